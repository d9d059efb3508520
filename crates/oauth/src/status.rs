//! What `status` shows of a server's sign-in: where it stands and what last failed, never a
//! token.

use crate::{Auth, Tokens};

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

impl Auth {
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
