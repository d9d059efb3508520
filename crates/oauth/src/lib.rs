//! The client side of MCP authorization for remote servers: on a 401, discovery (RFC 9728 and
//! RFC 8414), a client identity (pre-registered, a Client ID Metadata Document, or dynamic
//! registration per RFC 7591, in the spec's order), the authorization code flow with PKCE
//! (S256), `state`, `iss` (RFC 9207) and `resource` (RFC 8707) through a browser and a loopback
//! redirect, then refresh before expiry and step-up on `insufficient_scope`.
//!
//! One [`Auth`] per server URL holds its tokens (kept in a 0600 file, see [`store`]); one
//! sign-in at a time runs for it, and requests that hit a 401 meanwhile wait for that one.

pub mod challenge;
pub mod discover;
pub mod redirect;
pub mod secret;
pub mod store;
mod token;

use std::path::Path;
use std::sync::{Mutex, Once};
use std::time::Duration;

use base64::Engine;
use sha2::Digest;
use url::Url;

pub use challenge::Challenge;
pub use secret::Secret;
pub use store::{Registration, Store, Stored, Tokens};

use discover::Discovery;
use redirect::Listener;

/// A token this close to its expiry is refreshed before it is sent (or at half its lifetime,
/// where that is shorter).
const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// After a refresh before sending failed, how long requests send the token as it is.
const REFRESH_REST: Duration = Duration::from_secs(30);
/// How long `switchyard login` waits for another process's sign-in before starting its own.
const LOGIN_LOCK_WAIT: Duration = Duration::from_secs(2);
/// Each request to the authorization server may take this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request whose token is still valid waits for its refresh (and for its turn to
/// refresh) before it goes with the token as it is: a slow authorization server must not hold
/// calls that need nothing from it.
const EARLY_REFRESH_WAIT: Duration = Duration::from_secs(3);
/// How often a sign-in waiting for the browser looks whether another process signed in.
const STORE_POLL: Duration = Duration::from_millis(500);
/// What a refusal may take beyond `login_timeout_ms` (the token exchange after a sign-in that
/// came back at the last moment).
const SIGN_IN_SLACK: Duration = Duration::from_secs(5);
/// The longest registration answer read.
const MAX_REGISTRATION: usize = 64 * 1024;

/// How a server's sign-in is set up (`[servers.NAME.oauth]`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// A client id registered by hand with the authorization server (used first).
    pub client_id: Option<String>,
    /// Its secret, for a confidential client.
    pub client_secret: Option<Secret>,
    /// The URL of a Client ID Metadata Document describing switchyard, used as the client id
    /// where the authorization server supports them.
    pub client_metadata_url: Option<String>,
    /// Scopes asked for instead of those the server names.
    pub scopes: Vec<String>,
    /// How long a sign-in may wait for the browser.
    pub login_timeout: Duration,
    /// Whether a sign-in starts the browser (else it only names the URL).
    pub open_browser: bool,
    /// The port of 127.0.0.1 the redirect must come back to (a client registered by hand with
    /// a fixed redirect URI); None: a free port each time.
    pub redirect_port: Option<u16>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            client_id: None,
            client_secret: None,
            client_metadata_url: None,
            scopes: Vec::new(),
            login_timeout: Duration::from_secs(60),
            open_browser: true,
            redirect_port: None,
        }
    }
}

/// The step of a sign-in that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The whole of it (a bound on all the steps).
    SignIn,
    Discovery,
    Registration,
    Authorization,
    Token,
    Refresh,
    StepUp,
    Store,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::SignIn => "signing in",
            Step::Discovery => "finding the authorization server",
            Step::Registration => "registering switchyard as a client",
            Step::Authorization => "the browser sign-in",
            Step::Token => "exchanging the code for a token",
            Step::Refresh => "refreshing the token",
            Step::StepUp => "asking for more scopes",
            Step::Store => "saving the tokens",
        })
    }
}

