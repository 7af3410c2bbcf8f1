//! A request sent again (its answer lost) is stored once: profiles that name themselves
//! (`profile_id`) and were stored lately are left out, and counted; profiles without an id,
//! or with the same id at another time, are stored as before.

use spanprof_format::otlp::ProfilesData;

use super::test_data::{go_cpu_request, unsynced_store};
use super::{Selection, Store};

/// The testdata profile for service `api` (two profiles: its two sample types), each
/// profile given `id` (none when `None`) and its time moved by `shift_ns`.
fn request(id: Option<u8>, shift_ns: u64) -> ProfilesData {
    let mut data = go_cpu_request("api");
    for (i, p) in data.resource_profiles[0].scope_profiles[0]
        .profiles
        .iter_mut()
        .enumerate()
    {
        p.profile_id = id.map_or_else(Vec::new, |id| vec![id + i as u8; 16]);
        p.time_unix_nano += shift_ns;
    }
    data
}

fn total(store: &Store) -> u64 {
    let sel = Selection {
        service: Some("api".into()),
        ..Default::default()
    };
    store.flame_graph(&sel).unwrap().1.value_selected
}

#[test]
fn a_request_sent_again_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = unsynced_store(dir.path());
    let first = store.ingest(&[&request(Some(1), 0)], Vec::new()).unwrap();
    assert_eq!((first.profiles, first.repeated_profiles), (2, 0));
    let once = total(&store);
    // Again, alone and beside itself in one call: nothing more is stored, nothing refused.
    let again = request(Some(1), 0);
    let report = store.ingest(&[&again, &again], Vec::new()).unwrap();
    assert_eq!(
        (
            report.profiles,
            report.repeated_profiles,
            report.rejected_profiles
        ),
        (0, 4, 0)
    );
    assert_eq!(total(&store), once);
    // The same ids at another time (a producer that reuses them) are other profiles; and
    // profiles without ids are stored every time.
    let later = store.ingest(&[&request(Some(1), 10_000_000_000)], Vec::new());
    assert_eq!(later.unwrap().profiles, 2);
    for _ in 0..2 {
        let report = store.ingest(&[&request(None, 0)], Vec::new()).unwrap();
        assert_eq!((report.profiles, report.repeated_profiles), (2, 0));
    }
    assert_eq!(total(&store), 4 * once);
    // Within one call, a request and its copy: the copy is left out.
    let fresh = request(Some(9), 20_000_000_000);
    let report = store.ingest(&[&fresh, &fresh], Vec::new()).unwrap();
    assert_eq!((report.profiles, report.repeated_profiles), (2, 2));
}
