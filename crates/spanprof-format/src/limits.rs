//! How big one profile may be: samples, locations, and frames (the stack depths summed).
//!
//! The size limits on request bodies bound what a request takes to decode, not what its
//! profile costs after: a profile's distinct symbols and stacks are kept for good, in the
//! dictionaries of every stage and in the store's symbol tables. Measured on `spanprof serve`:
//! 9 MB of gzipped folded text (4 M one-frame lines, each a new function, 63 MB once
//! decompressed, within the 64 MiB limit) took 3.5 GB at its peak and kept 3.0 GB for good.
//!
//! So every receiver checks each profile against these limits right after decoding it
//! (the folded-text parser as it goes), before converting or storing anything, and refuses
//! a profile over one with [`FormatError::ProfileTooBig`], naming the count, the limit and
//! the setting that raises it. Pyroscope has the same kind of limit on samples
//! (`max_profile_stacktrace_samples`, 16,000); ours are higher, as span labels keep the
//! samples of different spans apart: a 15 s CPU profile of 32 busy cores with a span on
//! every sample has up to 48,000.

use crate::otlp::ProfilesData;
use crate::{pprof, FormatError};

/// What [`ProfileLimits`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Samples of one profile.
    Samples,
    /// Locations (of a pprof profile, or of an OTLP request's dictionary).
    Locations,
    /// Frames: the number of locations of every stack, summed (of every sample for pprof,
    /// of every distinct stack for OTLP).
    Frames,
    /// Series: the distinct label sets of a profile's samples (span and trace ids are links,
    /// not labels). Checked by the store, which tells labels from ids.
    Series,
    /// Bytes of the longest string (a function or file name, a label): symbols are kept,
    /// and a few names of a megabyte each made the store's symbols grow past what it can
    /// write. Pyroscope's limit is the same length (`max_profile_symbol_value_length`,
    /// 65,535), by which it truncates.
    StringBytes,
}

impl Measure {
    /// The plural noun in messages.
    pub fn noun(self) -> &'static str {
        match self {
            Measure::Samples => "samples",
            Measure::Locations => "locations",
            Measure::Frames => "stack frames",
            Measure::Series => "series (distinct sample label sets)",
            Measure::StringBytes => "bytes in its longest string (a function, file or label name)",
        }
    }

    /// The setting of `spanprof serve`'s configuration file that sets the limit.
    pub fn key(self) -> &'static str {
        match self {
            Measure::Samples => "server.max_profile_samples",
            Measure::Locations => "server.max_profile_locations",
            Measure::Frames => "server.max_profile_frames",
            Measure::Series => "server.max_profile_series",
            Measure::StringBytes => "server.max_profile_string_length",
        }
    }
}

/// The most one profile may hold; 0 is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileLimits {
    /// Samples of one profile.
    pub max_samples: usize,
    /// Locations of one profile (of one OTLP request's dictionary).
    pub max_locations: usize,
    /// Frames of one profile (of one OTLP request's dictionary): stack depths summed.
    pub max_frames: usize,
    /// Series one profile may make: distinct label sets of its samples. A series is kept
    /// for good, and a label with a value per request (a request id) makes one per sample.
    pub max_series: usize,
    /// Bytes of one string of the profile (function, file and label names).
    pub max_string_bytes: usize,
}

impl Default for ProfileLimits {
    /// 100,000 samples and locations, 4,000,000 frames and 1,000 series: beyond any real
    /// profile we know of (the load bench's Go CPU profile has 598 samples, 284 locations,
    /// 14,000 frames and 5 label sets; a 15 s window of 32 busy cores, 48,000 samples), and
    /// at most about 200 MB for a profile made to cost the most.
    fn default() -> Self {
        ProfileLimits {
            max_samples: 100_000,
            max_locations: 100_000,
            max_frames: 4_000_000,
            max_series: 1_000,
            max_string_bytes: 65_536,
        }
    }
}

impl ProfileLimits {
    /// No limits.
    pub const NONE: ProfileLimits = ProfileLimits {
        max_samples: 0,
        max_locations: 0,
        max_frames: 0,
        max_series: 0,
        max_string_bytes: 0,
    };

    /// The limit on `m` (0 = none).
    pub fn limit(&self, m: Measure) -> usize {
        match m {
            Measure::Samples => self.max_samples,
            Measure::Locations => self.max_locations,
            Measure::Frames => self.max_frames,
            Measure::Series => self.max_series,
            Measure::StringBytes => self.max_string_bytes,
        }
    }

    /// Whether `count` of `m` is within its limit; [`FormatError::ProfileTooBig`] if not.
    pub fn allow(&self, m: Measure, count: usize) -> Result<(), FormatError> {
        let limit = self.limit(m);
        if limit != 0 && count > limit {
            return Err(FormatError::ProfileTooBig {
                what: m.noun(),
                count,
                limit,
                key: m.key(),
            });
        }
        Ok(())
    }