/// A failed sign-in: its step and cause (which never hold a token, a code or a secret).
#[derive(Debug, Clone)]
pub struct Error {
    pub step: Step,
    pub cause: String,
    /// Nobody signed in within the time allowed: a `switchyard login` is what helps.
    pub timed_out: bool,
    /// The OAuth error code a token endpoint answered with (`invalid_client`, `invalid_grant`).
    pub oauth_error: Option<String>,
}

impl Error {
    pub fn new(step: Step, cause: impl Into<String>) -> Error {
        Error { step, cause: cause.into(), timed_out: false, oauth_error: None }
    }

    /// The token endpoint does not know the client: its registration is gone (servers expire
    /// dynamic registrations, and some forget them when they restart).
    fn unknown_client(&self) -> bool {
        self.oauth_error.as_deref() == Some("invalid_client")
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.step, self.cause)
    }
}

impl std::error::Error for Error {}

/// A server's sign-in state, for `status` (never a token).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Status {
    pub state: State,
    pub signed_in: bool,
    /// Seconds since the epoch.
    pub expires_at: Option<u64>,
    pub refreshable: bool,
    pub issuer: Option<String>,
    /// Why the last refresh (state `refresh_failing`) or sign-in (`sign_in_failed`) failed.
    pub error: Option<String>,
}

/// Where a server's sign-in stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// A token that has not expired.
    SignedIn,
    /// The token has expired; a refresh token is held, and the next request uses it.
    Expired,
    /// The token has expired and there is no refresh token: the next request signs in.
    ExpiredForGood,
    /// The last refresh failed; the next refusal of the token signs in again.
    RefreshFailing,
    NotSignedIn,
    /// No token, and the last sign-in failed.
    SignInFailed,
}

/// A refresh that failed: when, why, and of which access token (the state of `status` while that
/// token is the one held).
struct RefreshFailure {
    at: std::time::Instant,
    cause: String,
    of: Secret,
}

/// Where the authorization URL goes when a sign-in starts.
pub type Announce = dyn Fn(&str) + Send + Sync;

/// The sign-in of one server URL: its tokens, and the flow that gets them.
pub struct Auth {
    server_url: Url,
    settings: Settings,
    http: reqwest::Client,
    store: Store,
    /// The tokens in force (as in the file).
    tokens: Mutex<Option<Tokens>>,
    /// One sign-in or refresh at a time.
    flow: tokio::sync::Mutex<()>,
    /// The last sign-in that failed, and when: requests that waited for it get its error
    /// rather than a sign-in each, one after the other.
    failed: Mutex<Option<(std::time::Instant, Error)>>,
    /// The last refresh that failed (see [`Auth::refresh_resting`]); cleared by new tokens.
    refresh_failed: Mutex<Option<RefreshFailure>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("server_url", &shown(&self.server_url)).finish_non_exhaustive()
    }
}

