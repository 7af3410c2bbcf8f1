use super::*;
use spanprof_format::limits::ProfileLimits;
use spanprof_store::store::SeriesLimits;
use std::time::Duration;

#[test]
fn a_bad_value_is_named_by_its_key() {
    for (text, error) in [
        (
            "storage:\n  retention: 7 days\n",
            "storage.retention: \"7 days\" is not a duration",
        ),
        (
            "storage:\n  max_size: -5GiB\n",
            "storage.max_size: \"-5GiB\" is not a size",
        ),
        (
            "storage:\n  segment_size: -5\n",
            "storage.segment_size: -5 is not a size: sizes are not negative",
        ),
        (
            "receivers:\n  scrape:\n    - service: a\n      url: http://h\n      timeout: soon\n",
            "receivers.scrape[0].timeout: \"soon\" is not a duration",
        ),
        (
            "server:\n  otlp_http_addr: 127.0.0.1:70000\n",
            "server.otlp_http_addr: \"127.0.0.1:70000\" is not a listen address",
        ),
        (
            "processors:\n  batch:\n    max_age: soon\n",
            "processors.batch.max_age: \"soon\" is not a duration",
        ),
        (
            "processors:\n  transform:\n    - action: drop_label\n",
            "processors.transform[0] (drop_label): needs label at line 2",
        ),
        (
            "receivers:\n  scrape:\n    - service: a\n      url: http://h\n      tenant: a/b\n",
            "receivers.scrape[0]: the tenant id may hold only letters, digits and !-_.*'() at line 3",
        ),
        (
            "receivers:\n  scrape:\n    - url: http://h\n",
            "receivers.scrape[0]: missing field `service` at line 3",
        ),
        // Serde's Rust names in words; a line for an unknown section.
        (
            "storage:\n  max_series: many\n",
            "storage.max_series: invalid type: string \"many\", expected a whole number",
        ),
        (
            "server: 5\n",
            "server: invalid type: integer `5`, expected a mapping of keys at line 1",
        ),
        (
            "# spanprof\nstorag:\n  dir: /tmp/x\n",
            "unknown field `storag`, expected one of `server`",
        ),
        ("# spanprof\nstorag:\n  dir: /tmp/x\n", "at line 2 column 1"),
    ] {
        let e = load_str(text).unwrap_err().to_string();
        assert!(e.contains(error), "{text}: {e}");
    }
    assert_eq!(
        load_str("storage:\n  max_size: 1048576\n")
            .unwrap()
            .storage
            .max_size,
        Some((1 << 20).into())
    );
}

fn load_str(text: &str) -> Result<ServerConfig, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spanprof.yaml");
    std::fs::write(&path, text).unwrap();
    let c = load(&path, ServerConfig::default())?;
    // As `spanprof serve` does once the flags are over the file.
    c.validate().map_err(|e| ConfigError::Invalid {
        path,
        message: e.to_string(),
    })?;
    Ok(c)
}

