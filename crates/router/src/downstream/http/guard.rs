//! The HTTP front's door: decides from a request's method, path and headers, before anything
//! else reads it, whether it may reach the daemon. In order: `Host` (DNS rebinding), `Origin`
//! (other web pages), CORS preflights, and the bearer token.
//!
//! The server calls [`Guard::check`] on every request before routing it: on
//! [`Verdict::Answer`] it sends that response as it is; on [`Verdict::Pass`] it serves the
//! request and adds the `cors` headers to whatever it answers.

use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode, Uri};

use crate::downstream::http::token::Token;
use switchyard_config::{HostName, HttpConfig, WebOrigin, parse_authority};

/// Paths anyone on this machine may read without the token: the status page's own files (no
/// data in them; the page reads `/api/status` with the token from its URL fragment). Every other
/// path needs the token, so a route added later is closed until it is listed here.
pub const PUBLIC_PATHS: &[&str] = &["/", "/app.js", "/app.css", "/favicon.ico"];

/// Request headers a browser page may send to the front (the MCP transport's and the token's).
const ALLOW_HEADERS: &str =
    "Authorization, Content-Type, Accept, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name";
/// Response headers a browser page may read.
const EXPOSE_HEADERS: &str = "Mcp-Session-Id";
const ALLOW_METHODS: &str = "GET, POST, DELETE";

/// What to do with a request.
#[derive(Debug)]
pub enum Verdict {
    /// Let it through; add `cors` to its response (empty unless a listed origin sent it).
    /// `token`: the name of the `[http.tokens]` entry it carried (None: the daemon's token, or
    /// a path that needs none).
    Pass { cors: HeaderMap, token: Option<Arc<str>> },
    /// Answer with this at once; the request goes no further (a refusal, or a CORS preflight).
    Answer(Response<String>),
}

/// The checks of one front, built once from its settings and token.
pub struct Guard {
    /// Names `Host` may give besides loopback ones.
    hosts: Vec<HostName>,
    /// Origins besides loopback ones: allowed, and answered CORS.
    origins: Vec<WebOrigin>,
    /// SHA-256 of the token: a presented token is hashed and the digests compared, so the
    /// comparison's time tells nothing about how much of the secret a guess got right.
    digest: [u8; 32],
    /// The named tokens of `[http.tokens]`, each by its name: they open the MCP endpoints only.
    named: Vec<(Arc<str>, [u8; 32])>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("hosts", &self.hosts).field("origins", &self.origins).finish_non_exhaustive()
    }
}

impl Guard {
    /// The guard of a front with the daemon's `token` and the `named` ones (checked distinct
    /// by [`token::named_for_daemon`](super::token::named_for_daemon)).
    pub fn new(http: &HttpConfig, token: &Token, named: &[(String, Token)]) -> Guard {
        let mut hosts = http.allowed_hosts.clone();
        // Clients of a front bound to one address of this machine name that address.
        let ip = http.listen.ip();
        if !ip.is_unspecified() && !ip.is_loopback() {
            hosts.push(HostName::Ip(ip));
        }
        let named = named.iter().map(|(name, t)| (Arc::from(name.as_str()), t.digest())).collect();
        Guard { hosts, origins: http.allowed_origins.clone(), digest: token.digest(), named }
    }

