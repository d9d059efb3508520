//! The HTTP client every request to the authorization server goes through, and how a URL or a
//! failed request is told in a message without a secret in it.

use std::sync::Once;
use std::time::Duration;

use url::Url;

/// Each request to the authorization server may take this long.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The client for one server's sign-in: bounded requests that never follow a redirect.
pub(crate) fn client() -> Result<reqwest::Client, String> {
    static CRYPTO: Once = Once::new();
    // Ring is the TLS crypto rustls uses here (as for the remote transports). Err: one is
    // installed already.
    CRYPTO.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        // Never carry a code, a secret or a refresh token to where a redirect points.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("switchyard/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("could not set up an HTTP client: {e}"))
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
