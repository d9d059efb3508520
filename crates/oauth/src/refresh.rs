//! Keeping a token fresh: a refresh shortly before it expires (without holding up requests
//! that need nothing from a slow server), the refresh grant itself, and a pause after one fails.

use std::time::Duration;

use crate::{Auth, Error, Secret, Step, Tokens, discover, shown, token};

/// A token this close to its expiry is refreshed before it is sent (or at half its lifetime,
/// where that is shorter).
const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// After a refresh before sending failed, how long requests send the token as it is.
const REFRESH_REST: Duration = Duration::from_secs(30);
/// How long a request whose token is still valid waits for its refresh (and for its turn to
/// refresh) before it goes with the token as it is: a slow authorization server must not hold
/// calls that need nothing from it.
pub(crate) const EARLY_REFRESH_WAIT: Duration = Duration::from_secs(3);

/// A refresh that failed: when, why, and of which access token (the state of `status` while that
/// token is the one held).
pub(crate) struct RefreshFailure {
    at: std::time::Instant,
    pub(crate) cause: String,
    pub(crate) of: Secret,
}

impl Auth {
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

    pub(crate) fn refresh_failed(&self, of: &Tokens, e: &Error) {
        let failure =
            RefreshFailure { at: std::time::Instant::now(), cause: e.to_string(), of: of.access_token.clone() };
        *self.refresh_failed.lock().unwrap() = Some(failure);
    }

    /// Refreshes `old`'s access token and keeps the result.
    pub(crate) async fn refresh(&self, old: &Tokens) -> Result<Tokens, Error> {
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
}
