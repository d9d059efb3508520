//! When a sign-in happens: the answer to a refused request (a refresh, a step-up to more scopes
//! or a new sign-in, one at a time), `switchyard login`, and the scope a first sign-in asks for.

use std::time::Duration;

use crate::discover::{self, Discovery};
use crate::http::REQUEST_TIMEOUT;
use crate::{Announce, Auth, Challenge, Error, Secret, Status, Step, describe, shown};

/// How long `switchyard login` waits for another process's sign-in before starting its own.
const LOGIN_LOCK_WAIT: Duration = Duration::from_secs(2);
/// What a refusal may take beyond `login_timeout_ms` (the token exchange after a sign-in that
/// came back at the last moment).
pub(crate) const SIGN_IN_SLACK: Duration = Duration::from_secs(5);

impl Auth {
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
