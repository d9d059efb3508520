//! The token file: one per server URL, readable by its owner only (0600, in a 0700 directory),
//! replaced whole (written aside, then renamed) so a reader never sees half of it.

use std::collections::BTreeMap;
use std::io::Write;
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
    /// The lifetime the server gave (`expires_in`, seconds): a short-lived token is refreshed
    /// at half its life, not at every request. None in files written before it was kept.
    #[serde(default)]
    pub lifetime: Option<u64>,
    /// The scopes asked for (space-separated): a step-up asks for these and the new ones.
    pub scope: Option<String>,
}

impl Tokens {
    /// Whether the access token is due for a refresh before it is sent: it expires within
    /// `margin` of now, or within half its lifetime where that is shorter (a token that lives
    /// 30 s is not refreshed at every request).
    pub fn due_for_refresh(&self, margin: Duration) -> bool {
        let margin = self.lifetime.map_or(margin.as_secs(), |l| margin.as_secs().min(l / 2));
        self.expires_at.is_some_and(|at| at <= now_secs() + margin)
    }

    /// Whether the access token has expired.
    pub fn expired(&self) -> bool {
        self.expires_at.is_some_and(|at| at <= now_secs())
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
    url: Url,
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
        Store { path: dir.join(format!("{host}-{hex}.json")), url: server_url.clone() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the file holds; empty when there is none (or it is for another URL, or unreadable:
    /// a new sign-in replaces it). Tokens issued for another resource are not used here.
    pub fn load(&self) -> Stored {
        let empty = || Stored { server_url: self.url.to_string(), ..Stored::default() };
        let Ok(text) = std::fs::read(&self.path) else { return empty() };
        self.restrict_if_open();
        match serde_json::from_slice::<Stored>(&text) {
            Ok(mut s) if s.server_url == self.url.as_str() => {
                if let Some(t) = &s.tokens
                    && !crate::discover::resource_matches(&t.resource, &self.url)
                {
                    // A token is bound to the resource it was issued for: one for another
                    // server (a file copied or edited by hand) would hand it to this one.
                    if first_warning(&self.path, &t.resource) {
                        tracing::warn!(
                            "ignored the tokens in {}: they were issued for {}, not for {url}; the next request signs in again (or `switchyard login {url}`)",
                            self.path.display(),
                            t.resource,
                            url = crate::shown(&self.url)
                        );
                    }
                    s.tokens = None;
                }
                s
            }
            Ok(_) => empty(),
            Err(e) => {
                tracing::warn!("ignored the token file {}: {e}", self.path.display());
                empty()
            }
        }
    }

    /// Makes a token file others may read the owner's alone, and says so: anyone on the machine
    /// may have read its tokens meanwhile.
    fn restrict_if_open(&self) {
        let Ok(meta) = std::fs::metadata(&self.path) else { return };
        if !switchyard_os::fs::open_to_others(&meta) {
            return;
        }
        let mode = switchyard_os::fs::access_text(&meta);
        match switchyard_os::fs::restrict(&self.path) {
            Ok(()) => tracing::warn!(
                "the token file {} could be read by others ({mode}); it is now its owner's alone. If others use this machine, sign out and in again (`switchyard logout {url}`, then `switchyard login {url}`)",
                self.path.display(),
                url = crate::shown(&self.url)
            ),
            Err(e) => tracing::warn!(
                "the token file {} can be read by others ({mode}) and could not be restricted: {e}",
                self.path.display()
            ),
        }
    }

    /// The file's directory, made if need be, and the owner's alone (0700). Err: why not.
    fn own_dir(&self) -> Result<&Path, String> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let fail = |what: &str, e: std::io::Error| format!("could not {what} {}: {e}", dir.display());
        std::fs::create_dir_all(dir).map_err(|e| fail("create", e))?;
        switchyard_os::fs::restrict(dir).map_err(|e| fail("restrict", e))?;
        Ok(dir)
    }

    /// Replaces the file with `stored`.
    pub fn save(&self, stored: &Stored) -> Result<(), String> {
        self.own_dir()?;
        let body = serde_json::to_vec_pretty(stored).map_err(|e| format!("could not encode the tokens: {e}"))?;
        let tmp = self.path.with_extension(format!("tmp{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = switchyard_os::fs::private_options().write(true).create(true).truncate(true).open(&tmp)?;
            // An existing file of that name keeps its mode: make it ours.
            switchyard_os::fs::restrict(&tmp)?;
            f.write_all(&body)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("could not write {}: {e}", self.path.display())
        })
    }

    /// Waits up to `limit` for the lock that lets one process at a time sign in to, or refresh
    /// for, this server URL (an empty `.lock` file beside the tokens; the lock goes with the
    /// returned handle, or with the process). None: not had in time, or it cannot be had.
    pub async fn lock(&self, limit: Duration) -> Option<Held> {
        let path = self.path.with_extension("lock");
        let opened = self.own_dir().and_then(|_| {
            let file = switchyard_os::fs::private_options().write(true).create(true).truncate(false).open(&path);
            file.map_err(|e| format!("could not open the sign-in lock {}: {e}", path.display()))
        });
        let file = match opened {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!("{e}; signing in without it");
                return None;
            }
        };
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match file.try_lock() {
                Ok(()) => return Some(Held { _file: file }),
                Err(std::fs::TryLockError::WouldBlock) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(LOCK_POLL).await
                }
                Err(std::fs::TryLockError::WouldBlock) => return None,
                Err(std::fs::TryLockError::Error(e)) => {
                    tracing::warn!("could not take the sign-in lock {}: {e}; signing in without it", path.display());
                    return None;
                }
            }
        }
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

/// Whether a warning about `what` in the file at `path` is the first of this process: the file
/// is read at each request, and one warning says it.
fn first_warning(path: &Path, what: &str) -> bool {
    static SEEN: std::sync::Mutex<Vec<(PathBuf, String)>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap();
    let key = (path.to_path_buf(), what.to_string());
    if seen.contains(&key) {
        return false;
    }
    seen.push(key);
    true
}

/// How often a process waiting for another's sign-in looks whether it is done.
const LOCK_POLL: Duration = Duration::from_millis(50);

/// The sign-in lock of one server URL, held (see [`Store::lock`]).
#[derive(Debug)]
pub struct Held {
    _file: std::fs::File,
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use std::os::unix::fs::PermissionsExt;

