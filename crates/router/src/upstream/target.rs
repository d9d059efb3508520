//! Which server the router fronts: a command it starts or a URL it connects to, resolved from
//! the config, with `${VAR}` in header values read from the environment at start-up.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail};

use crate::upstream::transport::{Header, RemoteKind, RemoteSpec};
use switchyard_config::{
    Config, OAuthConfig, TransportKind, about_header, derive_name, expand, is_loopback, parse_url, url_name,
};

/// The configured server, ready to start or connect to.
#[derive(Debug, Clone)]
pub enum Target {
    /// A server switchyard starts and talks to over its stdin/stdout.
    Command {
        /// The server's name in logs and errors.
        server: String,
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<PathBuf>,
    },
    /// A remote server, over Streamable HTTP or legacy SSE.
    Remote(RemoteSpec),
}

impl Target {
    /// The server's name in logs and errors.
    pub fn server(&self) -> &str {
        match self {
            Target::Command { server, .. } => server,
            Target::Remote(spec) => &spec.server,
        }
    }
}

impl Target {
    /// The server `config` fronts, checked, with every `${VAR}` in header values read from the
    /// environment now. Warnings (a variable set but empty, headers sent over plain http) are
    /// logged here, once each; call it once, at start-up.
    pub fn of(config: &Config) -> anyhow::Result<Target> {
        let (target, warnings) = Target::resolve(config, &|name| std::env::var(name))?;
        for w in warnings {
            tracing::warn!("{w}");
        }
        Ok(target)
    }

    /// [`Target::of`] with the environment given, and the warnings returned instead of logged.
    pub fn resolve(
        config: &Config,
        env: &dyn Fn(&str) -> Result<String, std::env::VarError>,
    ) -> anyhow::Result<(Target, Vec<String>)> {
        let s = &config.server;
        s.check(&|_| "the server configuration".to_string())?;
        let Some(url) = &s.launch.url else {
            let Some(command) = s.launch.command.clone() else {
                bail!(
                    "no server: give a command after `--` (switchyard run -- npx -y @modelcontextprotocol/server-everything), or --url URL, or [server] command or url in the config file"
                );
            };
            let server = s.name.clone().unwrap_or_else(|| derive_name(&command, &s.launch.args));
            let vars = s.launch.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let target =
                Target::Command { server, command, args: s.launch.args.clone(), env: vars, cwd: s.launch.cwd.clone() };
            return Ok((target, Vec::new()));
        };
        let parsed = parse_url(url).map_err(|e| anyhow!("[server] url {e}"))?;
        let server = s.name.clone().unwrap_or_else(|| url_name(&parsed));
        let mut warnings = Vec::new();
        let mut warned = Vec::new();
        let mut headers = Vec::new();
        for (name, value) in &s.launch.headers {
            let about = about_header(name, &value.source);
            let e = expand(&value.raw, env).map_err(|e| anyhow!("server `{server}`: {about} {e}"))?;
            for var in e.empty {
                if !warned.contains(&var) {
                    warnings.push(format!(
                        "server `{server}`: {about} uses ${{{var}}}, which is set but empty; the header is sent without it"
                    ));
                    warned.push(var);
                }
            }
            headers.push(Header { name: name.clone(), value: e.value, vars: e.vars });
        }
        if !headers.is_empty() && parsed.scheme() == "http" && !is_loopback(&parsed) {
            warnings.push(format!(
                "server `{server}`: its headers go to {} over plain http, readable by anyone on the network path; use https:// unless the link is private",
                url_name(&parsed)
            ));
        }
        let oauth =
            oauth_settings(s.launch.oauth.as_ref(), &headers, env).map_err(|e| anyhow!("server `{server}`: {e}"))?;
        let kind = match s.launch.transport.unwrap_or_default() {
            TransportKind::Auto => RemoteKind::Auto,
            TransportKind::StreamableHttp => RemoteKind::StreamableHttp,
            TransportKind::Sse => RemoteKind::Sse,
        };
        let spec = RemoteSpec {
            server,
            url: parsed.to_string(),
            kind,
            headers,
            connect_timeout: Duration::from_millis(config.limits.connect_timeout_ms),
            max_message_bytes: config.limits.max_message_bytes,
            post_timeout: Duration::from_millis(config.limits.post_timeout_ms),
            liveness: (config.limits.liveness_ms > 0).then(|| Duration::from_millis(config.limits.liveness_ms)),
            oauth,
        };
        Ok((Target::Remote(spec), warnings))
    }
}

