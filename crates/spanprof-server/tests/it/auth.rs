//! Authentication and tenants, over every route of every listener. The routes come from the
//! same table the server builds its routers from (`tenants::routes_of(..).listed()`), so a
//! route added later is called here too. Each is called without credentials, with a wrong
//! token, with a token lacking the scope, and with the other tenant's token; answers are 401,
//! 403, or hold none of the other tenant's data. Then each tenant's data is checked to stay
//! its own across a restart and a compaction.

use std::path::Path;

use serde_json::json;
use spanprof_server::auth::Access;
use spanprof_server::tenants::{self, Listener};
use spanprof_server::ServerConfig;
use spanprof_testkit::server::{wait_for, Reply, TestServer};

/// Tokens and passwords of the test's credentials (the config file reads them from files).
const TOKENS: [(&str, &str); 5] = [
    ("a-write", "token-of-a-writer-0123456789"),
    ("a-read", "token-of-a-reader-0123456789"),
    ("a-admin", "token-of-a-admin-0123456789"),
    ("b-read", "token-of-b-reader-0123456789"),
    ("b-write", "token-of-b-writer-0123456789"),
];

/// Tenant a's trace: its id must never be in tenant b's answers.
const TRACE_A: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const TRACE_B: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

/// What tenant a's data is recognised by in an answer.
const A_MARKS: [&str; 4] = ["svc-a", "burn_a", "span-a", TRACE_A];

fn token(name: &str) -> &'static str {
    TOKENS.iter().find(|(n, _)| *n == name).unwrap().1
}

fn bearer(name: &str) -> String {
    format!("Bearer {}", token(name))
}

/// The configuration of the test: five token credentials and a basic-auth one, each secret in
/// its own file.
fn auth_config(dir: &Path) -> ServerConfig {
    std::fs::create_dir_all(dir).unwrap();
    let mut yaml = String::from("auth:\n  credentials:\n");
    for (name, secret) in TOKENS {
        let file = dir.join(format!("{name}.token"));
        std::fs::write(&file, format!("{secret}\n")).unwrap();
        let scope = name.split('-').nth(1).unwrap();
        let tenant = &name[..1];
        yaml.push_str(&format!(
            "  - name: {name}\n    scopes: [{scope}]\n    tenant: {tenant}\n    token_file: {}\n",
            file.display()
        ));
    }
    let password = dir.join("grafana.password");
    std::fs::write(&password, "pw-of-grafana-a").unwrap();
    yaml.push_str(&format!(
        "  - name: grafana-a\n    scopes: [read]\n    tenant: a\n    username: grafana\n    password_file: {}\n",
        password.display()
    ));
    let file = dir.join("spanprof.yaml");
    std::fs::write(&file, yaml).unwrap();
    spanprof_server::config_file::load(&file, ServerConfig::default()).unwrap()
}

