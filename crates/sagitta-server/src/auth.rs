//! Optional API keys with three roles. Keys are compared in constant time
//! (every configured key is compared, whatever matches).

use crate::error::{ApiError, ApiResult};
use subtle::ConstantTimeEq;

/// What a key may do; each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Search, get, count, scan, list and describe.
    Read,
    /// Also upsert and delete rows.
    Write,
    /// Also create and drop collections.
    Admin,
}

impl Role {
    /// Parses `read` / `ro`, `write` / `rw`, `admin`.
    pub fn parse(s: &str) -> Option<Role> {
        match s.trim().to_ascii_lowercase().as_str() {
            "read" | "ro" | "read-only" | "readonly" => Some(Role::Read),
            "write" | "rw" | "read-write" | "readwrite" => Some(Role::Write),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    /// `read`, `write` or `admin`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }

    /// What a request needing this role does (for the error message).
    pub fn action(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write rows (needs a read-write or admin key)",
            Role::Admin => "create or drop collections (needs an admin key)",
        }
    }
}

/// The configured keys; none configured means no authentication.
#[derive(Clone, Default)]
pub struct Keys {
    keys: Vec<(Vec<u8>, Role)>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys({} configured)", self.keys.len())
    }
}

/// Shortest key accepted in configuration.
pub const MIN_KEY_LEN: usize = 16;

impl Keys {
    /// Parses a keys file: one `ROLE KEY` per line (`#` comments, blank
    /// lines ignored).
    pub fn parse_file(text: &str) -> Result<Keys, String> {
        let mut k = Keys::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(role), Some(key), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(format!("line {}: expected `ROLE KEY`", i + 1));
            };
            k.push(role, key)
                .map_err(|e| format!("line {}: {e}", i + 1))?;
        }
        Ok(k)
    }

    /// Parses the environment form: `ROLE:KEY,ROLE:KEY`.
    pub fn parse_env(text: &str) -> Result<Keys, String> {
        let mut k = Keys::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (role, key) = item
                .split_once(':')
                .ok_or_else(|| "expected ROLE:KEY items separated by commas".to_string())?;
            k.push(role, key)?;
        }
        Ok(k)
    }

    fn push(&mut self, role: &str, key: &str) -> Result<(), String> {
        let role = Role::parse(role)
            .ok_or_else(|| format!("unknown role {role:?} (read, write or admin)"))?;
        if key.len() < MIN_KEY_LEN {
            return Err(format!("keys must be at least {MIN_KEY_LEN} characters"));
        }
        self.keys.push((key.as_bytes().to_vec(), role));
        Ok(())
    }

    /// Adds the keys of `other`.
    pub fn extend(&mut self, other: Keys) {
        self.keys.extend(other.keys);
    }

    /// Whether any key is configured.
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The role of `presented`, comparing against every key.
    fn role_of(&self, presented: &[u8]) -> Option<Role> {
        let mut found = None;
        for (key, role) in &self.keys {
            if bool::from(key.as_slice().ct_eq(presented)) {
                found = found.max(Some(*role));
            }
        }
        found
    }

    /// The role `presented` has: every role when no key is configured,
    /// `None` for an unknown key.
    pub fn role(&self, presented: Option<&[u8]>) -> Option<Role> {
        if !self.enabled() {
            return Some(Role::Admin);
        }
        presented.and_then(|p| self.role_of(p))
    }

    /// Checks that `presented` (the key a request carries) may do what
    /// `need` allows.
    pub fn check(&self, presented: Option<&[u8]>, need: Role) -> ApiResult<()> {
        if !self.enabled() {
            return Ok(());
        }
        let role = presented
            .and_then(|p| self.role_of(p))
            .ok_or(ApiError::Unauthenticated)?;
        if role < need {
            return Err(ApiError::Forbidden(need.action()));
        }
        Ok(())
    }
}

/// The key in an `Authorization: Bearer KEY` or `x-api-key: KEY` header
/// value.
pub fn bearer(authorization: Option<&[u8]>, api_key: Option<&[u8]>) -> Option<Vec<u8>> {
    if let Some(a) = authorization {
        let a = a.trim_ascii();
        if a.len() > 7 && a[..7].eq_ignore_ascii_case(b"bearer ") {
            return Some(a[7..].trim_ascii().to_vec());
        }
    }
    api_key.map(|k| k.trim_ascii().to_vec())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail loudly on unexpected errors
    use super::*;

    #[test]
    fn roles_and_keys() {
        let k = Keys::parse_file(
            "# comment\nread  reader-key-0123456789\nwrite writer-key-0123456789\nadmin admin-key-01234567890\n",
        )
        .unwrap();
        assert!(k.check(None, Role::Read).is_err());
        assert!(matches!(
            k.check(Some(b"nope"), Role::Read),
            Err(ApiError::Unauthenticated)
        ));
        assert!(k.check(Some(b"reader-key-0123456789"), Role::Read).is_ok());
        assert!(matches!(
            k.check(Some(b"reader-key-0123456789"), Role::Write),
            Err(ApiError::Forbidden(_))
        ));
        assert!(k.check(Some(b"writer-key-0123456789"), Role::Write).is_ok());
        assert!(k
            .check(Some(b"writer-key-0123456789"), Role::Admin)
            .is_err());
        assert!(k.check(Some(b"admin-key-01234567890"), Role::Admin).is_ok());
        // A prefix of a key is not the key.
        assert!(k.check(Some(b"admin-key-0123456789"), Role::Read).is_err());
        assert!(Keys::default().check(None, Role::Admin).is_ok());
        assert_eq!(Keys::default().role(None), Some(Role::Admin));
        assert_eq!(k.role(Some(b"reader-key-0123456789")), Some(Role::Read));
        assert_eq!(k.role(Some(b"writer-key-0123456789")), Some(Role::Write));
        assert_eq!(k.role(Some(b"nope")), None);
        assert_eq!(k.role(None), None);
        assert!(Keys::parse_file("root short").is_err());
        assert!(Keys::parse_file("boss some-long-key-0123456789").is_err());
        let e = Keys::parse_env("ro:reader-key-0123456789, admin:admin-key-01234567890").unwrap();
        assert!(e.check(Some(b"admin-key-01234567890"), Role::Admin).is_ok());
        assert_eq!(
            bearer(Some(b"Bearer abc"), None).as_deref(),
            Some(&b"abc"[..])
        );
        assert_eq!(bearer(None, Some(b" k ")).as_deref(), Some(&b"k"[..]));
        assert_eq!(bearer(Some(b"Basic x"), None), None);
    }
}