/// The sign-in settings of a remote server: as configured, or on by default where no
/// `Authorization` header is (a server given a token by hand has no use for a sign-in).
fn oauth_settings(
    config: Option<&OAuthConfig>,
    headers: &[Header],
    env: &dyn Fn(&str) -> Result<String, std::env::VarError>,
) -> anyhow::Result<Option<switchyard_oauth::Settings>> {
    let config = match config {
        Some(c) if !c.enabled => return Ok(None),
        Some(c) => c.clone(),
        None if headers.iter().any(|h| h.name.eq_ignore_ascii_case("authorization")) => return Ok(None),
        None => OAuthConfig::default(),
    };
    let client_secret = match &config.client_secret {
        Some(raw) => {
            let e = expand(raw, env).map_err(|e| anyhow!("`oauth` client_secret {e}"))?;
            Some(switchyard_oauth::Secret::new(e.value))
        }
        None => None,
    };
    Ok(Some(switchyard_oauth::Settings {
        client_id: config.client_id.clone(),
        client_secret,
        client_metadata_url: config.client_metadata_url.clone(),
        scopes: config.scopes.clone(),
        login_timeout: Duration::from_millis(config.login_timeout_ms()),
        open_browser: config.open_browser(),
        redirect_port: config.redirect_port,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_config::{HeaderValue, Source};

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Result<String, std::env::VarError> {
        move |name| pairs.iter().find(|p| p.0 == name).map(|p| p.1.to_string()).ok_or(std::env::VarError::NotPresent)
    }

    fn remote(text: &str, env: &'static [(&'static str, &'static str)]) -> anyhow::Result<(RemoteSpec, Vec<String>)> {
        let mut c: Config = toml::from_str(text).unwrap();
        c.validate().unwrap();
        match Target::resolve(&c, &env_of(env))? {
            (Target::Remote(spec), warnings) => Ok((spec, warnings)),
            (other, _) => panic!("not remote: {other:?}"),
        }
    }

    #[test]
    fn sign_in_is_on_unless_a_token_is_configured_or_it_is_turned_off() {
        let url = "[server]\nurl = \"https://h.example/mcp\"\n";
        let (spec, _) = remote(url, &[]).unwrap();
        let on = spec.oauth.unwrap();
        assert!(on.open_browser);
        assert_eq!(on.login_timeout, Duration::from_secs(60));
        let with_token = format!("{url}headers = {{ Authorization = \"Bearer x\" }}\n");
        assert!(remote(&with_token, &[]).unwrap().0.oauth.is_none());
        assert!(remote(&format!("{url}oauth = false\n"), &[]).unwrap().0.oauth.is_none());
        let both = format!("{url}headers = {{ Authorization = \"Bearer x\" }}\noauth = true\n");
        assert!(remote(&both, &[]).unwrap().0.oauth.is_some());
        let table = format!(
            "{url}[server.oauth]\nclient_id = \"c\"\nclient_secret = \"${{SECRET}}\"\nlogin_timeout_ms = 5000\nopen_browser = false\n"
        );
        let s = remote(&table, &[("SECRET", "s3cr3t-value")]).unwrap().0.oauth.unwrap();
        assert_eq!(s.client_secret.as_ref().map(|s| s.expose()), Some("s3cr3t-value"));
        assert_eq!(s.login_timeout, Duration::from_millis(5000));
        assert!(!s.open_browser);
        // The spec's Debug (logged at start-up) keeps the secret hidden.
        let (spec, _) = remote(&table, &[("SECRET", "s3cr3t-value")]).unwrap();
        assert!(!format!("{spec:?}").contains("s3cr3t"));
        let missing = remote(&table, &[]).unwrap_err().to_string();
        assert!(missing.contains("client_secret") && missing.contains("SECRET"), "{missing}");
    }

    fn load(text: &str) -> Config {
        Config::load_text(std::path::Path::new("/home/me/switchyard.toml"), text).unwrap()
    }

    #[test]
    fn each_server_of_a_file_resolves_as_a_file_of_its_own_would() {
        let c = load(
            "[limits]\nconnect_timeout_ms = 2000\n[servers.filesystem]\ncommand = \"npx\"\n\
             [servers.tracker]\nurl = \"https://mcp.example.com/mcp\"\n\
             headers = { Authorization = \"Bearer ${TRACKER_TOKEN}\" }\n",
        );
        let all = c.servers();
        let env = |_: &str| Ok("s3cr3t".to_string());
        let (t, _) = Target::resolve(&all["filesystem"], &env).unwrap();
        assert_eq!(t.server(), "filesystem");
        assert!(matches!(t, Target::Command { .. }));
        let (t, _) = Target::resolve(&all["tracker"], &env).unwrap();
        let Target::Remote(spec) = t else { panic!("not remote") };
        assert_eq!((spec.server.as_str(), spec.connect_timeout.as_millis()), ("tracker", 2000));
        assert_eq!(spec.headers[0].value, "Bearer s3cr3t");
    }

    #[test]
    fn the_single_server_form_resolves_under_the_name_its_server_table_gets() {
        for (text, name) in [
            ("[server]\ncommand = \"npx\"\nargs = [\"-y\", \"@x/server-git\"]\n", "server-git"),
            ("[server]\nurl = \"http://127.0.0.1:3001/mcp\"\n", "127.0.0.1:3001"),
            ("[server]\nname = \"docs\"\nurl = \"https://h/mcp\"\n", "docs"),
        ] {
            let c = load(text);
            let all = c.servers();
            assert_eq!(Target::resolve(&all[name], &env_of(&[])).unwrap().0.server(), name);
            assert_eq!(Target::resolve(&c, &env_of(&[])).unwrap().0.server(), name);
        }
    }

    #[test]
    fn a_missing_variable_in_a_servers_header_names_the_server_and_its_line() {
        let c = load(
            "[servers.a]\nurl = \"https://a/\"\nheaders = { X-A = \"1\" }\n\n[servers.b]\nurl = \"https://b/\"\n\
             [servers.b.headers]\nX-B = \"${NOPE}\"\nX-C = \"2\"\n",
        );
        let e = format!("{:#}", Target::resolve(&c.servers()["b"], &env_of(&[])).unwrap_err());
        let place = "config file /home/me/switchyard.toml, line 8";
        assert!(e.contains(&format!("server `b`: header `X-B` ({place}) uses ${{NOPE}}")), "{e}");
    }

    #[test]
    fn a_url_becomes_a_remote_spec_with_expanded_headers_and_limits() {
        let (spec, warnings) = remote(
            "[server]\nurl = \"https://mcp.example.com/mcp\"\ntransport = \"sse\"\n\
             headers = { Authorization = \"Bearer ${MCP_TOKEN}\", X-Team = \"core\" }\n\
             [limits]\nconnect_timeout_ms = 2500\npost_timeout_ms = 4000\nmax_message_bytes = 4096\nmax_buffered_bytes = 8192\n",
            &[("MCP_TOKEN", "s3cr3t")],
        )
        .unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(spec.server, "mcp.example.com");
        assert_eq!(spec.url, "https://mcp.example.com/mcp");
        assert_eq!(spec.kind, RemoteKind::Sse);
        assert_eq!(spec.connect_timeout, Duration::from_millis(2500));
        assert_eq!(spec.post_timeout, Duration::from_millis(4000));
        assert_eq!(spec.max_message_bytes, 4096);
        let auth =
            Header { name: "Authorization".into(), value: "Bearer s3cr3t".into(), vars: vec!["MCP_TOKEN".into()] };
        let team = Header { name: "X-Team".into(), value: "core".into(), vars: vec![] };
        assert_eq!(spec.headers, [auth, team]);
        assert!(!format!("{spec:?}").contains("s3cr3t"));
        // Defaults: auto, 10 s and 10 s; an explicit name wins over the host.
        let (spec, _) = remote("[server]\nname = \"docs\"\nurl = \"http://127.0.0.1:3001/mcp\"\n", &[]).unwrap();
        assert_eq!((spec.server.as_str(), spec.kind.clone()), ("docs", RemoteKind::Auto));
        assert_eq!((spec.connect_timeout, spec.post_timeout), (Duration::from_secs(10), Duration::from_secs(10)));
        assert_eq!(spec.max_message_bytes, 64 * 1024 * 1024);
    }

    #[test]
    fn a_missing_variable_names_itself_the_header_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switchyard.toml");
        std::fs::write(&path, "[server]\nurl = \"https://mcp.example.com/mcp\"\n\nheaders = { Authorization = \"Bearer ${MCP_TOKEN}\" }\n")
            .unwrap();
        let c = Config::load(&path).unwrap();
        let e = format!("{:#}", Target::resolve(&c, &env_of(&[])).unwrap_err());
        assert!(e.contains("${MCP_TOKEN}") && e.contains("not set"), "{e}");
        assert!(e.contains(&format!("header `Authorization` (config file {}, line 4)", path.display())), "{e}");
        assert!(e.contains("server `mcp.example.com`"), "{e}");
        let mut c = c;
        c.server.launch.headers.get_mut("Authorization").unwrap().source = Source::CommandLine;
        let e = format!("{:#}", Target::resolve(&c, &env_of(&[])).unwrap_err());
        assert!(e.contains("header `Authorization` (--header) uses ${MCP_TOKEN}"), "{e}");
    }

    #[test]
    fn an_empty_variable_is_warned_about_once() {
        let (spec, warnings) = remote(
            "[server]\nurl = \"https://h/\"\nheaders = { A = \"${TOKEN}\", B = \"x${TOKEN}\" }\n",
            &[("TOKEN", "")],
        )
        .unwrap();
        assert_eq!(spec.headers[1].value, "x");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("${TOKEN}") && warnings[0].contains("set but empty"), "{warnings:?}");
    }

    #[test]
    fn headers_over_plain_http_to_another_host_are_warned_about() {
        let with = |url: &str| format!("[server]\nurl = \"{url}\"\nheaders = {{ Authorization = \"${{T}}\" }}\n");
        let (_, w) = remote(&with("http://mcp.example.com/mcp"), &[("T", "s3cr3t")]).unwrap();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("plain http") && w[0].contains("mcp.example.com") && !w[0].contains("s3cr3t"), "{w:?}");
        for url in ["http://localhost:3000/mcp", "http://127.0.0.1:3000/mcp", "https://mcp.example.com/mcp"] {
            assert!(remote(&with(url), &[("T", "x")]).unwrap().1.is_empty(), "{url}");
        }
        // No headers: nothing to leak.
        assert!(remote("[server]\nurl = \"http://mcp.example.com/\"\n", &[]).unwrap().1.is_empty());
    }

    #[test]
    fn a_command_resolves_as_before() {
        let mut c: Config =
            toml::from_str("[server]\ncommand = \"npx\"\nargs = [\"-y\", \"@x/server-git\"]\nenv = { A = \"1\" }\n")
                .unwrap();
        c.validate().unwrap();
        let (t, w) = Target::resolve(&c, &env_of(&[])).unwrap();
        assert!(w.is_empty());
        let Target::Command { server, command, args, env, cwd } = t else { panic!("not a command") };
        assert_eq!((server.as_str(), command.as_str(), args.len(), cwd), ("server-git", "npx", 2, None));
        assert_eq!(env, [("A".to_string(), "1".to_string())]);
        let e = Target::resolve(&Config::default(), &env_of(&[])).unwrap_err().to_string();
        assert!(e.contains("--url"), "{e}");
    }

    #[test]
    fn built_in_code_a_config_is_checked_all_the_same() {
        let mut c = Config::default();
        c.server.launch.url = Some("https://h/".into());
        c.server.launch.command = Some("npx".into());
        assert!(Target::resolve(&c, &env_of(&[])).unwrap_err().to_string().contains("both `command` and `url`"));
        c.server.launch.command = None;
        c.server.launch.headers.insert("Bad Name".into(), HeaderValue { raw: "x".into(), source: Source::CommandLine });
        assert!(Target::resolve(&c, &env_of(&[])).unwrap_err().to_string().contains("a space"));
    }

    /// A remote instance is one HTTP session carrying many calls at once: its pools must not cap
    /// calls per instance unless the config says so. The default (0, no cap) is already that
    /// for every server, so nothing depends on the target; an explicit value is kept as is.
    #[test]
    fn max_inflight_is_unlimited_by_default_for_remote_and_stdio_and_explicit_wins() {
        for server in ["url = \"https://h/mcp\"", "command = \"npx\""] {
            let mut c: Config =
                toml::from_str(&format!("[server]\n{server}\n[pools.serial]\nmax_inflight = 1\n")).unwrap();
            c.validate().unwrap();
            Target::resolve(&c, &env_of(&[])).unwrap();
            assert_eq!(c.pools["default"].max_inflight, 0, "{server}");
            assert_eq!(c.pools["serial"].max_inflight, 1, "{server}");
        }
    }
}