#[test]
fn the_documented_example_sets_the_defaults() {
    // As printed, the file starts the server as `spanprof serve` does without one.
    let serve = || {
        let mut c = ServerConfig::default();
        // The example writes the store's default out (`enabled: true`); unset means the
        // same with the default backend.
        c.storage.enabled = Some(true);
        c
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spanprof.yaml");
    std::fs::write(&path, EXAMPLE).unwrap();
    assert_eq!(
        format!("{:?}", load(&path, serve()).unwrap()),
        format!("{:?}", serve())
    );
}

#[test]
fn the_documented_examples_load() {
    // Its examples are the lines commented out in the first column.
    let taken_up: String = EXAMPLE
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix('#').unwrap_or(l)))
        .collect();
    let c = load_str(&taken_up).unwrap();
    assert_eq!(c.receivers.scrape.len(), 2);
    assert_eq!(
        c.receivers.replica_set().unwrap(),
        Some(crate::replicas::Replicas { count: 3, index: 0 })
    );
    assert!(!c.processors.transform.is_empty());
    assert_eq!(c.exporters[0].max_in_flight, 4);
    assert_eq!(
        c.receivers.scrape[1].headers,
        vec![("authorization".to_owned(), "Bearer TOKEN".to_owned())]
    );
    assert_eq!(c.receivers.scrape[0].interval, Duration::from_secs(15));
    assert_eq!(c.receivers.scrape[0].timeout, Duration::from_secs(5));
    assert_eq!(
        c.receivers.scrape[0].labels,
        vec![("env".to_owned(), "prod".to_owned())]
    );
    assert_eq!(
        c.storage.retention,
        Some(Duration::from_secs(7 * 86400).into())
    );
    assert_eq!(c.storage.max_size, Some((20 << 30).into()));
    assert_eq!(c.exporters.len(), 2);
    assert!(
        c.exporters[0].sends_traces() && !c.exporters[0].sends_profiles() && c.exporters[0].gzip
    );
    let push = &c.exporters[1];
    assert_eq!(push.protocol, crate::config::ForwardProtocol::Push);
    assert!(
        push.sends_profiles() && !push.sends_traces(),
        "push.v1 sends profiles only"
    );
    assert_eq!(
        push.headers,
        vec![("x-scope-orgid".to_owned(), "team-a".to_owned())]
    );
    assert_eq!(c.processors.batch.max_age.0, Duration::from_millis(20));
    assert_eq!(
        c.server.otlp_grpc_addr,
        Some("127.0.0.1:4317".parse().unwrap())
    );
    assert!(!c.server.span_profiles_include_children);
    assert_eq!(c.auth.credentials.len(), 3);
    assert_eq!(c.receivers.scrape[1].tenant.as_str(), "team-a");
}

#[test]
fn scrape_targets_are_checked_at_load() {
    let target = |url: &str, extra: &str| {
        load_str(&format!(
            "receivers:\n  scrape:\n    - service: s\n      url: {url}\n{extra}"
        ))
    };
    let c = target("http://u:p%40ss@h:6060", "").unwrap();
    assert_eq!(
        c.receivers.scrape[0].url, "http://h:6060",
        "credentials leave the url"
    );
    // "u:p@ss" in base64.
    assert_eq!(
        c.receivers.scrape[0].headers,
        vec![("authorization".to_owned(), "Basic dTpwQHNz".to_owned())]
    );
    for (url, extra, error) in [
        (
            "http://u:p@h:6060",
            "      headers: {Authorization: Bearer t}\n",
            "more than one authorization",
        ),
        (
            "http://h:6060",
            "      bearer_token_file: /nonexistent/token\n",
            "bearer_token_file /nonexistent/token: No such file",
        ),
        (
            "http://h:6060",
            "      headers: {\"bad name\": x}\n",
            "header \"bad name\"",
        ),
        (
            "http://h:6060",
            "      profiles: [cpu, heapp]\n",
            "unknown profile kind \"heapp\": use cpu, heap, allocs, goroutine, mutex, block",
        ),
        (
            "http://h:6060",
            "      profiles: []\n",
            "no profiles to take",
        ),
        (
            "http://h:6060",
            "      interval: 0s\n",
            "interval 0s: must be whole seconds, at least 1s",
        ),
        ("http://h:6060", "      timeout: 0s\n", "timeout 0s"),
    ] {
        let e = target(url, extra).unwrap_err().to_string();
        assert!(
            e.contains("receivers.scrape \"s\"") && e.contains(error),
            "{extra}: {e}"
        );
    }
    let token = tempfile::NamedTempFile::new().unwrap();
    let c = load_str(&format!(
        "receivers:\n  scrape:\n    - service: s\n      url: http://h:6060\n      \
         bearer_token_file: {}\n      headers: {{x-org: a}}\n",
        token.path().display()
    ))
    .unwrap();
    assert_eq!(
        c.receivers.scrape[0].bearer_token_file.as_deref(),
        Some(token.path())
    );
    assert_eq!(
        c.receivers.scrape[0].headers,
        vec![("x-org".to_owned(), "a".to_owned())]
    );
}

