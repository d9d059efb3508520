//! `[http]`: the daemon's Streamable HTTP front, and the hosts and origins it lets in.

use anyhow::{anyhow, bail};
use serde::Deserialize;

use crate::vars::{HeaderValue, Piece, Source, expand, pieces};

/// Where the HTTP front listens when neither `[http] listen` nor `--http ADDR` says.
pub const DEFAULT_HTTP_LISTEN: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7070);

/// `[http]`: the daemon's Streamable HTTP front (`/mcp/NAME`), served when the table is given or
/// `switchyard daemon --http` is. Secure by default: a loopback address, a bearer token on every
/// MCP request, `Origin` and `Host` checked (see `front::guard`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// The address and port to listen on; `localhost:PORT` is 127.0.0.1:PORT.
    #[serde(deserialize_with = "listen_from_toml")]
    pub listen: std::net::SocketAddr,
    /// The bearer token clients send, `${VAR}` read from the environment when the daemon starts.
    /// None: a generated one kept in a 0600 file (`switchyard token` prints it), which only a
    /// loopback `listen` may use.
    pub token: Option<HeaderValue>,
    /// Named tokens, one per client or person (`[http.tokens] laptop = "${LAPTOP_TOKEN}"`):
    /// each lets its holder use the MCP endpoints (not the status page or metrics), and a
    /// policy plugin is told the name of the token that served a client.
    pub tokens: std::collections::BTreeMap<String, HeaderValue>,
    /// Browser origins allowed besides loopback ones (`https://app.example`), each exact; only
    /// these get CORS answers.
    pub allowed_origins: Vec<WebOrigin>,
    /// Names a request's `Host` may give besides loopback ones (DNS rebinding protection), for
    /// a non-loopback `listen` or a proxy in front.
    pub allowed_hosts: Vec<HostName>,
    /// An HTTP session without a request for this long is ended and its resources freed.
    pub session_idle_ms: u64,
    /// HTTP sessions at most; past it `initialize` is answered 503.
    pub max_sessions: usize,
    /// An SSE stream with nothing to send gets a comment this often (1 to 300 s), so proxies
    /// and clients do not time it out.
    pub keepalive_ms: u64,
    /// Per session, delivered SSE events kept for a client that resumes (`Last-Event-ID`), oldest
    /// dropped first; 0 keeps none.
    pub event_store_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: DEFAULT_HTTP_LISTEN,
            token: None,
            tokens: std::collections::BTreeMap::new(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            session_idle_ms: 30 * 60 * 1000,
            max_sessions: 10_000,
            keepalive_ms: 20_000,
            event_store_bytes: 1024 * 1024,
        }
    }
}

/// The shortest and longest `[http] keepalive_ms`: the MCP transport advice is 15-30 s, and a
/// proxy commonly drops an idle stream after 60 s or more.
const KEEPALIVE_MS: std::ops::RangeInclusive<u64> = 1_000..=300_000;

fn listen_from_toml<'de, D: serde::Deserializer<'de>>(d: D) -> Result<std::net::SocketAddr, D::Error> {
    let s = String::deserialize(d)?;
    parse_listen(&s).map_err(serde::de::Error::custom)
}

/// An address to listen on, as `[http] listen` and `--http` take it: `IP:PORT`, `[IPv6]:PORT`,
/// or `localhost:PORT` (127.0.0.1).
pub fn parse_listen(s: &str) -> Result<std::net::SocketAddr, String> {
    let how = "write an address and a port, e.g. 127.0.0.1:7070, [::1]:7070 or localhost:7070";
    if let Some(port) = s.strip_prefix("localhost:") {
        let port: u16 = port.parse().map_err(|_| format!("`{s}` has no valid port; {how}"))?;
        return Ok(std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), port));
    }
    s.parse().map_err(|_| format!("`{s}` is not an address and port; {how}"))
}

/// A bearer token's characters (RFC 6750 b64token): letters, digits, `-._~+/`, then `=` only
/// at the end.
pub fn is_bearer_token(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    !body.is_empty() && body.chars().all(|c| c.is_ascii_alphanumeric() || "-._~+/".contains(c))
}

