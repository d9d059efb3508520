//! What the HTTP front shows besides MCP: `/metrics` (Prometheus/OpenMetrics text), `/api/status`
//! (the JSON of `switchyard status --json`) and the live status page at `/` (`ui/`), which holds
//! no data itself: its script reads the token from the address's fragment and polls
//! `/api/status` with it. The guard runs first: the data paths need the token, the page does not.

use axum::body::Body;
use axum::response::Response;
use http::header::{self, HeaderValue};
use http::{Method, StatusCode};

use crate::registry::Servers;

const INDEX_HTML: &str = include_str!("ui/index.html");
const APP_JS: &str = include_str!("ui/app.js");
const APP_CSS: &str = include_str!("ui/app.css");

/// The page may load only its own script and style and talk only to its own origin; no frame
/// may hold it.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";
/// OpenMetrics text, which Prometheus asks for first.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The answer for one of this module's paths; None for any other path (MCP's).
pub fn serve(router: &Servers, method: &Method, path: &str) -> Option<Response> {
    let (body, kind): (Body, &'static str) = match path {
        "/" => (Body::from(INDEX_HTML), "text/html; charset=utf-8"),
        "/app.js" => (Body::from(APP_JS), "text/javascript; charset=utf-8"),
        "/app.css" => (Body::from(APP_CSS), "text/css; charset=utf-8"),
        "/favicon.ico" => (Body::empty(), ""),
        "/metrics" => (Body::from(router.metrics.encode()), OPENMETRICS),
        "/api/status" => (Body::from(router.status().to_string()), "application/json"),
        _ => return None,
    };
    if method != Method::GET && method != Method::HEAD {
        let mut r = Response::new(Body::from(format!("{path} answers GET only\n")));
        *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Some(r);
    }
    let mut r = Response::new(body);
    let h = r.headers_mut();
    if kind.is_empty() {
        *r.status_mut() = StatusCode::NO_CONTENT;
        return Some(r);
    }
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    // Live data and a page that changes with the binary: never from a cache.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::About;
    use switchyard_policy::Policy;
    use tokio_util::sync::CancellationToken;

    #[tokio::test]
    async fn the_page_its_assets_and_the_data_paths_are_served_with_strict_headers() {
        let router = Servers::new(Policy::disabled(), About::default(), None, CancellationToken::new());
        for (path, kind) in [
            ("/", "text/html"),
            ("/app.js", "text/javascript"),
            ("/app.css", "text/css"),
            ("/metrics", "application/openmetrics-text"),
            ("/api/status", "application/json"),
        ] {
            let r = serve(&router, &Method::GET, path).unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            let h = r.headers();
            assert!(h[header::CONTENT_TYPE].to_str().unwrap().starts_with(kind), "{path}");
            assert_eq!(h[header::CONTENT_SECURITY_POLICY], CSP, "{path}");
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        }
        assert!(serve(&router, &Method::GET, "/mcp").is_none());
        assert_eq!(serve(&router, &Method::POST, "/metrics").unwrap().status(), StatusCode::METHOD_NOT_ALLOWED);
        // The page loads nothing from elsewhere, and holds no data of its own.
        for asset in [INDEX_HTML, APP_JS, APP_CSS] {
            assert!(!asset.contains("http://") && !asset.contains("https://") && !asset.contains("//cdn"));
        }
        assert!(INDEX_HTML.contains(r#"src="/app.js""#) && INDEX_HTML.contains(r#"href="/app.css""#));
        assert!(INDEX_HTML.len() + APP_JS.len() + APP_CSS.len() < 15 * 1024, "the page should stay small");
    }
}