#[test]
fn log_format_is_text_or_json() {
    use crate::config::LogFormat;
    let format = |text: &str| load_str(text).unwrap().server.log_format;
    assert_eq!(format(""), LogFormat::Text);
    assert_eq!(format("server:\n  log_format: json\n"), LogFormat::Json);
    assert_eq!(format("server:\n  log_format: text\n"), LogFormat::Text);
    let e = load_str("server:\n  log_format: xml\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("xml") && e.contains("json") && e.contains("line 2"),
        "{e}"
    );
}

#[test]
fn span_profiles_include_children_is_one_server_setting() {
    assert!(!load_str("").unwrap().server.span_profiles_include_children);
    let c = load_str("server:\n  span_profiles_include_children: true\n").unwrap();
    assert!(c.server.span_profiles_include_children);
    let e = load_str("server:\n  span_profiles_include_children: sometimes\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2"), "{e}");
    // Only under `server`: elsewhere it is an unknown key.
    let e = load_str("processors:\n  span_profiles_include_children: true\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown field `span_profiles_include_children`"),
        "{e}"
    );
}

#[test]
fn profile_limits_default_and_are_set_one_by_one() {
    let d = load_str("").unwrap().server.profile_limits();
    assert_eq!(d, ProfileLimits::default());
    let c = load_str("server:\n  max_profile_samples: 500\n  max_profile_frames: 0\n  max_profile_series: 7\n  max_profile_string_length: 9\n")
        .unwrap();
    assert_eq!(c.server.max_profile_string_length, 9);
    assert_eq!(c.store_config().max_profile_series, 7);
    let c = c.server.profile_limits();
    assert_eq!(
        (c.max_samples, c.max_locations, c.max_frames, c.max_series),
        (500, d.max_locations, 0, 7)
    );
    let e = load_str("server:\n  max_profile_locations: lots\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2"), "{e}");
}

#[test]
fn series_limits_default_and_are_set_one_by_one() {
    let d = load_str("").unwrap().store_config().series;
    assert_eq!(d, SeriesLimits::default());
    let c = load_str(
        "server:\n  max_label_names_per_series: 9\n  max_label_value_length: 0\n\
         storage:\n  max_series: 12\n",
    )
    .unwrap()
    .store_config()
    .series;
    assert_eq!(
        c,
        SeriesLimits {
            max_series: 12,
            max_labels: 9,
            max_value_bytes: 0,
            ..d
        }
    );
    let c = load_str("server:\n  max_label_name_length: 5\n")
        .unwrap()
        .store_config()
        .series;
    assert_eq!(c.max_name_bytes, 5);
    let c = load_str("storage:\n  min_free_disk: 0\n").unwrap();
    assert_eq!(c.storage.min_free_disk.0, 0);
    let c = load_str("storage:\n  min_free_disk: 1GiB\n").unwrap();
    assert_eq!(c.store_config().min_free_disk_bytes, 1 << 30);
    assert_eq!(ServerConfig::default().storage.min_free_disk.0, 10 << 30);
    let c = load_str("storage:\n  max_symbols_size: 1GiB\n").unwrap();
    assert_eq!(c.store_config().max_symbol_bytes, 1 << 30);
    assert_eq!(
        load_str("").unwrap().store_config().max_symbol_bytes,
        128 << 20
    );
    let e = load_str("storage:\n  max_series: -1\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2"), "{e}");
}

#[test]
fn the_inflight_budget_holds_one_request_of_the_largest_size() {
    assert_eq!(load_str("").unwrap().server.max_inflight_size, 512 << 20);
    let c = load_str("server:\n  max_inflight_size: 96MiB\n").unwrap();
    assert_eq!(c.server.max_inflight_size, 96 << 20);
    assert_eq!(
        load_str("server:\n  max_inflight_size: 0\n")
            .unwrap()
            .server
            .max_inflight_size,
        0
    );
    let e = load_str("server:\n  max_inflight_size: 64MiB\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("server.max_inflight_size") && e.contains("100663296 bytes"),
        "{e}"
    );
    let c = load_str(
        "server:\n  max_body_size: 1MiB\n  max_decompressed_size: 2MiB\n  max_inflight_size: 3MiB\n",
    )
    .unwrap();
    assert_eq!(c.server.max_inflight_size, 3 << 20);
}