impl HttpConfig {
    /// Values the front cannot work with, and a non-loopback `listen` without a token of the
    /// user's own. `at(key)` says where `key` was written.
    pub fn check(&self, at: &dyn Fn(&str) -> String) -> anyhow::Result<()> {
        if !KEEPALIVE_MS.contains(&self.keepalive_ms) {
            bail!(
                "{}: [http] keepalive_ms ({}) must be from {} to {} (1 to 300 s)",
                at("keepalive_ms"),
                self.keepalive_ms,
                KEEPALIVE_MS.start(),
                KEEPALIVE_MS.end()
            );
        }
        if self.session_idle_ms < 1_000 {
            bail!("{}: [http] session_idle_ms ({}) must be at least 1000", at("session_idle_ms"), self.session_idle_ms);
        }
        if self.max_sessions == 0 {
            bail!("{}: [http] max_sessions must be at least 1", at("max_sessions"));
        }
        if let Some(token) = &self.token {
            check_token_text(token, "[http] token", "or remove it to use a generated one", &at("token"))?;
        }
        for (name, token) in &self.tokens {
            let place = format!("[http.tokens] {name}");
            if !is_token_name(name) {
                bail!(
                    "{}: {place}: a token's name has 1 to 64 ASCII letters, digits, `-` and `_` (it is shown to policy plugins and in the log)",
                    at("tokens")
                );
            }
            check_token_text(token, &place, "or remove the entry", &at("tokens"))?;
        }
        self.check_exposure("[http] listen").map_err(|e| anyhow!("{}: {e}", at("listen")))
    }

    /// A `listen` that other machines can reach needs a token of the user's own: the generated
    /// one is a file on this machine, meant for local clients. `given_by` names where `listen`
    /// came from (`[http] listen`, `--http`).
    pub fn check_exposure(&self, given_by: &str) -> anyhow::Result<()> {
        if self.token.is_none() && !self.listen.ip().is_loopback() {
            bail!(
                "{given_by} {} is reachable from other machines, and [http] has no `token`: set `token = \"${{SWITCHYARD_TOKEN}}\"` in [http] (with a long random SWITCHYARD_TOKEN in the daemon's environment), or listen on 127.0.0.1",
                self.listen
            );
        }
        Ok(())
    }

    /// The environment variables `token` reads (`${NAME}`): the daemon keeps them from its
    /// servers, which would otherwise inherit them with the rest of its environment.
    pub fn token_variables(&self) -> Vec<String> {
        let all = self.token.iter().chain(self.tokens.values());
        all.flat_map(|t| expand(&t.raw, &|_| Ok(String::new())).map(|got| got.vars).unwrap_or_default()).collect()
    }

    /// `[http] token` with its variables read through `env` (`std::env::var` outside tests);
    /// None when the file sets none. The error names where the token was written and the
    /// variable, never a value.
    pub fn token_value(
        &self,
        env: &dyn Fn(&str) -> Result<String, std::env::VarError>,
    ) -> anyhow::Result<Option<String>> {
        let Some(token) = &self.token else { return Ok(None) };
        token_text(token, "[http] token", "or remove `token` to use a generated one", env).map(Some)
    }

    /// `[http.tokens]` with their variables read through `env`: (name, value), by name. The
    /// error names the entry and the variable, never a value.
    pub fn named_token_values(
        &self,
        env: &dyn Fn(&str) -> Result<String, std::env::VarError>,
    ) -> anyhow::Result<Vec<(String, String)>> {
        self.tokens
            .iter()
            .map(|(name, token)| {
                let place = format!("[http.tokens] {name}");
                Ok((name.clone(), token_text(token, &place, "or remove the entry", env)?))
            })
            .collect()
    }
}

