//! The `auth` section of the config file: credentials (where their secrets come from, their
//! scopes and tenant), whether `X-Scope-OrgID` is trusted, and whether `/metrics` is open.
//! Secrets are read here, once, and kept only as SHA-256 digests.

use std::path::PathBuf;

use serde::Deserialize;

use super::{Auth, Credential, Kind, Scopes, TenantId};

/// `auth:` as written in the file.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    #[serde(default)]
    credentials: Vec<CredentialEntry>,
    #[serde(default)]
    trust_tenant_header: bool,
    #[serde(default)]
    metrics: MetricsAccess,
    max_tenants: Option<usize>,
}

/// `auth.metrics`: who may read `/metrics` once credentials exist.
#[derive(Deserialize, Default, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum MetricsAccess {
    /// Credentials with the `read` scope (the default).
    #[default]
    Read,
    /// Anyone (a Prometheus without credentials).
    Public,
}

/// One entry of `auth.credentials`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct CredentialEntry {
    name: String,
    scopes: Vec<Scope>,
    tenant: Option<String>,
    token_file: Option<PathBuf>,
    token_env: Option<String>,
    token_sha256: Option<String>,
    username: Option<String>,
    password_file: Option<PathBuf>,
    password_env: Option<String>,
    password_sha256: Option<String>,
    client_cert_sha256: Option<String>,
}

#[derive(Deserialize, Debug, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Scope {
    Read,
    Write,
    Admin,
}

impl AuthSection {
    /// The runtime [`Auth`]: every secret read and hashed. An error names the credential (by
    /// its `name`) and the key that is wrong, never a secret.
    pub fn load(self) -> Result<Auth, String> {
        let mut credentials = Vec::with_capacity(self.credentials.len());
        for (i, c) in self.credentials.into_iter().enumerate() {
            let at = format!("auth.credentials[{i}] ({:?})", c.name);
            if c.name.trim().is_empty() {
                return Err(format!(
                    "auth.credentials[{i}]: name is empty (it names the credential in logs)"
                ));
            }
            if credentials.iter().any(|k: &Credential| *k.name == *c.name) {
                return Err(format!("{at}: another credential has this name"));
            }
            if c.scopes.is_empty() {
                return Err(format!(
                    "{at}: scopes is empty (give read, write and/or admin)"
                ));
            }
            let scopes = c.scopes.iter().fold(Scopes::NONE, |s, scope| {
                s | match scope {
                    Scope::Read => Scopes::READ,
                    Scope::Write => Scopes::WRITE,
                    Scope::Admin => Scopes::ALL,
                }
            });
            let tenant = c
                .tenant
                .as_deref()
                .map(TenantId::new)
                .transpose()
                .map_err(|e| format!("{at}: tenant: {e}"))?;
            let kind = kind_of(&c, &at)?;
            credentials.push(Credential {
                name: c.name.into(),
                kind,
                scopes,
                tenant,
            });
        }
        Ok(Auth {
            credentials,
            trust_tenant_header: self.trust_tenant_header,
            metrics_public: self.metrics == MetricsAccess::Public,
            max_tenants: match self.max_tenants {
                Some(0) => return Err("auth.max_tenants: must be at least 1".to_owned()),
                Some(n) => n,
                None => super::DEFAULT_MAX_TENANTS,
            },
        })
    }
}

/// What the credential checks, from exactly one secret source.
fn kind_of(c: &CredentialEntry, at: &str) -> Result<Kind, String> {
    let token = secret(&c.token_file, &c.token_env, &c.token_sha256, "token", at)?;
    let password = secret(
        &c.password_file,
        &c.password_env,
        &c.password_sha256,
        "password",
        at,
    )?;
    let cert = c
        .client_cert_sha256
        .as_deref()
        .map(|h| hex_digest(h).ok_or(format!("{at}: client_cert_sha256 is not 64 hex digits")))
        .transpose()?;
    match (token, &c.username, password, cert) {
        (Some(digest), None, None, None) => Ok(Kind::Bearer(digest)),
        (None, Some(user), Some(digest), None) if !user.is_empty() && !user.contains(':') => {
            Ok(Kind::Basic {
                username: user.clone(),
                digest,
            })
        }
        (None, Some(_), Some(_), None) => Err(format!(
            "{at}: username must be non-empty and hold no ':' (basic auth splits there)"
        )),
        (None, Some(_), None, None) => Err(format!(
            "{at}: username needs password_file, password_env or password_sha256"
        )),
        (None, None, Some(_), None) => Err(format!("{at}: a password needs a username")),
        (None, None, None, Some(fingerprint)) => Ok(Kind::ClientCert(fingerprint)),
        (None, None, None, None) => Err(format!(
            "{at}: no secret: give token_file, token_env or token_sha256 (a bearer token), \
             username with password_file, password_env or password_sha256 (basic auth), or \
             client_cert_sha256 (mutual TLS)"
        )),
        _ => Err(format!(
            "{at}: give one kind of credential: a token, a username and password, or a client \
             certificate"
        )),
    }
}