fn start(dir: &Path, auth: &ServerConfig) -> TestServer {
    TestServer::start_with(&dir.join("data"), |c| {
        c.auth = auth.auth.clone();
        c.server.otlp_http_addr = Some(([127, 0, 0, 1], 0).into());
        c.server.otlp_grpc_addr = Some(([127, 0, 0, 1], 0).into());
    })
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Tenant `t`'s profile and spans, sent with its write token.
fn feed(server: &TestServer, t: &str, trace: &str) {
    let auth = bearer(&format!("{t}-write"));
    let r = server
        .send(
            server.addr,
            "POST",
            &format!("/ingest?name=svc-{t}.cpu&from=now-10s&until=now&format=folded"),
            &[("authorization", &auth)],
            Some((
                "binary/octet-stream",
                format!("main;burn_{t} 100\n").into_bytes(),
            )),
            false,
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let now = now_ns();
    let spans = json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": format!("svc-{t}")}}]},
        "scopeSpans": [{"spans": [{
            "traceId": trace,
            "spanId": format!("{}", &trace[..16]),
            "name": format!("span-{t}"),
            "startTimeUnixNano": (now - 50_000_000).to_string(),
            "endTimeUnixNano": now.to_string(),
        }]}],
    }]});
    let r = server
        .send(
            server.addr,
            "POST",
            "/v1/traces",
            &[("authorization", &auth)],
            Some(("application/json", spans.to_string().into_bytes())),
            false,
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// `GET path` on the main listener as credential `who`.
fn get_as(server: &TestServer, who: &str, path: &str) -> Reply {
    let auth = bearer(who);
    server
        .send(
            server.addr,
            "GET",
            path,
            &[("authorization", &auth)],
            None,
            false,
        )
        .unwrap()
}

fn text(r: &Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// The services and trace each tenant reads: its own only.
fn assert_apart(server: &TestServer) {
    for (reader, own, other) in [("a-read", "a", "b"), ("b-read", "b", "a")] {
        let services = get_as(server, reader, "/api/v1/services?spans=true")
            .ok()
            .json();
        assert_eq!(
            services,
            json!({ "services": [format!("svc-{own}")] }),
            "{reader}"
        );
        let flame = text(
            &get_as(
                server,
                reader,
                &format!("/api/v1/flamegraph?service=svc-{own}"),
            )
            .ok(),
        );
        assert!(flame.contains(&format!("burn_{own}")), "{reader}: {flame}");
        assert!(
            !flame.contains(&format!("burn_{other}")),
            "{reader}: {flame}"
        );
        let theirs = if other == "a" { TRACE_A } else { TRACE_B };
        let r = get_as(server, reader, &format!("/api/traces/{theirs}"));
        assert_eq!(
            r.status,
            404,
            "{reader} read the other tenant's trace: {}",
            text(&r)
        );
    }
}

/// A path of `pattern` with its captures filled in: tenant a's trace id, a tag, a file.
fn concrete(pattern: &str) -> String {
    pattern
        .replace("{trace_id}", TRACE_A)
        .replace("{name}", "service.name")
        .replace("{method}", "Get")
        .replace("{*rest}", "nothing")
        .replace("{*path}", "js/app.js")
}

/// Query strings that make the read routes select tenant a's data.
const READ_QUERY: &str = "service=svc-a&from=now-1h&until=now&query=svc-a.cpu%7B%7D&name=service_name&label=service_name&tags=service.name%3Dsvc-a";

#[test]
fn every_route_of_every_listener_checks_credentials_scopes_and_tenants() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("auth-routes");
    let _ = std::fs::remove_dir_all(&dir);
    let config = auth_config(&dir);
    let server = start(&dir, &config);
    feed(&server, "a", TRACE_A);
    feed(&server, "b", TRACE_B);
    wait_for("both tenants' data", || {
        ["a-read", "b-read"].iter().all(|who| {
            let r = get_as(&server, who, "/api/v1/services?spans=true");
            r.status == 200 && text(&r).contains("svc-")
        })
    });
    assert_apart(&server);
    // Each tenant's /metrics holds its own series only.
    let metrics = text(&get_as(&server, "a-read", "/metrics").ok());
    assert!(
        metrics.contains("tenant=\"a\"") && !metrics.contains("tenant=\"b\""),
        "{metrics}"
    );
    assert!(
        metrics.contains("spanprof_store_series{tenant=\"a\"}"),
        "{metrics}"
    );

    let listeners = [
        (Listener::Main, server.addr, false),
        (Listener::OtlpHttp, server.otlp_http.unwrap(), false),
        (Listener::OtlpGrpc, server.otlp_grpc.unwrap(), true),
    ];
    let mut called = 0;
    for (listener, addr, grpc) in listeners {
        let routes = tenants::routes_of(listener, &config);
        assert!(!routes.listed().is_empty());
        for route in routes.listed() {
            called += 1;
            let path = concrete(&route.path);
            let method = route.method.as_str();
            let (path, body) = if method == "GET" {
                (format!("{path}?{READ_QUERY}"), None)
            } else if grpc {
                (path, Some(("application/grpc", vec![0, 0, 0, 0, 0])))
            } else {
                let body = json!({"name": "service_name", "start": 0, "end": now_ns() / 1_000_000 + 60_000, "labelSelector": "{}"});
                (
                    path,
                    Some(("application/json", body.to_string().into_bytes())),
                )
            };
            let what = format!("{listener:?} {method} {path} ({:?})", route.access);
            let call = |headers: &[(&str, &str)]| {
                server
                    .send(addr, method, &path, headers, body.clone(), grpc)
                    .unwrap_or_else(|e| panic!("{what}: {e}"))
            };
            // gRPC says it in grpc-status, with HTTP 200.
            let refused = |r: &Reply, http: u16, grpc_code: &str| {
                if grpc {
                    r.headers.get("grpc-status").is_some_and(|v| v == grpc_code)
                } else {
                    r.status == http
                }
            };
            let unauthenticated = |r: &Reply| {
                refused(r, 401, "16") && (grpc || r.headers.get("www-authenticate").is_some())
            };

            // No credentials: probes and the UI's files answer, the rest are 401.
            let r = call(&[]);
            if route.access == Access::Public {
                assert!(!unauthenticated(&r), "{what}: {}", text(&r));
            } else {
                assert!(
                    unauthenticated(&r),
                    "{what} without credentials: {} {}",
                    r.status,
                    text(&r)
                );
            }
            // A wrong token, and basic auth with a wrong password: 401 everywhere.
            let r = call(&[("authorization", "Bearer not-a-token-of-anyone")]);
            assert!(
                unauthenticated(&r),
                "{what} wrong token: {} {}",
                r.status,
                text(&r)
            );
            let r = call(&[("authorization", "Basic Z3JhZmFuYTp3cm9uZw==")]);
            assert!(
                unauthenticated(&r),
                "{what} wrong password: {} {}",
                r.status,
                text(&r)
            );
            // The wrong scope: 403.
            let wrong_scope = match route.access {
                Access::Read | Access::Metrics => Some("a-write"),
                Access::Write | Access::Admin => Some("a-read"),
                Access::Public => None,
            };
            if let Some(who) = wrong_scope {
                let auth = bearer(who);
                let r = call(&[("authorization", &auth)]);
                assert!(
                    refused(&r, 403, "7"),
                    "{what} as {who}: {} {}",
                    r.status,
                    text(&r)
                );
                for mark in A_MARKS.into_iter().filter(|m| !path.contains(m)) {
                    assert!(!text(&r).contains(mark), "{what} as {who}: {}", text(&r));
                }
            }
            // The other tenant's credential with the scope: nothing of tenant a's.
            let other = match route.access {
                Access::Write => "b-write",
                _ => "b-read",
            };
            let auth = bearer(other);
            let r = call(&[("authorization", &auth)]);
            // What the request itself says may be echoed ("trace … not found").
            let marks: Vec<&str> = A_MARKS.into_iter().filter(|m| !path.contains(m)).collect();
            for &mark in &marks {
                assert!(
                    !text(&r).contains(mark),
                    "{what} as {other} holds tenant a's {mark}: {}",
                    text(&r)
                );
            }
            // A tenant id smuggled in the header does not move a credential.
            let r = call(&[("authorization", &auth), ("x-scope-orgid", "a")]);
            for &mark in &marks {
                assert!(
                    !text(&r).contains(mark),
                    "{what} as {other} + X-Scope-OrgID: a"
                );
            }
        }
    }
    assert!(called > 50, "only {called} routes listed");

    // Basic auth with the right password reads tenant a's services; settings need admin.
    let r = server
        .send(
            server.addr,
            "GET",
            "/api/v1/services",
            &[("authorization", "Basic Z3JhZmFuYTpwdy1vZi1ncmFmYW5hLWE=")],
            None,
            false,
        )
        .unwrap();
    assert_eq!(r.json(), json!({ "services": ["svc-a"] }));
    let set = |who: &str| {
        let auth = bearer(who);
        let body = json!({"setting": {"name": "k", "value": "v"}})
            .to_string()
            .into_bytes();
        server
            .send(
                server.addr,
                "POST",
                "/settings.v1.SettingsService/Set",
                &[("authorization", &auth)],
                Some(("application/json", body)),
                false,
            )
            .unwrap()
    };
    assert_eq!(set("a-read").status, 403);
    assert_eq!(set("a-admin").status, 200, "{}", text(&set("a-admin")));

    // Across a restart and a compaction, each tenant still reads only its own.
    server.stop().unwrap();
    for t in ["a", "b"] {
        let tenant_dir = dir.join("data").join(tenants::TENANTS_DIR).join(t);
        let (store, _) = spanprof_store::store::Store::open(
            spanprof_store::store::StoreConfig::new(&tenant_dir),
        )
        .unwrap();
        store.compact(u64::MAX).unwrap();
    }
    let server = start(&dir, &config);
    assert_apart(&server);
    server.stop().unwrap();
}

/// Bad `Authorization` headers and tenant ids: each a clear refusal, and the server goes on.
#[test]
fn odd_credentials_and_tenant_ids_are_refused_without_harm() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("auth-odd");
    let _ = std::fs::remove_dir_all(&dir);
    let config = auth_config(&dir);
    let server = TestServer::start_with(&dir.join("data"), |c| {
        c.auth = config.auth.clone();
    });
    let huge = format!("Bearer {}", "x".repeat(60_000));
    let odd: [&[(&str, &str)]; 7] = [
        &[("authorization", &huge)],
        &[("authorization", "Bearer")],
        &[("authorization", "Basic")],
        &[("authorization", "Basic %%%%")],
        &[("authorization", "Negotiate abc")],
        &[(
            "authorization",
            "Bearer \t token-of-a-reader-0123456789 extra",
        )],
        &[("authorization", "")],
    ];
    for headers in odd {
        let r = server
            .send(server.addr, "GET", "/api/v1/services", headers, None, false)
            .unwrap();
        // hyper itself refuses a head past its limit (431); else 401.
        assert!(
            r.status == 401 || r.status == 431,
            "{headers:?}: {}",
            r.status
        );
    }
    // Odd bytes: sent raw, past the client's own checks.
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    use std::io::{Read, Write};
    stream
        .write_all(b"GET /api/v1/services HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \xff\xfe\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");

    // Without credentials configured a trusted X-Scope-OrgID picks the tenant; bad ids are
    // 400s and no directory is made outside the data directory.
    server.stop().unwrap();
    let open_dir = dir.join("trusting");
    let yaml = open_dir.join("spanprof.yaml");
    std::fs::create_dir_all(&open_dir).unwrap();
    std::fs::write(
        &yaml,
        "auth:\n  trust_tenant_header: true\n  max_tenants: 3\n",
    )
    .unwrap();
    let trusting = spanprof_server::config_file::load(&yaml, ServerConfig::default()).unwrap();
    let server = TestServer::start_with(&open_dir.join("data"), |c| c.auth = trusting.auth.clone());
    let long = "t".repeat(10_000);
    for bad in ["..", ".", "a/b", "../../etc", long.as_str(), "a b"] {
        let r = server
            .send(
                server.addr,
                "GET",
                "/api/v1/services",
                &[("x-scope-orgid", bad)],
                None,
                false,
            )
            .unwrap();
        assert!(
            r.status == 400 || r.status == 431,
            "{bad:?}: {} {}",
            r.status,
            text(&r)
        );
    }
    let mut raw = std::net::TcpStream::connect(server.addr).unwrap();
    raw.write_all(b"GET /api/v1/services HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Scope-OrgID: a\x00b\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = raw.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let made: Vec<_> = std::fs::read_dir(&open_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        made.len(),
        2,
        "only the config and the data directory: {made:?}"
    );
    // Tenants past auth.max_tenants (the default one counts) are refused, naming the setting.
    for (t, status) in [("t1", 200), ("t2", 200), ("t3", 403)] {
        let r = server
            .send(
                server.addr,
                "GET",
                "/api/v1/services",
                &[("x-scope-orgid", t)],
                None,
                false,
            )
            .unwrap();
        assert_eq!(r.status, status, "{t}: {}", text(&r));
        if status == 403 {
            assert!(text(&r).contains("auth.max_tenants"), "{}", text(&r));
        }
    }
    server.stop().unwrap();
}

