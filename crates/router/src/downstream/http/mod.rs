//! The Streamable HTTP front of the daemon (`/mcp/NAME`): who may reach it ([`guard`]), with
//! which bearer token ([`token`]), its sessions of the 2025-11-25 era ([`session`], each an
//! ordinary session of the router, as a stdio client's is, with resumable streams: [`events`]),
//! and the session-less requests of the 2026-07-28 era ([`stateless`]).
//!
//! Not served, and answered as such (never with silence): JSON-RPC batches (400).

mod body;
pub mod events;
pub mod guard;
pub mod listen;
mod post;
pub mod session;
pub mod stateless;
pub mod status;
pub mod token;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::Response;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};
use tokio_util::sync::CancellationToken;

use crate::registry::Servers;
use guard::{Guard, Verdict};
use session::{Feed, HttpSession, Table};
use switchyard_config::HttpConfig;
use switchyard_core::codec;
use switchyard_mcp as mcp;
use token::Tokens;

/// After shutdown, how long open responses get to finish before the front stops waiting.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// One HTTP front of a router.
pub struct Front {
    router: Arc<Servers>,
    guard: Guard,
    http: HttpConfig,
    table: Arc<Table>,
    shutdown: CancellationToken,
    /// What the POST bodies being read at once may hold in all.
    bodies: body::Bodies,
}

/// Serves the front on `listener` until `shutdown` fires; then ends its sessions and waits at
/// most [`SHUTDOWN_GRACE`] for open responses.
pub async fn serve(
    router: Arc<Servers>,
    http: HttpConfig,
    tokens: Tokens,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) {
    let listen = listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| http.listen.to_string());
    let table = Arc::new(Table::default());
    let front = Arc::new(Front {
        router: router.clone(),
        guard: Guard::new(&http, &tokens.daemon, &tokens.named),
        http,
        table: table.clone(),
        shutdown: shutdown.clone(),
        bodies: body::Bodies::new(body::BODIES_BUDGET),
    });
    let weak = Arc::downgrade(&table);
    let shown = listen.clone();
    *router.http.write().expect("lock") =
        Some(Box::new(move || serde_json::json!({"listen": shown, "sessions": weak.upgrade().map_or(0, |t| t.len())})));
    tokio::spawn(reap(front.clone()));
    let app = axum::Router::new().fallback(handle).with_state(front);
    tokio::select! {
        _ = listen::serve(listener, app, &listen, shutdown.clone()) => {}
        _ = async {
            shutdown.cancelled().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => tracing::warn!("some HTTP responses were still open {} s after shutdown; they were cut", SHUTDOWN_GRACE.as_secs()),
    }
}

/// Ends sessions idle past `[http] session_idle_ms`.
async fn reap(front: Arc<Front>) {
    let idle = Duration::from_millis(front.http.session_idle_ms.max(1));
    let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = front.shutdown.cancelled() => return,
        }
        let n = front.table.reap(idle);
        if n > 0 {
            tracing::info!("ended {n} HTTP session(s) idle for {} ms ([http] session_idle_ms)", idle.as_millis());
        }
    }
}

async fn handle(State(front): State<Arc<Front>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let (cors, token) = match front.guard.check(&parts.method, &parts.uri, &parts.headers) {
        Verdict::Answer(r) => return r.map(Body::from),
        Verdict::Pass { cors, token } => (cors, token),
    };
    // It carried the token: its connection is a client's, never closed to admit another.
    if guard::needs_token(parts.uri.path())
        && let Some(conn) = parts.extensions.get::<listen::Conn>()
    {
        conn.prove();
    }
    // `/`, `/metrics`, `/api/status` and the page's assets (see `status`); the rest is MCP's.
    let mut resp = match status::serve(&front.router, &parts.method, parts.uri.path()) {
        Some(r) => r,
        None => front.route(&parts.method, parts.uri.path(), &parts.headers, token, body).await,
    };
    resp.headers_mut().extend(cors);
    resp
}

/// How the client takes the answer to a POSTed request.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Sse,
    Json,
}

