//! `switchyard.toml`: the servers (each a command or a URL), pools, limits, the plugin list and
//! the daemon's settings.

#![forbid(unsafe_code)]

pub mod paths;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use serde::Deserialize;
use serde::de::IgnoredAny;
use toml::Spanned;

/// The whole configuration file. Every section is optional.
///
/// A file names its server in one of two forms: one `[server]` (what `switchyard run` fronts),
/// or `[servers.NAME]` tables, one per server (what the daemon fronts). [`Config::servers`]
/// gives either as single-server configs.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    /// `[servers.NAME]`: the servers by name (empty in the `[server]` form).
    #[serde(default)]
    pub servers: BTreeMap<String, ServerEntry>,
    /// With `[servers]`: the defaults for every server, which its own `limits` override key by key.
    #[serde(default)]
    pub limits: Limits,
    /// Named pools of server instances; `default` always exists. With `[servers]`: the pools of
    /// every server, where a server's own pool of the same name replaces one as a whole.
    #[serde(default)]
    pub pools: BTreeMap<String, PoolConfig>,
    #[serde(default)]
    pub plugins: Vec<PluginEntry>,
    #[serde(default)]
    pub daemon: DaemonConfig,
    /// `[http]`: the daemon's Streamable HTTP front; None when the file has no such table.
    #[serde(default)]
    pub http: Option<HttpConfig>,
    /// Directory of the config file, for resolving relative paths (not read from the file).
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

/// The server: either a `command` switchyard starts, or a `url` it connects to.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Name used in logs and errors; defaults to the command's file name, or the URL's host.
    pub name: Option<String>,
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// A remote server: its MCP endpoint (Streamable HTTP) or SSE stream (legacy SSE).
    pub url: Option<String>,
    /// How to reach `url` (default auto).
    pub transport: Option<TransportKind>,
    /// Sent with every request to `url`; `${VAR}` in a value is read from the environment.
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    /// Names whose values the connecting client supplies (`connect NAME --env A,B`): a server
    /// with any is a template, only the daemon serves it (see [`Config::for_client`]).
    #[serde(default)]
    pub client_env: Vec<String>,
    /// The client's values of a server made by [`Config::for_client`], read before the
    /// environment by `${VAR}` in header values (not read from the file).
    #[serde(skip)]
    pub client_values: ClientValues,
}

/// One `[servers.NAME]` table: the keys of `[server]` but `name` (the table's name is the
/// server's), and the server's own pools and limits over the file's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    pub url: Option<String>,
    pub transport: Option<TransportKind>,
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    /// Names whose values the connecting client supplies; `${NAME}` in command, args, env
    /// values, cwd, url and header values stands for the client's value.
    #[serde(default)]
    pub client_env: Vec<String>,
    /// Replace the file's pools of the same name, each as a whole.
    #[serde(default)]
    pub pools: BTreeMap<String, PoolConfig>,
    /// Override the file's `[limits]`, only the keys given.
    #[serde(default)]
    pub limits: LimitsPatch,
}

impl ServerEntry {
    /// The entry as a `[server]` named `name`.
    pub fn server(&self, name: &str) -> ServerConfig {
        ServerConfig {
            name: Some(name.to_string()),
            command: self.command.clone(),
            args: self.args.clone(),
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            url: self.url.clone(),
            transport: self.transport,
            headers: self.headers.clone(),
            client_env: self.client_env.clone(),
            client_values: ClientValues::default(),
        }
    }
}

/// Values a client supplied for a server's `client_env`, by name. Debug shows the names only:
/// the values may be secrets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientValues(pub BTreeMap<String, String>);

impl std::fmt::Debug for ClientValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// `[daemon]`: settings of the long-lived router that fronts every server of the file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Exit after this long without a client session (0 = never).
    pub idle_exit_ms: u64,
}

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
            let pieces = pieces(&token.raw).map_err(|e| anyhow!("{}: [http] token {e}", at("token")))?;
            if pieces.is_empty() {
                bail!(
                    "{}: [http] token is empty; give a long random value (e.g. \"${{SWITCHYARD_TOKEN}}\", read from the environment), or remove it to use a generated one",
                    at("token")
                );
            }
            for piece in pieces {
                if let Piece::Text(t) = piece
                    && !t.chars().all(|c| c.is_ascii_alphanumeric() || "-._~+/=".contains(c))
                {
                    bail!("{}: [http] token has a character a bearer token cannot carry; {TOKEN_CHARS}", at("token"));
                }
            }
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

    /// `[http] token` with its variables read through `env` (`std::env::var` outside tests);
    /// None when the file sets none. The error names where the token was written and the
    /// variable, never a value.
    /// The environment variables `token` reads (`${NAME}`): the daemon keeps them from its
    /// servers, which would otherwise inherit them with the rest of its environment.
    pub fn token_variables(&self) -> Vec<String> {
        let Some(token) = &self.token else { return Vec::new() };
        expand(&token.raw, &|_| Ok(String::new())).map(|got| got.vars).unwrap_or_default()
    }

    pub fn token_value(
        &self,
        env: &dyn Fn(&str) -> Result<String, std::env::VarError>,
    ) -> anyhow::Result<Option<String>> {
        let Some(token) = &self.token else { return Ok(None) };
        let place = match &token.origin {
            Origin::File { .. } => format!("[http] token ({})", token.origin),
            _ => "[http] token".to_string(),
        };
        let got = expand(&token.raw, env).map_err(|e| anyhow!("{place} {e}"))?;
        if got.value.is_empty() {
            bail!(
                "{place} is empty once {} is read; set {} to a long random value, or remove `token` to use a generated one",
                got.vars.iter().map(|v| format!("${{{v}}}")).collect::<Vec<_>>().join(", "),
                got.vars.join(", ")
            );
        }
        if !is_bearer_token(&got.value) {
            let from =
                if got.vars.is_empty() { String::new() } else { format!(" (read from {})", got.vars.join(", ")) };
            bail!("{place}{from} has a character a bearer token cannot carry; {TOKEN_CHARS}");
        }
        Ok(Some(got.value))
    }
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

/// The longest server name: it appears in URLs (`/mcp/NAME`), socket paths and command lines.
pub const MAX_SERVER_NAME: usize = 64;

/// A server name is 1 to 64 ASCII letters, digits, `-`, `_` and `.`, and starts with a letter, a
/// digit or `_` (`-x` reads as an option on a command line, `.` and `..` as path steps in a URL).
/// The error completes "the server name `x` ...".
pub fn check_server_name(name: &str) -> Result<(), String> {
    const RULE: &str = "a server name is 1 to 64 ASCII letters, digits, `-`, `_` and `.`, starting with a letter, a digit or `_`, as it appears in URLs and on command lines";
    if name.is_empty() {
        return Err(format!("is empty; {RULE}"));
    }
    if name.len() > MAX_SERVER_NAME {
        return Err(format!("is {} bytes long; {RULE}", name.len()));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if let Some(c) = name.chars().find(|c| !allowed(*c)) {
        let what = match c {
            ' ' => "a space".to_string(),
            c if c.is_control() => "a control character".to_string(),
            c => format!("`{c}`"),
        };
        return Err(format!("has {what} in it; {RULE}"));
    }
    if name.starts_with(['-', '.']) {
        return Err(format!("starts with `{}`; {RULE}", &name[..1]));
    }
    Ok(())
}

/// How a remote server is reached (`[server] transport`, `--transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    /// Streamable HTTP, falling back to legacy SSE when the first POST is refused the way legacy servers refuse it
    #[default]
    Auto,
    /// Streamable HTTP only
    StreamableHttp,
    /// Legacy HTTP+SSE only
    Sse,
}

/// A header value as written, `${VAR}` not yet expanded (it may still be a literal secret, so
/// Debug hides it), and where it was written, for errors.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub struct HeaderValue {
    pub raw: String,
    pub origin: Origin,
}

impl From<String> for HeaderValue {
    fn from(raw: String) -> Self {
        HeaderValue { raw, origin: Origin::Table }
    }
}

impl std::fmt::Debug for HeaderValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderValue").field("raw", &"<hidden>").field("origin", &self.origin).finish()
    }
}

/// Where a header was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A `[server] headers` table not read through [`Config::load`] (tests, built in code).
    Table,
    File {
        path: PathBuf,
        line: Option<usize>,
    },
    CommandLine,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Table => write!(f, "[server] headers"),
            Origin::File { path, line } => write!(f, "{}", file_place(path, *line)),
            Origin::CommandLine => write!(f, "--header"),
        }
    }
}

/// `config file X, line N` (the line when known).
fn file_place(path: &Path, line: Option<usize>) -> String {
    match line {
        Some(n) => format!("config file {}, line {n}", path.display()),
        None => format!("config file {}", path.display()),
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Deadline of a call when the policy sets none.
    pub call_timeout_ms: u64,
    /// No decision may set a longer deadline; progress extends a deadline up to this.
    pub max_call_timeout_ms: u64,
    /// No decision may ask for more retries than this.
    pub max_retries: u32,
    /// No decision may ask for a longer backoff than this.
    pub max_backoff_ms: u32,
    /// Largest JSON-RPC message accepted from a client or a server, in bytes.
    pub max_message_bytes: usize,
    /// Output waiting for all clients together, at most: past it, a session whose client is
    /// behind (more than 4 x max_message_bytes waiting) is closed at once.
    pub max_buffered_bytes: usize,
    /// How long `server/discover` may take upstream before it is answered -32601.
    pub discover_timeout_ms: u64,
    /// How long spawning and initialising an instance may take.
    pub init_timeout_ms: u64,
    /// Ping idle instances this often (0 = never).
    pub health_interval_ms: u64,
    /// An instance that does not answer a health ping within this is recycled.
    pub health_timeout_ms: u64,
    /// A remote server: how long opening a connection (TCP and TLS) may take.
    pub connect_timeout_ms: u64,
    /// A remote legacy SSE server: how long a POST of one message may take to be accepted.
    pub post_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            call_timeout_ms: 300_000,
            max_call_timeout_ms: 3_600_000,
            max_retries: 5,
            max_backoff_ms: 30_000,
            max_message_bytes: 64 * 1024 * 1024,
            max_buffered_bytes: 512 * 1024 * 1024,
            discover_timeout_ms: 1_000,
            init_timeout_ms: 60_000,
            health_interval_ms: 30_000,
            health_timeout_ms: 10_000,
            connect_timeout_ms: 10_000,
            post_timeout_ms: 10_000,
        }
    }
}