/// Past its ingest rate a tenant's uploads are 429 with `Retry-After`, and another tenant's
/// are still taken.
#[test]
fn a_tenant_past_its_ingest_rate_is_told_to_retry_and_others_are_not_held() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("auth-rate");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = dir.join("spanprof.yaml");
    std::fs::write(
        &yaml,
        "server:\n  max_ingest_rate: 1KiB\n  max_ingest_burst: 4KiB\nauth:\n  trust_tenant_header: true\n",
    )
    .unwrap();
    let config = spanprof_server::config_file::load(&yaml, ServerConfig::default()).unwrap();
    let server = TestServer::start_with(&dir.join("data"), |c| {
        c.auth = config.auth.clone();
        c.server.max_ingest_rate = config.server.max_ingest_rate;
        c.server.max_ingest_burst = config.server.max_ingest_burst;
    });
    let upload = |tenant: &str| {
        let body = format!("main;{} 1\n", "f".repeat(1500)).into_bytes();
        server
            .send(
                server.addr,
                "POST",
                &format!("/ingest?name=svc-{tenant}&format=folded"),
                &[("x-scope-orgid", tenant)],
                Some(("text/plain", body)),
                false,
            )
            .unwrap()
    };
    // 4 KiB of burst: two uploads of about 1.5 KB pass, the third does not.
    assert_eq!(upload("a").status, 200);
    assert_eq!(upload("a").status, 200);
    let refused = upload("a");
    assert_eq!(refused.status, 429, "{}", text(&refused));
    assert!(text(&refused).contains("server.max_ingest_rate"));
    assert!(refused.headers.get("retry-after").is_some());
    assert_eq!(
        upload("b").status,
        200,
        "tenant b is held by tenant a's rate"
    );
    server.stop().unwrap();
}