impl Auth {
    /// The sign-in of `server_url`, its tokens kept in `dir`.
    pub fn new(server_url: Url, settings: Settings, dir: &Path) -> Result<Auth, String> {
        static CRYPTO: Once = Once::new();
        // Ring is the TLS crypto rustls uses here (as for the remote transports). Err: one is
        // installed already.
        CRYPTO.call_once(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            // Never carry a code, a secret or a refresh token to where a redirect points.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("switchyard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("could not set up an HTTP client: {e}"))?;
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

    /// The access token to send, refreshed first when it is about to expire. None: not
    /// signed in.
    pub async fn bearer(&self) -> Option<Secret> {
        self.follow_store();
        let current = self.tokens.lock().unwrap().clone()?;
        if current.due_for_refresh(REFRESH_MARGIN) && current.refresh_token.is_some() && !self.refresh_resting() {
            // A slow refresh is not waited for: a token still valid goes as it is, and an expired
            // one is refused, whose refusal refreshes (or signs in) within the sign-in's bound.
            let wait = EARLY_REFRESH_WAIT;
            let deadline = tokio::time::Instant::now() + wait;
            let Ok(_flow) = tokio::time::timeout_at(deadline, self.flow.lock()).await else {
                return Some(current.access_token);
            };
            // One process at a time refreshes. Not had in time: the token goes as it is, and a
            // refusal of it waits longer.
            let Some(_file) = self.store.lock(deadline.saturating_duration_since(tokio::time::Instant::now())).await
            else {
                return Some(current.access_token);
            };
            // Another process sharing the file (a `run`, the daemon, a `login`) may have
            // refreshed: its tokens are the ones in force, and a server that rotates refresh
            // tokens refuses the one this process held (and may revoke the family for it).
            if let Some(stored) = self.store.load().tokens
                && stored.access_token != current.access_token
            {
                *self.tokens.lock().unwrap() = Some(stored);
            }
            let now = self.tokens.lock().unwrap().clone()?;
            if now.access_token != current.access_token {
                return Some(now.access_token);
            }
            let refreshed = tokio::time::timeout_at(deadline, self.refresh(&now)).await.unwrap_or_else(|_| {
                Err(Error::new(
                    Step::Refresh,
                    format!("the authorization server did not answer within {} s", wait.as_secs()),
                ))
            });
            match refreshed {
                Ok(t) => return Some(t.access_token),
                // The server will refuse the old token, and its 401 starts a sign-in.
                Err(e) => {
                    tracing::info!("{}: {e}", shown(&self.server_url));
                    self.refresh_failed(&now, &e);
                }
            }
        }
        Some(current.access_token)
    }

    /// Whether a refresh before sending failed a moment ago: requests meanwhile send the token
    /// as it is (a refusal of it still signs in) instead of each asking the server again.
    fn refresh_resting(&self) -> bool {
        self.refresh_failed.lock().unwrap().as_ref().is_some_and(|f| f.at.elapsed() < REFRESH_REST)
    }

    fn refresh_failed(&self, of: &Tokens, e: &Error) {
        let failure =
            RefreshFailure { at: std::time::Instant::now(), cause: e.to_string(), of: of.access_token.clone() };
        *self.refresh_failed.lock().unwrap() = Some(failure);
    }

    /// Answers a 401 or 403 that carried `challenge` (its `WWW-Authenticate` values) for a
    /// request sent with `sent`: Ok once a new token is in force (the request may be sent
    /// again). Requests refused meanwhile wait for the same sign-in.
    pub async fn refused(
        &self,
        status: u16,
        challenge: Option<&Challenge>,
        sent: Option<&Secret>,
        announce: &Announce,
    ) -> Result<(), Error> {
        let asked = std::time::Instant::now();
        // A call waits for one sign-in at most `login_timeout_ms` (and a moment for the token
        // exchange), whatever is slow: the browser, another process, the authorization server.
        let limit = self.settings.login_timeout + SIGN_IN_SLACK;
        let work = async {
            let _flow = self.flow.lock().await;
            // Another process's sign-in to the same server is waited for (its tokens are then
            // taken), rather than a second registration and a second browser tab.
            let _file = self.store.lock(self.settings.login_timeout).await;
            self.refused_now(status, challenge, sent, asked, Some(announce)).await
        };
        let result = tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
            let mut e = Error::new(
                Step::SignIn,
                format!(
                    "it did not finish within {} s (login_timeout_ms of {} s, and {} s more): the authorization server, the browser or another process's sign-in took longer",
                    limit.as_secs_f64(),
                    self.settings.login_timeout.as_secs_f64(),
                    SIGN_IN_SLACK.as_secs()
                ),
            );
            e.timed_out = true;
            Err(e)
        });
        if let Err(e) = &result {
            *self.failed.lock().unwrap() = Some((std::time::Instant::now(), e.clone()));
        }
        result
    }

