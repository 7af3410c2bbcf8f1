//! The per-request limits of ingest: label and profile-type sizes, series per service and
//! symbol bytes, each refused with a [`Refusal`] naming what was too big.

use spanprof_format::profile_type::ProfileTypeId;

use super::labels::{render_labels, shown};
use crate::store::state::{SeriesKey, State};
use crate::store::{near_max_symbol_bytes, SeriesLimits, StoreConfig};

/// Logs a warning when ingest takes the store's series past 90 % of `storage.max_series`,
/// before profiles are refused for it (once per crossing).
pub(super) fn warn_near_series_limit(before: usize, after: usize, limits: &SeriesLimits) {
    if !limits.near_max_series(before) && limits.near_max_series(after) {
        tracing::warn!(
            series = after,
            limit = limits.max_series,
            "the store holds 90 % of its series limit (storage.max_series): past it, profiles \
             that would make a new series are refused; raise the limit or find the label whose \
             values keep changing (GET /api/v1/label-names, /api/v1/label-values)"
        );
    }
}

/// Counts what the profile just added to `service`'s symbols (since `sizes_before`) against
/// `StoreConfig::max_symbol_bytes`: past it, the profile is refused.
pub(super) fn within_symbol_limit(
    st: &mut State,
    service: u32,
    sizes_before: [usize; 5],
    cfg: &StoreConfig,
) -> Result<(), Refusal> {
    let added = st.services[service as usize]
        .symbols
        .bytes_since(sizes_before);
    if added > 0 && cfg.max_symbol_bytes != 0 && st.symbol_bytes + added > cfg.max_symbol_bytes {
        return Err(Refusal::limit(format!(
            "the store's symbols take {} bytes and the profile would add {added}, more than \
             the limit of {} (storage.max_symbols_size): each segment starts with all of them, \
             and an earlier build's go only once retention deleted the data that refers to them",
            st.symbol_bytes, cfg.max_symbol_bytes
        )));
    }
    if !near_max_symbol_bytes(st.symbol_bytes, cfg.max_symbol_bytes)
        && near_max_symbol_bytes(st.symbol_bytes + added, cfg.max_symbol_bytes)
    {
        tracing::warn!(
            bytes = st.symbol_bytes + added,
            limit = cfg.max_symbol_bytes,
            "the store's symbols take 90 % of their limit (storage.max_symbols_size): past it, \
             profiles that add symbols (a new build or service) are refused; an earlier build's \
             symbols go once retention deleted the data that refers to them, so raise the limit \
             or shorten retention (storage.retention)"
        );
    }
    st.symbol_bytes += added;
    st.services[service as usize].bytes += added;
    Ok(())
}

/// Why a profile is refused.
pub(super) struct Refusal {
    pub(super) message: String,
    /// It is over a limit (it may be valid).
    pub(super) limit: bool,
}

impl Refusal {
    pub(super) fn limit(message: String) -> Self {
        Refusal {
            message,
            limit: true,
        }
    }
}

impl From<String> for Refusal {
    /// The profile is not valid.
    fn from(message: String) -> Self {
        Refusal {
            message,
            limit: false,
        }
    }
}

/// Checks a new series' labels against the label limits.
pub(super) fn check_labels(labels: &[(String, String)], lim: &SeriesLimits) -> Result<(), Refusal> {
    let over = |n: usize, limit: usize| limit != 0 && n > limit;
    if over(labels.len(), lim.max_labels) {
        let names: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
        return Err(Refusal::limit(format!(
            "a series of the profile has {} labels, more than the limit of {} \
             (server.max_label_names_per_series): {}",
            labels.len(),
            lim.max_labels,
            shown(&names.join(", "))
        )));
    }
    for (k, v) in labels {
        if over(k.len(), lim.max_name_bytes) {
            return Err(Refusal::limit(format!(
                "label name {:?} is {} bytes, more than the limit of {} \
                 (server.max_label_name_length)",
                shown(k),
                k.len(),
                lim.max_name_bytes
            )));
        }
        if over(v.len(), lim.max_value_bytes) {
            return Err(Refusal::limit(format!(
                "the value of label {:?} is {} bytes, more than the limit of {} \
                 (server.max_label_value_length): {:?}",
                shown(k),
                v.len(),
                lim.max_value_bytes,
                shown(v)
            )));
        }
    }
    Ok(())
}

/// Checks a profile type, which its series carry as a label (`__profile_type__` in
/// Pyroscope's answers), against the label value limit.
pub(super) fn check_profile_type(t: &ProfileTypeId, lim: &SeriesLimits) -> Result<(), Refusal> {
    let len = [
        &t.name,
        &t.sample_type,
        &t.sample_unit,
        &t.period_type,
        &t.period_unit,
    ]
    .iter()
    .map(|s| s.len() + 1)
    .sum::<usize>()
        - 1;
    if lim.max_value_bytes != 0 && len > lim.max_value_bytes {
        return Err(Refusal::limit(format!(
            "the profile type is {len} bytes, more than the limit of {} \
             (server.max_label_value_length): {:?}",
            lim.max_value_bytes,
            shown(&t.to_string())
        )));
    }
    Ok(())
}

/// The id of series `key`, unless it is new and the store already holds `max` series.
pub(super) fn new_series(st: &mut State, key: SeriesKey, max: usize) -> Result<u32, Refusal> {
    st.series_id_within(key, max).map_err(|key| {
        Refusal::limit(format!(
            "the store holds {} series, its limit (storage.max_series), and the profile \
             would make another: {}",
            st.live_series(),
            render_labels(&key.labels)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::{near_max_symbol_bytes, SeriesLimits};

    #[test]
    fn near_the_series_and_symbol_limits_is_nine_tenths_of_them() {
        let at = |max_series| SeriesLimits {
            max_series,
            ..SeriesLimits::default()
        };
        assert!(!at(100).near_max_series(89));
        assert!(at(100).near_max_series(90));
        assert!(at(100).near_max_series(150));
        assert!(!at(0).near_max_series(1_000_000));
        assert!(!near_max_symbol_bytes(89, 100) && near_max_symbol_bytes(90, 100));
        assert!(!near_max_symbol_bytes(u64::MAX, 0));
        // Small limits: 90 % of 3 rounds up to 3.
        assert!(!at(3).near_max_series(2));
        assert!(at(3).near_max_series(3));
    }
}
