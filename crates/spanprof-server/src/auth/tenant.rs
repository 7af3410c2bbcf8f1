//! Tenant ids: which of the store's separate data sets a request reads and writes. Pyroscope's
//! and Tempo's rules (`X-Scope-OrgID`): at most 150 bytes of ASCII letters, digits and
//! `!-_.*'()`, not `.` or `..` (an id names a directory under `tenants/`).

use std::fmt;
use std::sync::Arc;

/// Longest tenant id, bytes (Pyroscope's and Tempo's `MaxTenantIDLength`).
pub const MAX_TENANT_ID_BYTES: usize = 150;

/// The tenant of requests that name none: its data is the data directory itself, as before
/// tenants existed.
pub const DEFAULT_TENANT: &str = "default";

/// A checked tenant id (cheap to clone).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize, serde::Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(Arc<str>);

impl TryFrom<String> for TenantId {
    type Error = TenantError;
    fn try_from(id: String) -> Result<TenantId, TenantError> {
        TenantId::new(&id)
    }
}

impl From<TenantId> for String {
    fn from(id: TenantId) -> String {
        id.0.to_string()
    }
}

/// Why a tenant id was refused; the id itself is not repeated (it may be anything).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantError {
    /// Empty.
    #[error("the tenant id is empty")]
    Empty,
    /// Past [`MAX_TENANT_ID_BYTES`].
    #[error("the tenant id is longer than {MAX_TENANT_ID_BYTES} bytes")]
    TooLong,
    /// `.` or `..`.
    #[error("the tenant id may not be \".\" or \"..\"")]
    Dots,
    /// A byte outside letters, digits and `!-_.*'()`.
    #[error("the tenant id may hold only letters, digits and !-_.*'()")]
    Character,
}

impl TenantId {
    /// Checks `id`.
    pub fn new(id: &str) -> Result<TenantId, TenantError> {
        if id.is_empty() {
            return Err(TenantError::Empty);
        }
        if id.len() > MAX_TENANT_ID_BYTES {
            return Err(TenantError::TooLong);
        }
        if id == "." || id == ".." {
            return Err(TenantError::Dots);
        }
        let allowed = |b: u8| b.is_ascii_alphanumeric() || b"!-_.*'()".contains(&b);
        if !id.bytes().all(allowed) {
            return Err(TenantError::Character);
        }
        Ok(TenantId(Arc::from(id)))
    }

    /// [`DEFAULT_TENANT`].
    pub fn default_tenant() -> TenantId {
        TenantId(Arc::from(DEFAULT_TENANT))
    }

    /// Whether this is [`DEFAULT_TENANT`].
    pub fn is_default(&self) -> bool {
        &*self.0 == DEFAULT_TENANT
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_leave_the_directory_or_break_a_header_are_refused() {
        for ok in ["a", "team-a", "Team_A.1", "x!*'()", &"a".repeat(150)] {
            assert_eq!(TenantId::new(ok).unwrap().as_str(), ok);
        }
        assert_eq!(TenantId::new(""), Err(TenantError::Empty));
        assert_eq!(TenantId::new("."), Err(TenantError::Dots));
        assert_eq!(TenantId::new(".."), Err(TenantError::Dots));
        assert_eq!(TenantId::new(&"a".repeat(151)), Err(TenantError::TooLong));
        for bad in ["a/b", "../x", "a\0b", "a b", "é", "a|b", "a\\b"] {
            assert_eq!(TenantId::new(bad), Err(TenantError::Character), "{bad:?}");
        }
    }
}