impl Front {
    /// An MCP request; `token`: the name of the named token it carried, if it did.
    async fn route(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        token: Option<Arc<str>>,
        body: Body,
    ) -> Response {
        let at = match (mcp_endpoint(path), group_endpoint(path)) {
            (Some(name), _) => Endpoint::Server(name),
            (None, Some(group)) => Endpoint::Group(group),
            (None, None) => {
                return plain(
                    StatusCode::NOT_FOUND,
                    "not found: MCP servers are at /mcp/NAME, groups at /groups/NAME/mcp",
                );
            }
        };
        // A POST's route is looked up in `Front::post`, before its body is read, and its version
        // checked after, against its body (errors carry the request's id). Any other request's
        // route is looked up here, before its version, as a POST's is.
        if *method != Method::POST {
            if let Some(r) = self.unknown_here(at, headers, token.as_deref()) {
                return r;
            }
            if let Some(r) = check_version(headers) {
                return r;
            }
        }
        match (method, at) {
            (&Method::POST, Endpoint::Server(name)) => self.post(name, headers, token, body).await,
            (&Method::POST, Endpoint::Group(group)) => self.post_group(group, headers, token, body).await,
            (&Method::GET, at) => self.get(at, headers, token.as_deref()),
            (&Method::DELETE, at) => self.delete(at, headers, token.as_deref()),
            _ => {
                let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "use POST, GET or DELETE");
                r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
                r
            }
        }
    }

    /// The session a request names, if it is one of this path's server, begun with the token
    /// the request carries (a session id seen by the holder of another token is of no use).
    /// Else 404: naming the server or group when the config has no such one.
    fn session(&self, at: Endpoint<'_>, sid: &str, token: Option<&str>) -> Result<Arc<HttpSession>, Box<Response>> {
        self.live_session(at, sid, token).ok_or_else(|| {
            Box::new(self.unknown(at).unwrap_or_else(|| {
                rpc_error(
                    StatusCode::NOT_FOUND,
                    "null",
                    codec::INVALID_REQUEST,
                    "session not found: it ended (DELETE, idle, or the daemon restarted) or never existed; send initialize without Mcp-Session-Id for a new one",
                )
            }))
        })
    }

    /// The session of [`Front::session`], if it lives.
    fn live_session(&self, at: Endpoint<'_>, sid: &str, token: Option<&str>) -> Option<Arc<HttpSession>> {
        let here = |s: &HttpSession| match (at, s.group.as_deref()) {
            (Endpoint::Server(name), None) => name.is_none_or(|n| n == s.server.name),
            (Endpoint::Group(g), Some(of)) => g == of,
            _ => false,
        };
        self.table.get(sid).filter(|s| here(s) && s.token.as_deref() == token)
    }

    /// [`Front::unknown`], unless the request names a session that lives at `at`: that shows the
    /// route (a group session outlives its group's removal from the config, and may still be
    /// ended with DELETE).
    fn unknown_here(&self, at: Endpoint<'_>, headers: &HeaderMap, token: Option<&str>) -> Option<Response> {
        let sid = headers.get(mcp::header::SESSION_ID).map(|v| v.to_str().unwrap_or(""));
        if sid.is_some_and(|sid| self.live_session(at, sid, token).is_some()) {
            return None;
        }
        self.unknown(at)
    }

    /// 404 naming why, when the server or group `at` names is none of the config's. None for
    /// `/mcp`, which names none (any session's; a POST without one is told there why not).
    fn unknown(&self, at: Endpoint<'_>) -> Option<Response> {
        let why = match at {
            Endpoint::Server(None) => return None,
            Endpoint::Server(Some(name)) if self.router.names().iter().any(|n| n == name) => return None,
            // Read again from the file first, and why not, when not (broken, a name no server has).
            Endpoint::Server(Some(name)) => self.router.lookup(Some(name), &BTreeMap::new()).err()?,
            Endpoint::Group(name) => self.router.group(name).err()?,
        };
        Some(rpc_error(StatusCode::NOT_FOUND, "null", codec::INVALID_REQUEST, &self.hidden(why)))
    }

    /// `why` with the config file's path taken out: an HTTP client may be another person's (a
    /// named token) or another machine's, and where the file is stays on this one.
    fn hidden(&self, why: String) -> String {
        match &self.router.about.config {
            Some(path) => why.replace(&path.display().to_string(), "the daemon's config file"),
            None => why,
        }
    }

    fn get(&self, at: Endpoint<'_>, headers: &HeaderMap, token: Option<&str>) -> Response {
        let Some(sid) = headers.get(mcp::header::SESSION_ID) else {
            let mut r = plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "GET opens the stream of a session: send its Mcp-Session-Id (initialize begins one)",
            );
            r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
            return r;
        };
        if accepts(headers) != Some(Mode::Sse) {
            return plain(StatusCode::NOT_ACCEPTABLE, "the GET stream is text/event-stream; list it in Accept");
        }
        let session = match self.session(at, sid.to_str().unwrap_or(""), token) {
            Ok(s) => s,
            Err(r) => return *r,
        };
        let gone = || rpc_error(StatusCode::NOT_FOUND, "null", codec::INVALID_REQUEST, "session not found: it ended");
        let Some(last) = headers.get(mcp::header::LAST_EVENT_ID) else {
            return match session.listen() {
                Ok(feed) => self.sse(feed),
                Err(_) => gone(),
            };
        };
        // Looked up in this session's events only: another session's id is unknown here.
        match session.resume(last.to_str().unwrap_or("")) {
            Ok(Ok(feed)) => self.sse(feed),
            Ok(Err(why)) => rpc_error(
                StatusCode::BAD_REQUEST,
                "null",
                codec::INVALID_REQUEST,
                &match why {
                    session::Unknown::Malformed => "Last-Event-ID is not an event id of this server (they look like 12.345); open the stream again without it".to_string(),
                    session::Unknown::Dropped => "the stream of that event was dropped: nobody read it in time; open the stream again without Last-Event-ID".to_string(),
                    session::Unknown::NotKept => format!(
                        "Last-Event-ID names no event of this session still kept (events are kept up to [http] event_store_bytes = {} per session); open the stream again without it",
                        self.http.event_store_bytes
                    ),
                },
            ),
            Err(_) => gone(),
        }
    }

    fn delete(&self, at: Endpoint<'_>, headers: &HeaderMap, token: Option<&str>) -> Response {
        let Some(sid) = headers.get(mcp::header::SESSION_ID) else {
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "DELETE ends a session: send its Mcp-Session-Id");
            r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
            return r;
        };
        let sid = sid.to_str().unwrap_or("");
        if let Err(r) = self.session(at, sid, token) {
            return *r;
        }
        self.table.remove(sid);
        empty(StatusCode::NO_CONTENT)
    }

    /// A `text/event-stream` response carrying `feed`, with keep-alive comments while idle; it
    /// ends when the feed does (after a request's response; when the session ends).
    fn sse(&self, feed: Feed) -> Response {
        let tick = self.keepalive();
        let events = futures_util::stream::unfold((feed, tick), |(mut feed, mut tick)| async move {
            let bytes = tokio::select! {
                m = feed.next() => m?,
                _ = tick.tick() => Bytes::from_static(b": keep-alive\n\n"),
            };
            Some((Ok::<_, std::convert::Infallible>(bytes), (feed, tick)))
        });
        event_stream(Body::from_stream(events))
    }

    /// When an idle SSE stream gets its next keep-alive comment (`[http] keepalive_ms`).
    fn keepalive(&self) -> tokio::time::Interval {
        let period = Duration::from_millis(self.http.keepalive_ms.max(1));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick
    }
}