/// A server's own `[servers.NAME.limits]`: only the keys it gives, each over the file's `[limits]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsPatch {
    pub call_timeout_ms: Option<u64>,
    pub max_call_timeout_ms: Option<u64>,
    pub max_retries: Option<u32>,
    pub max_backoff_ms: Option<u32>,
    pub max_message_bytes: Option<usize>,
    pub max_buffered_bytes: Option<usize>,
    pub discover_timeout_ms: Option<u64>,
    pub init_timeout_ms: Option<u64>,
    pub health_interval_ms: Option<u64>,
    pub health_timeout_ms: Option<u64>,
    pub connect_timeout_ms: Option<u64>,
    pub post_timeout_ms: Option<u64>,
}

impl LimitsPatch {
    /// `base` with the keys given here in place of its own. Written as a struct literal so that
    /// a key added to [`Limits`] does not compile until it can be overridden here too.
    pub fn over(&self, base: &Limits) -> Limits {
        Limits {
            call_timeout_ms: self.call_timeout_ms.unwrap_or(base.call_timeout_ms),
            max_call_timeout_ms: self.max_call_timeout_ms.unwrap_or(base.max_call_timeout_ms),
            max_retries: self.max_retries.unwrap_or(base.max_retries),
            max_backoff_ms: self.max_backoff_ms.unwrap_or(base.max_backoff_ms),
            max_message_bytes: self.max_message_bytes.unwrap_or(base.max_message_bytes),
            max_buffered_bytes: self.max_buffered_bytes.unwrap_or(base.max_buffered_bytes),
            discover_timeout_ms: self.discover_timeout_ms.unwrap_or(base.discover_timeout_ms),
            init_timeout_ms: self.init_timeout_ms.unwrap_or(base.init_timeout_ms),
            health_interval_ms: self.health_interval_ms.unwrap_or(base.health_interval_ms),
            health_timeout_ms: self.health_timeout_ms.unwrap_or(base.health_timeout_ms),
            connect_timeout_ms: self.connect_timeout_ms.unwrap_or(base.connect_timeout_ms),
            post_timeout_ms: self.post_timeout_ms.unwrap_or(base.post_timeout_ms),
        }
    }
}

impl Limits {
    /// Values that would make the router misbehave.
    fn check(&self) -> anyhow::Result<()> {
        let l = self;
        if l.call_timeout_ms == 0 || l.max_call_timeout_ms < l.call_timeout_ms {
            bail!(
                "limits: call_timeout_ms ({}) must be above 0 and at most max_call_timeout_ms ({})",
                l.call_timeout_ms,
                l.max_call_timeout_ms
            );
        }
        if l.connect_timeout_ms == 0 || l.post_timeout_ms == 0 {
            bail!("limits: connect_timeout_ms and post_timeout_ms must be above 0");
        }
        if l.max_message_bytes < 1024 {
            bail!("limits: max_message_bytes must be at least 1024");
        }
        if l.max_buffered_bytes < l.max_message_bytes {
            bail!(
                "limits: max_buffered_bytes ({}) must be at least max_message_bytes ({})",
                l.max_buffered_bytes,
                l.max_message_bytes
            );
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Affinity {
    /// Any instance of the pool serves any session.
    #[default]
    None,
    /// Each session gets instances of its own (for stateful servers).
    Session,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// Instances kept running even when idle.
    pub min: usize,
    /// Instances at most.
    pub max: usize,
    /// Calls in flight per instance at most; 0 = unlimited (pipelining), 1 = the server is serial.
    pub max_inflight: usize,
    pub affinity: Affinity,
    /// Instances above `min` idle this long are shut down (0 = never).
    pub idle_timeout_ms: u64,
    /// Calls waiting for this pool at most; past it a call is answered "server busy" at once.
    pub max_queue: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            min: 1,
            max: 1,
            max_inflight: 0,
            affinity: Affinity::None,
            idle_timeout_ms: 300_000,
            max_queue: 1024,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// A failing plugin is skipped for that call.
    #[default]
    Open,
    /// A failing plugin rejects the call.
    Closed,
}

/// One `[[plugins]]` entry. Plugins in the directory without an entry load with defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginEntry {
    /// File name inside the plugins directory (or a path relative to it).
    pub file: String,
    /// Higher runs first; ties are broken by file name.
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub on_error: OnError,
    /// Handed to the plugin's `init` as JSON: a JSON string, or an inline TOML table.
    #[serde(default)]
    pub config: Option<toml::Value>,
    /// CPU budget per call, enforced by epoch deadlines.
    #[serde(default = "default_deadline_ms")]
    pub deadline_ms: u64,
    /// Linear memory at most, in MiB.
    #[serde(default = "default_memory_mib")]
    pub memory_mib: u64,
    /// Give the plugin a wall and monotonic clock (off: they read as zero).
    #[serde(default)]
    pub allow_clock: bool,
    /// Give the plugin random numbers (off: a fixed stream).
    #[serde(default)]
    pub allow_random: bool,
    /// The plugin must run: a missing file stops the start, and deleting it later keeps the
    /// loaded version in force. `false`: the entry only configures the file when it is there.
    #[serde(default = "default_required")]
    pub required: bool,
}

fn default_deadline_ms() -> u64 {
    5
}
fn default_memory_mib() -> u64 {
    16
}
fn default_required() -> bool {
    true
}

impl PluginEntry {
    /// An entry with every default, for a file found in the directory without a config entry.
    pub fn defaults_for(file: &str) -> PluginEntry {
        PluginEntry {
            file: file.to_string(),
            priority: 0,
            on_error: OnError::default(),
            config: None,
            deadline_ms: default_deadline_ms(),
            memory_mib: default_memory_mib(),
            allow_clock: false,
            allow_random: false,
            required: default_required(),
        }
    }

    /// The `config` value as JSON text for `init` (`{}` when absent).
    pub fn config_json(&self) -> anyhow::Result<String> {
        match &self.config {
            None => Ok("{}".to_string()),
            Some(toml::Value::String(s)) => {
                serde_json::from_str::<serde_json::Value>(s)
                    .with_context(|| format!("plugin {}: `config` is a string but not valid JSON", self.file))?;
                Ok(s.clone())
            }
            Some(other) => Ok(serde_json::to_string(other)?),
        }
    }
}

/// Where the server keys are in a config file, for errors that name the line.
#[derive(Default, Deserialize)]
struct FileSpans {
    /// The `[server]` table (its header, or the inline table).
    #[serde(default)]
    server: Option<Spanned<ServerSpans>>,
    /// `servers` where it first appears, and each entry's table header (or its name, when only
    /// a sub-table such as `[servers.x.pools.p]` opens it).
    #[serde(default)]
    servers: Option<Spanned<BTreeMap<String, Spanned<ServerSpans>>>>,
    /// The `[http]` table and its keys.
    #[serde(default)]
    http: Option<Spanned<BTreeMap<String, Spanned<IgnoredAny>>>>,
}

#[derive(Default, Deserialize)]
struct ServerSpans {
    command: Option<Spanned<IgnoredAny>>,
    args: Option<Spanned<IgnoredAny>>,
    env: Option<Spanned<IgnoredAny>>,
    cwd: Option<Spanned<IgnoredAny>>,
    url: Option<Spanned<IgnoredAny>>,
    transport: Option<Spanned<IgnoredAny>>,
    headers: Option<BTreeMap<String, Spanned<IgnoredAny>>>,
    client_env: Option<Spanned<IgnoredAny>>,
}

/// Pools that cannot work: no instance at all, or more kept running than allowed.
fn check_pools(pools: &BTreeMap<String, PoolConfig>) -> anyhow::Result<()> {
    for (name, pool) in pools {
        if pool.max == 0 {
            bail!("pool `{name}`: max must be at least 1");
        }
        if pool.min > pool.max {
            bail!("pool `{name}`: min ({}) is larger than max ({})", pool.min, pool.max);
        }
    }
    Ok(())
}

impl ServerSpans {
    fn offset(&self, key: &str) -> Option<usize> {
        let span = match key {
            "command" => &self.command,
            "args" => &self.args,
            "env" => &self.env,
            "cwd" => &self.cwd,
            "url" => &self.url,
            "transport" => &self.transport,
            "client_env" => &self.client_env,
            // The table itself has no span here: its first entry stands for it.
            "headers" => return self.headers.iter().flat_map(|h| h.values()).map(|s| s.span().start).min(),
            _ => &None,
        };
        span.as_ref().map(|s| s.span().start)
    }
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|b| **b == b'\n').count() + 1
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut at = offset.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    (line_of(text, at), text[start..at].chars().count() + 1)
}

/// A config file that is not TOML, or not switchyard's: one line with the file, the line and the
/// column, and what is wrong there (the toml crate's own text spans several lines).
fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> anyhow::Error {
    let what = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    match e.span() {
        Some(span) => {
            let (line, col) = line_col(text, span.start);
            anyhow!("config file {}, line {line}, column {col}: {what}", path.display())
        }
        None => anyhow!("config file {}: {what}", path.display()),
    }
}

impl ServerConfig {
    /// Whether no key of `[server]` is given.
    fn is_unset(&self) -> bool {
        let ServerConfig { name, command, args, env, cwd, url, transport, headers, client_env, client_values } = self;
        client_env.is_empty()
            && client_values.0.is_empty()
            && name.is_none()
            && command.is_none()
            && args.is_empty()
            && env.is_empty()
            && cwd.is_none()
            && url.is_none()
            && transport.is_none()
            && headers.is_empty()
    }