/// A token's name in `[http.tokens]`.
fn is_token_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// A token as written (before its variables are read): not empty, and its literal text of
/// characters a bearer token may carry. `place` names the key, `at` where it was written,
/// `instead` what else the user may do about an empty one.
fn check_token_text(token: &HeaderValue, place: &str, instead: &str, at: &str) -> anyhow::Result<()> {
    let pieces = pieces(&token.raw).map_err(|e| anyhow!("{at}: {place} {e}"))?;
    if pieces.is_empty() {
        bail!(
            "{at}: {place} is empty; give a long random value (e.g. \"${{SWITCHYARD_TOKEN}}\", read from the environment), {instead}"
        );
    }
    for piece in pieces {
        if let Piece::Text(t) = piece
            && !t.chars().all(|c| c.is_ascii_alphanumeric() || "-._~+/=".contains(c))
        {
            bail!("{at}: {place} has a character a bearer token cannot carry; {TOKEN_CHARS}");
        }
    }
    Ok(())
}

/// A token's value, its variables read through `env`. `place` names the key (and the file and
/// line, when known); `instead` is what else the user may do about an empty one.
fn token_text(
    token: &HeaderValue,
    place: &str,
    instead: &str,
    env: &dyn Fn(&str) -> Result<String, std::env::VarError>,
) -> anyhow::Result<String> {
    let place = match &token.source {
        Source::File { .. } => format!("{place} ({})", token.source),
        _ => place.to_string(),
    };
    let got = expand(&token.raw, env).map_err(|e| anyhow!("{place} {e}"))?;
    if got.value.is_empty() {
        bail!(
            "{place} is empty once {} is read; set {} to a long random value, {instead}",
            got.vars.iter().map(|v| format!("${{{v}}}")).collect::<Vec<_>>().join(", "),
            got.vars.join(", ")
        );
    }
    if !is_bearer_token(&got.value) {
        let from = if got.vars.is_empty() { String::new() } else { format!(" (read from {})", got.vars.join(", ")) };
        bail!("{place}{from} has a character a bearer token cannot carry; {TOKEN_CHARS}");
    }
    Ok(got.value)
}

const TOKEN_CHARS: &str =
    "a bearer token has only ASCII letters, digits and -._~+/, then `=` only at its end (base64 and base64url fit)";

/// A host as a `Host` header, an `Origin` and `[http] allowed_hosts` name it: a domain name
/// (lowercased; a trailing dot kept, so `localhost.` is not `localhost`), an IPv4 address as four
/// decimal numbers, or an IPv6 address in brackets. Nothing else is read as an address (no
/// `127.1`, no `0x7f.0.0.1`): a name that only looks like one stays a name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum HostName {
    Domain(String),
    Ip(std::net::IpAddr),
}

impl TryFrom<String> for HostName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        HostName::parse(&s).map_err(|e| format!("[http] allowed_hosts: `{}` {e}", s.escape_debug()))
    }
}

impl HostName {
    /// The error completes "`X` ...".
    pub fn parse(s: &str) -> Result<HostName, String> {
        if let Some(inner) = s.strip_prefix('[') {
            let Some(ip) = inner.strip_suffix(']') else { return Err("has `[` without a closing `]`".into()) };
            return ip
                .parse::<std::net::Ipv6Addr>()
                .map(|ip| HostName::Ip(ip.into()))
                .map_err(|_| "is not an IPv6 address in brackets".into());
        }
        if let Ok(ip) = s.parse::<std::net::Ipv4Addr>() {
            return Ok(HostName::Ip(ip.into()));
        }
        if s.contains(':') {
            return Err(
                "is not a host name (an IPv6 address goes in brackets, and a port is not part of a host)".into()
            );
        }
        let name = s.to_ascii_lowercase();
        let labels = name.strip_suffix('.').unwrap_or(&name);
        let label_ok = |l: &str| {
            !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        };
        if name.is_empty() || name.len() > 254 || !labels.split('.').all(label_ok) {
            return Err("is not a host name (ASCII letters, digits, `-` and `_`, in labels joined by dots)".into());
        }
        Ok(HostName::Domain(name))
    }