    /// [`Auth::refused`] for a request no one waits on (switchyard's own health ping): the
    /// token is renewed where a refresh does it, but no sign-in starts, so no browser opens for
    /// a request no user made.
    pub async fn refused_quietly(
        &self,
        status: u16,
        challenge: Option<&Challenge>,
        sent: Option<&Secret>,
    ) -> Result<(), Error> {
        let asked = std::time::Instant::now();
        let work = async {
            let _flow = self.flow.lock().await;
            let Some(_file) = self.store.lock(REQUEST_TIMEOUT).await else {
                return Err(Error::new(
                    Step::Authorization,
                    "another process is signing in to the server; not waiting for it",
                ));
            };
            self.refused_now(status, challenge, sent, asked, None).await
        };
        let limit = REQUEST_TIMEOUT * 2;
        tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
            Err(Error::new(
                Step::Refresh,
                format!("the authorization server did not answer within {} s", limit.as_secs()),
            ))
        })
    }

    /// `announce`: None when no sign-in may start.
    async fn refused_now(
        &self,
        status: u16,
        challenge: Option<&Challenge>,
        sent: Option<&Secret>,
        asked: std::time::Instant,
        announce: Option<&Announce>,
    ) -> Result<(), Error> {
        let no_sign_in = || {
            Error::new(
                Step::Authorization,
                "not signed in, and a request of switchyard's own (a health ping) starts no sign-in",
            )
        };
        // A `switchyard login` in another process may have signed in meanwhile.
        if let Some(t) = self.store.load().tokens {
            *self.tokens.lock().unwrap() = Some(t);
        }
        let current = self.tokens.lock().unwrap().clone();
        if status == 401 && current.as_ref().map(|t| &t.access_token) != sent {
            // Another request renewed the token while this one waited.
            return Ok(());
        }
        // A sign-in failed while this request waited for it: the same answer, at once (a call
        // waits for one sign-in at most, never for a queue of them).
        if let Some((at, e)) = self.failed.lock().unwrap().clone()
            && at >= asked
        {
            return Err(e);
        }
        if status == 403 {
            let Some(c) = challenge.filter(|c| c.insufficient_scope()) else {
                return Err(Error::new(
                    Step::Authorization,
                    "the server forbade the request (HTTP 403) without asking for another scope",
                ));
            };
            let have = current.as_ref().and_then(|t| t.scope.clone());
            let wanted = c.scope.clone().unwrap_or_default();
            if wanted.split_whitespace().all(|s| have.as_deref().unwrap_or("").split_whitespace().any(|h| h == s)) {
                return Err(Error::new(
                    Step::StepUp,
                    format!(
                        "the server asks for the scope \"{wanted}\", which the token has already: not signing in again"
                    ),
                ));
            }
            let announce = announce.ok_or_else(no_sign_in)?;
            let disc = discover::discover(&self.http, &self.server_url, Some(c)).await?;
            let scope = union(have.as_deref(), &wanted);
            return self.authorize(&disc, Some(scope), announce).await.map(drop);
        }
        let disc = discover::discover(&self.http, &self.server_url, challenge).await?;
        if let Some(t) = current.filter(|t| t.issuer == disc.server.issuer && t.refresh_token.is_some()) {
            match self.refresh(&t).await {
                Ok(_) => return Ok(()),
                Err(e) => self.refresh_failed(&t, &e),
            }
        }
        let announce = announce.ok_or_else(no_sign_in)?;
        let scope = self.initial_scope(&disc, challenge);
        self.authorize(&disc, scope, announce).await.map(drop)
    }

    /// A sign-in whatever the tokens held (`switchyard login`): the server is asked first, for
    /// the challenge that says where its metadata is.
    pub async fn login(&self, announce: &Announce) -> Result<Status, Error> {
        let _flow = self.flow.lock().await;
        // The server is asked first: a URL that asks for no sign-in leaves nothing behind.
        let challenge = self.probe().await?;
        // Asked for by a person: another process's sign-in is waited for a moment only (one
        // nobody completes must not hold this one up), then both may finish; the last one kept wins.
        let _file = self.store.lock(LOGIN_LOCK_WAIT).await;
        let disc = discover::discover(&self.http, &self.server_url, challenge.as_ref()).await?;
        // A sign-in asked for by hand registers anew: a registration the server has forgotten
        // (it restarted, or the registration expired) would send the browser to an error page
        // this process never sees, and nothing else here would find out.
        let mut stored = self.store.load();
        if stored.clients.get(&disc.server.issuer).is_some_and(|c| c.redirect_uri.is_some()) {
            stored.clients.remove(&disc.server.issuer);
            self.store.save(&stored).map_err(|e| Error::new(Step::Store, e))?;
        }
        let scope = self.initial_scope(&disc, challenge.as_ref());
        self.authorize(&disc, scope, announce).await?;
        Ok(self.status())
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

    /// The sign-in's state, with what this process saw fail (a refresh, a sign-in).
    pub fn status(&self) -> Status {
        self.follow_store();
        let held = self.tokens.lock().unwrap().clone();
        let mut status = status_of(held.as_ref());
        if let Some(t) = held {
            // A failure of the token held; one another process replaced since is history.
            if let Some(f) = &*self.refresh_failed.lock().unwrap()
                && f.of == t.access_token
            {
                status.state = State::RefreshFailing;
                status.error = Some(f.cause.clone());
            }
        } else if let Some((_, e)) = &*self.failed.lock().unwrap() {
            status.state = State::SignInFailed;
            status.error = Some(e.to_string());
        }
        status
    }

    /// Takes in what another process did to the file: a sign-in (`switchyard login`) when none
    /// is held here, a `switchyard logout` (the file gone: what failed before is history too).
    /// One stat per request.
    fn follow_store(&self) {
        let held = self.tokens.lock().unwrap().is_some();
        let exists = self.store.path().exists();
        if held && !exists {
            self.forget_held();
        } else if !held && exists {
            *self.tokens.lock().unwrap() = self.store.load().tokens;
        }
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

    /// A POST without a token, for the 401's challenge. Ok(None): a 401 or 403 without a Bearer
    /// challenge (a server of the 2025-03-26 spec). Err: the server could not be reached, or
    /// asks for no sign-in.
    async fn probe(&self) -> Result<Option<Challenge>, Error> {
        let resp = self
            .http
            .post(self.server_url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
            .body(r#"{"jsonrpc":"2.0","id":"switchyard-login","method":"ping"}"#)
            .send()
            .await
            .map_err(|e| {
                Error::new(
                    Step::Discovery,
                    format!(
                        "could not reach the server {}: {}; check that it is up and reachable from here",
                        shown(&self.server_url),
                        describe(&e)
                    ),
                )
            })?;
        let status = resp.status();
        // A server that takes the request, or answers it with an error of another kind (a 404
        // for a wrong path), asks for no sign-in: discovery at its origin would only fail
        // further on, and blame registration.
        if !matches!(status.as_u16(), 401 | 403) {
            let what = match status.is_success() {
                true => "took a request without a token: it asks for no sign-in".to_string(),
                false => format!(
                    "answered HTTP {} without asking for a sign-in (no 401): check the URL, its path included",
                    status.as_u16()
                ),
            };
            return Err(Error::new(Step::Discovery, format!("the server {} {what}", shown(&self.server_url))));
        }
        let values: Vec<String> = resp
            .headers()
            .get_all(reqwest::header::WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect();
        Ok(Challenge::parse(values.iter().map(String::as_str)))
    }

    /// The scope a first sign-in asks for: the configured scopes, else the challenge's, else
    /// all the resource lists, else none; with `offline_access` (for a refresh token) where the
    /// authorization server offers it.
    fn initial_scope(&self, disc: &Discovery, challenge: Option<&Challenge>) -> Option<String> {
        let base = if !self.settings.scopes.is_empty() {
            Some(self.settings.scopes.join(" "))
        } else if let Some(s) = challenge.and_then(|c| c.scope.clone()).filter(|s| !s.trim().is_empty()) {
            Some(s)
        } else {
            disc.resource_scopes.as_ref().filter(|s| !s.is_empty()).map(|s| s.join(" "))
        }?;
        let offline = disc.server.scopes_supported.as_ref().is_some_and(|s| s.iter().any(|s| s == "offline_access"));
        Some(if offline { union(Some(&base), "offline_access") } else { base })
    }

    /// Refreshes `old`'s access token and keeps the result.
    async fn refresh(&self, old: &Tokens) -> Result<Tokens, Error> {
        let Some(refresh) = &old.refresh_token else {
            return Err(Error::new(Step::Refresh, "there is no refresh token"));
        };
        let server = discover::server_metadata(&self.http, &old.issuer).await?;
        let stored = self.store.load();
        let client = self.preset_client(&server).or_else(|| stored.clients.get(&old.issuer).cloned());
        let Some(client) = client else {
            return Err(Error::new(Step::Refresh, "the client registration is gone"));
        };
        let grant = token::Grant::Refresh { token: refresh };
        let tokens = token::request(
            &self.http,
            &server.token_endpoint,
            &server.issuer,
            &client,
            &old.resource,
            grant,
            old.scope.as_deref(),
        )
        .await
        .map_err(|e| self.forget_client_if_unknown(e, &server.issuer, &client))?;
        self.keep(tokens.clone(), None)?;
        Ok(tokens)
    }

    /// `e` as it is, after forgetting the registration `client` at `issuer` when `e` says the
    /// server no longer knows it and switchyard registered it itself: the next sign-in
    /// registers again instead of sending the browser with a client id nobody knows.
    fn forget_client_if_unknown(&self, mut e: Error, issuer: &str, client: &Registration) -> Error {
        // A configured client id (or metadata document URL) is the user's to fix, not to forget.
        if !e.unknown_client() || client.redirect_uri.is_none() {
            return e;
        }
        let mut stored = self.store.load();
        if stored.clients.get(issuer).is_some_and(|c| c.client_id == client.client_id) {
            stored.clients.remove(issuer);
            match self.store.save(&stored) {
                Ok(()) => e.cause.push_str("; the registration was forgotten, and the next sign-in registers anew"),
                Err(why) => tracing::warn!("could not forget the registration {issuer} no longer knows: {why}"),
            }
        }
        e
    }

    /// The authorization code flow, from the browser to the tokens kept.
    async fn authorize(&self, disc: &Discovery, scope: Option<String>, announce: &Announce) -> Result<Tokens, Error> {
        let issuer = &disc.server.issuer;
        let stored = self.store.load();
        let known = self.preset_client(&disc.server).or_else(|| stored.clients.get(issuer).cloned());
        let listener = match self.settings.redirect_port {
            Some(port) => Listener::bind_exact(port).await?,
            None => Listener::bind(known.as_ref().and_then(|c| c.redirect_uri.as_deref())).await?,
        };
        let client = match known {
            Some(c)
                if c.redirect_uri.is_none() || c.redirect_uri.as_deref() == Some(listener.redirect_uri.as_str()) =>
            {
                c
            }
            _ => {
                let registered = self.register(disc, &listener.redirect_uri).await?;
                // Kept at once, not only with the tokens: a sign-in that fails or times out is
                // tried again with the same client, not with one more registration each time.
                let mut stored = self.store.load();
                stored.clients.insert(issuer.clone(), registered.clone());
                self.store.save(&stored).map_err(|e| Error::new(Step::Store, e))?;
                registered
            }
        };
        let verifier = secret::random_token(32);
        let challenge =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
        let state = secret::random_token(16);
        let mut url = Url::parse(&disc.server.authorization_endpoint).map_err(|e| {
            Error::new(
                Step::Authorization,
                format!("the authorization endpoint {:?} is not a URL: {e}", disc.server.authorization_endpoint),
            )
        })?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("response_type", "code")
                .append_pair("client_id", &client.client_id)
                .append_pair("redirect_uri", &listener.redirect_uri)
                .append_pair("code_challenge", &challenge)
                .append_pair("code_challenge_method", "S256")
                .append_pair("state", &state)
                .append_pair("resource", &disc.resource);
            if let Some(s) = &scope {
                q.append_pair("scope", s);
                // OpenID Connect Core section 11: an OpenID provider drops `offline_access`
                // (and so issues no refresh token) unless the request asks for consent. OAuth
                // servers ignore the parameter (RFC 6749 section 3.1).
                if s.split_whitespace().any(|s| s == "offline_access") {
                    q.append_pair("prompt", "consent");
                }
            }
        }
        let redirect_uri = listener.redirect_uri.clone();
        announce(url.as_str());
        if self.settings.open_browser
            && let Err(e) = redirect::open_browser(url.as_str())
        {
            tracing::warn!("{e}; open the sign-in URL by hand");
        }
        let wait = self.settings.login_timeout;
        // A sign-in another process completes meanwhile (the `switchyard login` that the
        // waiting message advises) ends this one: its tokens are taken.
        let before = self.store.load().tokens.map(|t| t.access_token);
        let elsewhere = async {
            loop {
                tokio::time::sleep(STORE_POLL).await;
                if let Some(t) = self.store.load().tokens
                    && Some(&t.access_token) != before.as_ref()
                {
                    return t;
                }
            }
        };
        let callback = tokio::select! {
            waited = tokio::time::timeout(wait, listener.wait(&state)) => match waited {
                Ok(r) => r?,
                Err(_) => {
                    let mut e = Error::new(Step::Authorization, format!("nobody signed in within {} s", wait.as_secs()));
                    e.timed_out = true;
                    return Err(e);
                }
            },
            tokens = elsewhere => {
                tracing::info!(
                    "{}: signed in by another process (`switchyard login`); this sign-in is no longer needed",
                    shown(&self.server_url)
                );
                *self.tokens.lock().unwrap() = Some(tokens.clone());
                return Ok(tokens);
            }
        };
        // RFC 9207: a present `iss` must be the issuer, compared as strings; where the server
        // promises it, it must be present.
        match &callback.iss {
            Some(iss) if iss != issuer => {
                return Err(Error::new(
                    Step::Authorization,
                    format!(
                        "the redirect came from the issuer {iss}, not {issuer}: refused it (a mix-up attack, or a misconfigured server)"
                    ),
                ));
            }
            None if disc.server.authorization_response_iss_parameter_supported => {
                return Err(Error::new(
                    Step::Authorization,
                    format!("{issuer} promises an `iss` in its redirects and this one had none: refused it"),
                ));
            }
            _ => {}
        }
        let grant = token::Grant::Code { code: &callback.code, verifier: &verifier, redirect_uri: &redirect_uri };
        let tokens = token::request(
            &self.http,
            &disc.server.token_endpoint,
            issuer,
            &client,
            &disc.resource,
            grant,
            scope.as_deref(),
        )
        .await
        .map_err(|e| self.forget_client_if_unknown(e, issuer, &client))?;
        let keep_client = (client.redirect_uri.is_some()).then(|| client.clone());
        self.keep(tokens.clone(), keep_client)?;
        Ok(tokens)
    }

    /// The client identity that needs no registration: the configured client id, else the
    /// Client ID Metadata Document where the server takes one.
    fn preset_client(&self, server: &discover::ServerMetadata) -> Option<Registration> {
        if let Some(id) = &self.settings.client_id {
            let method = pick_method(
                server.token_endpoint_auth_methods_supported.as_deref(),
                self.settings.client_secret.is_some(),
            );
            return Some(Registration {
                client_id: id.clone(),
                client_secret: self.settings.client_secret.clone(),
                auth_method: method,
                redirect_uri: None,
            });
        }
        let url =
            self.settings.client_metadata_url.as_ref().filter(|_| server.client_id_metadata_document_supported)?;
        Some(Registration {
            client_id: url.clone(),
            client_secret: None,
            auth_method: "none".into(),
            redirect_uri: None,
        })
    }

    /// Dynamic client registration (RFC 7591) with the redirect URI of this sign-in.
    async fn register(&self, disc: &Discovery, redirect_uri: &str) -> Result<Registration, Error> {
        let fail = |cause: String| Error::new(Step::Registration, cause);
        let Some(endpoint) = &disc.server.registration_endpoint else {
            return Err(fail(format!(
                "{} takes no dynamic registration: register a client with it and set client_id (and client_secret) in the server's oauth settings",
                disc.server.issuer
            )));
        };
        let supported = disc.server.token_endpoint_auth_methods_supported.as_deref();
        let method = match supported {
            Some(list) if list.iter().any(|m| m == "none") => "none",
            Some(list) if list.iter().any(|m| m == "client_secret_basic") => "client_secret_basic",
            Some(list) if list.iter().any(|m| m == "client_secret_post") => "client_secret_post",
            Some(_) => "none",
            None => "client_secret_basic",
        };
        let body = serde_json::json!({
            "client_name": "switchyard",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": method,
            "application_type": "native",
        });
        let resp = self
            .http
            .post(endpoint)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| fail(format!("could not reach {endpoint}: {}", describe(&e))))?;
        let status = resp.status();
        let answer = read_limited(resp, MAX_REGISTRATION).await.map_err(fail)?;
        #[derive(serde::Deserialize)]
        struct Answer {
            client_id: String,
            client_secret: Option<Secret>,
            token_endpoint_auth_method: Option<String>,
        }
        if !status.is_success() {
            return Err(fail(format!("{endpoint} refused the registration (HTTP {})", status.as_u16())));
        }
        let a: Answer =
            serde_json::from_slice(&answer).map_err(|_| fail(format!("{endpoint} answered without a client_id")))?;
        let auth_method = match (a.token_endpoint_auth_method, &a.client_secret) {
            (Some(m), _) => m,
            (None, Some(_)) if method != "none" => method.to_string(),
            _ => "none".to_string(),
        };
        Ok(Registration {
            client_id: a.client_id,
            client_secret: a.client_secret,
            auth_method,
            redirect_uri: Some(redirect_uri.to_string()),
        })
    }

    /// Puts `tokens` in force and in the file, with `client` as the registration at their issuer.
    fn keep(&self, tokens: Tokens, client: Option<Registration>) -> Result<(), Error> {
        let mut stored = self.store.load();
        if let Some(c) = client {
            stored.clients.insert(tokens.issuer.clone(), c);
        }
        stored.tokens = Some(tokens.clone());
        *self.tokens.lock().unwrap() = Some(tokens);
        *self.refresh_failed.lock().unwrap() = None;
        self.store.save(&stored).map_err(|e| Error::new(Step::Store, e))
    }
}

fn status_of(tokens: Option<&Tokens>) -> Status {
    match tokens {
        Some(t) => Status {
            state: match (t.expired(), t.refresh_token.is_some()) {
                (false, _) => State::SignedIn,
                (true, true) => State::Expired,
                (true, false) => State::ExpiredForGood,
            },
            signed_in: true,
            expires_at: t.expires_at,
            refreshable: t.refresh_token.is_some(),
            issuer: Some(t.issuer.clone()),
            error: None,
        },
        None => Status {
            state: State::NotSignedIn,
            signed_in: false,
            expires_at: None,
            refreshable: false,
            issuer: None,
            error: None,
        },
    }
}

/// How to authenticate a pre-registered client at the token endpoint: with a secret, Basic
/// unless only `client_secret_post` is offered (RFC 8414's default is Basic); without, `none`.
fn pick_method(supported: Option<&[String]>, has_secret: bool) -> String {
    if !has_secret {
        return "none".into();
    }
    match supported {
        Some(list)
            if !list.iter().any(|m| m == "client_secret_basic") && list.iter().any(|m| m == "client_secret_post") =>
        {
            "client_secret_post".into()
        }
        _ => "client_secret_basic".into(),
    }
}

/// `have` and the scopes of `more` not in it, space-separated, in order.
fn union(have: Option<&str>, more: &str) -> String {
    let mut out: Vec<&str> = have.unwrap_or("").split_whitespace().collect();
    for s in more.split_whitespace() {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out.join(" ")
}

/// A URL for messages: without its query, fragment or credentials.
pub fn shown(url: &Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.set_fragment(None);
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

/// An HTTP error and its causes on one line, without the URL (reqwest's own top line repeats
/// it, with its query, which may carry a secret). Also what the router's remote transports say
/// of a failed request.
pub fn describe(e: &reqwest::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        // hyper-util's "client error (Connect)" only says which layer wraps the real cause.
        if !text.starts_with("client error (") && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    if !parts.is_empty() {
        return parts.join(": ");
    }
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_body() || e.is_decode() {
        "the body broke off"
    } else {
        "the request failed"
    };
    what.to_string()
}

/// At most `limit` bytes of a body.
pub(crate) async fn read_limited(mut resp: reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| describe(&e))? {
        body.extend_from_slice(&chunk);
        if body.len() > limit {
            return Err(format!("the answer is over {limit} bytes"));
        }
    }
    Ok(body)
}

#[cfg(test)]
mod tests;
