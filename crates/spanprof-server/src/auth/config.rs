//! The `auth` section of the config file: credentials (where their secrets come from, their
//! scopes and tenant), whether `X-Scope-OrgID` is trusted, and whether `/metrics` is open.
//! Secrets are read here, once, and kept only as SHA-256 digests.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Auth, Credential, Kind, Scopes, TenantId};

/// `auth`: read from the file as is, fields named as its keys, one `Default`. Its secrets
/// are read by [`AuthConfig::load`] into the runtime [`Auth`], which keeps only digests.
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Who may do what, and where each secret comes from; none by default (every request
    /// is served).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<CredentialEntry>,
    /// Take the tenant from `X-Scope-OrgID` (behind a proxy that sets it).
    pub trust_tenant_header: bool,
    /// Who reads `/metrics` once credentials exist.
    pub metrics: MetricsAccess,
    /// Tenants open at once, at least 1 (100 by default).
    pub max_tenants: usize,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            credentials: Vec::new(),
            trust_tenant_header: false,
            metrics: MetricsAccess::Read,
            max_tenants: super::DEFAULT_MAX_TENANTS,
        }
    }
}

/// `auth.metrics`: who may read `/metrics` once credentials exist.
#[derive(Deserialize, Serialize, Default, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MetricsAccess {
    /// Credentials with the `read` scope (the default).
    #[default]
    Read,
    /// Anyone (a Prometheus without credentials).
    Public,
}

/// One entry of `auth.credentials`: a name, scopes, a tenant and one secret's source
/// (`docs/security.md`; keys as the fields).
#[derive(Deserialize, Serialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct CredentialEntry {
    /// Named in logs; never the secret.
    pub name: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its tenant (default: the default tenant, or a trusted `X-Scope-OrgID`).
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A file holding a bearer token.
    pub token_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// An environment variable holding a bearer token.
    pub token_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A bearer token's SHA-256, 64 hex digits.
    pub token_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A basic-auth user name (with one password source).
    pub username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A file holding the password.
    pub password_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// An environment variable holding the password.
    pub password_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The password's SHA-256, 64 hex digits.
    pub password_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A client certificate's SHA-256 (of its DER), 64 hex digits.
    pub client_cert_sha256: Option<String>,
}

/// A credential's scope: `read`, `write`, or `admin` (all).
#[derive(Deserialize, Serialize, Debug, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Queries, the UI, Grafana.
    Read,
    /// Ingest.
    Write,
    /// Settings, and read and write.
    Admin,
}

impl AuthConfig {
    /// The runtime [`Auth`]: every secret read and hashed. An error names the credential (by
    /// its `name`) and the key that is wrong, never a secret.
    pub fn load(&self) -> Result<Auth, String> {
        let mut credentials = Vec::with_capacity(self.credentials.len());
        for (i, c) in self.credentials.iter().enumerate() {
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
            let kind = kind_of(c, &at)?;
            credentials.push(Credential {
                name: c.name.as_str().into(),
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
                0 => return Err("auth.max_tenants: must be at least 1".to_owned()),
                n => n,
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
        serde_norway::from_str::<AuthConfig>(yaml).unwrap().load()
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
