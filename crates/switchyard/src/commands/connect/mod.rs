//! `switchyard connect`: relays a client's stdin/stdout to a router over its Unix socket, starts
//! the user's daemon when none serves the config, and carries the session over router restarts.
//!
//! The relay has one controller (what goes to the router, and when) and a task per direction that
//! must not wait for the other: the client's lines come in through a reader task, the router's
//! lines go to the client through a writer task, fed by one reader task per connection. Requests
//! in flight are kept in a [`relay::Ledger`] shared by the controller and the connection readers,
//! so that a router that goes away still leaves every request of the client answered once.
//!
//! When the client's stdin and stdout are pipes or Unix stream sockets, connect first offers them
//! to the router ([`handed`]): then the router reads and writes them itself, and connect hands the
//! session over again when the router lets go of it (it died, stopped, or moved the session to a
//! new configuration). The relay runs only where that cannot be done.
//!
//! Here: where to connect ([`Destination`]); [`join`]: reaching (or starting) the daemon and the
//! hello; [`handed`]: the hand-off; [`relay`]: the controller; [`pumps`]: the tasks that move lines.

#[cfg(target_os = "linux")]
mod handed;
mod join;
mod pumps;
mod relay;
#[cfg(all(test, unix))]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::anyhow;

use switchyard_config::ClientValues;

use relay::{Start, relay};

/// `switchyard connect NAME [--config FILE] [--socket PATH] [--env NAME,...]` as given.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// A server of the config, or (with a `/`) the socket of a router: the old form.
    pub(crate) name: PathBuf,
    pub(crate) config: Option<PathBuf>,
    pub(crate) socket: Option<PathBuf>,
    /// Variables of connect's own environment whose values go to the server (its `client_env`).
    pub(crate) env: Vec<String>,
    /// `--group NAME`: join a group of the config's servers instead of one (`name` is empty).
    pub(crate) group: Option<String>,
}

/// Where `connect` goes, which server it asks for, and how to start the daemon if nobody is there.
#[derive(Debug, Clone, PartialEq)]
struct Destination {
    socket: PathBuf,
    /// The server named in the hello; None for the old form (the router's only server).
    server: Option<String>,
    /// The config a daemon is started with; None for the old form, which never starts one.
    config: Option<PathBuf>,
    /// The values `--env` named, sent in every hello (Debug shows the names only).
    env: ClientValues,
    /// The group named in the hello (`--group`); `server` is None then.
    group: Option<String>,
}

impl Destination {
    /// Reads the command line: `--socket` wins; a NAME with a `/` is a socket (the old form);
    /// else the config's daemon socket.
    fn resolve(opts: &Options) -> anyhow::Result<Destination> {
        Destination::resolve_with(opts, &|name| std::env::var_os(name))
    }

    /// [`Destination::resolve`] with the environment given.
    fn resolve_with(
        opts: &Options,
        getenv: &dyn Fn(&str) -> Option<std::ffi::OsString>,
    ) -> anyhow::Result<Destination> {
        let env = client_values(&opts.env, getenv)?;
        if let Some(group) = &opts.group {
            if let Err(e) = switchyard_config::check_server_name(group) {
                anyhow::bail!("--group {group:?}: {}", e.replace("server name", "group name"));
            }
            let config = match &opts.config {
                Some(c) => c.clone(),
                None => switchyard_config::paths::default_config()?,
            };
            let socket = match &opts.socket {
                Some(s) => s.clone(),
                None => switchyard_config::paths::socket_for(&switchyard_config::paths::canonical_config(&config)?)?,
            };
            return Ok(Destination { socket, server: None, config: Some(config), env, group: Some(group.clone()) });
        }
        let name = opts.name.to_str().ok_or_else(|| {
            anyhow!("{}: a server name must be UTF-8 (or give a socket path, with a `/`)", opts.name.display())
        })?;
        if name.contains('/') {
            if opts.socket.is_some() || opts.config.is_some() {
                anyhow::bail!(
                    "`switchyard connect {name}` names a socket; --config and --socket go with a server name: switchyard connect NAME --config FILE"
                );
            }
            return Ok(Destination { socket: opts.name.clone(), server: None, config: None, env, group: None });
        }
        let config = match &opts.config {
            Some(c) => c.clone(),
            None => switchyard_config::paths::default_config()?,
        };
        let socket = match &opts.socket {
            Some(s) => s.clone(),
            // The socket is named after the config file, so the file must exist now. With
            // --socket it is needed only to start a daemon, and read then.
            None => switchyard_config::paths::socket_for(&switchyard_config::paths::canonical_config(&config)?)?,
        };
        Ok(Destination { socket, server: Some(name.to_string()), config: Some(config), env, group: None })
    }