/// A tenant's forwarder sends its tenant on (`X-Scope-OrgID`), as Pyroscope and Tempo take
/// it: here to a second spanprof that trusts the header, which keeps tenant a's data in its
/// own tenant a, and none in its default tenant.
#[test]
fn a_tenants_forwarder_passes_its_tenant_on() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("auth-forward");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = dir.join("downstream.yaml");
    std::fs::write(&yaml, "auth:\n  trust_tenant_header: true\n").unwrap();
    let trusting = spanprof_server::config_file::load(&yaml, ServerConfig::default()).unwrap();
    let downstream = TestServer::start_with(&dir.join("down"), |c| c.auth = trusting.auth.clone());
    let config = auth_config(&dir.join("up-config"));
    let endpoint = format!("http://{}", downstream.addr);
    let upstream = TestServer::start_with(&dir.join("up"), |c| {
        c.auth = config.auth.clone();
        c.exporters.push(spanprof_server::config::ForwarderConfig {
            batch_age: std::time::Duration::from_millis(50),
            ..spanprof_server::config::ForwarderConfig::new(
                "down",
                spanprof_server::config::ForwardProtocol::Http,
                &endpoint,
            )
        });
    });
    feed(&upstream, "a", TRACE_A);
    let services = |tenant: Option<&str>| {
        let headers: Vec<(&str, &str)> = tenant.map(|t| ("x-scope-orgid", t)).into_iter().collect();
        let r = downstream
            .send(
                downstream.addr,
                "GET",
                "/api/v1/services?spans=true",
                &headers,
                None,
                false,
            )
            .unwrap();
        r.json()
    };
    wait_for("tenant a's data downstream", || {
        services(Some("a")) == json!({ "services": ["svc-a"] })
    });
    assert_eq!(services(None), json!({ "services": [] }));
    assert_eq!(services(Some("b")), json!({ "services": [] }));
    let r = downstream
        .send(
            downstream.addr,
            "GET",
            &format!("/api/traces/{TRACE_A}"),
            &[("x-scope-orgid", "a")],
            None,
            false,
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", text(&r));
    upstream.stop().unwrap();
    downstream.stop().unwrap();
}
