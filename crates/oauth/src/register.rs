//! The client identity a sign-in uses: a pre-registered client id, a Client ID Metadata
//! Document, or dynamic registration (RFC 7591), in the spec's order; and forgetting a
//! registration the authorization server no longer knows.

use crate::discover::{Discovery, ServerMetadata};
use crate::http::read_limited;
use crate::{Auth, Error, Registration, Secret, Step, describe};

/// The longest registration answer read.
const MAX_REGISTRATION: usize = 64 * 1024;

impl Auth {
    /// The client for a sign-in that comes back to `redirect_uri`: `known` where it takes that
    /// redirect, else one registered now.
    pub(crate) async fn client_for(
        &self,
        disc: &Discovery,
        known: Option<Registration>,
        redirect_uri: &str,
    ) -> Result<Registration, Error> {
        match known {
            Some(c) if c.redirect_uri.is_none() || c.redirect_uri.as_deref() == Some(redirect_uri) => Ok(c),
            _ => {
                let registered = self.register(disc, redirect_uri).await?;
                // Kept at once, not only with the tokens: a sign-in that fails or times out is
                // tried again with the same client, not with one more registration each time.
                let mut stored = self.store.load();
                stored.clients.insert(disc.server.issuer.clone(), registered.clone());
                self.store.save(&stored).map_err(|e| Error::new(Step::Store, e))?;
                Ok(registered)
            }
        }
    }

    /// The client identity that needs no registration: the configured client id, else the
    /// Client ID Metadata Document where the server takes one.
    pub(crate) fn preset_client(&self, server: &ServerMetadata) -> Option<Registration> {
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

    /// `e` as it is, after forgetting the registration `client` at `issuer` when `e` says the
    /// server no longer knows it and switchyard registered it itself: the next sign-in
    /// registers again instead of sending the browser with a client id nobody knows.
    pub(crate) fn forget_client_if_unknown(&self, mut e: Error, issuer: &str, client: &Registration) -> Error {
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
}

/// How to authenticate a pre-registered client at the token endpoint: with a secret, Basic
/// unless only `client_secret_post` is offered (RFC 8414's default is Basic); without, `none`.
pub(crate) fn pick_method(supported: Option<&[String]>, has_secret: bool) -> String {
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