#[test]
fn unknown_keys_and_bad_values_name_the_key_and_line() {
    let e = load_str("server:\n  http_adr: 0.0.0.0:1\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown field `http_adr`") && e.contains("line 2"),
        "{e}"
    );
    let e = load_str("storage:\n  retention: 7 parsecs\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a duration") && e.contains("line 2"), "{e}");
    let e = load_str("storage:\n  max_size: 12 zebibytes\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("size unit") && e.contains("line 2"), "{e}");
    for (text, says) in [
        (
            "storage:\n  max_size: 99999999999999999999999\n",
            "bytes is too large",
        ),
        ("storage:\n  max_size: 1.5\n", "a whole number of bytes"),
        ("storage:\n  max_size: 1.5GiB\n", "1536MiB"),
    ] {
        let e = load_str(text).unwrap_err().to_string();
        assert!(e.contains(says) && !e.contains("u128"), "{text}: {e}");
    }
    let e = load_str("server:\n  otlp_http_addr: nowhere\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not a listen address") && e.contains("(or off)"),
        "{e}"
    );
    let e =
        load_str("exporters:\n  - name: x\n    protocol: carrier-pigeon\n    endpoint: http://x\n")
            .unwrap_err()
            .to_string();
    assert!(e.contains("carrier-pigeon") && e.contains("line 3"), "{e}");
    let e = load_str(
        "exporters:\n  - name: x\n    protocol: grpc\n    endpoint: grpc://me:pw@x:4317\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(
            "exporters \"x\": endpoint \"grpc://x:4317\" must start with http:// or https://"
        ),
        "{e}"
    );
    assert!(load_str("").is_ok());
    // push.v1 carries no traces: asking for them is an error naming the way.
    let e = load_str(
        "exporters:\n  - name: p\n    protocol: push\n    endpoint: http://p:4040\n    signals: [profiles, traces]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("exporters \"p\": protocol push carries profiles only"),
        "{e}"
    );
    let e = load_str(
        "exporters:\n  - name: p\n    protocol: push\n    endpoint: http://p:4040/push.v1.PusherService/Push\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("give the base URL"), "{e}");
    // Credentials in an exporter's endpoint are sent beside its headers.
    let c = load_str(
        "exporters:\n  - name: x\n    protocol: http\n    endpoint: https://me:pw@h:4318\n    headers: {x-tenant: a}\n",
    )
    .unwrap();
    assert_eq!(c.exporters[0].endpoint, "https://h:4318");
    let names: Vec<&str> = c.exporters[0]
        .headers
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(names, ["authorization", "x-tenant"]);
    assert!(load_str("server:\n  otlp_http_addr: off\n")
        .unwrap()
        .server
        .otlp_http_addr
        .is_none());
}

