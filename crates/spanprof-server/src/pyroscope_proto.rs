//! Pyroscope's protobuf messages, `types.v1`, `push.v1`, `querier.v1` and `settings.v1`, generated at
//! build time (`build.rs`) from our own `.proto` files under `proto/`, which say where each
//! field number comes from. `google.v1.Profile` is [`spanprof_format::pprof::Profile`].

/// `types.v1`: labels, series, profile types, label-name and label-value calls.
pub mod types {
    /// Version 1.
    pub mod v1 {
        // Generated: the `.proto` file under proto/ documents each message and field.
        #![allow(missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/types.v1.rs"));
    }
}

/// `push.v1`: the push API's request.
pub mod push {
    /// Version 1.
    pub mod v1 {
        // Generated: the `.proto` file under proto/ documents each message and field.
        #![allow(missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/push.v1.rs"));
    }
}

/// `settings.v1`: tenant settings (what Grafana's Profiles Drilldown app keeps).
pub mod settings {
    /// Version 1.
    pub mod v1 {
        // Generated: the `.proto` file under proto/ documents each message and field.
        #![allow(missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/settings.v1.rs"));
    }
}

/// `querier.v1`: the query API's requests and answers.
pub mod querier {
    /// Version 1.
    pub mod v1 {
        // Generated: the `.proto` file under proto/ documents each message and field.
        #![allow(missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/querier.v1.rs"));
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use spanprof_format::pprof;

    /// `google.v1` generated from `proto/google/v1/profile.proto` on its own (`build.rs`).
    mod declared {
        // Generated: the `.proto` file under proto/ documents each message and field.
        #![allow(missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/google_v1_check/google.v1.rs"));
    }

    #[test]
    fn google_v1_profile_declaration_matches_the_pprof_codec() {
        // A real Go CPU profile, with every field the declaration has set (Go leaves some
        // 0) and the two it leaves out (newer pprof) unset.
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/go/cpu-10s.pb.gz"
        );
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut p = pprof::decode(&bytes, 64 << 20).expect("a valid pprof");
        p.drop_frames = 1;
        p.keep_frames = 2;
        p.comment = vec![3, 4];
        p.default_sample_type = 1;
        p.doc_url = 0;
        p.sample[0].label.push(pprof::Label {
            key: 1,
            str: 0,
            num: 5,
            num_unit: 2,
        });
        let m = &mut p.mapping[0];
        (m.memory_start, m.memory_limit, m.file_offset, m.build_id) = (1, 2, 3, 4);
        (m.has_functions, m.has_filenames) = (true, true);
        (m.has_line_numbers, m.has_inline_frames) = (true, true);
        p.location[0].is_folded = true;
        p.function[0].system_name = 1;
        p.function[0].start_line = 7;
        for l in p.location.iter_mut().flat_map(|l| l.line.iter_mut()) {
            l.column = 0;
        }
        let ours = p.encode_to_vec();
        // Decoding drops what the declaration lacks and fails on a wrong wire type;
        // re-encoding writes fields in number order, as the codec does.
        let declared = declared::Profile::decode(ours.as_slice()).expect("decodes");
        assert_eq!(declared.encode_to_vec(), ours);
    }
}