    fn tokens() -> Tokens {
        Tokens {
            issuer: "https://as".into(),
            resource: "https://h/mcp".into(),
            access_token: Secret::new("at-123456789"),
            refresh_token: Some(Secret::new("rt-123456789")),
            expires_at: Some(now_secs() + 3600),
            lifetime: Some(3600),
            scope: None,
        }
    }

    #[test]
    fn the_file_is_0600_in_a_0700_directory_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let url = Url::parse("https://h/mcp").unwrap();
        let store = Store::new(&dir.path().join("oauth"), &url);
        let stored = Stored { server_url: url.to_string(), tokens: Some(tokens()), ..Default::default() };
        store.save(&stored).unwrap();
        #[cfg(unix)]
        {
            let mode = std::fs::metadata(store.path()).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            let dir_mode = std::fs::metadata(dir.path().join("oauth")).unwrap().permissions().mode() & 0o777;
            assert_eq!(dir_mode, 0o700);
        }
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
    fn tokens_for_another_resource_are_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let url = Url::parse("https://h/mcp").unwrap();
        let store = Store::new(dir.path(), &url);
        let mut stored = Stored { server_url: url.to_string(), tokens: Some(tokens()), ..Default::default() };
        store.save(&stored).unwrap();
        assert!(store.load().tokens.is_some(), "issued for this resource");
        for other in ["https://other/mcp", "https://h/other", "http://h/mcp"] {
            stored.tokens.as_mut().unwrap().resource = other.into();
            store.save(&stored).unwrap();
            assert!(store.load().tokens.is_none(), "issued for {other}");
        }
        // A resource that covers the server's path (its origin) is the same resource.
        stored.tokens.as_mut().unwrap().resource = "https://h/".into();
        store.save(&stored).unwrap();
        assert!(store.load().tokens.is_some());
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_can_read_is_made_the_owners_alone() {
        let dir = tempfile::tempdir().unwrap();
        let url = Url::parse("https://h/mcp").unwrap();
        let store = Store::new(dir.path(), &url);
        store.save(&Stored { server_url: url.to_string(), tokens: Some(tokens()), ..Default::default() }).unwrap();
        std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(store.load().tokens.is_some(), "still used: nothing is gained by refusing it now");
        let mode = std::fs::metadata(store.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_short_lived_token_is_refreshed_at_half_its_life() {
        let margin = Duration::from_secs(60);
        let mut t = tokens();
        t.lifetime = Some(30);
        t.expires_at = Some(now_secs() + 30);
        assert!(!t.due_for_refresh(margin), "fresh: not refreshed at once");
        t.expires_at = Some(now_secs() + 14);
        assert!(t.due_for_refresh(margin), "past half its life");
        // A long-lived one, and one of an old file with no lifetime, keep the full margin.
        t.lifetime = Some(3600);
        t.expires_at = Some(now_secs() + 59);
        assert!(t.due_for_refresh(margin));
        t.lifetime = None;
        assert!(t.due_for_refresh(margin));
        t.expires_at = Some(now_secs() + 61);
        assert!(!t.due_for_refresh(margin));
    }

    #[test]
    fn debug_never_shows_a_token() {
        let text = format!("{:?}", tokens());
        assert!(!text.contains("123456789"), "{text}");
    }
}