    /// Whether this names this machine: `localhost`, 127.0.0.0/8 or `[::1]`. Only names no one
    /// else can point elsewhere count (not `*.localhost`, nor `localhost.`).
    pub fn is_loopback(&self) -> bool {
        match self {
            HostName::Domain(d) => d == "localhost",
            HostName::Ip(ip) => ip.is_loopback(),
        }
    }
}

impl std::fmt::Display for HostName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostName::Domain(d) => f.write_str(d),
            HostName::Ip(std::net::IpAddr::V4(ip)) => write!(f, "{ip}"),
            HostName::Ip(std::net::IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

/// `host[:port]`, as a `Host` header and an origin carry it; the port None when not given. The
/// error completes "`X` ...".
pub fn parse_authority(s: &str) -> Result<(HostName, Option<u16>), String> {
    // The port follows the last `:` after an IPv6 literal's `]`, if any.
    let split = match s.rfind(']') {
        Some(end) => s[end..].find(':').map(|i| end + i),
        None => s.rfind(':'),
    };
    let (host, port) = match split {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let port = match port {
        None | Some("") => None,
        Some(p) if p.len() <= 5 && p.chars().all(|c| c.is_ascii_digit()) => {
            Some(p.parse::<u16>().map_err(|_| "has a port above 65535".to_string())?)
        }
        Some(_) => return Err("has a port that is not a number".into()),
    };
    Ok((HostName::parse(host)?, port))
}

/// A web origin (`https://app.example`, `http://localhost:5173`) as an `Origin` header sends it
/// and `[http] allowed_origins` lists it: scheme http or https, host, port (the scheme's default
/// when not given), nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct WebOrigin {
    pub https: bool,
    pub host: HostName,
    pub port: u16,
}

impl TryFrom<String> for WebOrigin {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        // A path of `/` alone is forgiven in the file: it is easy to copy from an address bar.
        let bare = s.strip_suffix('/').unwrap_or(&s);
        WebOrigin::parse(bare).map_err(|e| format!("[http] allowed_origins: `{}` {e}", s.escape_debug()))
    }
}

impl WebOrigin {
    /// The error completes "`X` ...".
    pub fn parse(s: &str) -> Result<WebOrigin, String> {
        let how =
            "is not an origin; write it as scheme://host[:port], e.g. https://app.example or http://localhost:5173";
        let (https, rest) = if s.len() > 8 && s[..8].eq_ignore_ascii_case("https://") {
            (true, &s[8..])
        } else if s.len() > 7 && s[..7].eq_ignore_ascii_case("http://") {
            (false, &s[7..])
        } else {
            return Err(how.into());
        };
        if rest.contains(['/', '?', '#', '@']) {
            return Err(how.into());
        }
        let (host, port) = parse_authority(rest).map_err(|e| format!("{how} (its host {e})"))?;
        Ok(WebOrigin { https, host, port: port.unwrap_or(if https { 443 } else { 80 }) })
    }
}

