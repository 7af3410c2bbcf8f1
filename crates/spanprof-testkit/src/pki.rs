//! Certificates of a private CA made with `openssl`, for the TLS tests (spanprof's forwarders
//! and scrapes as clients, its listeners as a server). Standard library only.

use std::path::Path;
use std::process::Command;

const INSTALL_OPENSSL: &str = "install openssl: apt-get install openssl, or run .ci/setup";

/// `openssl ARGS` in `dir`, which must succeed; its standard output.
pub fn openssl(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl ({e}): {INSTALL_OPENSSL}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The SHA-256 fingerprint of certificate `pem` in `dir` as `openssl x509` prints it, in
/// lower-case hex without colons.
pub fn fingerprint(dir: &Path, pem: &str) -> String {
    let out = openssl(
        dir,
        &["x509", "-in", pem, "-noout", "-fingerprint", "-sha256"],
    );
    let hex = out.trim().rsplit('=').next().unwrap_or_default();
    hex.replace(':', "").to_ascii_lowercase()
}

/// A new P-256 key, as every certificate here has.
pub const EC_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// A CA (`ca.pem`) and a certificate it signed for 127.0.0.1 only (`server.pem`,
/// `server.key`), in `dir`.
pub fn certificates(dir: &Path) {
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "2",
        "-subj",
        "/CN=spanprof test CA",
    ];
    ca.extend(EC_KEY);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(dir, &ca);
    signed(dir, "server", "127.0.0.1", "subjectAltName=IP:127.0.0.1");
}

/// A client certificate the CA of [`certificates`] signed, for `spanprof-client`
/// (`client.pem`, `client.key`), in `dir`.
pub fn client_certificate(dir: &Path) {
    signed(
        dir,
        "client",
        "spanprof-client",
        "extendedKeyUsage=clientAuth",
    );
}

/// A key and a certificate the CA in `dir` signs (`{name}.key`, `{name}.pem`), for common
/// name `cn`, with the X.509 extension `extension`.
pub fn signed(dir: &Path, name: &str, cn: &str, extension: &str) {
    let [key, csr, ext, pem] = ["key", "csr", "ext", "pem"].map(|x| format!("{name}.{x}"));
    let subject = format!("/CN={cn}");
    let mut request = vec!["req", "-subj", subject.as_str()];
    request.extend(EC_KEY);
    request.extend(["-keyout", key.as_str(), "-out", csr.as_str()]);
    openssl(dir, &request);
    std::fs::write(dir.join(&ext), format!("{extension}\n")).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-extfile",
            &ext,
            "-out",
            &pem,
        ],
    );
}
