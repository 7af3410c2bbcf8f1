use super::split_credentials;

/// `base` changed by `change` fails `check` with a message containing `why`.
#[track_caller]
fn assert_refused<T: Clone>(
    base: &T,
    check: impl Fn(&T) -> Result<(), super::ConfigError>,
    change: &dyn Fn(&mut T),
    why: &str,
) {
    let mut changed = base.clone();
    change(&mut changed);
    let e = check(&changed).unwrap_err().to_string();
    assert!(e.contains(why), "{e}");
}

#[test]
fn a_forwarder_is_checked_and_keeps_its_credentials_out_of_the_endpoint() {
    use super::{ForwardProtocol, ForwarderConfig, ScrapeTarget};
    let f = ForwarderConfig::new("down", ForwardProtocol::Http, "https://me:s%40fe@h:4318/");
    assert_eq!(f.endpoint, "https://h:4318");
    assert_eq!(
        f.headers,
        [("authorization".to_owned(), "Basic bWU6c0BmZQ==".to_owned())]
    );
    assert!(f.check().is_ok());
    let refused = |change: &dyn Fn(&mut ForwarderConfig), why: &str| {
        assert_refused(&f, ForwarderConfig::check, change, why)
    };
    refused(&|g| g.queue_size = 1 << 20, "must be at least 256MiB");
    refused(
        &|g| g.retry_max = std::time::Duration::ZERO,
        "must be at least 100ms",
    );
    refused(
        &|g| g.headers.push(("Authorization".into(), "Bearer x".into())),
        "more than one authorization",
    );
    refused(&|g| g.batch_size = 0, "batch size 0");
    refused(&|g| g.signals = Some(Vec::new()), "signals: none");
    for path in ["/v1development/profiles", "/v1/traces"] {
        refused(
            &|g| g.endpoint = format!("http://b:4318{path}"),
            "give the base URL (http://b:4318)",
        );
    }
    let e = ScrapeTarget::new(" ", "http://h:6060")
        .check()
        .unwrap_err()
        .to_string();
    assert!(e.contains("the service name is empty"), "{e}");
    let mut t = ScrapeTarget::new("a", "http://h:6060");
    t.interval = std::time::Duration::from_millis(1500);
    assert!(t
        .check()
        .unwrap_err()
        .to_string()
        .contains("must be whole seconds"));
    let kinds = |kinds: &[&str]| {
        let mut t = ScrapeTarget::new("a", "http://h:6060");
        t.profiles = kinds.iter().map(|k| k.to_string()).collect();
        t.check()
    };
    let e = kinds(&["cpu", "heap", "cpu"]).unwrap_err().to_string();
    assert!(e.contains("\"cpu\" is given twice"), "{e}");
    let e = kinds(&["allocs", "cpu", "heap"]).unwrap_err().to_string();
    assert!(e.contains("heap and allocs are both given"), "{e}");
    assert!(kinds(&["cpu", "allocs", "mutex", "block", "goroutine"]).is_ok());
}

#[test]
fn sizes_and_durations_are_shown_as_the_file_writes_them() {
    use super::{format_duration, format_size, parse_size};
    use std::time::Duration;
    for (bytes, shown) in [
        (20u64 << 30, "20GiB"),
        (512 << 20, "512MiB"),
        (64 << 10, "64KiB"),
        (1000, "1000B"),
        (0, "0B"),
    ] {
        assert_eq!(format_size(bytes), shown);
        assert_eq!(parse_size(shown), Ok(bytes), "{shown}");
    }
    for (secs, shown) in [
        (7 * 86_400, "7d"),
        (36 * 3_600, "36h"),
        (90, "90s"),
        (0, "0s"),
    ] {
        assert_eq!(format_duration(Duration::from_secs(secs)), shown);
    }
    assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
    assert_eq!(parse_size("10MB"), Ok(10 << 20), "binary, as MiB");
    let e = parse_size("1.5GiB").unwrap_err();
    assert!(
        e.contains("a whole number of its unit (1.5GiB is 1536MiB)"),
        "{e}"
    );
    assert!(parse_size("12 parsecs").unwrap_err().contains("MB"));
}

