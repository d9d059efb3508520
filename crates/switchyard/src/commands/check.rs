//! `switchyard check`: what the daemon would make of a config file, without starting anything:
//! which servers and plugin entries load (and the error of each that does not, with its line),
//! whether each server's command is there to start, whether every plugin loads with the config
//! its entry gives it, and what the running daemon, if any, has in force.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use switchyard_config::{Config, Tolerated, paths};

use crate::commands::daemon::{ask_daemon, locate, start};

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct CheckArgs {
    /// The config file (default: ~/.config/switchyard/switchyard.toml).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// The plugins directory (default: plugins/ beside the config file).
    #[arg(long, value_name = "DIR")]
    pub(crate) plugins: Option<PathBuf>,
}

/// `switchyard check`: prints the report; an error (exit 1) when anything does not load.
pub(crate) fn check_blocking(args: CheckArgs) -> anyhow::Result<()> {
    let (config, socket) = locate(args.config.as_deref(), None)?;
    let config = config.expect("a config file is resolved without --socket");
    let (text, problems) = report(&config, args.plugins.as_deref());
    let daemon = daemon_line(&config, &socket);
    print!("{text}{daemon}");
    match problems {
        0 => {
            println!("everything loads");
            Ok(())
        }
        n => anyhow::bail!("{n} problem(s) in {}; each is named above with its line and fix", config.display()),
    }
}

/// The report on `config` and how many problems it found.
fn report(config: &Path, plugins: Option<&Path>) -> (String, usize) {
    let mut out = String::new();
    let _ = writeln!(out, "config file {}", config.display());
    let text = match std::fs::read_to_string(config) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(out, "  cannot be read: {e}");
            return (out, 1);
        }
    };
    let loaded = match Config::load_tolerant(config, &text) {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(out, "  does not load: {}", format!("{e:#}").replace('\n', " "));
            let _ = writeln!(
                out,
                "  a daemon started now runs on the last version of it that loaded, when there is one ({})",
                paths::last_good_for(config).map(|p| p.display().to_string()).unwrap_or_default()
            );
            return (out, 1);
        }
    };
    let mut problems = servers(&loaded, &mut out);
    problems += plugin_entries(&loaded, plugins, &mut out);
    if let Some(why) = &loaded.broken_http {
        let _ = writeln!(out, "[http]: not served: {why}");
        problems += 1;
    }
    for (name, why) in &loaded.broken_groups {
        let _ = writeln!(out, "group {name}: does not load: {why}");
        problems += 1;
    }
    (out, problems)
}

/// One line per server: what it runs, and whether it can.
fn servers(loaded: &Tolerated, out: &mut String) -> usize {
    let mut problems = 0;
    for (name, one) in loaded.config.servers() {
        let launch = &one.server.launch;
        let said = match (&launch.command, &launch.url) {
            (Some(command), _) if !launch.client_env.is_empty() => {
                format!("`{command}`, with values from each client ({})", launch.client_env.join(", "))
            }
            (Some(command), _) => {
                match switchyard_os::launch::resolve(command, launch.env.get("PATH").map(String::as_str)) {
                    Ok(file) => format!("`{command}` ({})", file.display()),
                    Err(e) => {
                        problems += 1;
                        format!("`{command}` cannot start: {e} (give its full path, or set PATH in the server's `env`)")
                    }
                }
            }
            (None, Some(url)) => match switchyard_config::parse_url(url) {
                Ok(u) => switchyard_config::display_url(&u),
                // With a client's values in it: shown once they are put in.
                Err(_) => "a URL with values from each client".to_string(),
            },
            (None, None) => "nothing to run".to_string(),
        };
        let _ = writeln!(out, "server {name}: {said}");
        if let Some(cwd) = launch.cwd.as_ref().filter(|d| !d.is_dir() && launch.client_env.is_empty()) {
            problems += 1;
            let _ = writeln!(out, "  its cwd {} is not a directory", cwd.display());
        }
    }
    for (name, why) in &loaded.broken_servers {
        problems += 1;
        let _ = writeln!(out, "server {name}: does not load: {why}");
    }
    problems
}

/// One line per plugin entry and per plugin file: whether it loads with its config.
fn plugin_entries(loaded: &Tolerated, dir: Option<&Path>, out: &mut String) -> usize {
    let mut problems = 0;
    for p in &loaded.broken_plugins {
        problems += 1;
        let _ = writeln!(
            out,
            "plugin {}: entry does not load, so the calls of {} are refused: {}",
            p.file.as_deref().unwrap_or("?"),
            match p.servers.as_deref() {
                None => "every server".to_string(),
                Some([one]) => format!("server {one}"),
                Some(many) => format!("servers {}", many.join(", ")),
            },
            p.why
        );
    }
    let findings = match switchyard_policy::problems::check(&loaded.config, dir) {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(out, "plugins: {e:#}");
            return problems + 1;
        }
    };
    for plugin in &findings.applied {
        let _ = writeln!(out, "plugin {plugin}: loads with its entry's config");
    }
    for p in &findings.problems {
        // A plugin whose entry does not load is said above, with the entry.
        if loaded.broken_plugins.iter().any(|b| b.file.as_deref() == Some(p.plugin.as_str())) {
            continue;
        }
        problems += 1;
        let _ = writeln!(out, "plugin {}: {p}", p.plugin);
    }
    problems
}

/// What the running daemon of `config` has in force, or why none runs.
fn daemon_line(config: &Path, socket: &Path) -> String {
    use switchyard_router::control::{Hello, Reply};
    match ask_daemon(socket, &Hello::Status) {
        Ok(Reply::Status { status }) => {
            let mut line = format!("daemon: runs (pid {})", status["pid"]);
            for note in crate::commands::status::problems(&status) {
                let _ = write!(line, "\n  {note}");
            }
            line + "\n"
        }
        _ => match start::last_failure(config) {
            Some(why) => format!("daemon: not running; {why}\n"),
            None => "daemon: not running (the first `switchyard connect` starts it)\n".to_string(),
        },
    }
}