    /// "socket S, config C" for messages.
    fn socket_and_config(&self) -> String {
        match &self.config {
            Some(c) => format!("socket {}, config {}", self.socket.display(), c.display()),
            None => format!("socket {}", self.socket.display()),
        }
    }

    /// The session, for messages: "server `fs`" or "the router".
    fn session_label(&self) -> String {
        match (&self.server, &self.group) {
            (Some(s), _) => format!("server `{s}`"),
            (None, Some(g)) => format!("group `{g}`"),
            (None, None) => "the router".to_string(),
        }
    }
}

/// The values of the variables `--env` names, read from `getenv` (connect's environment). An
/// unset one is an error naming it, unless written `NAME?` (optional): then the server gets it
/// empty, as near as a template comes to a client that leaves an unset variable out (Codex's
/// `env_vars`). A value is never put in an error.
fn client_values(
    names: &[String],
    getenv: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> anyhow::Result<ClientValues> {
    let mut values = BTreeMap::new();
    for given in names.iter().flat_map(|n| n.split(',')).map(str::trim).filter(|n| !n.is_empty()) {
        let (name, optional) = match given.strip_suffix('?') {
            Some(name) => (name, true),
            None => (given, false),
        };
        if !switchyard_config::is_var_name(name) {
            anyhow::bail!(
                "--env {given:?}: not a variable name (ASCII letters, digits and `_`, not starting with a digit, and `?` after it when it may be unset); --env takes names, and connect reads their values from its environment"
            );
        }
        match getenv(name) {
            Some(v) => match v.into_string() {
                Ok(v) => {
                    values.insert(name.to_string(), v);
                }
                Err(_) => {
                    anyhow::bail!("--env {name}: the value of {name} in connect's environment is not valid UTF-8")
                }
            },
            None if optional => {
                values.insert(name.to_string(), String::new());
            }
            None => anyhow::bail!(
                "--env {name}: {name} is not set in connect's environment; the MCP client's entry for this server should give connect {name} (in its environment settings), or name it `--env {name}?` if the server may run without it"
            ),
        }
    }
    Ok(ClientValues(values))
}

/// Runs `connect` on the process's stdin and stdout, starting the daemon with this very binary.
/// The session is handed to the router when it can be ([`handed`]), else relayed ([`relay`]).
/// The reason of a failure is on stderr already when this returns.
pub(crate) async fn run(opts: &Options) -> anyhow::Result<()> {
    let destination = match Destination::resolve(opts) {
        Ok(d) => d,
        Err(e) => {
            let why = format!("{e:#}");
            switchyard_core::logging::say(&format!("switchyard connect: {why}"));
            crate::commands::lines::refuse_on_stdio(&why).await;
            return Err(anyhow!(why));
        }
    };
    let exe = switchyard_os::exe::spawnable();
    #[cfg(not(target_os = "linux"))]
    let start = Start::Fresh(join::join(&destination, &exe).await);
    #[cfg(target_os = "linux")]
    // A group's session is read by the group itself: never handed off.
    let start = if destination.group.is_none() && handed::wanted() {
        match handed::hand_off(&destination, &exe).await {
            handed::Outcome::Ended => return Ok(()),
            handed::Outcome::Relay(first) => Start::Fresh(first),
            handed::Outcome::Recovered { recovered, why } => Start::Recovered { recovered, why },
        }
    } else {
        Start::Fresh(join::join(&destination, &exe).await)
    };
    let (input, output, restore) = switchyard_router::downstream::stdio::open();
    let result = relay(destination, exe, input, output, start).await;
    drop(restore);
    result
}
