//! `switchyard login NAME` and `switchyard logout NAME`: a remote server's sign-in, done ahead
//! of time (or again), and forgotten. The tokens go to the same file the router reads, so a
//! running daemon takes the new sign-in at its next request.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};

use switchyard_config::{Config, paths};
use switchyard_oauth::{Auth, Status};
use switchyard_router::upstream::target::Target;

/// How long `login` waits for the browser: a person is at the keyboard.
const LOGIN_WAIT: Duration = Duration::from_secs(300);

#[derive(clap::Args, Debug, Clone)]
pub struct LoginArgs {
    /// The server, as named in the config ([servers.NAME]).
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
    /// The server, as named in the config ([servers.NAME]).
    pub name: String,
    /// The config file [default: ~/.config/switchyard/switchyard.toml].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The sign-in of server `name` of the config at `config`, with its settings.
fn auth_of(
    config: Option<&Path>,
    name: &str,
    open_browser: Option<bool>,
    wait: Option<Duration>,
) -> anyhow::Result<Auth> {
    let path = match config {
        Some(p) => p.to_path_buf(),
        None => paths::default_config()?,
    };
    let file = Config::load(&path)?;
    let mut servers = file.servers();
    let names = servers.keys().cloned().collect::<Vec<_>>().join(", ");
    let one = servers
        .remove(name)
        .ok_or_else(|| anyhow!("config file {} has no server `{name}`; its servers: {names}", path.display()))?;
    let Target::Remote(spec) = Target::of(&one)? else {
        bail!("server `{name}` is a command switchyard starts; only remote servers (`url`) sign in");
    };
    let Some(mut settings) = spec.oauth else {
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
    let url = url::Url::parse(&spec.url).with_context(|| format!("server `{name}`: its URL"))?;
    let dir = paths::state_dir()?.join("oauth");
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
        eprintln!(
            "Signing in to server `{name}`. {how} (waiting up to {} minutes):\n\n  {url}\n",
            LOGIN_WAIT.as_secs() / 60
        );
    };
    let status = runtime
        .block_on(auth.login(&announce))
        .map_err(|e| anyhow!("server `{}`: could not sign in: {e}", args.name))?;
    println!("Signed in to server `{}`{}.", args.name, about(&status));
    Ok(())
}

/// `switchyard logout NAME`.
pub(crate) fn logout_blocking(args: LogoutArgs) -> anyhow::Result<()> {
    let auth = auth_of(args.config.as_deref(), &args.name, None, None)?;
    match auth.logout().map_err(|e| anyhow!("server `{}`: {e}", args.name))? {
        true => println!("Signed out of server `{}`: its tokens and client registrations are forgotten.", args.name),
        false => println!("Server `{}` was not signed in.", args.name),
    }
    Ok(())
}

/// ", the token expires in 59 min, and is refreshed" and the like; never the token.
pub(crate) fn about(status: &Status) -> String {
    if !status.signed_in {
        return String::new();
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let expiry = match status.expires_at {
        Some(at) if at <= now => "; the token has expired".to_string(),
        Some(at) => format!("; the token expires in {}", human_secs(at - now)),
        None => "; the token has no stated expiry".to_string(),
    };
    let refresh = if status.refreshable { " and is refreshed before then" } else { "" };
    format!("{expiry}{refresh}")
}

fn human_secs(s: u64) -> String {
    match s {
        s if s < 120 => format!("{s} s"),
        s if s < 2 * 3600 => format!("{} min", s / 60),
        s if s < 2 * 86400 => format!("{} h", s / 3600),
        s => format!("{} days", s / 86400),
    }
}

/// The sign-in state of each remote server of the config at `path` that signs in, from the
/// token files (for `status`): (name, state text).
pub(crate) fn sign_ins(path: &Path) -> Vec<(String, String)> {
    let Ok(file) = Config::load(path) else { return Vec::new() };
    let Ok(dir) = paths::state_dir_path() else { return Vec::new() };
    let dir = dir.join("oauth");
    let mut out = Vec::new();
    for (name, one) in file.servers() {
        let Ok((Target::Remote(spec), _)) = Target::resolve(&one, &|v| std::env::var(v)) else { continue };
        if spec.oauth.is_none() {
            continue;
        }
        let Ok(url) = url::Url::parse(&spec.url) else { continue };
        let status = switchyard_oauth::stored_status(&dir, &url);
        let text = if status.signed_in {
            format!("signed in{}", about(&status).replacen("; ", " (", 1) + ")")
        } else {
            format!("not signed in (`switchyard login {name}`)")
        };
        out.push((name, text));
    }
    out
}
