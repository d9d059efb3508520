//! The token file: one per server URL, readable by its owner only (0600, in a 0700 directory),
//! replaced whole (written aside, then renamed) so a reader never sees half of it.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::Digest;
use url::Url;

use crate::secret::Secret;

/// A client identity at one authorization server.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Registration {
    pub client_id: String,
    pub client_secret: Option<Secret>,
    /// `client_secret_basic`, `client_secret_post` or `none`.
    pub auth_method: String,
    /// The redirect URI it was registered with (a dynamic registration names one).
    pub redirect_uri: Option<String>,
}

/// Tokens for one resource, from one authorization server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tokens {
    /// The authorization server that issued them: tokens are never sent after a change of server.
    pub issuer: String,
    /// The resource they were asked for (RFC 8707).
    pub resource: String,
    pub access_token: Secret,
    pub refresh_token: Option<Secret>,
    /// Seconds since the epoch; None: the server gave no lifetime.
    pub expires_at: Option<u64>,
    /// The scopes asked for (space-separated): a step-up asks for these and the new ones.
    pub scope: Option<String>,
}

impl Tokens {
    /// Whether the access token expires within `margin` of now.
    pub fn expires_within(&self, margin: Duration) -> bool {
        self.expires_at.is_some_and(|at| at <= now_secs() + margin.as_secs())
    }
}

/// What the file holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stored {
    /// The server URL the file is for (a check that the file is the right one).
    pub server_url: String,
    /// Client identities, by issuer: one server's registration is never used at another.
    #[serde(default)]
    pub clients: BTreeMap<String, Registration>,
    pub tokens: Option<Tokens>,
}

/// The token file of one server URL.
#[derive(Debug, Clone)]
pub struct Store {
    path: PathBuf,
    server_url: String,
}

impl Store {
    /// The file for `server_url` in `dir` (made 0700 when written).
    pub fn new(dir: &Path, server_url: &Url) -> Store {
        let hash = sha2::Sha256::digest(server_url.as_str().as_bytes());
        let hex: String = hash.iter().take(8).map(|b| format!("{b:02x}")).collect();
        let host: String = server_url
            .host_str()
            .unwrap_or("server")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
            .take(40)
            .collect();
        Store { path: dir.join(format!("{host}-{hex}.json")), server_url: server_url.to_string() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the file holds; empty when there is none (or it is for another URL, or unreadable:
    /// a new sign-in replaces it).
    pub fn load(&self) -> Stored {
        let empty = || Stored { server_url: self.server_url.clone(), ..Stored::default() };
        let Ok(text) = std::fs::read(&self.path) else { return empty() };
        match serde_json::from_slice::<Stored>(&text) {
            Ok(s) if s.server_url == self.server_url => s,
            Ok(_) => empty(),
            Err(e) => {
                tracing::warn!("ignored the token file {}: {e}", self.path.display());
                empty()
            }
        }
    }

    /// Replaces the file with `stored`.
    pub fn save(&self, stored: &Stored) -> Result<(), String> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let fail = |what: &str, e: std::io::Error| format!("could not {what} {}: {e}", dir.display());
        std::fs::create_dir_all(dir).map_err(|e| fail("create", e))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| fail("restrict", e))?;
        let body = serde_json::to_vec_pretty(stored).map_err(|e| format!("could not encode the tokens: {e}"))?;
        let tmp = self.path.with_extension(format!("tmp{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
            // An existing file of that name keeps its mode: make it ours.
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            f.write_all(&body)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("could not write {}: {e}", self.path.display())
        })
    }

    /// Forgets everything (tokens and registrations). Ok(false): there was nothing.
    pub fn remove(&self) -> Result<bool, String> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(format!("could not remove {}: {e}", self.path.display())),
        }
    }
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        Tokens {
            issuer: "https://as".into(),
            resource: "https://h/mcp".into(),
            access_token: Secret::new("at-123456789"),
            refresh_token: Some(Secret::new("rt-123456789")),
            expires_at: Some(now_secs() + 3600),
            scope: None,
        }
    }

    #[test]
    fn the_file_is_0600_in_a_0700_directory_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let url = Url::parse("https://h.example/mcp").unwrap();
        let store = Store::new(&dir.path().join("oauth"), &url);
        let stored = Stored { server_url: url.to_string(), tokens: Some(tokens()), ..Default::default() };
        store.save(&stored).unwrap();
        let mode = std::fs::metadata(store.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(dir.path().join("oauth")).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        let back = store.load();
        assert_eq!(back.tokens.unwrap().access_token.expose(), "at-123456789");
        // Only the file remains: nothing written aside is left over.
        assert_eq!(std::fs::read_dir(dir.path().join("oauth")).unwrap().count(), 1);
        assert!(store.remove().unwrap());
        assert!(!store.remove().unwrap());
        assert!(store.load().tokens.is_none());
    }

    #[test]
    fn a_file_for_another_url_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let a = Url::parse("https://h.example/mcp").unwrap();
        let store = Store::new(dir.path(), &a);
        let stored =
            Stored { server_url: "https://other.example/mcp".into(), tokens: Some(tokens()), ..Default::default() };
        store.save(&stored).unwrap();
        assert!(store.load().tokens.is_none());
    }

    #[test]
    fn debug_never_shows_a_token() {
        let text = format!("{:?}", tokens());
        assert!(!text.contains("123456789"), "{text}");
    }
}