    /// The verdict on a request: `uri` as the server read it (its path, and its authority when
    /// the request line carried one), `headers` as sent.
    pub fn check(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Verdict {
        let host = match self.host(uri, headers) {
            Ok(h) => h,
            Err(refusal) => return Verdict::Answer(refusal.response()),
        };
        let origin = match self.origin(headers, &host) {
            Ok(o) => o,
            Err(refusal) => return Verdict::Answer(refusal.response()),
        };
        let listed = origin.as_ref().filter(|(o, _)| self.origins.contains(o)).map(|(_, sent)| sent.clone());
        let preflight = method == Method::OPTIONS && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
        if let (true, Some((o, _))) = (preflight, &origin) {
            return Verdict::Answer(match &listed {
                Some(sent) => preflight_answer(sent),
                None => Refusal::new(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "origin {o} is not in [http] allowed_origins; a web page of another origin may call the front only when it is listed there"
                    ),
                )
                .response(),
            });
        }
        let cors = listed.as_ref().map(cors_headers).unwrap_or_default();
        if !needs_token(uri.path()) {
            return Verdict::Pass { cors, token: None };
        }
        let refused = |refusal: Refusal| {
            let mut answer = refusal.response();
            answer.headers_mut().extend(cors.clone());
            Verdict::Answer(answer)
        };
        match self.authorized(headers) {
            Err(refusal) => refused(refusal),
            Ok(Some(name))
                if super::mcp_endpoint(uri.path()).is_none() && super::group_endpoint(uri.path()).is_none() =>
            {
                refused(Refusal::new(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "the token `{name}` of [http.tokens] opens the MCP endpoints (/mcp/NAME, /groups/NAME/mcp) only; the status page, its API and the metrics take the daemon's own token (`switchyard token --config FILE` prints it)"
                    ),
                ))
            }
            Ok(token) => Verdict::Pass { cors, token },
        }
    }

    /// The host the request names (its `Host`, and the request line's authority when given),
    /// which must be this machine's or listed.
    fn host(&self, uri: &Uri, headers: &HeaderMap) -> Result<(HostName, Option<u16>), Refusal> {
        let mut given = headers.get_all(header::HOST).iter();
        let (first, second) = (given.next(), given.next());
        if second.is_some() {
            return Err(Refusal::new(StatusCode::BAD_REQUEST, "the request has more than one Host header"));
        }
        // HTTP/2 and absolute-form requests carry the host in the request line: it counts too,
        // and first (RFC 9112: a server uses it over Host).
        let line = uri.authority().map(|a| a.as_str());
        let mut named = None;
        for text in [line, first.map(|v| v.to_str().unwrap_or("\u{0}"))].into_iter().flatten() {
            let Ok((host, port)) = parse_authority(text) else {
                return Err(Refusal::new(
                    StatusCode::BAD_REQUEST,
                    "the Host header is not a host name with an optional port",
                ));
            };
            if !host.is_loopback() && !self.hosts.contains(&host) {
                return Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "Host {host} is not a name of this daemon: requests naming another host are refused (DNS rebinding protection); list it in [http] allowed_hosts if clients reach the daemon by that name"
                    ),
                ));
            }
            named.get_or_insert((host, port));
        }
        named.ok_or_else(|| Refusal::new(StatusCode::BAD_REQUEST, "the request has no Host header"))
    }

    /// The request's origin, if it sent one, and that origin as sent; an origin that is not
    /// loopback, listed, or the front's own is refused.
    fn origin(
        &self,
        headers: &HeaderMap,
        host: &(HostName, Option<u16>),
    ) -> Result<Option<(WebOrigin, HeaderValue)>, Refusal> {
        let mut given = headers.get_all(header::ORIGIN).iter();
        let (Some(sent), second) = (given.next(), given.next()) else { return Ok(None) };
        let forbidden = |why: &str| Err(Refusal::new(StatusCode::FORBIDDEN, why));
        if second.is_some() {
            return forbidden("the request has more than one Origin header");
        }
        let text = sent.to_str().unwrap_or("");
        if text == "null" {
            return forbidden(
                "Origin null (a sandboxed page, a file, or a redirect) is refused: a page without an origin of its own cannot be told apart from any other",
            );
        }
        let Ok(origin) = WebOrigin::parse(text) else {
            return forbidden("the Origin header is not an origin (scheme://host[:port])");
        };
        // The front's own pages (the status page, served under the name and port the request
        // used; no port is the scheme's default, as behind a proxy).
        let default = if origin.https { 443 } else { 80 };
        let own = origin.host == host.0 && host.1.unwrap_or(default) == origin.port;
        if origin.host.is_loopback() || own || self.origins.contains(&origin) {
            return Ok(Some((origin, sent.clone())));
        }
        forbidden(&format!(
            "origin {origin} is not allowed: only pages of this machine (localhost, 127.0.0.1, [::1]) and the origins in [http] allowed_origins may call the front"
        ))
    }

    /// Whether the request carries one of this front's tokens as `Authorization: Bearer TOKEN`
    /// (the scheme in any case, one or more spaces before the token, as RFC 6750 writes it):
    /// None for the daemon's own, else the name of the named one.
    fn authorized(&self, headers: &HeaderMap) -> Result<Option<Arc<str>>, Refusal> {
        let mut given = headers.get_all(header::AUTHORIZATION).iter();
        let (Some(sent), None) = (given.next(), given.next()) else {
            return Err(unauthorized(
                "Bearer",
                "this needs the daemon's bearer token: send `Authorization: Bearer TOKEN` (`switchyard token --config FILE` prints it)",
            ));
        };
        let presented = sent.to_str().ok().and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            let token = rest.trim_start_matches(' ');
            (scheme.eq_ignore_ascii_case("bearer") && switchyard_config::is_bearer_token(token)).then_some(token)
        });
        let Some(presented) = presented else {
            return Err(unauthorized(
                "Bearer error=\"invalid_request\"",
                "the Authorization header is not `Bearer TOKEN` (`switchyard token --config FILE` prints the token)",
            ));
        };
        let digest = Token::new(presented.to_string()).digest();
        // Every byte of every token compared, whatever the first difference or match.
        let same = |other: &[u8; 32]| digest.iter().zip(other).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        let mut matched = same(&self.digest).then_some(None);
        for (name, d) in &self.named {
            if same(d) {
                matched = Some(Some(name.clone()));
            }
        }
        matched.ok_or_else(|| {
            unauthorized(
                "Bearer error=\"invalid_token\"",
                "the bearer token is not this daemon's (`switchyard token --config FILE` prints it; a token generated for another config file is that daemon's; a named one must be in [http.tokens] of this config)",
            )
        })
    }
}