impl std::fmt::Display for WebOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (scheme, default) = if self.https { ("https", 443) } else { ("http", 80) };
        write!(f, "{scheme}://{}", self.host)?;
        if self.port != default {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::load_text;

    fn err(text: &str) -> String {
        let (dir, c) = load_text(text);
        let e = format!("{:#}", c.unwrap_err());
        e.replace(&dir.path().join("switchyard.toml").display().to_string(), "F")
    }

    fn no_env(_: &str) -> Result<String, std::env::VarError> {
        Err(std::env::VarError::NotPresent)
    }

    #[test]
    fn no_http_table_is_none_and_an_empty_one_has_every_default() {
        let (_d, c) = load_text("[servers.a]\ncommand = \"x\"\n");
        assert!(c.unwrap().http.is_none());
        let (_d, c) = load_text("[http]\n[servers.a]\ncommand = \"x\"\n");
        let c = c.unwrap();
        let h = c.http.clone().unwrap();
        assert_eq!(h, HttpConfig::default());
        assert_eq!(h.listen.to_string(), "127.0.0.1:7070");
        assert_eq!((h.session_idle_ms, h.max_sessions, h.keepalive_ms), (1_800_000, 10_000, 20_000));
        assert_eq!(h.event_store_bytes, 1 << 20);
        // Each server's own config carries it (the daemon builds servers from those).
        assert_eq!(c.servers()["a"].http, Some(h));
    }

    #[test]
    fn every_key_parses() {
        let (dir, c) = load_text(
            r#"
[http]
listen = "[::1]:9000"
token = "${SY_TOKEN}"
allowed_origins = ["https://App.Example/", "http://localhost:5173"]
allowed_hosts = ["MCP.example.com", "10.0.0.5", "[fe80::1]"]
session_idle_ms = 60000
max_sessions = 5
keepalive_ms = 15000
event_store_bytes = 0
"#,
        );
        let h = c.unwrap().http.unwrap();
        assert_eq!(h.listen, "[::1]:9000".parse().unwrap());
        assert_eq!(h.token.as_ref().unwrap().raw, "${SY_TOKEN}");
        let path = dir.path().join("switchyard.toml");
        assert_eq!(h.token.as_ref().unwrap().source, Source::File { path, line: Some(4) });
        let origins: Vec<String> = h.allowed_origins.iter().map(|o| o.to_string()).collect();
        assert_eq!(origins, ["https://app.example", "http://localhost:5173"]);
        let hosts: Vec<String> = h.allowed_hosts.iter().map(|o| o.to_string()).collect();
        assert_eq!(hosts, ["mcp.example.com", "10.0.0.5", "[fe80::1]"]);
        assert_eq!((h.session_idle_ms, h.max_sessions, h.keepalive_ms, h.event_store_bytes), (60_000, 5, 15_000, 0));
        assert!(!format!("{h:?}").contains("SY_TOKEN"), "Debug shows the token: {h:?}");
    }

    #[test]
    fn bad_values_name_the_file_line_and_fix() {
        for (text, says) in [
            (
                "[http]\nlisten = \"7070\"\n",
                "F, line 2, column 10: `7070` is not an address and port; write an address and a port, e.g. 127.0.0.1:7070",
            ),
            ("[http]\nlisten = \"localhost:x\"\n", "`localhost:x` has no valid port"),
            ("[http]\nlisten = \"example.com:80\"\n", "`example.com:80` is not an address and port"),
            ("[http]\nlistn = \"127.0.0.1:1\"\n", "F, line 2, column 1: unknown field `listn`"),
            (
                "[http]\n\nkeepalive_ms = 500\n",
                "F, line 3: [http] keepalive_ms (500) must be from 1000 to 300000 (1 to 300 s)",
            ),
            ("[http]\nkeepalive_ms = 300001\n", "line 2: [http] keepalive_ms (300001)"),
            ("[http]\nsession_idle_ms = 10\n", "line 2: [http] session_idle_ms (10) must be at least 1000"),
            ("[http]\nmax_sessions = 0\n", "line 2: [http] max_sessions must be at least 1"),
            ("[http]\ntoken = \"\"\n", "line 2: [http] token is empty; give a long random value"),
            ("[http]\ntoken = \"a b\"\n", "line 2: [http] token has a character a bearer token cannot carry"),
            ("[http]\ntoken = \"${A\"\n", "line 2: [http] token has `${` without a closing `}`"),
            ("[http.tokens]\n\"a b\" = \"x\"\n", "line 1: [http.tokens] a b: a token's name has 1 to 64 ASCII letters"),
            ("[http]\ntokens = { laptop = \"\" }\n", "line 2: [http.tokens] laptop is empty; give a long random value"),
            ("[http.tokens]\nci = \"a:b\"\n", "[http.tokens] ci has a character a bearer token cannot carry"),
            (
                "[http]\nallowed_origins = [\"app.example\"]\n",
                "line 2, column 19: [http] allowed_origins: `app.example` is not an origin; write it as scheme://host[:port]",
            ),
            ("[http]\nallowed_origins = [\"https://a.example/x\"]\n", "`https://a.example/x` is not an origin"),
            ("[http]\nallowed_origins = [\"null\"]\n", "`null` is not an origin"),
            ("[http]\nallowed_origins = [\"*\"]\n", "`*` is not an origin"),
            (
                "[http]\nallowed_hosts = [\"a.example:8080\"]\n",
                "[http] allowed_hosts: `a.example:8080` is not a host name (an IPv6 address goes in brackets, and a port is not part of a host)",
            ),
            ("[http]\nallowed_hosts = [\"a b\"]\n", "`a b` is not a host name"),
            ("[http]\nallowed_hosts = [\"\"]\n", "`` is not a host name"),
        ] {
            let e = err(text);
            assert!(e.contains(says), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_non_loopback_listen_needs_a_token_of_the_user_s_own() {
        for addr in ["0.0.0.0:7070", "[::]:7070", "192.168.1.5:7070"] {
            let e = err(&format!("[http]\n\nlisten = \"{addr}\"\n"));
            assert!(e.starts_with("config file F, line 3: [http] listen"), "{e}");
            assert!(
                e.contains("reachable from other machines") && e.contains("token = \"${SWITCHYARD_TOKEN}\""),
                "{e}"
            );
            assert!(e.contains("or listen on 127.0.0.1"), "{e}");
            let (_d, c) = load_text(&format!("[http]\nlisten = \"{addr}\"\ntoken = \"${{T}}\"\n"));
            c.unwrap();
        }
        for addr in ["127.0.0.1:1", "127.8.0.1:1", "[::1]:1", "localhost:1"] {
            let (_d, c) = load_text(&format!("[http]\nlisten = \"{addr}\"\n"));
            assert!(c.unwrap().http.unwrap().listen.ip().is_loopback(), "{addr}");
        }
    }

    #[test]
    fn the_token_is_read_from_the_environment_and_an_empty_or_unusable_one_is_refused() {
        let (dir, c) = load_text("[http]\ntoken = \"${SY_T}\"\n");
        let h = c.unwrap().http.unwrap();
        let file = dir.path().join("switchyard.toml").display().to_string();
        let env = |v: &'static str| move |n: &str| if n == "SY_T" { Ok(v.to_string()) } else { no_env(n) };
        assert_eq!(h.token_value(&env("abc-_.~+/==")).unwrap().as_deref(), Some("abc-_.~+/=="));
        let e = format!("{:#}", h.token_value(&no_env).unwrap_err());
        assert!(
            e.starts_with(&format!("[http] token (config file {file}, line 2) uses ${{SY_T}}, which is not set")),
            "{e}"
        );
        let e = format!("{:#}", h.token_value(&env("")).unwrap_err());
        assert!(e.contains("line 2) is empty once ${SY_T} is read; set SY_T to a long random value"), "{e}");
        for bad in ["has space", "a=b", "tab\tx", "é"] {
            let e = format!("{:#}", h.token_value(&env(bad)).unwrap_err());
            assert!(e.contains("(read from SY_T) has a character a bearer token cannot carry"), "{bad:?}: {e}");
            assert!(!e.contains(bad), "the value is shown: {e}");
        }
        let e = format!("{:#}", h.token_value(&env("a\nb")).unwrap_err());
        assert!(e.contains("line feed") && !e.contains("a\nb"), "{e}");
        // A literal, and none at all.
        let lit = HttpConfig { token: Some(HeaderValue::from("sy_literal".to_string())), ..HttpConfig::default() };
        assert_eq!(lit.token_value(&no_env).unwrap().as_deref(), Some("sy_literal"));
        assert_eq!(HttpConfig::default().token_value(&no_env).unwrap(), None);
    }

    #[test]
    fn named_tokens_are_read_from_the_environment_each_named_where_it_is_written() {
        let (dir, c) = load_text(
            "[http]\ntoken = \"${SY_T}\"\n\n[http.tokens]\nlaptop = \"${SY_LAPTOP}\"\nci = \"sy_ci_literal\"\n",
        );
        let h = c.unwrap().http.unwrap();
        let file = dir.path().join("switchyard.toml").display().to_string();
        let mut vars = h.token_variables();
        vars.sort();
        assert_eq!(vars, ["SY_LAPTOP", "SY_T"], "the daemon keeps every token's variable from its servers");
        let env = |n: &str| if n == "SY_LAPTOP" { Ok("sy_from_env".to_string()) } else { no_env(n) };
        assert_eq!(
            h.named_token_values(&env).unwrap(),
            [("ci".to_string(), "sy_ci_literal".to_string()), ("laptop".to_string(), "sy_from_env".to_string())]
        );
        let e = format!("{:#}", h.named_token_values(&no_env).unwrap_err());
        assert!(
            e.starts_with(&format!(
                "[http.tokens] laptop (config file {file}, line 5) uses ${{SY_LAPTOP}}, which is not set"
            )),
            "{e}"
        );
        let bad = |n: &str| if n == "SY_LAPTOP" { Ok("two words".to_string()) } else { no_env(n) };
        let e = format!("{:#}", h.named_token_values(&bad).unwrap_err());
        assert!(e.contains("laptop") && e.contains("(read from SY_LAPTOP) has a character"), "{e}");
        assert!(!e.contains("two words"), "the value is shown: {e}");
    }

    #[test]
    fn hosts_are_read_strictly() {
        let host = |s: &str| HostName::parse(s);
        let lo = |s: &str| host(s).unwrap().is_loopback();
        assert!(lo("localhost") && lo("LOCALHOST") && lo("127.0.0.1") && lo("127.9.9.9") && lo("[::1]"));
        for not_lo in [
            "localhost.",
            "localhost.evil.com",
            "127.0.0.1.nip.io",
            "a.localhost",
            "127.1",
            "2130706433",
            "0x7f.0.0.1",
            "[::ffff:127.0.0.1]",
            "10.0.0.1",
        ] {
            assert!(!lo(not_lo), "{not_lo}");
        }
        for bad in ["", "::1", "[::1", "[zz]", "a..b", "a b", "a/b", "é.example", "a.example..", &"x".repeat(64)] {
            assert!(host(bad).is_err(), "{bad:?}");
        }
        assert_eq!(host("Example.COM.").unwrap(), HostName::Domain("example.com.".into()));
        let auth = |s: &str| parse_authority(s).map(|(h, p)| (h.to_string(), p));
        assert_eq!(auth("[::1]:7070").unwrap(), ("[::1]".into(), Some(7070)));
        assert_eq!(auth("[::1]").unwrap(), ("[::1]".into(), None));
        assert_eq!(auth("localhost:").unwrap(), ("localhost".into(), None));
        assert_eq!(auth("127.0.0.1:80").unwrap(), ("127.0.0.1".into(), Some(80)));
        assert!(auth("localhost:99999").unwrap_err().contains("above 65535"));
        assert!(auth("localhost:8x").unwrap_err().contains("not a number"));
        assert!(auth("::1:80").is_err() && auth("[::1]x").is_err());
    }

    #[test]
    fn origins_are_exact_up_to_case_and_default_ports() {
        let o = |s: &str| WebOrigin::parse(s);
        assert_eq!(o("HTTPS://App.Example:443").unwrap(), o("https://app.example").unwrap());
        assert_eq!(o("http://localhost:80").unwrap().to_string(), "http://localhost");
        assert_ne!(o("http://app.example").unwrap(), o("https://app.example").unwrap());
        assert_ne!(o("http://localhost:1234").unwrap(), o("http://localhost").unwrap());
        assert!(o("http://localhost.evil").unwrap().host != HostName::Domain("localhost".into()));
        for bad in ["null", "", "http://", "ftp://a", "http://a/", "http://a?x", "http://u@a", "http://a#f", "//a"] {
            assert!(o(bad).is_err(), "{bad:?}");
        }
    }
}