/// A `text/event-stream` response of `body`, never cached or buffered by a proxy.
fn event_stream(body: Body) -> Response {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// For GET and DELETE: 400 for a protocol version header that is no version served, 405 for one of
/// the stateless era (which has neither); None when it may go on (none given: the spec then
/// assumes 2025-03-26).
fn check_version(headers: &HeaderMap) -> Option<Response> {
    let v = headers.get(mcp::header::PROTOCOL_VERSION)?;
    let v = v.to_str().unwrap_or("(not ASCII)");
    if !mcp::version::is_stateless(v) && !mcp::version::SESSION_ERA.contains(&v) {
        return Some(stateless::unsupported(v, "null"));
    }
    mcp::version::is_stateless(v).then(|| {
        let mut r = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "the 2026-07-28 protocol has no GET or DELETE: POST each request to the MCP endpoint",
        );
        r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
        r
    })
}

/// How the client wants a request answered, from `Accept` (none: anything).
fn accepts(headers: &HeaderMap) -> Option<Mode> {
    let mut listed = headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).peekable();
    if listed.peek().is_none() {
        return Some(Mode::Sse);
    }
    let types: Vec<String> = listed.flat_map(|v| v.split(',')).map(media).collect();
    let has = |t: &str| types.iter().any(|x| x == t);
    if has("text/event-stream") || has("*/*") || has("text/*") {
        Some(Mode::Sse)
    } else if has("application/json") || has("application/*") {
        Some(Mode::Json)
    } else {
        None
    }
}