/// Whether `path` is an MCP endpoint (`/mcp`, `/mcp/NAME`, with anything after).
/// Whether a request for `path` must carry the token: all but [`PUBLIC_PATHS`] (`/mcp`,
/// `/mcp/NAME`, `/metrics`, `/api/status` among them).
pub fn needs_token(path: &str) -> bool {
    !PUBLIC_PATHS.contains(&path)
}

/// The headers that let the page of `origin` (a listed one, as it sent it) read a response.
fn cors_headers(origin: &HeaderValue) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    h.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static(EXPOSE_HEADERS));
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    h
}

/// The answer to a listed origin's preflight: which methods and headers its page may use.
fn preflight_answer(origin: &HeaderValue) -> Response<String> {
    let mut r = Response::new(String::new());
    *r.status_mut() = StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    h.extend(cors_headers(origin));
    h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static(ALLOW_METHODS));
    h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static(ALLOW_HEADERS));
    h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    r
}

/// Why a request is answered at once, before it is made a response.
struct Refusal {
    status: StatusCode,
    why: String,
    /// `WWW-Authenticate` (a 401's challenge).
    challenge: Option<&'static str>,
}

impl Refusal {
    fn new(status: StatusCode, why: &str) -> Refusal {
        Refusal { status, why: why.to_string(), challenge: None }
    }

    /// The response: `status` with a JSON-RPC error without a request id (none is read yet).
    fn response(self) -> Response<String> {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": self.why}});
        let mut r = Response::new(body.to_string());
        *r.status_mut() = self.status;
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(c) = self.challenge {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(c));
        }
        r
    }
}

