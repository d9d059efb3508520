//! Discovery: the server's Protected Resource Metadata (RFC 9728), then its authorization
//! server's metadata (RFC 8414, or OpenID discovery), tried at the places and in the order the
//! MCP authorization spec gives.

use serde::Deserialize;
use url::Url;

use crate::challenge::Challenge;
use crate::{Error, Step};

/// The largest metadata document read.
const MAX_DOCUMENT: usize = 1 << 20;

/// What the server says about itself as an OAuth protected resource.
#[derive(Debug, Clone, Deserialize)]
pub struct ResourceMetadata {
    /// The resource identifier, exactly as published: the `resource` parameter sends it as is.
    pub resource: String,
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Option<Vec<String>>,
}

/// What an authorization server says about itself.
#[derive(Debug, Clone, Deserialize)]
pub struct ServerMetadata {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub registration_endpoint: Option<String>,
    pub scopes_supported: Option<Vec<String>>,
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    pub code_challenge_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    /// RFC 9207: the server puts `iss` in every authorization response.
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
}

/// Where to sign in for one server, found.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// The resource identifier tokens are asked for (RFC 8707 `resource`).
    pub resource: String,
    /// The scopes the resource lists (used when the challenge names none).
    pub resource_scopes: Option<Vec<String>>,
    pub server: ServerMetadata,
}

/// Finds the resource metadata and the authorization server for `server_url`, starting from
/// the 401's challenge when there was one.
pub async fn discover(
    http: &reqwest::Client,
    server_url: &Url,
    challenge: Option<&Challenge>,
) -> Result<Discovery, Error> {
    let fail = |cause: String| Error::new(Step::Discovery, cause);
    let mut tried = Vec::new();
    let mut resource: Option<ResourceMetadata> = None;
    for candidate in resource_candidates(server_url, challenge) {
        match get_json::<ResourceMetadata>(http, &candidate).await {
            Ok(Some(m)) => {
                resource = Some(m);
                break;
            }
            Ok(None) => tried.push(candidate),
            Err(e) => tried.push(format!("{candidate} ({e})")),
        }
    }
    let (resource_id, resource_scopes, issuer) = match resource {
        Some(m) => {
            if !resource_matches(&m.resource, server_url) {
                return Err(fail(format!(
                    "the server's resource metadata names the resource {}, which is not {}: refusing to sign in for it",
                    m.resource,
                    crate::shown(server_url)
                )));
            }
            let Some(issuer) = m.authorization_servers.first().cloned() else {
                return Err(fail("the server's resource metadata names no authorization server".into()));
            };
            (m.resource, m.scopes_supported, issuer)
        }
        // No resource metadata: a server of the 2025-03-26 spec, whose own origin is the
        // authorization server.
        None => (server_url.to_string(), None, server_url.origin().ascii_serialization()),
    };
    let server = server_metadata(http, &issuer).await?;
    Ok(Discovery { resource: resource_id, resource_scopes, server })
}

/// The authorization server `issuer`'s metadata, checked to be its own; the 2025-03-26
/// default endpoints when it publishes none.
pub async fn server_metadata(http: &reqwest::Client, issuer: &str) -> Result<ServerMetadata, Error> {
    let fail = |cause: String| Error::new(Step::Discovery, cause);
    let base =
        Url::parse(issuer).map_err(|e| fail(format!("the authorization server {issuer:?} is not a URL: {e}")))?;
    if base.scheme() != "https" && base.scheme() != "http" {
        return Err(fail(format!("the authorization server {issuer:?} is not an http(s) URL")));
    }
    let (mut unreachable, mut answered) = (None, false);
    for candidate in server_candidates(&base) {
        let found = match get_json::<ServerMetadata>(http, &candidate).await {
            Ok(found) => {
                answered = true;
                found
            }
            Err(e) => {
                unreachable.get_or_insert(e);
                continue;
            }
        };
        if let Some(m) = found {
            // RFC 8414 section 3.3: metadata for another issuer is not this server's.
            if m.issuer != issuer {
                return Err(fail(format!(
                    "the metadata at {candidate} is for the issuer {}, not {issuer}: refusing it",
                    m.issuer
                )));
            }
            if let Some(methods) = &m.code_challenge_methods_supported
                && !methods.iter().any(|c| c == "S256")
            {
                return Err(fail(format!("{issuer} does not support PKCE with S256")));
            }
            return Ok(m);
        }
    }
    // A server that answered none of the requests is not one without metadata: it is down, or
    // not reachable from here (the default endpoints would only fail further on).
    if let Some(cause) = unreachable.filter(|_| !answered) {
        return Err(fail(format!(
            "could not reach the authorization server {issuer}: {cause}; check that it is up and reachable from here"
        )));
    }
    // The 2025-03-26 spec's fallback: the default endpoints at the server's base.
    let at = |path: &str| format!("{}{path}", base.origin().ascii_serialization());
    Ok(ServerMetadata {
        issuer: issuer.to_string(),
        authorization_endpoint: at("/authorize"),
        token_endpoint: at("/token"),
        registration_endpoint: Some(at("/register")),
        scopes_supported: None,
        token_endpoint_auth_methods_supported: None,
        code_challenge_methods_supported: None,
        client_id_metadata_document_supported: false,
        authorization_response_iss_parameter_supported: false,
    })
}