/// The SHA-256 of the secret named by exactly one of `file`, `env` and `sha256`, if any.
fn secret(
    file: &Option<PathBuf>,
    env: &Option<String>,
    sha256: &Option<String>,
    what: &str,
    at: &str,
) -> Result<Option<[u8; 32]>, String> {
    let given = [file.is_some(), env.is_some(), sha256.is_some()];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err(format!(
            "{at}: give one of {what}_file, {what}_env and {what}_sha256"
        ));
    }
    let text = if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{at}: {what}_file {}: {e}", path.display()))?;
        warn_if_readable_by_others(path, at);
        text
    } else if let Some(var) = env {
        std::env::var(var).map_err(|_| {
            format!("{at}: {what}_env: the environment variable {var} is not set (or not UTF-8)")
        })?
    } else if let Some(hex) = sha256 {
        return hex_digest(hex)
            .map(Some)
            .ok_or(format!("{at}: {what}_sha256 is not 64 hex digits"));
    } else {
        return Ok(None);
    };
    // A file's or a variable's last newline is not part of the secret.
    let secret = text.trim_end_matches(['\n', '\r']);
    if secret.is_empty() {
        return Err(format!("{at}: the {what} is empty"));
    }
    Ok(Some(super::sha256(secret.as_bytes())))
}

fn warn_if_readable_by_others(path: &std::path::Path, at: &str) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.permissions().mode() & 0o077 != 0 {
                tracing::warn!(credential = %at, file = %path.display(), "a secret file is readable by other users: chmod 600 it");
            }
        }
    }
}

/// 64 hex digits as 32 bytes.
pub(crate) fn hex_digest(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.as_bytes().chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<Auth, String> {
        serde_norway::from_str::<AuthSection>(yaml).unwrap().load()
    }

    #[test]
    fn each_credential_has_one_secret_and_errors_name_it() {
        let sha = "a".repeat(64);
        let auth = load(&format!(
            "credentials:\n- name: ci\n  scopes: [write]\n  token_sha256: {sha}\n"
        ))
        .unwrap();
        assert_eq!(auth.credentials.len(), 1);
        let e = load("credentials:\n- name: ci\n  scopes: [read]\n").unwrap_err();
        assert!(e.contains("(\"ci\"): no secret"), "{e}");
        let e = load(&format!(
            "credentials:\n- name: ci\n  scopes: [read]\n  token_sha256: {sha}\n  token_env: X\n"
        ))
        .unwrap_err();
        assert!(e.contains("give one of token_file"), "{e}");
        let e = load("credentials:\n- name: ci\n  scopes: []\n  token_sha256: 12\n").unwrap_err();
        assert!(e.contains("scopes is empty"), "{e}");
        let e = load(
            "credentials:\n- name: ci\n  scopes: [read]\n  token_env: SPANPROF_SURELY_UNSET_VAR\n",
        )
        .unwrap_err();
        assert!(e.contains("SPANPROF_SURELY_UNSET_VAR is not set"), "{e}");
        let e = load(&format!(
            "credentials:\n- name: ci\n  scopes: [read]\n  tenant: ../x\n  token_sha256: {sha}\n"
        ))
        .unwrap_err();
        assert!(e.contains("tenant: the tenant id may hold only"), "{e}");
    }

    #[test]
    fn a_secret_file_is_read_without_its_last_newline_and_never_echoed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret-token\n").unwrap();
        let auth = load(&format!(
            "credentials:\n- name: ci\n  scopes: [write]\n  token_file: {}\n",
            path.display()
        ))
        .unwrap();
        assert!(
            matches!(auth.credentials[0].kind, Kind::Bearer(d) if d == super::super::sha256(b"s3cret-token"))
        );
        std::fs::write(&path, "\n").unwrap();
        let e = load(&format!(
            "credentials:\n- name: ci\n  scopes: [write]\n  token_file: {}\n",
            path.display()
        ))
        .unwrap_err();
        assert!(e.contains("the token is empty"), "{e}");
    }
}