    /// The rules of `[server]` on its own: a command or a URL, not both, only the keys that fit
    /// it, a usable URL and well-formed headers. `at(key)` says where `key` was written.
    pub fn check(&self, at: &dyn Fn(&str) -> String) -> anyhow::Result<()> {
        self.check_as(None, at)
    }

    /// [`ServerConfig::check`] for `[server]` (`entry` None) or the `[servers.NAME]` entry named
    /// `entry`, whose `at(key)` already names the server.
    fn check_as(&self, entry: Option<&str>, at: &dyn Fn(&str) -> String) -> anyhow::Result<()> {
        let table = if entry.is_some() { "" } else { "[server] " };
        self.check_client_env(entry.is_some(), at)?;
        let Some(url) = &self.url else {
            if self.command.as_deref().is_some_and(|c| c.trim().is_empty()) {
                bail!("{}: {table}`command` is empty; give the program to run (e.g. \"npx\")", at("command"));
            }
            if self.command.is_some() {
                for (key, set) in [("transport", self.transport.is_some()), ("headers", !self.headers.is_empty())] {
                    if set {
                        bail!(
                            "{}: {table}`{key}` applies to a remote server (`url`), and this server is the command `{}`; remove it",
                            at(key),
                            self.command.as_deref().unwrap_or_default()
                        );
                    }
                }
            }
            return self.check_headers(entry);
        };
        if self.command.is_some() {
            bail!(
                "{}: {table}has both `command` and `url`: a server is either a command switchyard starts or a URL it connects to; keep one",
                at("url")
            );
        }
        for (key, set) in [("args", !self.args.is_empty()), ("env", !self.env.is_empty()), ("cwd", self.cwd.is_some())]
        {
            if set {
                bail!("{}: {table}`{key}` applies to commands only, and this server is a `url`; remove it", at(key));
            }
        }
        // A URL with a client's value in it is checked once the value is known (`for_client`).
        if !uses_client_env(url, &self.client_env) {
            parse_url(url).map_err(|e| anyhow!("{}: {table}url {e}", at("url")))?;
        }
        self.check_headers(entry)
    }

    /// `client_env`: only in `[servers.NAME]` (`in_entry`), variable names, each once.
    fn check_client_env(&self, in_entry: bool, at: &dyn Fn(&str) -> String) -> anyhow::Result<()> {
        if self.client_env.is_empty() {
            return Ok(());
        }
        if !in_entry {
            bail!(
                "{}: [server] `client_env` takes values from the client that connects to the daemon (`switchyard connect NAME --env ...`), and `switchyard run` has no such client; move the server into a [servers.NAME] table, or remove `client_env`",
                at("client_env")
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        for name in &self.client_env {
            if !is_var_name(name) {
                let shown: String = name.chars().take(64).collect();
                bail!(
                    "{}: `client_env` has {:?}, which is not a variable name (ASCII letters, digits and `_`, not starting with a digit)",
                    at("client_env"),
                    shown
                );
            }
            if !seen.insert(name) {
                bail!("{}: `client_env` names `{name}` twice; keep one", at("client_env"));
            }
        }
        Ok(())
    }

    fn check_headers(&self, entry: Option<&str>) -> anyhow::Result<()> {
        let who = entry.map(|n| format!("server `{n}`: ")).unwrap_or_default();
        let mut seen = std::collections::BTreeSet::new();
        for (name, value) in &self.headers {
            check_header(name, &value.raw).map_err(|e| anyhow!("{who}{} {e}", about_header(name, &value.origin)))?;
            if !seen.insert(name.to_ascii_lowercase()) {
                bail!("{who}{} is given twice (header names ignore case); keep one", about_header(name, &value.origin));
            }
        }
        Ok(())
    }
}

/// `header `Authorization` (config file x.toml, line 4)`: the start of every error about a header.
pub fn about_header(name: &str, origin: &Origin) -> String {
    format!("header `{name}` ({origin})")
}

/// Header names switchyard sets itself, as the protocol needs them; a configured one would clash.
const PROTOCOL_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "last-event-id",
];

/// A header name must be an HTTP token (RFC 9110) and not one switchyard sets itself. The name
/// is not repeated in the error: a mistyped `--header` may have a secret where the name should be.
pub fn check_header_name(name: &str) -> Result<(), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() {
        return Err("has an empty name".into());
    }
    if let Some(c) = name.chars().find(|c| !token(*c)) {
        let what = match c {
            ' ' => "a space".to_string(),
            c if c.is_control() => "a control character".to_string(),
            c => format!("`{c}`"),
        };
        return Err(format!(
            "has a name with {what} in it; a header name has only letters, digits and !#$%&'*+-.^_`|~"
        ));
    }
    if PROTOCOL_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err("is set by switchyard itself, as the protocol needs it; remove it".into());
    }
    Ok(())
}

/// One part of a header value as written: text, or a `${VAR}` reference.
#[derive(Debug, PartialEq, Eq)]
enum Piece<'a> {
    Text(String),
    Var(&'a str),
}

/// Splits a header value into text and `${VAR}` references; `$${` stands for a literal `${`,
/// and any other `$` is itself.
fn pieces(raw: &str) -> Result<Vec<Piece<'_>>, String> {
    let is_name = is_var_name;
    let mut out = Vec::new();
    let mut text = String::new();
    let mut rest = raw;
    while let Some(i) = rest.find('$') {
        text.push_str(&rest[..i]);
        let at = &rest[i..];
        if let Some(r) = at.strip_prefix("$${") {
            text.push_str("${");
            rest = r;
        } else if let Some(r) = at.strip_prefix("${") {
            let Some(end) = r.find('}') else {
                return Err("has `${` without a closing `}` (write `$${` for a literal `${`)".into());
            };
            let name = &r[..end];
            if !is_name(name) {
                // The text after `${` is not named: it may be part of a secret.
                return Err("has `${` followed by something that is not a variable name (letters, digits and `_`, not starting with a digit); write `$${` for a literal `${`".into());
            }
            if !text.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut text)));
            }
            out.push(Piece::Var(name));
            rest = &r[end + 1..];
        } else {
            text.push('$');
            rest = &at[1..];
        }
    }
    text.push_str(rest);
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