    /// Checks a pprof profile.
    pub fn check_pprof(&self, p: &pprof::Profile) -> Result<(), FormatError> {
        self.allow(Measure::Samples, p.sample.len())?;
        self.allow(Measure::Locations, p.location.len())?;
        let frames = p.sample.iter().map(|s| s.location_id.len()).sum();
        self.allow(Measure::Frames, frames)?;
        let longest = p.string_table.iter().map(String::len).max().unwrap_or(0);
        self.allow(Measure::StringBytes, longest)
    }

    /// Checks an OTLP request: each profile's samples, and its dictionary's locations and
    /// the frames of its stacks (a request's profiles share one dictionary).
    pub fn check_otlp(&self, data: &ProfilesData) -> Result<(), FormatError> {
        let samples = data
            .resource_profiles
            .iter()
            .flat_map(|r| &r.scope_profiles)
            .flat_map(|s| &s.profiles)
            .map(|p| p.samples.len())
            .max()
            .unwrap_or(0);
        self.allow(Measure::Samples, samples)?;
        let Some(d) = &data.dictionary else {
            return Ok(());
        };
        self.allow(Measure::Locations, d.location_table.len())?;
        let frames = d.stack_table.iter().map(|s| s.location_indices.len()).sum();
        self.allow(Measure::Frames, frames)?;
        let longest = d.string_table.iter().map(String::len).max().unwrap_or(0);
        self.allow(Measure::StringBytes, longest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::{Profile, ProfilesDictionary, ResourceProfiles, ScopeProfiles, Stack};

    fn pprof_with(samples: usize, depth: usize) -> pprof::Profile {
        pprof::Profile {
            sample: (0..samples)
                .map(|_| pprof::Sample {
                    location_id: vec![1; depth],
                    ..Default::default()
                })
                .collect(),
            location: vec![pprof::Location::default(); 3],
            ..Default::default()
        }
    }

    #[test]
    fn each_limit_names_its_count_and_setting_and_zero_is_none() {
        let limits = ProfileLimits {
            max_samples: 10,
            max_locations: 2,
            max_frames: 50,
            max_series: 0,
            max_string_bytes: 0,
        };
        let within = ProfileLimits {
            max_locations: 3,
            ..limits
        };
        assert!(within.check_pprof(&pprof_with(10, 5)).is_ok());
        let e = limits.check_pprof(&pprof_with(10, 5)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the profile has 3 locations, more than the limit of 2 (server.max_profile_locations)"
        );
        let e = within.check_pprof(&pprof_with(11, 1)).unwrap_err();
        assert!(e.to_string().contains("11 samples"), "{e}");
        let e = within.check_pprof(&pprof_with(10, 6)).unwrap_err();
        assert!(
            e.to_string().contains("60 stack frames")
                && e.to_string().contains("max_profile_frames"),
            "{e}"
        );
        assert!(ProfileLimits::NONE
            .check_pprof(&pprof_with(1000, 100))
            .is_ok());
        // The longest string, whichever it is.
        let mut named = pprof_with(1, 1);
        named.string_table = vec![String::new(), "x".repeat(10), "main".into()];
        let short = ProfileLimits {
            max_string_bytes: 9,
            ..within
        };
        let e = short.check_pprof(&named).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the profile has 10 bytes in its longest string (a function, file or label name), \
             more than the limit of 9 (server.max_profile_string_length)"
        );
        assert!(ProfileLimits {
            max_string_bytes: 10,
            ..within
        }
        .check_pprof(&named)
        .is_ok());
    }

    #[test]
    fn otlp_counts_each_profiles_samples_and_the_shared_dictionary() {
        let profile = |n: usize| Profile {
            samples: vec![Default::default(); n],
            ..Default::default()
        };
        let data = ProfilesData {
            resource_profiles: vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![profile(8), profile(9)],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            dictionary: Some(ProfilesDictionary {
                location_table: vec![Default::default(); 4],
                stack_table: vec![
                    Stack {
                        location_indices: vec![1, 2, 3],
                    };
                    5
                ],
                ..Default::default()
            }),
        };
        let limits = ProfileLimits {
            max_samples: 9,
            max_locations: 4,
            max_frames: 15,
            max_series: 0,
            max_string_bytes: 0,
        };
        assert!(limits.check_otlp(&data).is_ok());
        for (tighter, says) in [
            (
                ProfileLimits {
                    max_samples: 8,
                    ..limits
                },
                "9 samples",
            ),
            (
                ProfileLimits {
                    max_locations: 3,
                    ..limits
                },
                "4 locations",
            ),
            (
                ProfileLimits {
                    max_frames: 14,
                    ..limits
                },
                "15 stack frames",
            ),
        ] {
            let e = tighter.check_otlp(&data).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }
}