/// 401 with the challenge RFC 6750 asks for (`error` when a token was presented but is not
/// usable or not this front's).
fn unauthorized(challenge: &'static str, why: &str) -> Refusal {
    Refusal { challenge: Some(challenge), ..Refusal::new(StatusCode::UNAUTHORIZED, why) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HeaderName;

    const TOKEN: &str = "sy_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG";
    /// The named token `laptop` of every guard here.
    const LAPTOP: &str = "sy_laptop_0123456789abcdefghijklmnopqrstuvwxyz";

    fn guard_with(extra: &str) -> Guard {
        let text = format!("[http]\n{extra}");
        let c: switchyard_config::Config = toml::from_str(&text).unwrap();
        Guard::new(&c.http.unwrap(), &Token::new(TOKEN.into()), &[("laptop".into(), Token::new(LAPTOP.into()))])
    }

    fn guard() -> Guard {
        guard_with("allowed_origins = [\"https://app.example\"]\nallowed_hosts = [\"mcp.example.com\"]\n")
    }

    /// A request: method, URI, and headers as (name, value) pairs (repeats allowed).
    fn check(g: &Guard, method: &str, uri: &str, headers: &[(&str, &str)]) -> Verdict {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_bytes(v.as_bytes()).unwrap());
        }
        g.check(&method.parse().unwrap(), &uri.parse().unwrap(), &map)
    }

    fn bearer() -> String {
        format!("Bearer {TOKEN}")
    }

    /// The status of the answer, or 0 for a pass.
    fn status(v: &Verdict) -> u16 {
        match v {
            Verdict::Pass { .. } => 0,
            Verdict::Answer(r) => r.status().as_u16(),
        }
    }

    fn answer(v: Verdict) -> Response<String> {
        match v {
            Verdict::Answer(r) => r,
            Verdict::Pass { .. } => panic!("passed"),
        }
    }

    /// A POST /mcp with the token, `Host: host`, and `Origin: origin` when given.
    fn post(g: &Guard, host: &str, origin: Option<&str>) -> u16 {
        let auth = bearer();
        let mut h = vec![("host", host), ("authorization", auth.as_str())];
        h.extend(origin.map(|o| ("origin", o)));
        status(&check(g, "POST", "/mcp", &h))
    }

    #[test]
    fn loopback_and_listed_hosts_pass_with_any_port() {
        let g = guard();
        for host in [
            "localhost",
            "localhost:7070",
            "LOCALHOST:7070",
            "LocalHost",
            "127.0.0.1",
            "127.0.0.1:7070",
            "127.0.0.2:1",
            "[::1]",
            "[::1]:7070",
            "mcp.example.com",
            "MCP.Example.COM:443",
        ] {
            assert_eq!(post(&g, host, None), 0, "{host}");
        }
    }

    #[test]
    fn other_hosts_are_refused_403_and_a_missing_or_malformed_one_400() {
        let g = guard();
        for host in [
            "localhost.evil.com",
            "localhost.evil.com:7070",
            "127.0.0.1.nip.io",
            "127.0.0.1.nip.io:7070",
            "localhost.",
            "localhost.:7070",
            "127.0.0.1.",
            "mcp.example.com.",
            "evil.example.com",
            "a.localhost",
            "127.1",
            "2130706433",
            "0x7f000001",
            "[::ffff:127.0.0.1]:7070",
            "[::2]:7070",
            "0.0.0.0:7070",
            "10.0.0.1",
        ] {
            let code = post(&g, host, None);
            // `127.0.0.1.` is an IPv4 address to some parsers: either way it is not let through.
            assert!(code == 403 || (code == 400 && host.ends_with('.')), "{host}: {code}");
        }
        for host in [
            "",
            ":7070",
            "::1",
            "::1:7070",
            "[::1",
            "[::1]:x",
            "local host",
            "a/b",
            "localhost:99999",
            "é",
            "localhost:7070, evil.com",
            "evil.com:80@localhost",
            "localhost@evil.com",
            "localhost:7070:80",
            "localhost\\",
        ] {
            assert_eq!(post(&g, host, None), 400, "{host:?}");
        }
        assert_eq!(status(&check(&g, "POST", "/mcp", &[("authorization", &bearer())])), 400);
        let twice = [("host", "localhost"), ("host", "evil.com"), ("authorization", &bearer())];
        assert_eq!(status(&check(&g, "POST", "/mcp", &twice)), 400);
        // Non-ASCII bytes in the header.
        let mut map = HeaderMap::new();
        map.insert(header::HOST, HeaderValue::from_bytes(b"localhost\xff").unwrap());
        map.insert(header::AUTHORIZATION, HeaderValue::from_str(&bearer()).unwrap());
        assert_eq!(status(&g.check(&Method::POST, &"/mcp".parse().unwrap(), &map)), 400);
        // The body says why, and what to set.
        let r = answer(check(&g, "POST", "/mcp", &[("host", "evil.example.com:7070")]));
        assert!(r.body().contains("Host evil.example.com is not a name of this daemon"), "{}", r.body());
        assert!(r.body().contains("[http] allowed_hosts"), "{}", r.body());
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
        let v: serde_json::Value = serde_json::from_str(r.body()).unwrap();
        assert_eq!(
            (v["jsonrpc"].as_str(), v["id"].is_null(), v["error"]["code"].as_i64()),
            (Some("2.0"), true, Some(-32000))
        );
    }

    #[test]
    fn the_request_line_s_authority_is_checked_too() {
        let g = guard();
        let a = bearer();
        let h = [("host", "localhost"), ("authorization", a.as_str())];
        assert_eq!(status(&check(&g, "POST", "http://evil.example.com/mcp", &h)), 403);
        assert_eq!(status(&check(&g, "POST", "http://127.0.0.1:7070/mcp", &h)), 0);
        // HTTP/2 carries no Host header: the authority stands for it.
        assert_eq!(status(&check(&g, "POST", "http://localhost:7070/mcp", &[("authorization", &a)])), 0);
    }

    #[test]
    fn a_front_bound_to_one_address_accepts_that_address_as_host() {
        let g = guard_with("listen = \"192.168.1.5:7070\"\ntoken = \"x\"\n");
        assert_eq!(post(&g, "192.168.1.5:7070", None), 0);
        assert_eq!(post(&g, "192.168.1.6:7070", None), 403);
        // Every interface: only loopback and listed names.
        let g = guard_with("listen = \"0.0.0.0:7070\"\ntoken = \"x\"\n");
        assert_eq!(post(&g, "0.0.0.0:7070", None), 403);
        assert_eq!(post(&g, "127.0.0.1:7070", None), 0);
    }

    #[test]
    fn origins_loopback_listed_or_own_pass_and_others_and_null_are_403() {
        let g = guard();
        for origin in [
            "http://localhost:1234",
            "http://localhost",
            "https://localhost:8443",
            "http://127.0.0.1:5173",
            "http://[::1]:3000",
            "HTTP://LOCALHOST:1234",
            "https://app.example",
            "https://app.example:443",
        ] {
            assert_eq!(post(&g, "localhost:7070", Some(origin)), 0, "{origin}");
        }
        for origin in [
            "null",
            "http://localhost.evil",
            "http://localhost.evil:1234",
            "http://localhost.",
            "http://127.0.0.1.nip.io",
            "http://evil.example.com",
            "http://app.example",
            "https://app.example:8443",
            "https://app.example.evil",
            "https://sub.app.example",
            "file://",
            "chrome-extension://abc",
            "http://localhost:1234/",
            "http://localhost:1234/path",
            "http://user@localhost",
            "",
            "*",
        ] {
            assert_eq!(post(&g, "localhost:7070", Some(origin)), 403, "{origin:?}");
        }
        let twice = [("host", "localhost"), ("origin", "http://localhost"), ("origin", "http://evil.com")];
        assert_eq!(status(&check(&g, "POST", "/mcp", &twice)), 403);
        // The front's own page, under a listed name: same origin.
        assert_eq!(post(&g, "mcp.example.com", Some("http://mcp.example.com")), 0);
        assert_eq!(post(&g, "mcp.example.com:8080", Some("http://mcp.example.com:8080")), 0);
        assert_eq!(post(&g, "mcp.example.com:8080", Some("http://mcp.example.com:9090")), 403);
        assert_eq!(post(&g, "mcp.example.com", Some("https://mcp.example.com")), 0, "behind a TLS proxy");
        assert_eq!(post(&g, "mcp.example.com", Some("http://mcp.example.com:9090")), 403);
        assert_eq!(post(&g, "mcp.example.com", Some("http://other.example.com")), 403);
        let r = answer(check(&g, "POST", "/mcp", &[("host", "localhost"), ("origin", "http://localhost.evil")]));
        assert!(r.body().contains("origin http://localhost.evil is not allowed"), "{}", r.body());
        assert!(r.body().contains("[http] allowed_origins"), "{}", r.body());
        // Origin is checked before the token: a foreign page learns nothing from a 401.
        assert_eq!(status(&check(&g, "POST", "/mcp", &[("host", "localhost"), ("origin", "http://evil.com")])), 403);
    }

    #[test]
    fn mcp_metrics_and_status_need_the_token_and_the_page_does_not() {
        let g = guard();
        for path in [
            "/mcp",
            "/mcp/",
            "/mcp/filesystem",
            "/mcp/a/b",
            "/metrics",
            "/api/status",
            "/api",
            "/other",
            "/%6dcp",
            "//",
            "/mcp/../app.js",
            "/app.js/",
        ] {
            for method in ["GET", "POST", "DELETE", "HEAD"] {
                let v = check(&g, method, path, &[("host", "localhost:7070")]);
                assert_eq!(status(&v), 401, "{method} {path}");
                let r = answer(v);
                assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer", "{path}");
                assert!(r.body().contains("switchyard token --config FILE"), "{}", r.body());
            }
            assert_eq!(post_path(&g, path, &bearer()), 0, "{path}");
        }
        for path in PUBLIC_PATHS {
            assert_eq!(status(&check(&g, "GET", path, &[("host", "localhost:7070")])), 0, "{path}");
        }
        // With a query string too.
        assert_eq!(status(&check(&g, "GET", "/?x=1", &[("host", "localhost")])), 0);
        assert_eq!(status(&check(&g, "GET", "/metrics?x=1", &[("host", "localhost")])), 401);
    }

    #[test]
    fn a_named_token_opens_the_mcp_endpoints_only_and_says_whose_it_is() {
        let g = guard();
        let pass = |method: &str, path: &str, auth: &str| match check(
            &g,
            method,
            path,
            &[("host", "localhost:7070"), ("authorization", auth)],
        ) {
            Verdict::Pass { token, .. } => Ok(token.map(|t| t.to_string())),
            Verdict::Answer(r) => Err((r.status().as_u16(), r.into_body())),
        };
        let laptop = format!("Bearer {LAPTOP}");
        for path in ["/mcp", "/mcp/", "/mcp/fs"] {
            for method in ["GET", "POST", "DELETE"] {
                assert_eq!(pass(method, path, &laptop), Ok(Some("laptop".into())), "{method} {path}");
                assert_eq!(pass(method, path, &bearer()), Ok(None), "{method} {path}");
            }
        }
        // What the router would not serve as an endpoint (`/mcp/a/b`) is no MCP endpoint here either.
        for path in ["/metrics", "/api/status", "/api", "/other", "/mcpx", "/%6dcp/fs", "/mcp/a/b", "/mcp//"] {
            let (status, body) = pass("GET", path, &laptop).unwrap_err();
            assert_eq!(status, 403, "{path}");
            assert!(body.contains("the token `laptop` of [http.tokens] opens the MCP endpoints"), "{body}");
            assert!(!body.contains(LAPTOP), "{body}");
            assert_eq!(pass("GET", path, &bearer()), Ok(None), "{path}");
        }
        // Only the exact value: a prefix or a near miss of the named token is no one's.
        for bad in [&LAPTOP[..LAPTOP.len() - 1], "sy_laptop_", &LAPTOP.to_uppercase()] {
            assert_eq!(pass("POST", "/mcp/fs", &format!("Bearer {bad}")).unwrap_err().0, 401, "{bad}");
        }
    }

    fn post_path(g: &Guard, path: &str, auth: &str) -> u16 {
        status(&check(g, "POST", path, &[("host", "localhost:7070"), ("authorization", auth)]))
    }

    #[test]
    fn only_the_exact_token_after_bearer_passes() {
        let g = guard();
        let ok = |auth: &str| post_path(&g, "/mcp/fs", auth) == 0;
        assert!(ok(&format!("Bearer {TOKEN}")));
        assert!(ok(&format!("bearer {TOKEN}")), "the scheme ignores case (RFC 9110)");
        assert!(ok(&format!("BEARER {TOKEN}")));
        assert!(ok(&format!("Bearer  {TOKEN}")), "RFC 6750: one or more spaces");
        for bad in [
            String::new(),
            "Bearer".into(),
            "Bearer ".into(),
            "Bearer  ".into(),
            TOKEN.into(),
            format!("Basic {TOKEN}"),
            format!("Bearer{TOKEN}"),
            format!("Bearer\t{TOKEN}"),
            format!("Bearer {TOKEN} "),
            format!("Bearer {TOKEN}x"),
            format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]),
            format!("Bearer {}", TOKEN.to_uppercase()),
            format!("Bearer {TOKEN},Bearer {TOKEN}"),
            format!("Bearer {TOKEN} {TOKEN}"),
            "Bearer sy_".into(),
        ] {
            assert!(!ok(&bad), "{bad:?} passed");
        }
        // Two Authorization headers, even both right: refused.
        let a = bearer();
        let two = [("host", "localhost"), ("authorization", a.as_str()), ("authorization", a.as_str())];
        assert_eq!(status(&check(&g, "POST", "/mcp", &two)), 401);
        // A wrong token is told apart from a missing one in the challenge.
        let r = answer(check(&g, "POST", "/mcp", &[("host", "localhost"), ("authorization", "Bearer nope")]));
        assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer error=\"invalid_token\"");
        assert!(!r.body().contains(TOKEN) && !r.body().contains("nope"), "{}", r.body());
        let r = answer(check(&g, "POST", "/mcp", &[("host", "localhost"), ("authorization", "Basic x")]));
        assert_eq!(r.headers()[header::WWW_AUTHENTICATE], "Bearer error=\"invalid_request\"");
    }

    #[test]
    fn a_listed_origin_gets_cors_answers_and_others_none() {
        let g = guard();
        let pre = |origin: &str| {
            check(
                &g,
                "OPTIONS",
                "/mcp/fs",
                &[
                    ("host", "localhost:7070"),
                    ("origin", origin),
                    ("access-control-request-method", "POST"),
                    ("access-control-request-headers", "authorization, content-type, mcp-session-id"),
                ],
            )
        };
        // No token on a preflight: browsers never send one there.
        let r = answer(pre("https://app.example"));
        assert_eq!(r.status(), 204);
        let h = r.headers();
        assert_eq!(h[header::ACCESS_CONTROL_ALLOW_ORIGIN], "https://app.example");
        assert_eq!(h[header::VARY], "Origin");
        assert_eq!(h[header::ACCESS_CONTROL_ALLOW_METHODS], "GET, POST, DELETE");
        let allowed = h[header::ACCESS_CONTROL_ALLOW_HEADERS].to_str().unwrap().to_ascii_lowercase();
        for name in ["mcp-session-id", "mcp-protocol-version", "last-event-id", "authorization", "content-type"] {
            assert!(allowed.split(", ").any(|a| a == name), "{name} not in {allowed}");
        }
        assert_eq!(h[header::ACCESS_CONTROL_EXPOSE_HEADERS], "Mcp-Session-Id");
        assert!(h.get(header::ACCESS_CONTROL_ALLOW_CREDENTIALS).is_none());
        // A loopback origin passes the origin check but is not listed: no CORS for it.
        let r = answer(pre("http://localhost:5173"));
        assert_eq!(r.status(), 403);
        assert!(r.headers().get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
        assert!(r.body().contains("not in [http] allowed_origins"), "{}", r.body());
        assert_eq!(status(&pre("http://evil.example.com")), 403);
        assert_eq!(status(&pre("null")), 403);
        // The request itself: CORS headers to add, on a pass and on a 401 alike.
        let a = bearer();
        let req = |auth: &str| {
            check(
                &g,
                "POST",
                "/mcp/fs",
                &[("host", "localhost"), ("origin", "https://app.example"), ("authorization", auth)],
            )
        };
        match req(&a) {
            Verdict::Pass { cors, .. } => {
                assert_eq!(cors[header::ACCESS_CONTROL_ALLOW_ORIGIN], "https://app.example");
                assert_eq!(cors[header::ACCESS_CONTROL_EXPOSE_HEADERS], "Mcp-Session-Id");
            }
            other => panic!("{other:?}"),
        }
        let r = answer(req("Bearer wrong"));
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "https://app.example");
        // Unlisted origins and no origin: nothing added.
        for h in [
            vec![("host", "localhost"), ("authorization", a.as_str())],
            vec![("host", "localhost"), ("origin", "http://localhost:3000"), ("authorization", a.as_str())],
        ] {
            match check(&g, "POST", "/mcp", &h) {
                Verdict::Pass { cors, .. } => assert!(cors.is_empty(), "{cors:?}"),
                other => panic!("{other:?}"),
            }
        }
        // An OPTIONS that is no preflight (no Origin) is an ordinary request: token needed.
        assert_eq!(
            status(&check(&g, "OPTIONS", "/mcp", &[("host", "localhost"), ("access-control-request-method", "POST")])),
            401
        );
    }

    #[test]
    fn host_is_checked_before_origin_and_origin_before_the_token() {
        let g = guard();
        let v = check(&g, "POST", "/mcp", &[("host", "evil.com"), ("origin", "http://evil.com")]);
        assert_eq!(status(&v), 403);
        assert!(answer(v).body().contains("Host evil.com"));
        let v = check(&g, "POST", "/", &[("host", "localhost"), ("origin", "http://evil.com")]);
        assert_eq!(status(&v), 403, "the page too refuses foreign origins");
    }

    #[test]
    fn the_guard_s_debug_shows_no_token() {
        let s = format!("{:?}", guard());
        assert!(!s.contains(TOKEN) && !s.contains("digest"), "{s}");
    }
}
