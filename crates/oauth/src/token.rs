//! Requests to the token endpoint (the code exchange and refreshes) and the client
//! authentication each carries, as the registration or the server's metadata says.

use base64::Engine;

use crate::store::{Registration, Tokens, now_secs};
use crate::{Error, Secret, Step};

/// The largest token response read.
const MAX_RESPONSE: usize = 256 * 1024;

#[derive(serde::Deserialize)]
struct TokenResponse {
    access_token: Secret,
    token_type: Option<String>,
    expires_in: Option<u64>,
    refresh_token: Option<Secret>,
    scope: Option<String>,
}

#[derive(serde::Deserialize)]
struct ErrorResponse {
    error: String,
    error_description: Option<String>,
}

/// What a token request is for.
pub enum Grant<'a> {
    Code { code: &'a Secret, verifier: &'a str, redirect_uri: &'a str },
    Refresh { token: &'a Secret },
}

/// Posts a token request and reads the tokens. `scope`: what was asked for (kept with the
/// tokens when the server does not say what it granted).
pub async fn request(
    http: &reqwest::Client,
    endpoint: &str,
    issuer: &str,
    client: &Registration,
    resource: &str,
    grant: Grant<'_>,
    scope: Option<&str>,
) -> Result<Tokens, Error> {
    let step = match grant {
        Grant::Code { .. } => Step::Token,
        Grant::Refresh { .. } => Step::Refresh,
    };
    let fail = |cause: String| Error::new(step, cause);
    let mut form: Vec<(&str, &str)> = Vec::new();
    let old_refresh = match &grant {
        Grant::Code { code, verifier, redirect_uri } => {
            form.extend([
                ("grant_type", "authorization_code"),
                ("code", code.expose()),
                ("redirect_uri", redirect_uri),
                ("code_verifier", verifier),
            ]);
            None
        }
        Grant::Refresh { token } => {
            form.extend([("grant_type", "refresh_token"), ("refresh_token", token.expose())]);
            Some((*token).clone())
        }
    };
    form.push(("resource", resource));
    let req = http.post(endpoint).header(reqwest::header::ACCEPT, "application/json");
    let req = authenticate(req, &mut form, client).map_err(fail)?;
    let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
    let resp = req
        .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .map_err(|e| fail(format!("could not reach {endpoint}: {}", crate::describe(&e))))?;
    let status = resp.status();
    let body = crate::http::read_limited(resp, MAX_RESPONSE).await.map_err(fail)?;
    if !status.is_success() {
        // Only the error code and its description are shown: nothing else of the body.
        let parsed = serde_json::from_slice::<ErrorResponse>(&body).ok();
        let why = match &parsed {
            Some(e) => {
                format!("{}{}", e.error, e.error_description.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())
            }
            None => "no OAuth error in the body".into(),
        };
        let mut e = fail(format!("{endpoint} answered HTTP {}: {why}", status.as_u16()));
        e.oauth_error = parsed.map(|p| p.error);
        return Err(e);
    }
    let t: TokenResponse =
        serde_json::from_slice(&body).map_err(|_| fail(format!("{endpoint} answered without an access token")))?;
    if let Some(kind) = &t.token_type
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(fail(format!("{endpoint} issued a {kind} token; only Bearer tokens are supported")));
    }
    Ok(Tokens {
        issuer: issuer.to_string(),
        resource: resource.to_string(),
        access_token: t.access_token,
        // A refresh answer without a new refresh token leaves the old one in force.
        refresh_token: t.refresh_token.or(old_refresh),
        expires_at: t.expires_in.map(|s| now_secs() + s),
        lifetime: t.expires_in,
        scope: t.scope.or_else(|| scope.map(str::to_string)),
    })
}

/// `req` with the client's authentication, as its registration says: a Basic header, or its
/// id (and secret) added to `form`.
fn authenticate<'a>(
    mut req: reqwest::RequestBuilder,
    form: &mut Vec<(&'a str, &'a str)>,
    client: &'a Registration,
) -> Result<reqwest::RequestBuilder, String> {
    match (client.auth_method.as_str(), &client.client_secret) {
        ("client_secret_basic", Some(secret)) => {
            // RFC 6749 section 2.3.1: each part form-encoded, then base64 of `id:secret`.
            let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let pair = format!("{}:{}", enc(&client.client_id), enc(secret.expose()));
            let value = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair));
            let mut value = reqwest::header::HeaderValue::from_str(&value)
                .map_err(|_| "the client secret is not valid in a header".to_string())?;
            value.set_sensitive(true);
            req = req.header(reqwest::header::AUTHORIZATION, value);
        }
        ("client_secret_post", Some(secret)) => {
            form.extend([("client_id", client.client_id.as_str()), ("client_secret", secret.expose())]);
        }
        _ => {
            form.push(("client_id", &client.client_id));
        }
    }
    Ok(req)
}
