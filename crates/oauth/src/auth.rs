//! [`Auth`], the sign-in of one server URL: the tokens it holds, kept in step with the token
//! file that other processes share, and what it remembers of the last failures.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use url::Url;

use crate::refresh::RefreshFailure;
use crate::{Error, Registration, Secret, Settings, Step, Store, Tokens, http, shown};

/// The sign-in of one server URL: its tokens, and the flow that gets them.
pub struct Auth {
    pub(crate) server_url: Url,
    pub(crate) settings: Settings,
    pub(crate) http: reqwest::Client,
    pub(crate) store: Store,
    /// The tokens in force (as in the file).
    pub(crate) tokens: Mutex<Option<Tokens>>,
    /// One sign-in or refresh at a time.
    pub(crate) flow: tokio::sync::Mutex<()>,
    /// The last sign-in that failed, and when: requests that waited for it get its error
    /// rather than a sign-in each, one after the other.
    pub(crate) failed: Mutex<Option<(std::time::Instant, Error)>>,
    /// The last refresh that failed (see [`Auth::refresh_resting`]); cleared by new tokens.
    pub(crate) refresh_failed: Mutex<Option<RefreshFailure>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("server_url", &shown(&self.server_url)).finish_non_exhaustive()
    }
}

impl Auth {
    /// The sign-in of `server_url`, its tokens kept in `dir`.
    pub fn new(server_url: Url, settings: Settings, dir: &Path) -> Result<Auth, String> {
        let http = http::client()?;
        let store = Store::new(dir, &server_url);
        let tokens = store.load().tokens;
        Ok(Auth {
            server_url,
            settings,
            http,
            store,
            tokens: Mutex::new(tokens),
            flow: tokio::sync::Mutex::new(()),
            failed: Mutex::new(None),
            refresh_failed: Mutex::new(None),
        })
    }

    /// How long a request may wait for a user to sign in (`login_timeout_ms`), where no
    /// token is held yet (a start then waits for the sign-in before its initialize); zero when
    /// one is (a refresh, if needed, takes a request's time).
    pub fn sign_in_wait(&self) -> Duration {
        self.follow_store();
        match self.tokens.lock().unwrap().is_some() {
            true => Duration::ZERO,
            false => self.settings.login_timeout,
        }
    }

    /// The access token in force, as it is (see [`Auth::bearer`] for one refreshed in time).
    pub fn current(&self) -> Option<Secret> {
        self.tokens.lock().unwrap().as_ref().map(|t| t.access_token.clone())
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Forgets the tokens and registrations. Ok(false): there were none.
    pub fn logout(&self) -> Result<bool, String> {
        self.forget_held();
        self.store.remove()
    }

    /// Drops the tokens held here, and what failed with them: history once signed out.
    fn forget_held(&self) {
        *self.tokens.lock().unwrap() = None;
        *self.refresh_failed.lock().unwrap() = None;
        *self.failed.lock().unwrap() = None;
    }

    /// Takes in what another process did to the file: a sign-in (`switchyard login`) when none
    /// is held here, a `switchyard logout` (the file gone: what failed before is history too).
    /// One stat per request.
    pub(crate) fn follow_store(&self) {
        let held = self.tokens.lock().unwrap().is_some();
        let exists = self.store.path().exists();
        if held && !exists {
            self.forget_held();
        } else if !held && exists {
            *self.tokens.lock().unwrap() = self.store.load().tokens;
        }
    }

    /// Puts `tokens` in force and in the file, with `client` as the registration at their issuer.
    pub(crate) fn keep(&self, tokens: Tokens, client: Option<Registration>) -> Result<(), Error> {
        let mut stored = self.store.load();
        if let Some(c) = client {
            stored.clients.insert(tokens.issuer.clone(), c);
        }
        stored.tokens = Some(tokens.clone());
        *self.tokens.lock().unwrap() = Some(tokens);
        *self.refresh_failed.lock().unwrap() = None;
        self.store.save(&stored).map_err(|e| Error::new(Step::Store, e))
    }

    /// Moves the tokens held (in memory and in the file) `secs` closer to their expiry, as if
    /// that much time had passed.
    #[cfg(test)]
    pub(crate) fn age(&self, secs: u64) {
        let mut held = self.tokens.lock().unwrap();
        let t = held.as_mut().expect("signed in");
        t.expires_at = t.expires_at.map(|at| at - secs);
        let mut stored = self.store.load();
        if stored.tokens.as_ref().is_some_and(|s| s.access_token == t.access_token) {
            stored.tokens = Some(t.clone());
            self.store.save(&stored).unwrap();
        }
    }
}