/// Where the resource metadata may be, in order: the challenge's URL, then the path-aware
/// well-known URL, then the root one.
fn resource_candidates(server_url: &Url, challenge: Option<&Challenge>) -> Vec<String> {
    let origin = server_url.origin().ascii_serialization();
    let mut out = Vec::new();
    if let Some(url) = challenge.and_then(|c| c.resource_metadata.as_deref())
        && Url::parse(url).is_ok_and(|u| u.scheme() == "https" || u.scheme() == "http")
    {
        out.push(url.to_string());
    }
    let path = server_url.path().trim_end_matches('/');
    if !path.is_empty() {
        out.push(format!("{origin}/.well-known/oauth-protected-resource{path}"));
    }
    out.push(format!("{origin}/.well-known/oauth-protected-resource"));
    out.dedup();
    out
}

/// Where an issuer's metadata may be, in the spec's order: RFC 8414 with the path inserted,
/// OpenID discovery with it inserted, then OpenID discovery with it appended.
fn server_candidates(issuer: &Url) -> Vec<String> {
    let origin = issuer.origin().ascii_serialization();
    let path = issuer.path().trim_end_matches('/');
    if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    }
}

/// Whether tokens for `resource` may be used at `server_url`: the same origin, and the
/// server's path at or under the resource's (RFC 9728 section 3.3 asks for the same
/// identifier; a resource may cover several endpoints below it).
pub fn resource_matches(resource: &str, server_url: &Url) -> bool {
    let Ok(r) = Url::parse(resource) else { return false };
    if r.origin() != server_url.origin() || r.fragment().is_some() {
        return false;
    }
    let want: Vec<&str> = r.path().split('/').filter(|s| !s.is_empty()).collect();
    let have: Vec<&str> = server_url.path().split('/').filter(|s| !s.is_empty()).collect();
    have.starts_with(&want)
}

/// GETs a JSON document. Ok(None): the server has none there (any status but 2xx, or a body
/// that is not the document).
async fn get_json<T: serde::de::DeserializeOwned>(http: &reqwest::Client, url: &str) -> Result<Option<T>, String> {
    let resp = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| crate::describe(&e))?;
    if !resp.status().is_success() {
        return Ok(None);
    }
    let body = crate::http::read_limited(resp, MAX_DOCUMENT).await?;
    Ok(serde_json::from_slice(&body).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_candidates_are_in_the_spec_order() {
        let url = Url::parse("https://h.example/api/mcp").unwrap();
        let c = Challenge { resource_metadata: Some("https://h.example/custom.json".into()), ..Default::default() };
        assert_eq!(
            resource_candidates(&url, Some(&c)),
            [
                "https://h.example/custom.json",
                "https://h.example/.well-known/oauth-protected-resource/api/mcp",
                "https://h.example/.well-known/oauth-protected-resource"
            ]
        );
        let root = Url::parse("https://h.example/").unwrap();
        assert_eq!(resource_candidates(&root, None), ["https://h.example/.well-known/oauth-protected-resource"]);
    }

    #[test]
    fn server_candidates_insert_the_path_then_append_it() {
        let with_path = Url::parse("https://as.example/tenant1").unwrap();
        assert_eq!(
            server_candidates(&with_path),
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant1",
                "https://as.example/.well-known/openid-configuration/tenant1",
                "https://as.example/tenant1/.well-known/openid-configuration"
            ]
        );
        let bare = Url::parse("https://as.example").unwrap();
        assert_eq!(
            server_candidates(&bare),
            [
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn a_resource_matches_its_server_and_what_is_below_it_only() {
        let url = Url::parse("https://h.example/mcp").unwrap();
        assert!(resource_matches("https://h.example/mcp", &url));
        assert!(resource_matches("https://h.example", &url));
        assert!(resource_matches("https://h.example/", &url));
        assert!(!resource_matches("https://evil.example.com/mcp", &url));
        assert!(!resource_matches("https://h.example/other", &url));
        assert!(!resource_matches("https://h.example/mcp/deeper", &url));
        assert!(!resource_matches("http://h.example/mcp", &url));
        assert!(!resource_matches("not a url", &url));
    }
}