#[test]
fn settings_that_cannot_work_are_refused() {
    use super::ServerConfig;
    use std::time::Duration;
    let base = ServerConfig::default();
    assert!(base.validate().is_ok());
    let refused = |change: &dyn Fn(&mut ServerConfig), why: &str| {
        assert_refused(&base, ServerConfig::validate, change, why)
    };
    refused(&|c| c.server.max_body_size = 0, "server.max_body_size");
    refused(
        &|c| c.storage.enabled = Some(false),
        "the store is off (--no-store",
    );
    refused(
        &|c| {
            let f = super::ForwarderConfig::new("b", super::ForwardProtocol::Http, "http://x:1");
            c.exporters = vec![f.clone(), f];
        },
        "forwarder b: the name is used twice",
    );
    refused(
        &|c| {
            c.exporters = vec![super::ForwarderConfig::new(
                "a/b",
                super::ForwardProtocol::Http,
                "http://x:1",
            )]
        },
        "a name is letters, digits",
    );
    refused(
        &|c| c.processors.batch.queue_capacity = 0,
        "processors.batch.queue_capacity 0",
    );
    refused(
        &|c| c.processors.batch.max_items = 0,
        "processors.batch.max_items 0",
    );
    refused(
        &|c| c.storage.retention = Some(Duration::ZERO.into()),
        "storage.retention",
    );
    refused(&|c| c.storage.max_size = Some(0.into()), "storage.max_size");
    refused(
        &|c| c.storage.segment_size = 0.into(),
        "storage.segment_size 0 bytes",
    );
}

#[test]
fn a_target_given_twice_is_refused() {
    use super::{check_scrape_targets, ScrapeTarget};
    let a = ScrapeTarget::new("a", "http://h:6060");
    let other_url = ScrapeTarget::new("a", "http://h:6061");
    let other_service = ScrapeTarget::new("b", "http://h:6060");
    assert!(check_scrape_targets(&[a.clone(), other_url, other_service]).is_ok());
    let e = check_scrape_targets(&[a.clone(), a])
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"a\" at http://h:6060 is given twice"), "{e}");
}

#[test]
fn listen_addresses_take_go_style_ports_and_localhost() {
    use super::parse_listen_addr;
    for (text, addr) in [
        ("0.0.0.0:4040", "0.0.0.0:4040"),
        (":4700", "0.0.0.0:4700"),
        ("localhost:4700", "127.0.0.1:4700"),
        ("[::1]:4040", "[::1]:4040"),
    ] {
        assert_eq!(parse_listen_addr(text).unwrap().to_string(), addr, "{text}");
    }
    for bad in ["4040", ":port", "localhost", "example.com:80", ":70000"] {
        let e = parse_listen_addr(bad).unwrap_err();
        assert!(
            e.contains("is not a listen address: give IP:PORT"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn credentials_leave_the_url_as_a_basic_authorization() {
    for (url, left, basic) in [
        ("http://h:6060", "http://h:6060", None),
        // An @ past the authority is not a credential.
        ("http://h:6060/x?y=a@b", "http://h:6060/x?y=a@b", None),
        // "u:" and "u:p:q@" in base64: the password runs to the last @.
        ("https://u@h", "https://h", Some("Basic dTo=")),
        (
            "http://u:p:q%40@h/base",
            "http://h/base",
            Some("Basic dTpwOnFA"),
        ),
        // A % that is not an escape stays.
        ("http://u:100%@h", "http://h", Some("Basic dToxMDAl")),
    ] {
        let (url_left, value) = split_credentials(url);
        assert_eq!(url_left, left, "{url}");
        assert_eq!(value.as_deref(), basic, "{url}");
    }
}

/// The pprof index's own URL, as a browser shows it, is taken for the base URL.
#[test]
fn a_scrape_url_of_the_pprof_index_is_its_base() {
    for url in [
        "http://h:6060",
        "http://h:6060/",
        "http://h:6060/debug/pprof",
        "http://h:6060/debug/pprof/",
    ] {
        assert_eq!(
            super::ScrapeTarget::new("s", url).url,
            "http://h:6060",
            "{url}"
        );
    }
    // Behind a proxy's path, only the index's part goes.
    let t = super::ScrapeTarget::new("s", "https://u:p@h/app/debug/pprof/");
    assert_eq!(t.url, "https://h/app");
    assert_eq!(t.headers.len(), 1);
}
