//! The authorization code flow with PKCE (S256), `state`, `resource` (RFC 8707) and `iss`
//! (RFC 9207): the URL handed to the browser, the wait for its redirect, and the code exchange.

use std::time::Duration;

use base64::Engine;
use sha2::Digest;
use url::Url;

use crate::discover::{Discovery, ServerMetadata};
use crate::redirect::{self, Callback, Listener};
use crate::{Auth, Error, Registration, Step, Tokens, secret, shown, token};

/// How often a sign-in waiting for the browser looks whether another process signed in.
const STORE_POLL: Duration = Duration::from_millis(500);

/// Where the authorization URL goes when a sign-in starts.
pub type Announce = dyn Fn(&str) + Send + Sync;

/// How the wait for the browser ended.
enum Back {
    /// The authorization server redirected to the listener.
    Redirect(Callback),
    /// Another process signed in meanwhile; its tokens are in force.
    SignedInElsewhere(Tokens),
}

impl Auth {
    /// The authorization code flow, from the browser to the tokens kept.
    pub(crate) async fn authorize(
        &self,
        disc: &Discovery,
        scope: Option<String>,
        announce: &Announce,
    ) -> Result<Tokens, Error> {
        let issuer = &disc.server.issuer;
        let stored = self.store.load();
        let known = self.preset_client(&disc.server).or_else(|| stored.clients.get(issuer).cloned());
        let listener = match self.settings.redirect_port {
            Some(port) => Listener::bind_exact(port).await?,
            None => Listener::bind(known.as_ref().and_then(|c| c.redirect_uri.as_deref())).await?,
        };
        let client = self.client_for(disc, known, &listener.redirect_uri).await?;
        let verifier = secret::random_token(32);
        let state = secret::random_token(16);
        let url = authorization_url(disc, &client, &listener.redirect_uri, &verifier, &state, scope.as_deref())?;
        let redirect_uri = listener.redirect_uri.clone();
        announce(url.as_str());
        if self.settings.open_browser
            && let Err(e) = redirect::open_browser(url.as_str())
        {
            tracing::warn!("{e}; open the sign-in URL by hand");
        }
        let callback = match self.wait_for_redirect(listener, &state).await? {
            Back::Redirect(callback) => callback,
            Back::SignedInElsewhere(tokens) => return Ok(tokens),
        };
        check_iss(&disc.server, callback.iss.as_deref())?;
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

    /// Waits `login_timeout` for the browser to come back to `listener` with `state`. A sign-in
    /// another process completes meanwhile (the `switchyard login` that the waiting message
    /// advises) ends this one: its tokens are taken.
    async fn wait_for_redirect(&self, listener: Listener, state: &str) -> Result<Back, Error> {
        let wait = self.settings.login_timeout;
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
        tokio::select! {
            waited = tokio::time::timeout(wait, listener.wait(state)) => match waited {
                Ok(r) => Ok(Back::Redirect(r?)),
                Err(_) => {
                    let mut e = Error::new(Step::Authorization, format!("nobody signed in within {} s", wait.as_secs()));
                    e.timed_out = true;
                    Err(e)
                }
            },
            tokens = elsewhere => {
                tracing::info!(
                    "{}: signed in by another process (`switchyard login`); this sign-in is no longer needed",
                    shown(&self.server_url)
                );
                *self.tokens.lock().unwrap() = Some(tokens.clone());
                Ok(Back::SignedInElsewhere(tokens))
            }
        }
    }
}

/// The authorization endpoint's URL for this sign-in, with the S256 challenge of `verifier`.
fn authorization_url(
    disc: &Discovery,
    client: &Registration,
    redirect_uri: &str,
    verifier: &str,
    state: &str,
    scope: Option<&str>,
) -> Result<Url, Error> {
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
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
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", state)
            .append_pair("resource", &disc.resource);
        if let Some(s) = scope {
            q.append_pair("scope", s);
            // OpenID Connect Core section 11: an OpenID provider drops `offline_access`
            // (and so issues no refresh token) unless the request asks for consent. OAuth
            // servers ignore the parameter (RFC 6749 section 3.1).
            if s.split_whitespace().any(|s| s == "offline_access") {
                q.append_pair("prompt", "consent");
            }
        }
    }
    Ok(url)
}

/// RFC 9207: a present `iss` must be the issuer, compared as strings; where the server
/// promises it, it must be present.
fn check_iss(server: &ServerMetadata, iss: Option<&str>) -> Result<(), Error> {
    let issuer = &server.issuer;
    match iss {
        Some(iss) if iss != issuer => Err(Error::new(
            Step::Authorization,
            format!(
                "the redirect came from the issuer {iss}, not {issuer}: refused it (a mix-up attack, or a misconfigured server)"
            ),
        )),
        None if server.authorization_response_iss_parameter_supported => Err(Error::new(
            Step::Authorization,
            format!("{issuer} promises an `iss` in its redirects and this one had none: refused it"),
        )),
        _ => Ok(()),
    }
}