/// The keys a section of the model takes, as serde lists them when refusing an unknown one.
fn keys_of(section_yaml_with_unknown: &str) -> Vec<String> {
    let e = load_str(section_yaml_with_unknown).unwrap_err().to_string();
    let expected = e
        .split_once("unknown field `zz_unknown`, expected")
        .unwrap_or_else(|| panic!("{section_yaml_with_unknown}: {e}"))
        .1;
    let expected = expected.split(" at line ").next().unwrap();
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_documented_example_shows_every_key() {
    // The example is the reference (docs/configuration.md is generated from it): a key the
    // model takes that it does not show, set or commented out, is undocumented.
    let sections = [
        "zz_unknown: 1\n",
        "server:\n  zz_unknown: 1\n",
        "server:\n  tls:\n    zz_unknown: 1\n",
        "storage:\n  zz_unknown: 1\n",
        "receivers:\n  zz_unknown: 1\n",
        "receivers:\n  scrape:\n    - zz_unknown: 1\n",
        "receivers:\n  scrape:\n    - service: s\n      url: http://x\n      tls:\n        zz_unknown: 1\n",
        "processors:\n  zz_unknown: 1\n",
        "processors:\n  link:\n    zz_unknown: 1\n",
        "processors:\n  batch:\n    zz_unknown: 1\n",
        "processors:\n  transform:\n    - zz_unknown: 1\n",
        "exporters:\n  - zz_unknown: 1\n",
        "auth:\n  zz_unknown: 1\n",
        "auth:\n  credentials:\n    - zz_unknown: 1\n",
    ];
    // Keys written `key:` anywhere in the example, commented out or not.
    let shown = |key: &str| {
        EXAMPLE.match_indices(&format!("{key}:")).any(|(at, _)| {
            !EXAMPLE[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let mut missing = Vec::new();
    let mut counted = 0;
    for yaml in sections {
        for key in keys_of(yaml) {
            counted += 1;
            if !shown(&key) {
                missing.push(format!("{key} (in {yaml:?})"));
            }
        }
    }
    assert!(
        counted > 80,
        "only {counted} keys found: is the error wording changed?"
    );
    assert!(
        missing.is_empty(),
        "config_example.yaml does not show: {missing:#?}"
    );
}

#[test]
fn the_remote_backend_is_checked_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "secret\n").unwrap();
    let ok = format!(
        "storage:\n  backend: remote\n  remote:\n    timeout: 5s\n    pyroscope:\n      url: \
         https://pyroscope.example:4040/\n      tenant: team-a\n      bearer_token_file: {}\n    \
         tempo:\n      url: http://tempo:3200\n",
        token.display()
    );
    let c = load_str(&ok).unwrap();
    let r = c.remote.expect("the remote backend");
    assert_eq!(r.pyroscope.url, "https://pyroscope.example:4040");
    assert_eq!(r.pyroscope.tenant.as_deref(), Some("team-a"));
    assert_eq!(r.timeout, Duration::from_secs(5));
    assert!(
        !c.storage.store_enabled(),
        "a query frontend keeps nothing itself"
    );
    for (text, error) in [
        (
            "storage:\n  backend: remote\n".to_owned(),
            "storage.remote.pyroscope.url",
        ),
        (
            "storage:\n  backend: remote\n  remote:\n    pyroscope: {url: ftp://x}\n    tempo: \
             {url: http://t}\n"
                .to_owned(),
            "storage.remote.pyroscope.url \"ftp://x\": must start with http:// or https://",
        ),
        (
            "storage:\n  backend: remote\n  remote:\n    pyroscope: {url: 'http://u:p@x'}\n    \
             tempo: {url: http://t}\n"
                .to_owned(),
            "never in the url",
        ),
        (
            "storage:\n  backend: remote\n  remote:\n    pyroscope: {url: http://p}\n    tempo: \
             {url: http://t, bearer_token_file: /nonexistent/token}\n"
                .to_owned(),
            "storage.remote.tempo.bearer_token_file /nonexistent/token",
        ),
        (
            "storage:\n  remote:\n    pyroscope: {url: http://p}\n".to_owned(),
            "storage.backend is not remote",
        ),
        (
            "storage:\n  backend: distributed\n".to_owned(),
            "unknown variant `distributed`",
        ),
    ] {
        let e = load_str(&text).unwrap_err().to_string();
        assert!(e.contains(error), "{text}: {e}");
        assert!(!e.contains("secret"));
    }
}

#[test]
fn the_example_shows_the_defaults_serialised() {
    // The sections that are the runtime config, serialised from their one `Default`, are
    // what the example file sets (as printed: its examples stay commented out). Keys with
    // no default (storage.retention, max_size) are left out of both.
    let example: serde_norway::Value = serde_norway::from_str(EXAMPLE).unwrap();
    let defaults = ServerConfig::default();
    for (section, serialised) in [
        (
            "storage",
            serde_norway::to_value(&defaults.storage).unwrap(),
        ),
        (
            "processors",
            serde_norway::to_value(&defaults.processors).unwrap(),
        ),
        (
            "receivers",
            serde_norway::to_value(&defaults.receivers).unwrap(),
        ),
        ("server", serde_norway::to_value(&defaults.server).unwrap()),
        // The runtime form holds digests of the secrets read; the section is what is read.
        (
            "auth",
            serde_norway::to_value(crate::auth::config::AuthConfig::default()).unwrap(),
        ),
    ] {
        // A section whose keys are all commented out reads as null: no key set.
        let empty = serde_norway::Value::Mapping(Default::default());
        let written = example
            .get(section)
            .map(|v| if v.is_null() { &empty } else { v });
        assert_eq!(
            written,
            Some(&serialised),
            "config_example.yaml's {section} section differs from the defaults serialised:\n{}",
            serde_norway::to_string(&serialised).unwrap()
        );
    }
}

#[test]
fn a_minimal_exporter_is_the_sections_default() {
    // The example shows exporters commented out only, so the section's defaults are tested
    // here: an exporter with its three required keys is `ForwarderConfig::default()` with
    // them, and the example's commented values of the other keys are those defaults.
    use crate::config::ForwardProtocol;
    let c =
        load_str("exporters:\n  - name: down\n    protocol: http\n    endpoint: http://h:4318/\n")
            .unwrap();
    assert_eq!(
        c.exporters,
        vec![ForwarderConfig {
            name: "down".into(),
            protocol: ForwardProtocol::Http,
            endpoint: "http://h:4318".into(),
            ..ForwarderConfig::default()
        }]
    );
    assert!(c.exporters[0].sends_profiles() && c.exporters[0].sends_traces());
    let taken_up: String = EXAMPLE
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix('#').unwrap_or(l)))
        .collect();
    let example: serde_norway::Value = serde_norway::from_str(&taken_up).unwrap();
    let written = &example["exporters"][0];
    let defaults = serde_norway::to_value(ForwarderConfig::default()).unwrap();
    for key in [
        "batch_size",
        "batch_age",
        "max_in_flight",
        "retry_max",
        "queue_size",
    ] {
        let as_read: ForwarderConfig = serde_norway::from_value(
            serde_norway::from_str(&format!(
                "{{name: a, protocol: grpc, endpoint: 'http://a', {key}: {}}}",
                serde_norway::to_string(&written[key]).unwrap().trim()
            ))
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            serde_norway::to_value(as_read).unwrap()[key],
            defaults[key],
            "config_example.yaml's exporter shows {key}: {:?}, not its default",
            written[key]
        );
    }
    // The three keys without a default are required, and named.
    let e = load_str("exporters:\n  - name: down\n    endpoint: http://h:4318\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing field `protocol`"), "{e}");
}

#[test]
fn a_file_without_a_server_section_keeps_the_default_listeners() {
    // `spanprof serve` starts from `ServerConfig::default()`; the file's `server` section
    // replaces it whole, so the gRPC listener's default must be the section's own.
    for text in [
        "",
        "storage:\n  max_series: 5\n",
        "server:\n  max_body_size: 1MiB\n",
    ] {
        let s = load_str(text).unwrap().server;
        assert_eq!(
            s.otlp_grpc_addr,
            Some("127.0.0.1:4317".parse().unwrap()),
            "{text}"
        );
        assert_eq!(
            s.otlp_http_addr,
            Some("127.0.0.1:4318".parse().unwrap()),
            "{text}"
        );
        assert_eq!(s.http_addr, "127.0.0.1:4040".parse().unwrap(), "{text}");
    }
    let s = load_str("server:\n  otlp_grpc_addr: off\n").unwrap().server;
    assert_eq!(s.otlp_grpc_addr, None);
}
