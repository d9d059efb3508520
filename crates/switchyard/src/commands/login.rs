//! `switchyard login NAME` and `switchyard logout NAME`: a remote server's sign-in, done ahead
//! of time (or again), and forgotten. The tokens go to the same file the router reads, so a
//! running daemon takes the new sign-in at its next request.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};

use switchyard_config::{Config, paths};
use switchyard_oauth::{Auth, Settings, Status};
use switchyard_router::upstream::target::Target;

/// How long `login` waits for the browser: a person is at the keyboard.
const LOGIN_WAIT: Duration = Duration::from_secs(300);

#[derive(clap::Args, Debug, Clone)]
pub struct LoginArgs {
    /// The server: its name in the config ([servers.NAME]), or its URL (`run --url`'s server;
    /// a config server with that URL signs in with its settings).
    #[arg(value_name = "NAME|URL")]
    pub name: String,
    /// The config file [default: ~/.config/switchyard/switchyard.toml].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the sign-in URL instead of opening the browser.
    #[arg(long)]
    pub no_browser: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct LogoutArgs {
    /// The server: its name in the config ([servers.NAME]), or its URL.
    #[arg(value_name = "NAME|URL")]
    pub name: String,
    /// The config file [default: ~/.config/switchyard/switchyard.toml].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Whether `target` is a URL rather than a server's name (names have no `://`; a URL of another
/// scheme is then refused as a URL, not looked up as a name).
fn is_url(target: &str) -> bool {
    target.contains("://")
}

/// A line on stdout; a closed stdout (`| head -0`) is no reason to fail after the work is done.
fn say(line: String) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// A line on stderr, as [`say`].
fn say_err(line: String) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The remote server `target` names (a name in the config at `config`, or a URL): its URL,
/// and its sign-in settings (None: sign-in is off for it). A URL no config server has signs in
/// with the defaults, as `run --url` does.
fn server_of(config: Option<&Path>, target: &str) -> anyhow::Result<(url::Url, Option<Settings>)> {
    let path = match config {
        Some(p) => p.to_path_buf(),
        None => paths::default_config()?,
    };
    if is_url(target) {
        let wanted = switchyard_config::parse_url(target).map_err(|e| anyhow!("the URL {target:?} {e}"))?;
        let servers = match Config::load(&path) {
            Ok(file) => file.servers(),
            // `login URL` needs no config file, unless one is named with --config.
            Err(_) if config.is_none() && !path.exists() => Default::default(),
            Err(e) => return Err(e),
        };
        // A config server with that URL that signs in lends its settings; else (none, or its
        // sign-in is off) the defaults, as `run --url URL` signs in.
        let found = servers.into_iter().find_map(|(_, one)| match Target::of(&one) {
            Ok(Target::Remote(spec)) if url::Url::parse(&spec.url).is_ok_and(|u| u == wanted) => spec.oauth,
            _ => None,
        });
        return Ok((wanted, Some(found.unwrap_or_default())));
    }
    let mut servers = Config::load(&path)?.servers();
    let names = servers.keys().cloned().collect::<Vec<_>>().join(", ");
    let one = servers.remove(target).ok_or_else(|| {
        anyhow!(
            "config file {} has no server {target:?}; its servers: {names} (a remote server run with `run --url` signs in by its URL: `switchyard login URL`)",
            path.display()
        )
    })?;
    let Target::Remote(spec) = Target::of(&one)? else {
        bail!("server `{target}` is a command switchyard starts; only remote servers (`url`) sign in");
    };
    let url = url::Url::parse(&spec.url).with_context(|| format!("server `{target}`: its URL"))?;
    Ok((url, spec.oauth))
}

/// The sign-in of server `name` of the config at `config`, with its settings.
fn auth_of(
    config: Option<&Path>,
    name: &str,
    open_browser: Option<bool>,
    wait: Option<Duration>,
) -> anyhow::Result<Auth> {
    let (url, settings) = server_of(config, name)?;
    let Some(mut settings) = settings else {
        bail!(
            "server `{name}` has sign-in off (`oauth = false`, or an Authorization header is configured); set `oauth = true` to sign in"
        );
    };
    // `login` is asked for by a person: the browser opens unless --no-browser, whatever
    // `open_browser` says (that is for the sign-ins the router starts on its own).
    if let Some(open) = open_browser {
        settings.open_browser = open;
    }
    if let Some(w) = wait {
        settings.login_timeout = w;
    }
    let dir = paths::oauth_dir()?;
    Auth::new(url, settings, &dir).map_err(|e| anyhow!("server `{name}`: {e}"))
}

/// `switchyard login NAME`.
pub(crate) fn login_blocking(args: LoginArgs) -> anyhow::Result<()> {
    let auth = auth_of(args.config.as_deref(), &args.name, Some(!args.no_browser), Some(LOGIN_WAIT))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let name = args.name.clone();
    let browser = !args.no_browser;
    let announce = move |url: &str| {
        let how = if browser { "Opening the browser; if it does not open, use this URL" } else { "Open this URL" };
        say_err(format!(
            "Signing in to server `{name}`. {how} (waiting up to {} minutes):\n\n  {url}\n",
            LOGIN_WAIT.as_secs() / 60
        ));
    };
    let status = runtime
        .block_on(auth.login(&announce))
        .map_err(|e| anyhow!("server `{}`: could not sign in: {e}", args.name))?;
    say(format!("Signed in to server `{}`{}.", args.name, about(&status)));
    Ok(())
}

/// `switchyard logout NAME`: also for a server whose sign-in is now off (its tokens from
/// before are forgotten all the same).
pub(crate) fn logout_blocking(args: LogoutArgs) -> anyhow::Result<()> {
    let (url, settings) = server_of(args.config.as_deref(), &args.name)?;
    let dir = paths::oauth_dir()?;
    let auth =
        Auth::new(url, settings.unwrap_or_default(), &dir).map_err(|e| anyhow!("server `{}`: {e}", args.name))?;
    match auth.logout().map_err(|e| anyhow!("server `{}`: {e}", args.name))? {
        true => {
            say(format!("Signed out of server `{}`: its tokens and client registrations are forgotten.", args.name))
        }
        false => say(format!("Server `{}` was not signed in.", args.name)),
    }
    Ok(())
}

/// ", the token expires in 59 min, and is refreshed" and the like; never the token.
pub(crate) fn about(status: &Status) -> String {
    if !status.signed_in {
        return String::new();
    }
    let now = now_secs();
    let expiry = match status.expires_at {
        Some(at) if at <= now => "; the token has expired".to_string(),
        Some(at) => format!("; the token expires in {}", human_secs(at - now)),
        None => "; the token has no stated expiry".to_string(),
    };
    let refresh = if status.refreshable { " and is refreshed before then" } else { "" };
    format!("{expiry}{refresh}")
}

/// Seconds since 1970, as token expiries are given.
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

pub(crate) fn human_secs(s: u64) -> String {
    match s {
        s if s < 120 => format!("{s} s"),
        s if s < 2 * 3600 => format!("{} min", s / 60),
        s if s < 2 * 86400 => format!("{} h", s / 3600),
        s => format!("{} days", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switchyard.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    /// `login URL` signs in to `run --url`'s server; a config server with that URL signs in
    /// with its own settings, and a name still works.
    #[test]
    fn a_server_is_found_by_name_or_by_url() {
        let (_d, path) = config(
            r#"
[servers.tracker]
url = "https://mcp.tracker.example/mcp"
[servers.tracker.oauth]
client_id = "by-hand"

[servers.fs]
command = "npx"
"#,
        );
        let (url, settings) = server_of(Some(&path), "tracker").unwrap();
        assert_eq!(url.as_str(), "https://mcp.tracker.example/mcp");
        assert_eq!(settings.unwrap().client_id.as_deref(), Some("by-hand"));
        let (url, settings) = server_of(Some(&path), "https://mcp.tracker.example/mcp").unwrap();
        assert_eq!(url.as_str(), "https://mcp.tracker.example/mcp");
        assert_eq!(settings.unwrap().client_id.as_deref(), Some("by-hand"), "the config server's settings");
        let (url, settings) = server_of(Some(&path), "http://127.0.0.1:3001/mcp").unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:3001/mcp");
        assert!(settings.unwrap().client_id.is_none(), "the defaults, as `run --url` has");

        let e = server_of(Some(&path), "127.0.0.1:3001").unwrap_err().to_string();
        assert!(e.contains("has no server \"127.0.0.1:3001\"") && e.contains("`switchyard login URL`"), "{e}");
        let e = server_of(Some(&path), "fs").unwrap_err().to_string();
        assert!(e.contains("only remote servers"), "{e}");
        let e = server_of(Some(&path), "https://user:pw@h/mcp").unwrap_err().to_string();
        assert!(e.contains("user name or password"), "{e}");
    }

    /// A server whose sign-in is now off cannot sign in, but what it kept from before can be
    /// forgotten.
    #[test]
    fn sign_in_off_refuses_login_and_allows_logout() {
        let (_d, path) = config(
            r#"
[servers.tracker]
url = "https://mcp.tracker.example/mcp"
oauth = false
"#,
        );
        let (_, settings) = server_of(Some(&path), "tracker").unwrap();
        assert!(settings.is_none());
        let e = auth_of(Some(&path), "tracker", None, None).unwrap_err().to_string();
        assert!(e.contains("sign-in off"), "{e}");
        // By URL it is `run --url`'s server, which signs in with the defaults.
        let (_, settings) = server_of(Some(&path), "https://mcp.tracker.example/mcp").unwrap();
        assert!(settings.is_some());
    }

    /// Anything with `://` is a URL, and one switchyard cannot sign in to is refused as a URL,
    /// not looked up as a server name.
    #[test]
    fn other_schemes_are_refused_as_urls() {
        let (_d, path) = config("[servers.tracker]\nurl = \"https://h/mcp\"\n");
        for bad in ["ftp://h/mcp", "file:///etc/passwd"] {
            let e = server_of(Some(&path), bad).unwrap_err().to_string();
            assert!(e.contains("must start with https:// or http://"), "{bad}: {e}");
        }
        let (url, _) = server_of(Some(&path), "HTTPS://h/mcp").unwrap();
        assert_eq!(url.as_str(), "https://h/mcp", "the scheme's case does not matter");
    }
}