/// The media type of a header value, lowercase, without parameters.
fn media(v: &str) -> String {
    v.split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

fn rpc_error(status: StatusCode, id: &str, code: i64, message: &str) -> Response {
    rpc_error_data(status, id, code, message, None)
}

fn rpc_error_data(
    status: StatusCode,
    id: &str,
    code: i64,
    message: &str,
    data: Option<&serde_json::Value>,
) -> Response {
    let mut r = Response::new(Body::from(codec::response_error(id, code, message, data)));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn plain(status: StatusCode, message: &str) -> Response {
    let mut r = Response::new(Body::from(format!("{message}\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

fn empty(status: StatusCode) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    r
}

/// What an MCP request's path names.
#[derive(Clone, Copy)]
enum Endpoint<'a> {
    /// `/mcp` (None: the only server) or `/mcp/NAME`.
    Server(Option<&'a str>),
    /// `/groups/NAME/mcp`.
    Group(&'a str),
}

/// The group `/groups/NAME/mcp` names.
pub(super) fn group_endpoint(path: &str) -> Option<&str> {
    let name = path.strip_prefix("/groups/")?.strip_suffix("/mcp")?;
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

/// The MCP endpoint `path` names: `Some(None)` for `/mcp` (the only server), `Some(Some(name))`
/// for `/mcp/NAME`, None for any other path. The guard and the router both ask this.
pub(super) fn mcp_endpoint(path: &str) -> Option<Option<&str>> {
    match path.strip_prefix("/mcp")? {
        "" | "/" => Some(None),
        rest if rest.len() > 1 && rest.starts_with('/') && !rest[1..].contains('/') => Some(Some(&rest[1..])),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A header map of `pairs` (a name may repeat).
    pub(crate) fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_group_is_at_groups_name_mcp_and_nowhere_else() {
        assert_eq!(group_endpoint("/groups/work/mcp"), Some("work"));
        for path in ["/groups//mcp", "/groups/a/b/mcp", "/groups/work", "/groups/work/mcp/", "/mcp/work"] {
            assert_eq!(group_endpoint(path), None, "{path}");
        }
        // A group's path is no server's, so a session id of one is never good at the other.
        assert_eq!(mcp_endpoint("/groups/work/mcp"), None);
    }

    #[test]
    fn accept_picks_the_stream_unless_only_json_is_taken() {
        assert!(accepts(&headers(&[])) == Some(Mode::Sse));
        assert!(accepts(&headers(&[("accept", "application/json, text/event-stream")])) == Some(Mode::Sse));
        assert!(accepts(&headers(&[("accept", "application/json;q=0.9")])) == Some(Mode::Json));
        assert!(accepts(&headers(&[("accept", "text/html")])).is_none());
    }

    #[test]
    fn get_and_delete_take_initialize_era_versions_405_stateless_ones_and_400_others() {
        assert!(check_version(&headers(&[])).is_none());
        assert!(check_version(&headers(&[("mcp-protocol-version", "2025-06-18")])).is_none());
        assert!(check_version(&headers(&[("mcp-protocol-version", "2024-10-07")])).is_none());
        for (v, status) in [
            ("2026-07-28", StatusCode::METHOD_NOT_ALLOWED),
            ("2027-01-01", StatusCode::METHOD_NOT_ALLOWED),
            ("latest", StatusCode::BAD_REQUEST),
            ("2025-6-18", StatusCode::BAD_REQUEST),
            ("1999-01-01", StatusCode::BAD_REQUEST),
            ("2025-12-01", StatusCode::BAD_REQUEST),
        ] {
            assert_eq!(check_version(&headers(&[("mcp-protocol-version", v)])).unwrap().status(), status, "{v}");
        }
    }
}