/// A variable name: ASCII letters, digits and `_`, not starting with a digit.
pub fn is_var_name(n: &str) -> bool {
    n.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `text` refers to one of `names` as `${NAME}`.
fn uses_client_env(text: &str, names: &[String]) -> bool {
    names.iter().any(|n| text.contains(&format!("${{{n}}}")))
}

/// `text` with every `${NAME}` of a name in `values` replaced by its value, in one pass, so a
/// value is never read again (a value holding `${OTHER}` stays as it is). `$${NAME}` of such a
/// name is a literal `${NAME}`; every other text, other `${X}` included, is left as written.
fn substitute(text: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        let named = after.find('}').map(|end| (&after[..end], &after[end + 1..]));
        match named.and_then(|(name, tail)| Some((name, values.get(name)?, tail))) {
            Some((name, value, tail)) => {
                if rest[..i].ends_with('$') {
                    out.push_str(&rest[..i - 1]);
                    out.push_str(&format!("${{{name}}}"));
                } else {
                    out.push_str(&rest[..i]);
                    out.push_str(value);
                }
                rest = tail;
            }
            None => {
                out.push_str(&rest[..i + 2]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether a header value refers to a variable (`${VAR}`, not the escaped `$${`).
pub fn uses_vars(raw: &str) -> bool {
    pieces(raw).map_or(true, |p| p.iter().any(|p| matches!(p, Piece::Var(_))))
}

/// What in `s` a header value cannot carry, if anything: RFC 9110 allows visible ASCII, space,
/// tab, and bytes from 0x80 (obs-text).
fn forbidden(s: &str) -> Option<&'static str> {
    s.chars().find_map(|c| match c {
        '\r' => Some("a carriage return (CR)"),
        '\n' => Some("a line feed (LF)"),
        '\t' => None,
        c if c.is_ascii_control() => Some("a control character"),
        _ => None,
    })
}

/// Checks a header as written, before any variable is read: its name, its `${VAR}` syntax and
/// its literal text. The error completes "header `X` (where) ...", and never holds the value.
pub fn check_header(name: &str, raw: &str) -> Result<(), String> {
    check_header_name(name)?;
    for piece in pieces(raw)? {
        if let Piece::Text(t) = piece
            && let Some(what) = forbidden(&t)
        {
            return Err(format!("has {what} in its value, which a header cannot carry"));
        }
    }
    Ok(())
}

/// A header value with its variables read.
#[derive(PartialEq, Eq)]
pub struct Expanded {
    pub value: String,
    /// The variables used, in order of first use.
    pub vars: Vec<String>,
    /// The variables that were set but empty.
    pub empty: Vec<String>,
}

impl std::fmt::Debug for Expanded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expanded")
            .field("value", &"<hidden>")
            .field("vars", &self.vars)
            .field("empty", &self.empty)
            .finish()
    }
}

/// Reads every `${VAR}` of a header value through `env` (`std::env::var` outside tests). The
/// error completes "header `X` (where) ...", names the variable and never holds a value.
pub fn expand(raw: &str, env: &dyn Fn(&str) -> Result<String, std::env::VarError>) -> Result<Expanded, String> {
    let mut out = Expanded { value: String::new(), vars: Vec::new(), empty: Vec::new() };
    for piece in pieces(raw)? {
        match piece {
            Piece::Text(t) => {
                if let Some(what) = forbidden(&t) {
                    return Err(format!("has {what} in its value, which a header cannot carry"));
                }
                out.value.push_str(&t);
            }
            Piece::Var(name) => {
                let v = match env(name) {
                    Ok(v) => v,
                    Err(std::env::VarError::NotPresent) => {
                        return Err(format!(
                            "uses ${{{name}}}, which is not set: set {name} in switchyard's environment (write `$${{` for a literal `${{`)"
                        ));
                    }
                    Err(std::env::VarError::NotUnicode(_)) => {
                        return Err(format!("uses ${{{name}}}, whose value is not valid UTF-8"));
                    }
                };
                if let Some(what) = forbidden(&v) {
                    return Err(format!(
                        "uses ${{{name}}}, whose value has {what}, which a header cannot carry (a value read from a file often ends with a line feed)"
                    ));
                }
                if v.is_empty() && !out.empty.iter().any(|e| e == name) {
                    out.empty.push(name.to_string());
                }
                if !out.vars.iter().any(|e| e == name) {
                    out.vars.push(name.to_string());
                }
                out.value.push_str(&v);
            }
        }
    }
    Ok(out)
}

/// A remote server's URL, checked: http or https, with a host, and no user name or password
/// (URLs are logged). The error completes "... url ..." and does not repeat the URL.
pub fn parse_url(s: &str) -> Result<url::Url, String> {
    let u = url::Url::parse(s)
        .map_err(|e| format!("is not a valid URL ({e}); write it as https://host/path or http://host:port/path"))?;
    if u.scheme() != "http" && u.scheme() != "https" {
        return Err(format!("must start with https:// or http://, not {}:", u.scheme()));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err("has no host; write it as https://host/path".into());
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("has a user name or password in it, and URLs appear in logs: send credentials in a header instead (e.g. `Authorization: Bearer ${MCP_TOKEN}`)".into());
    }
    Ok(u)
}

/// A URL as shown in messages and listings: scheme, host, port and path only (the query,
/// fragment and credentials may hold a key).
pub fn display_url(url: &url::Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.to_string()
}

/// A remote server's name from its URL: the host, and the port when it is not the scheme's
/// default (`mcp.example.com`, `127.0.0.1:3001`).
pub fn url_name(u: &url::Url) -> String {
    let host = u.host_str().unwrap_or_default();
    match u.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// Whether the URL's host is this machine (`localhost`, 127.0.0.0/8, ::1): plain http there
/// does not cross a network.
pub fn is_loopback(u: &url::Url) -> bool {
    match u.host() {
        Some(url::Host::Domain(d)) => {
            d.eq_ignore_ascii_case("localhost") || d.to_ascii_lowercase().ends_with(".localhost")
        }
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> anyhow::Result<Config> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read config file {}", path.display()))?;
        Config::load_text(path, &text)
    }

    /// [`Config::load`] of a file already read: `text` is its content, and `path` names it in
    /// errors and gives the directory that relative paths in it start from.
    pub fn load_text(path: &Path, text: &str) -> anyhow::Result<Config> {
        let mut config: Config = toml::from_str(text).map_err(|e| parse_error(path, text, &e))?;
        // The same text again, only for where the server keys are (it parsed above, so this does too).
        let spans: FileSpans = toml::from_str(text).unwrap_or_default();
        let place = |offset: Option<usize>| file_place(path, offset.map(|o| line_of(text, o)));
        let no_keys = ServerSpans::default();
        let server_keys = spans.server.as_ref().map_or(&no_keys, |s| s.get_ref());
        if !config.servers.is_empty() && !config.server.is_unset() {
            let line = |offset: Option<usize>| offset.map_or("?".to_string(), |o| line_of(text, o).to_string());
            bail!(
                "config file {}: both [server] (line {}) and [servers] (line {}) are given: a file names its one server in [server], or its servers in [servers.NAME] tables; move the [server] keys into a [servers.NAME] table",
                path.display(),
                line(spans.server.as_ref().map(|s| s.span().start)),
                line(spans.servers.as_ref().map(|s| s.span().start)),
            );
        }
        for (name, value) in config.server.headers.iter_mut() {
            let at = server_keys.headers.as_ref().and_then(|h| h.get(name));
            let line = at.map(|s| line_of(text, s.span().start));
            value.origin = Origin::File { path: path.to_path_buf(), line };
        }
        config.server.check(&|key| place(server_keys.offset(key)))?;
        let base_dir =
            path.parent().map(|p| if p.as_os_str().is_empty() { PathBuf::from(".") } else { p.to_path_buf() });
        config.base_dir = base_dir.clone();
        // A relative working directory is the config file's, like every other path in it.
        let resolve = |cwd: &mut Option<PathBuf>| {
            if let (Some(dir), Some(base)) = (cwd.as_ref(), &base_dir)
                && dir.is_relative()
            {
                *cwd = Some(base.join(dir));
            }
        };
        resolve(&mut config.server.cwd);
        // A working directory with a client's value in it is resolved once the value is known.
        let resolve_entry = |cwd: &mut Option<PathBuf>, names: &[String]| {
            if !cwd.as_ref().and_then(|c| c.to_str()).is_some_and(|c| uses_client_env(c, names)) {
                resolve(cwd);
            }
        };
        // Where each entry starts: its table header, or its name.
        let entry_at = |name: &str| {
            let entry = spans.servers.as_ref().and_then(|s| s.get_ref().get(name));
            (entry.map(|e| e.span().start), entry.map(|e| e.get_ref()))
        };
        for (name, entry) in config.servers.iter_mut() {
            let (start, keys) = entry_at(name);
            check_server_name(name)
                .map_err(|e| anyhow!("{}: the server name `{}` {e}", place(start), name.escape_debug()))?;
            for (header, value) in entry.headers.iter_mut() {
                let at = keys.and_then(|k| k.headers.as_ref()).and_then(|h| h.get(header));
                let line = at.map(|s| line_of(text, s.span().start));
                value.origin = Origin::File { path: path.to_path_buf(), line };
            }
            let at = |key: &str| format!("server `{name}` ({})", place(keys.and_then(|k| k.offset(key)).or(start)));
            entry.server(name).check_as(Some(name), &at)?;
            resolve_entry(&mut entry.cwd, &entry.client_env);
        }
        if let Some(http) = config.http.as_mut() {
            let keys = spans.http.as_ref();
            let at = |key: &str| {
                let key_at = keys.and_then(|k| k.get_ref().get(key)).map(|k| k.span().start);
                place(key_at.or(keys.map(|k| k.span().start)))
            };
            if let Some(token) = http.token.as_mut() {
                token.origin = Origin::File {
                    path: path.to_path_buf(),
                    line: keys.and_then(|k| k.get_ref().get("token")).map(|s| line_of(text, s.span().start)),
                };
            }
            http.check(&at)?;
        }
        config.validate_defaults().map_err(|e| anyhow!("config file {}: {e:#}", path.display()))?;
        config.validate_servers(&|name| format!("server `{name}` ({})", place(entry_at(name).0)))?;
        Ok(config)
    }

    /// Fills in the `default` pool and checks values that would make the router misbehave,
    /// those of every server's own pools and limits included.
    pub fn validate(&mut self) -> anyhow::Result<()> {
        self.validate_defaults()?;
        self.validate_servers(&|name| format!("server `{name}`"))
    }

    /// The file's own pools, limits and plugins.
    fn validate_defaults(&mut self) -> anyhow::Result<()> {
        self.pools.entry("default".to_string()).or_default();
        check_pools(&self.pools)?;
        self.limits.check()?;
        for p in &self.plugins {
            p.config_json()?;
            if p.deadline_ms == 0 || p.memory_mib == 0 {
                bail!("plugin {}: deadline_ms and memory_mib must be above 0", p.file);
            }
        }
        Ok(())
    }

    /// Each `[servers.NAME]`: its name, and its pools and limits merged over the file's.
    /// `at(name)` names the server (and where it is) in errors.
    fn validate_servers(&self, at: &dyn Fn(&str) -> String) -> anyhow::Result<()> {
        for (name, entry) in &self.servers {
            check_server_name(name)
                .map_err(|e| anyhow!("{}: the server name `{}` {e}", at(name), name.escape_debug()))?;
            let one = self.entry_config(name, entry);
            check_pools(&one.pools).and_then(|()| one.limits.check()).map_err(|e| anyhow!("{}: {e}", at(name)))?;
        }
        Ok(())
    }

    /// Every server as a config of its own, by name, each ready for [`Config::target`]: its
    /// `server` named, its pools and limits merged over the file's (the `default` pool filled in),
    /// and the file's plugins, daemon settings and directory. In the `[server]` form, that one
    /// server under the name `target` gives it; none when it has neither a command nor a URL.
    ///
    /// The merged settings are checked by [`Config::validate`] (and so by [`Config::load`]);
    /// call this on a config that passed it.
    pub fn servers(&self) -> BTreeMap<String, Config> {
        if self.servers.is_empty() {
            let Some(name) = self.server.derived_name() else { return BTreeMap::new() };
            let mut one = self.clone();
            one.server.name = Some(name.clone());
            one.pools.entry("default".to_string()).or_default();
            return BTreeMap::from([(name, one)]);
        }
        self.servers.iter().map(|(name, entry)| (name.clone(), self.entry_config(name, entry))).collect()
    }

    /// The `[servers.NAME]` entry `entry` as a single-server config.
    fn entry_config(&self, name: &str, entry: &ServerEntry) -> Config {
        let mut pools = self.pools.clone();
        // A server's own pool replaces the file's pool of that name as a whole.
        pools.extend(entry.pools.iter().map(|(k, v)| (k.clone(), v.clone())));
        pools.entry("default".to_string()).or_default();
        Config {
            server: entry.server(name),
            servers: BTreeMap::new(),
            limits: entry.limits.over(&self.limits),
            pools,
            plugins: self.plugins.clone(),
            daemon: self.daemon.clone(),
            http: self.http.clone(),
            base_dir: self.base_dir.clone(),
        }
    }

    /// The server of this single-server config (one of [`Config::servers`]) as a client that
    /// supplied `values` gets it: each `${NAME}` of a name in its `client_env` replaced by the
    /// client's value in `command`, `args`, `env` values, `cwd` and `url`, and read from
    /// `values` before the environment in header values (see [`ServerConfig::client_values`]).
    /// Values of other names are ignored. The error names the server and what is wrong, never
    /// a value.
    pub fn for_client(&self, values: &BTreeMap<String, String>) -> anyhow::Result<Config> {
        let s = &self.server;
        let name = s.name.as_deref().unwrap_or("?");
        let missing: Vec<&str> = s.client_env.iter().filter(|n| !values.contains_key(*n)).map(String::as_str).collect();
        if !missing.is_empty() {
            bail!(
                "server `{name}` takes {} from the client that connects, which did not send {}: connect with `switchyard connect {name} --env {}`, with {} set in its environment (in an MCP client's config, its `env`)",
                s.client_env.join(", "),
                missing.join(", "),
                s.client_env.join(","),
                s.client_env.join(" and ")
            );
        }
        let mine: BTreeMap<String, String> = s.client_env.iter().map(|n| (n.clone(), values[n].clone())).collect();
        for (header, value) in &s.headers {
            for piece in pieces(&value.raw)
                .map_err(|e| anyhow!("server `{name}`: {} {e}", about_header(header, &value.origin)))?
            {
                if let Piece::Var(var) = piece
                    && let Some(what) = mine.get(var).and_then(|v| forbidden(v))
                {
                    bail!(
                        "server `{name}`: {} uses ${{{var}}}, whose value from the client has {what}, which a header cannot carry",
                        about_header(header, &value.origin)
                    );
                }
            }
        }
        let sub = |t: &str| substitute(t, &mine);
        let mut one = self.clone();
        let o = &mut one.server;
        o.command = s.command.as_deref().map(sub);
        o.args = s.args.iter().map(|a| sub(a)).collect();
        o.env = s.env.iter().map(|(k, v)| (k.clone(), sub(v))).collect();
        o.url = s.url.as_deref().map(sub);
        if let Some(cwd) = s.cwd.as_ref().and_then(|c| c.to_str()).filter(|c| uses_client_env(c, &s.client_env)) {
            let dir = PathBuf::from(sub(cwd));
            o.cwd = Some(match &self.base_dir {
                Some(base) if dir.is_relative() => base.join(dir),
                _ => dir,
            });
        }
        if let Some(url) = &o.url {
            parse_url(url).map_err(|e| anyhow!("server `{name}`: its url, with the client's values in it, {e}"))?;
        }
        o.client_env.clear();
        o.client_values = ClientValues(mine);
        Ok(one)
    }

    /// An error when this single-server config is a template (has `client_env`): only the
    /// daemon serves one, a server per client's values (`switchyard run` has no such client).
    pub fn refuse_client_env(&self) -> anyhow::Result<()> {
        let s = &self.server;
        if s.client_env.is_empty() {
            return Ok(());
        }
        let name = s.name.as_deref().unwrap_or("?");
        bail!(
            "server `{name}` has `client_env` ({}): it takes values from the client that connects, so only the daemon serves it, through `switchyard connect {name} --env {}`; `switchyard run` has no such client",
            s.client_env.join(", "),
            s.client_env.join(",")
        )
    }

    /// Warnings for pools no call can reach: every call goes to `default` unless a policy plugin
    /// routes it elsewhere, so another pool with no plugin in force is dead weight (its `min`
    /// instances still start), and usually a misspelt `[pools.default]`.
    pub fn unreachable_pools(&self, plugins: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for name in self.pools.keys().filter(|n| *n != "default") {
            let hint =
                if strsim::damerau_levenshtein(name, "default") <= 2 { " (did you mean [pools.default]?)" } else { "" };
            let what = format!(
                "pool `{name}` is configured{hint}, but calls reach a pool other than `default` only when a policy plugin routes them there"
            );
            out.push(if plugins.is_empty() {
                format!("{what}, and no plugin is loaded: no call can reach it")
            } else {
                format!("{what}; make sure one of [{}] does", plugins.join(", "))
            });
        }
        out
    }
}

impl ServerConfig {
    /// The server's name as `Target::of` (in the router) gives it: `name`, else one from the command, else
    /// the URL's host. None without a command or a URL, or with a URL that is not valid.
    pub fn derived_name(&self) -> Option<String> {
        let derived = match (&self.url, &self.command) {
            (Some(url), _) => url_name(&parse_url(url).ok()?),
            (None, Some(command)) => derive_name(command, &self.args),
            (None, None) => return None,
        };
        Some(self.name.clone().unwrap_or(derived))
    }
}

/// A readable server name from a command line: `npx -y @scope/server-x dir` -> `server-x`,
/// `node node_modules/@scope/server-y/dist/index.js` -> `server-y`.
pub fn derive_name(command: &str, args: &[String]) -> String {
    // Path parts that say nothing about which server it is.
    const GENERIC: &[&str] = &["index", "main", "cli", "server", "dist", "build", "lib", "src", "bin", "out"];
    let base = |s: &str| {
        let s = s.trim_end_matches('/');
        s.rsplit('/').next().unwrap_or(s).to_string()
    };
    let cmd = base(command);
    let launchers = ["npx", "node", "uvx", "uv", "python", "python3", "deno", "bunx", "bun", "pipx"];
    if !launchers.contains(&cmd.as_str()) {
        return cmd;
    }
    let Some(arg) = args.iter().find(|a| !a.starts_with('-') && *a != "run" && *a != "exec") else {
        return cmd;
    };
    let strip = |p: &str| {
        let p = p.split('@').find(|p| !p.is_empty()).unwrap_or(p).to_string();
        p.trim_end_matches(".js").trim_end_matches(".mjs").trim_end_matches(".py").to_string()
    };
    // The last path part that names something: a file, else the package directory above it.
    let parts: Vec<String> = arg.trim_end_matches('/').split('/').map(strip).collect();
    parts
        .iter()
        .rev()
        .find(|p| !p.is_empty() && !GENERIC.contains(&p.as_str()))
        .cloned()
        .unwrap_or_else(|| strip(&base(arg)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_package_not_the_launcher() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            derive_name("npx", &a(&["-y", "@modelcontextprotocol/server-filesystem", "/w"])),
            "server-filesystem"
        );
        assert_eq!(derive_name("/usr/bin/node", &a(&["dist/index.js", "stdio"])), "index");
        let nm = "node_modules/@modelcontextprotocol/server-everything/dist/index.js";
        assert_eq!(derive_name("node", &a(&[nm, "stdio"])), "server-everything");
        assert_eq!(derive_name("python3", &a(&["-m", "weather_server.py"])), "weather_server");
        assert_eq!(derive_name("uvx", &a(&["mcp-server-git@1.2"])), "mcp-server-git");
        assert_eq!(derive_name("/opt/bin/my-server", &a(&["--port", "3"])), "my-server");
    }

    #[test]
    fn an_empty_command_is_an_error_naming_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "[servers.gamma]\ncommand = \"\"\n").unwrap();
        let e = format!("{:#}", Config::load(&path).unwrap_err());
        assert!(e.contains("`command` is empty") && e.contains("line 2") && e.contains("gamma"), "{e}");
    }

    #[test]
    fn full_file_parses_with_inline_and_string_plugin_config() {
        let mut c: Config = toml::from_str(
            r#"
            [server]
            command = "npx"
            args = ["-y", "x"]
            [limits]
            call_timeout_ms = 1000
            [pools.slow]
            max = 4
            max_inflight = 1
            affinity = "session"
            [[plugins]]
            file = "hints.wasm"
            priority = 10
            on_error = "closed"
            config = { tools = { "read_*" = { readOnlyHint = true } } }
            [[plugins]]
            file = "guard.wasm"
            config = '{"deny": ["rm*"]}'
            "#,
        )
        .unwrap();
        c.validate().unwrap();
        assert!(c.pools.contains_key("default"));
        assert_eq!(c.pools["slow"].affinity, Affinity::Session);
        assert_eq!(c.plugins[0].on_error, OnError::Closed);
        let v: serde_json::Value = serde_json::from_str(&c.plugins[0].config_json().unwrap()).unwrap();
        assert_eq!(v["tools"]["read_*"]["readOnlyHint"], true);
        assert_eq!(c.plugins[1].config_json().unwrap(), r#"{"deny": ["rm*"]}"#);
        assert_eq!(c.plugins[1].deadline_ms, 5);
    }

    #[test]
    fn bad_values_are_named() {
        let mut c: Config = toml::from_str("[pools.p]\nmin = 3\nmax = 2\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("pool `p`") && e.contains("min (3)"), "{e}");
        let mut c: Config = toml::from_str("[[plugins]]\nfile = \"a.wasm\"\nconfig = \"{nope\"\n").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("a.wasm"));
        assert!(toml::from_str::<Config>("[limits]\ncall_timeout = 3\n").is_err());
    }

    #[test]
    fn every_table_refuses_unknown_keys_with_the_key_named() {
        for (text, key) in [
            ("bogus = 1\n", "bogus"),
            ("[server]\ncomand = \"x\"\n", "comand"),
            ("[limits]\ncall_timeout = 3\n", "call_timeout"),
            ("[pools.default]\nmxa = 3\n", "mxa"),
            ("[[plugins]]\nfile = \"a.wasm\"\npriorty = 1\n", "priorty"),
        ] {
            let e = toml::from_str::<Config>(text).unwrap_err().to_string();
            assert!(e.contains(&format!("unknown field `{key}`")), "{text:?}: {e}");
        }
    }

    /// Writes `text` as a config file in a fresh directory and loads it.
    pub(super) fn load_text(text: &str) -> (tempfile::TempDir, anyhow::Result<Config>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switchyard.toml");
        std::fs::write(&path, text).unwrap();
        let loaded = Config::load(&path);
        (dir, loaded)
    }

    #[test]
    fn a_url_server_parses_with_transport_headers_and_the_new_limits() {
        let (dir, c) = load_text(
            "[server]\nurl = \"https://mcp.example.com/mcp\"\ntransport = \"streamable-http\"\n\
             headers = { Authorization = \"Bearer ${MCP_TOKEN}\", X-Team = \"core\" }\n\
             [limits]\nconnect_timeout_ms = 2500\n",
        );
        let c = c.unwrap();
        assert_eq!(c.server.url.as_deref(), Some("https://mcp.example.com/mcp"));
        assert_eq!(c.server.transport, Some(TransportKind::StreamableHttp));
        assert_eq!(c.server.headers["Authorization"].raw, "Bearer ${MCP_TOKEN}");
        let path = dir.path().join("switchyard.toml");
        assert_eq!(c.server.headers["X-Team"].origin, Origin::File { path, line: Some(4) });
        assert_eq!((c.limits.connect_timeout_ms, c.limits.post_timeout_ms), (2500, 10_000));
        for t in ["auto", "sse"] {
            let c: Config = toml::from_str(&format!("[server]\nurl = \"http://h/\"\ntransport = \"{t}\"\n")).unwrap();
            assert!(c.server.transport.is_some());
        }
        let e = toml::from_str::<Config>("[server]\ntransport = \"websocket\"\n").unwrap_err().to_string();
        assert!(e.contains("streamable-http"), "{e}");
        let mut c = Config::default();
        c.limits.post_timeout_ms = 0;
        assert!(c.validate().unwrap_err().to_string().contains("post_timeout_ms"));
    }

    #[test]
    fn both_command_and_url_is_an_error_naming_the_file_and_line() {
        let (dir, c) = load_text("[server]\ncommand = \"npx\"\n\nurl = \"https://mcp.example.com/mcp\"\n");
        let e = format!("{:#}", c.unwrap_err());
        let file = dir.path().join("switchyard.toml");
        assert!(e.contains(&format!("config file {}, line 4", file.display())), "{e}");
        assert!(e.contains("both `command` and `url`"), "{e}");
        // Neither in the file is fine: the command line may give one.
        let (_d, c) = load_text("[limits]\ncall_timeout_ms = 1000\n");
        c.unwrap();
    }

    #[test]
    fn command_keys_with_a_url_and_url_keys_with_a_command_are_errors() {
        for (extra, key, line) in
            [("args = [\"-y\"]", "args", 3), ("env = { A = \"1\" }", "env", 3), ("cwd = \"/tmp\"", "cwd", 3)]
        {
            let (_d, c) = load_text(&format!("[server]\nurl = \"https://h/mcp\"\n{extra}\n"));
            let e = format!("{:#}", c.unwrap_err());
            assert!(e.contains(&format!("line {line}: [server] `{key}` applies to commands only")), "{e}");
        }
        for (extra, key) in [("transport = \"sse\"", "transport"), ("headers = { A = \"b\" }", "headers")] {
            let (_d, c) = load_text(&format!("[server]\ncommand = \"npx\"\n{extra}\n"));
            let e = format!("{:#}", c.unwrap_err());
            assert!(e.contains(&format!("line 3: [server] `{key}` applies to a remote server")), "{e}");
        }
    }

    #[test]
    fn bad_urls_are_refused_without_repeating_them() {
        for (url, says) in [
            ("mcp.example.com/mcp", "not a valid URL"),
            ("ftp://mcp.example.com/mcp", "not ftp:"),
            ("http://", "not a valid URL"),
            ("file:///tmp/x", "not file:"),
            ("https://me:hunter2@mcp.example.com/mcp", "user name or password"),
        ] {
            let e = parse_url(url).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("hunter2") && !e.contains("example.com"), "{url}: {e}");
        }
        let (_d, c) = load_text("[server]\n\nurl = \"ftp://x/\"\n");
        assert!(format!("{:#}", c.unwrap_err()).contains("line 3: [server] url must start with https://"));
        assert_eq!(parse_url("https://mcp.example.com/mcp").unwrap().as_str(), "https://mcp.example.com/mcp");
    }

    #[test]
    fn names_come_from_the_host_and_a_port_that_is_not_the_default() {
        let name = |u: &str| url_name(&parse_url(u).unwrap());
        assert_eq!(name("https://mcp.example.com/mcp"), "mcp.example.com");
        assert_eq!(name("https://mcp.example.com:443/mcp"), "mcp.example.com");
        assert_eq!(name("http://127.0.0.1:3001/sse"), "127.0.0.1:3001");
        assert_eq!(name("http://[::1]:8080/mcp"), "[::1]:8080");
        assert_eq!(name("http://Localhost/mcp"), "localhost");
    }

    #[test]
    fn loopback_hosts_are_told_apart() {
        let lo = |u: &str| is_loopback(&parse_url(u).unwrap());
        assert!(
            lo("http://localhost:3000/mcp")
                && lo("http://127.0.0.5/")
                && lo("http://[::1]/")
                && lo("http://a.localhost/")
        );
        assert!(!lo("http://mcp.example.com/") && !lo("http://10.0.0.1/") && !lo("http://localhost.example.com/"));
    }

    #[test]
    fn header_names_must_be_tokens_and_not_the_protocol_s_own() {
        assert!(check_header_name("Authorization").is_ok() && check_header_name("X-Api_Key.v2~").is_ok());
        for (name, says) in [
            ("", "empty name"),
            ("X Api", "a space"),
            ("X:Api", "`:`"),
            ("X\u{1}", "a control character"),
            ("Mcp-Session-Id", "set by switchyard itself"),
            ("content-type", "set by switchyard itself"),
        ] {
            let e = check_header_name(name).unwrap_err();
            assert!(e.contains(says), "{name:?}: {e}");
        }
        let (_d, c) = load_text(
            "[server]\nurl = \"https://h/\"\n[server.headers]\nAuthorization = \"a\"\nauthorization = \"b\"\n",
        );
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.contains("given twice") && e.contains("line 5"), "{e}");
    }

    #[test]
    fn header_values_refuse_line_breaks_and_controls_but_not_obs_text() {
        assert!(check_header("X", "a b\tc ~ é").is_ok());
        for (raw, says) in [("a\r\nInjected: 1", "carriage return"), ("a\nb", "line feed"), ("a\u{7f}", "control")] {
            let e = check_header("X", raw).unwrap_err();
            assert!(e.contains(says) && !e.contains("Injected"), "{raw:?}: {e}");
        }
        for raw in ["Bearer ${TOKEN", "${1X}", "${}", "${A-B}"] {
            let e = check_header("X", raw).unwrap_err();
            assert!(e.contains("`${`") && e.contains("$${"), "{raw:?}: {e}");
        }
        let (_d, c) = load_text("[server]\nurl = \"https://h/\"\nheaders = { X = \"a\\nb\" }\n");
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.contains("header `X` (config file") && e.contains("line 3)") && e.contains("line feed"), "{e}");
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Result<String, std::env::VarError> {
        move |name| pairs.iter().find(|p| p.0 == name).map(|p| p.1.to_string()).ok_or(std::env::VarError::NotPresent)
    }

    #[test]
    fn variables_are_expanded_recorded_and_escaped() {
        let env = env_of(&[("MCP_TOKEN", "s3cr3t"), ("TEAM", "core"), ("EMPTY", "")]);
        let e = expand("Bearer ${MCP_TOKEN}", &env).unwrap();
        assert_eq!((e.value.as_str(), e.vars.as_slice()), ("Bearer s3cr3t", &["MCP_TOKEN".to_string()][..]));
        let e = expand("${TEAM}/${MCP_TOKEN}/${TEAM}", &env).unwrap();
        assert_eq!(e.value, "core/s3cr3t/core");
        assert_eq!(e.vars, ["TEAM", "MCP_TOKEN"]);
        // `$${` is a literal `${`; any other `$` is itself.
        let e = expand("$${MCP_TOKEN} costs $5 $$ ${TEAM}", &env).unwrap();
        assert_eq!(e.value, "${MCP_TOKEN} costs $5 $$ core");
        assert_eq!(e.vars, ["TEAM"]);
        assert!(!uses_vars("$${MCP_TOKEN}") && uses_vars("x ${A}") && !uses_vars("plain"));
        let e = expand("a${EMPTY}b${EMPTY}", &env).unwrap();
        assert_eq!((e.value.as_str(), e.empty.as_slice()), ("ab", &["EMPTY".to_string()][..]));
    }

    #[test]
    fn a_missing_or_unusable_variable_is_named_and_its_value_is_not() {
        let e = expand("Bearer ${MCP_TOKEN}", &env_of(&[])).unwrap_err();
        assert!(e.contains("${MCP_TOKEN}") && e.contains("not set"), "{e}");
        let e = expand("Bearer ${MCP_TOKEN}", &env_of(&[("MCP_TOKEN", "s3cr3t\n")])).unwrap_err();
        assert!(e.contains("${MCP_TOKEN}") && e.contains("line feed") && !e.contains("s3cr3t"), "{e}");
        let e = expand("${T}", &|_| Err(std::env::VarError::NotUnicode("x".into()))).unwrap_err();
        assert!(e.contains("${T}") && e.contains("UTF-8"), "{e}");
    }

    #[test]
    fn debug_output_hides_header_values() {
        let c: Config =
            toml::from_str("[server]\nurl = \"https://h/\"\nheaders = { Authorization = \"Bearer lit3ral\" }\n")
                .unwrap();
        let shown = format!("{c:?}");
        assert!(shown.contains("Authorization") && !shown.contains("lit3ral"), "{shown}");
    }

    #[test]
    fn a_misspelt_default_pool_is_a_warning_that_names_it_and_the_plugins() {
        let mut c: Config = toml::from_str("[pools.defualt]\nmax = 4\n[pools.slow]\nmax = 2\n").unwrap();
        c.validate().unwrap();
        let w = c.unreachable_pools(&[]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("`defualt`") && w[0].contains("did you mean [pools.default]"), "{w:?}");
        assert!(w[0].contains("no plugin is loaded"), "{w:?}");
        assert!(!w[1].contains("did you mean"), "{w:?}");
        let w = c.unreachable_pools(&["timeouts.wasm".to_string()]);
        assert!(w[1].contains("`slow`") && w[1].contains("[timeouts.wasm]"), "{w:?}");
        let mut c = Config::default();
        c.validate().unwrap();
        assert!(c.unreachable_pools(&[]).is_empty());
    }

    /// The example of DAEMON-SPEC.md, trimmed: two servers over the file's limits and pools.
    const TWO_SERVERS: &str = r#"[daemon]
idle_exit_ms = 60000

[limits]
call_timeout_ms = 60000
connect_timeout_ms = 2000
[pools.default]
max = 2
min = 0
[pools.slow]
max = 3
max_inflight = 1

[servers.filesystem]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/work"]
env = { A = "b" }
cwd = "work"
[servers.filesystem.pools.default]
max = 4
[servers.filesystem.limits]
call_timeout_ms = 5000

[servers.tracker]
url = "https://mcp.example.com/mcp"
transport = "streamable-http"
headers = { Authorization = "Bearer ${TRACKER_TOKEN}" }

[[plugins]]
file = "hints.wasm"
"#;

    #[test]
    fn each_server_gets_the_file_s_limits_under_its_own_and_its_own_pools_in_place_of_the_file_s() {
        let (dir, c) = load_text(TWO_SERVERS);
        let c = c.unwrap();
        assert_eq!(c.daemon, DaemonConfig { idle_exit_ms: 60_000 });
        let all = c.servers();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["filesystem", "tracker"]);
        let fs = &all["filesystem"];
        // Key by key: its own call timeout, the file's connect timeout, the built-in rest.
        assert_eq!((fs.limits.call_timeout_ms, fs.limits.connect_timeout_ms), (5000, 2000));
        assert_eq!(fs.limits.max_retries, Limits::default().max_retries);
        // As a whole: its `default` pool is its own (min back to the built-in 1), `slow` is the file's.
        assert_eq!((fs.pools["default"].max, fs.pools["default"].min), (4, 1));
        assert_eq!(fs.pools["slow"].max_inflight, 1);
        assert_eq!(fs.server.name.as_deref(), Some("filesystem"));
        assert_eq!(fs.server.cwd.as_deref(), Some(dir.path().join("work").as_path()));
        let tracker = &all["tracker"];
        assert_eq!(
            (tracker.limits.call_timeout_ms, tracker.pools["default"].max, tracker.pools["default"].min),
            (60000, 2, 0)
        );
        for one in all.values() {
            assert!(one.servers.is_empty());
            assert_eq!(one.plugins.len(), 1);
            assert_eq!(one.daemon.idle_exit_ms, 60_000);
            assert_eq!(one.base_dir.as_deref(), Some(dir.path()));
            one.clone().validate().unwrap();
        }
    }

    #[test]
    fn a_server_without_pools_gets_the_default_pool_and_daemon_defaults_to_never() {
        let (_d, c) = load_text("[servers.a]\ncommand = \"x\"\n");
        let c = c.unwrap();
        assert_eq!(c.daemon.idle_exit_ms, 0);
        let a = &c.servers()["a"];
        assert_eq!(a.pools.keys().collect::<Vec<_>>(), ["default"]);
        assert_eq!(a.limits.call_timeout_ms, Limits::default().call_timeout_ms);
        // Built in code, unvalidated: `servers` still fills in `default`.
        let mut c = Config::default();
        c.servers.insert("b".into(), ServerEntry { command: Some("y".into()), ..ServerEntry::default() });
        assert!(c.servers()["b"].pools.contains_key("default"));
    }

    #[test]
    fn a_merged_pool_or_limit_that_cannot_work_names_the_server_and_its_line() {
        let (dir, c) = load_text(
            "[limits]\nmax_call_timeout_ms = 10000\ncall_timeout_ms = 5000\n[servers.a]\ncommand = \"x\"\n[servers.a.limits]\ncall_timeout_ms = 20000\n",
        );
        let e = format!("{:#}", c.unwrap_err());
        let file = dir.path().join("switchyard.toml");
        assert!(
            e.contains(&format!(
                "server `a` (config file {}, line 4): limits: call_timeout_ms (20000)",
                file.display()
            )),
            "{e}"
        );
        let (_d, c) = load_text(
            "[servers.a]\ncommand = \"x\"\n[servers.b]\ncommand = \"y\"\n[servers.b.pools.default]\nmin = 3\nmax = 2\n",
        );
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.contains("server `b` (config file") && e.contains("line 3): pool `default`: min (3)"), "{e}");
        // The file's own defaults must work on their own, and say which file.
        let (_d, c) =
            load_text("[pools.default]\nmax = 0\n[servers.a]\ncommand = \"x\"\n[servers.a.pools.default]\nmax = 1\n");
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.starts_with("config file ") && e.contains("pool `default`: max must be at least 1"), "{e}");
        // validate() checks a config built in code the same way.
        let mut c = Config::default();
        let limits = LimitsPatch { max_message_bytes: Some(10), ..LimitsPatch::default() };
        c.servers.insert("a".into(), ServerEntry { command: Some("x".into()), limits, ..ServerEntry::default() });
        let e = c.validate().unwrap_err().to_string();
        assert!(e.starts_with("server `a`: limits: max_message_bytes"), "{e}");
    }

    #[test]
    fn server_names_follow_the_rule_and_a_bad_one_names_the_file_line_and_rule() {
        for good in ["fs", "a.b-c_d", "_x", "9", &"x".repeat(64)] {
            assert!(check_server_name(good).is_ok(), "{good}");
        }
        for (bad, says) in [
            ("", "is empty"),
            ("my server", "a space"),
            ("a/b", "`/`"),
            ("é", "`é`"),
            ("a\u{1}", "a control character"),
            (&"x".repeat(65), "65 bytes long"),
            ("-x", "starts with `-`"),
            ("..", "starts with `.`"),
        ] {
            let e = check_server_name(bad).unwrap_err();
            assert!(e.contains(says) && e.contains("1 to 64 ASCII letters, digits"), "{bad:?}: {e}");
        }
        let (dir, c) = load_text("[servers.ok]\ncommand = \"x\"\n\n[servers.\"my fs\"]\ncommand = \"y\"\n");
        let e = format!("{:#}", c.unwrap_err());
        let file = dir.path().join("switchyard.toml");
        assert!(
            e.starts_with(&format!("config file {}, line 4: the server name `my fs` has a space", file.display())),
            "{e}"
        );
        // A name that only a sub-table opens is found at that line.
        let (_d, c) = load_text("[servers.\"a/b\".pools.default]\nmax = 1\n");
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.contains("line 1: the server name `a/b` has `/`"), "{e}");
        let mut c = Config::default();
        c.servers.insert("".into(), ServerEntry::default());
        assert!(c.validate().unwrap_err().to_string().contains("the server name `` is empty"));
    }

    #[test]
    fn both_server_forms_in_one_file_is_an_error_naming_both_with_their_lines() {
        let (dir, c) = load_text("[limits]\n\n[server]\ncommand = \"npx\"\n\n[servers.fs]\ncommand = \"npx\"\n");
        let e = format!("{:#}", c.unwrap_err());
        let file = dir.path().join("switchyard.toml");
        assert!(
            e.starts_with(&format!("config file {}: both [server] (line 3) and [servers] (line 6)", file.display())),
            "{e}"
        );
        assert!(e.contains("[servers.NAME]"), "{e}");
        // An inline table counts too; an empty [server] header does not.
        let (_d, c) = load_text("server = { url = \"https://h/\" }\nservers = { a = { command = \"x\" } }\n");
        assert!(format!("{:#}", c.unwrap_err()).contains("both [server] (line 1) and [servers] (line 2)"));
        let (_d, c) = load_text("[server]\n[servers.a]\ncommand = \"x\"\n");
        c.unwrap();
    }

    #[test]
    fn a_broken_file_is_one_line_naming_the_file_line_and_column() {
        for (text, line, col, says) in [
            ("[limits]\ncall_timeout_ms = 1000\n  bad key = 3\n", 3, 7, "expected"),
            ("[servers.fs]\ncommand = \n", 2, 11, "string values must be quoted"),
            ("[servers.fs]\ncommand = \"x\"\ncomand = \"y\"\n", 3, 1, "unknown field `comand`"),
            ("[servers.fs.limits]\ncall_timeout = 3\n", 2, 1, "unknown field `call_timeout`"),
            ("[servers.fs.pools.default]\nmxa = 3\n", 2, 1, "unknown field `mxa`"),
            ("[servers.fs]\nname = \"x\"\n", 2, 1, "unknown field `name`"),
            ("[daemon]\nidle_exit = 3\n", 2, 1, "unknown field `idle_exit`"),
            ("[daemon]\nidle_exit_ms = \"é\"\n", 2, 16, "invalid type"),
        ] {
            let (dir, c) = load_text(text);
            let e = format!("{:#}", c.unwrap_err());
            let file = dir.path().join("switchyard.toml");
            let want = format!("config file {}, line {line}, column {col}: ", file.display());
            assert!(e.starts_with(&want) && e.contains(says), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{text:?}: {e}");
        }
        // The column counts characters, not bytes.
        assert_eq!(line_col("a\né = x", 5), (2, 3));
        let e = parse_error(Path::new("f.toml"), "x", &toml::from_str::<Config>("x").unwrap_err()).to_string();
        assert!(e.starts_with("config file f.toml, line 1, column "), "{e}");
    }

    #[test]
    fn the_single_server_form_is_one_server_under_the_name_target_gives_it() {
        for (text, name) in [
            ("[server]\ncommand = \"npx\"\nargs = [\"-y\", \"@x/server-git\"]\n", "server-git"),
            ("[server]\nurl = \"http://127.0.0.1:3001/mcp\"\n", "127.0.0.1:3001"),
            ("[server]\nname = \"docs\"\nurl = \"https://h/mcp\"\n", "docs"),
        ] {
            let (_d, c) = load_text(&format!("{text}[pools.slow]\nmax = 2\n[daemon]\nidle_exit_ms = 5\n"));
            let c = c.unwrap();
            let all = c.servers();
            assert_eq!(all.keys().collect::<Vec<_>>(), [name], "{text}");
            let one = &all[name];
            assert_eq!(one.server.name.as_deref(), Some(name));
            assert!(one.pools.contains_key("slow") && one.pools.contains_key("default"));
            assert_eq!((one.daemon.idle_exit_ms, one.limits.call_timeout_ms), (5, c.limits.call_timeout_ms));
        }
        // No command and no URL (the command line gives one): no server yet.
        let (_d, c) = load_text("[server]\nname = \"x\"\n[limits]\ncall_timeout_ms = 1000\n");
        assert!(c.unwrap().servers().is_empty());
    }

    #[test]
    fn a_server_s_headers_carry_their_own_line_and_its_errors_name_it() {
        let (dir, c) = load_text(
            "[servers.a]\nurl = \"https://a/\"\nheaders = { X-A = \"1\" }\n\n[servers.b]\nurl = \"https://b/\"\n\
             [servers.b.headers]\nX-B = \"${NOPE}\"\nX-C = \"2\"\n",
        );
        let c = c.unwrap();
        let path = dir.path().join("switchyard.toml");
        let at = |line| Origin::File { path: path.clone(), line: Some(line) };
        assert_eq!(c.servers["a"].headers["X-A"].origin, at(3));
        assert_eq!(c.servers["b"].headers["X-B"].origin, at(8));
        assert_eq!(c.servers["b"].headers["X-C"].origin, at(9));
        let all = c.servers();
        assert_eq!(all["b"].server.headers["X-C"].origin, at(9));
        // The rules of [server] hold for each entry, and the errors name the server and the line.
        for (text, says) in [
            (
                "[servers.fs]\nurl = \"https://h/\"\n\nargs = [\"-y\"]\n",
                "server `fs` (config file {F}, line 4): `args` applies to commands only",
            ),
            (
                "[servers.fs]\ncommand = \"npx\"\nurl = \"https://h/\"\n",
                "server `fs` (config file {F}, line 3): has both `command` and `url`",
            ),
            (
                "[servers.fs]\ncommand = \"npx\"\ntransport = \"sse\"\n",
                "server `fs` (config file {F}, line 3): `transport` applies to a remote server",
            ),
            (
                "[servers.fs]\n\nurl = \"ftp://h/\"\n",
                "server `fs` (config file {F}, line 3): url must start with https://",
            ),
            (
                "[servers.fs]\nurl = \"https://h/\"\nheaders = { X = \"a\\nb\" }\n",
                "server `fs`: header `X` (config file {F}, line 3) has a line feed",
            ),
        ] {
            let (dir, c) = load_text(text);
            let e = format!("{:#}", c.unwrap_err());
            let says = says.replace("{F}", &dir.path().join("switchyard.toml").display().to_string());
            assert!(e.contains(&says), "{text:?}: {e}");
        }
    }

    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_template_gets_the_client_s_values_in_one_pass_and_other_text_stays_literal() {
        let (dir, loaded) = load_text(
            r#"
            [servers.tools]
            command = "${BIN}/python3"
            args = ["${workspaceFolder}/tools/server.py", "--token", "${TOOLS_TOKEN}", "${HOME}", "$${TOOLS_TOKEN}", "${TOOLS_TOKEN"]
            env = { TOKEN = "t=${TOOLS_TOKEN};", PLAIN = "${PATH}" }
            cwd = "${workspaceFolder}/sub"
            client_env = ["workspaceFolder", "TOOLS_TOKEN", "BIN"]
            [servers.rel]
            command = "x"
            cwd = "${DIR}"
            client_env = ["DIR"]
            "#,
        );
        let config = loaded.unwrap();
        let all = config.servers();
        let tools = &all["tools"];
        assert!(tools.refuse_client_env().unwrap_err().to_string().contains("--env workspaceFolder,TOOLS_TOKEN,BIN"));
        // A value holding `${OTHER}` (even a client name) is not read again.
        let got = tools
            .for_client(&values(&[
                ("workspaceFolder", "/ws"),
                ("TOOLS_TOKEN", "a${BIN}b"),
                ("BIN", "/usr/bin"),
                ("EXTRA", "ignored"),
            ]))
            .unwrap();
        let s = &got.server;
        assert_eq!(s.command.as_deref(), Some("/usr/bin/python3"));
        assert_eq!(
            s.args,
            ["/ws/tools/server.py", "--token", "a${BIN}b", "${HOME}", "${TOOLS_TOKEN}", "${TOOLS_TOKEN"]
        );
        assert_eq!(s.env["TOKEN"], "t=a${BIN}b;");
        assert_eq!(s.env["PLAIN"], "${PATH}");
        assert_eq!(s.cwd.as_deref(), Some(Path::new("/ws/sub")));
        assert!(s.client_env.is_empty() && s.client_values.0.len() == 3, "only its own names are kept");
        got.refuse_client_env().unwrap();
        // A relative directory from the client is the config file's, as every path in it.
        let rel = all["rel"].for_client(&values(&[("DIR", "here")])).unwrap();
        assert_eq!(rel.server.cwd, Some(dir.path().join("here")));
        // A missing value names the server, what is missing and what to do.
        let e = format!("{:#}", tools.for_client(&values(&[("BIN", "/b")])).unwrap_err());
        for want in [
            "server `tools`",
            "did not send workspaceFolder, TOOLS_TOKEN",
            "connect tools --env workspaceFolder,TOOLS_TOKEN,BIN",
        ] {
            assert!(e.contains(want), "{want} missing from: {e}");
        }
    }

    #[test]
    fn a_remote_template_takes_client_values_in_its_url_and_headers() {
        let (_dir, loaded) = load_text(
            r#"
            [servers.web]
            url = "https://${HOST}/mcp"
            headers = { Authorization = "Bearer ${KEY}", X-Both = "${KEY}:${DAEMON_VAR}:$${KEY}" }
            client_env = ["HOST", "KEY"]
            "#,
        );
        let web = loaded.unwrap().servers().remove("web").unwrap();
        let got = web.for_client(&values(&[("HOST", "mcp.example.com"), ("KEY", "k${DAEMON_VAR}")])).unwrap();
        assert_eq!(got.server.url.as_deref(), Some("https://mcp.example.com/mcp"));
        // Header values are read from the client's values first, then the environment, once.
        let env = |n: &str| if n == "DAEMON_VAR" { Ok("d".to_string()) } else { Err(std::env::VarError::NotPresent) };
        let client = &got.server.client_values.0;
        let lookup = |n: &str| client.get(n).cloned().map_or_else(|| env(n), Ok);
        assert_eq!(expand(&got.server.headers["X-Both"].raw, &lookup).unwrap().value, "k${DAEMON_VAR}:d:${KEY}");
        // A value a header cannot carry is refused, without the value.
        let e = format!("{:#}", web.for_client(&values(&[("HOST", "h"), ("KEY", "line\nfeed")])).unwrap_err());
        assert!(e.contains("line feed") && e.contains("${KEY}") && e.contains("`Authorization`"), "{e}");
        assert!(!e.contains("feed\n") && !e.contains("line\n"), "{e}");
        // So is a URL the values make invalid, without repeating it.
        let e = format!("{:#}", web.for_client(&values(&[("HOST", "a b"), ("KEY", "k")])).unwrap_err());
        assert!(e.contains("server `web`") && e.contains("url"), "{e}");
    }

    #[test]
    fn client_env_is_checked_where_it_is_written() {
        for (text, says) in [
            (
                "[servers.a]\ncommand = \"x\"\nclient_env = [\"OK\", \"9bad\"]\n",
                "server `a` (config file {F}, line 3): `client_env` has \"9bad\", which is not a variable name",
            ),
            ("[servers.a]\ncommand = \"x\"\nclient_env = [\"A\", \"A\"]\n", "line 3): `client_env` names `A` twice"),
            ("[server]\ncommand = \"x\"\nclient_env = [\"A\"]\n", "line 3: [server] `client_env` takes values"),
        ] {
            let (dir, loaded) = load_text(text);
            let e = format!("{:#}", loaded.unwrap_err());
            let says = says.replace("{F}", &dir.path().join("switchyard.toml").display().to_string());
            assert!(e.contains(&says), "{text:?}: {e}");
        }
    }
}

#[cfg(test)]
mod http_tests {
    use super::tests::load_text;
    use super::*;

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
        assert_eq!(h.token.as_ref().unwrap().origin, Origin::File { path, line: Some(4) });
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
