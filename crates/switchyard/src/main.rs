//! The `switchyard` command line: parses arguments and hands over to [`commands`].

mod commands;

use std::path::PathBuf;
use std::process::ExitCode;

use std::io::Write;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "switchyard", version, about = "An MCP policy router")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an MCP server behind the router (a command after `--`, or a remote one with --url),
    /// speaking MCP on stdin/stdout.
    Run(commands::run::RunArgs),
    /// Relay stdin/stdout to server NAME of the user's daemon (started when none runs), as one
    /// more client; put this in an MCP client's config instead of the server's command.
    Connect {
        /// A server of the config. With a `/`, the socket of a router started with
        /// `run --listen SOCKET` (no daemon is started then).
        #[arg(required_unless_present = "group", conflicts_with = "group")]
        name: Option<PathBuf>,
        /// Join a group of the config's servers instead (`[groups.NAME]`, or `all` for every
        /// server): one MCP server with all their tools, named SERVER__TOOL.
        #[arg(long, value_name = "NAME")]
        group: Option<String>,
        /// The daemon's config file [default: ~/.config/switchyard/switchyard.toml].
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The daemon's socket [default: one per config file, in /run/user/UID/switchyard or /tmp/switchyard-UID].
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        /// Pass these variables of connect's environment to the server (its `client_env` in the
        /// config): values only the MCP client has, set in its entry's `env`. Repeatable.
        #[arg(long = "env", value_name = "NAME[,NAME...]")]
        env: Vec<String>,
    },
    /// Run the long-lived router for a config file: it owns every server in it and outlives its
    /// clients, which join with `switchyard connect NAME` (which starts it when needed).
    Daemon(commands::daemon::DaemonArgs),
    /// Check a config file as the daemon would load it, without starting anything: each server
    /// and plugin entry, each server's command, each plugin with its config, and what the
    /// running daemon has in force. Exits 1 when anything does not load.
    Check(commands::check::CheckArgs),
    /// Show what a daemon is doing: its servers, their instances, the sessions, the plugins.
    Status {
        /// The whole status as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        which: commands::daemon::Which,
    },
    /// Show the calls the audit log recorded (a daemon's and `switchyard run`'s): who called
    /// which tool of which server, what the policy decided, how it ended and how long it took.
    Calls(commands::calls::CallsArgs),
    /// Print the bearer token HTTP clients send to the daemon of a config file (`Authorization:
    /// Bearer TOKEN`): its [http] token, else the one generated for it (made now if missing).
    Token {
        /// The daemon's config file [default: ~/.config/switchyard/switchyard.toml].
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Print the status page's address with the token in it instead
        /// (http://LISTEN/#token=TOKEN).
        #[arg(long)]
        url: bool,
        /// With --url: the front's address (default: where the running daemon serves HTTP,
        /// else the config's [http] listen).
        #[arg(long, value_name = "ADDR", requires = "url")]
        http: Option<std::net::SocketAddr>,
    },
    /// Sign in to remote server NAME (the MCP authorization flow) in the browser, or with
    /// --no-browser by printing the URL; the tokens are kept for the router and the daemon.
    Login(commands::login::LoginArgs),
    /// Forget remote server NAME's sign-in: its tokens and client registrations.
    Logout(commands::login::LogoutArgs),
    /// Stop a daemon: its servers are stopped and it exits.
    Stop {
        #[command(flatten)]
        which: commands::daemon::Which,
    },
    /// List the MCP client configs found (Claude Desktop, Claude Code, Cursor, VS Code, Codex,
    /// Gemini CLI), their servers, and which already run through switchyard. Reads only; shows
    /// no secret.
    Clients {
        /// A project directory whose `.mcp.json`, `.cursor/mcp.json`, `.vscode/mcp.json`,
        /// `.codex/config.toml` and `.gemini/settings.json` are read too (default: the current
        /// directory).
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Put every MCP server of a client's config behind switchyard: each entry moves into
    /// switchyard's config as [servers.NAME] and becomes `switchyard connect NAME`. Try
    /// --dry-run first: it shows the change as a diff and writes nothing.
    Wrap(WrapArgs),
    /// Put back the entries `switchyard wrap` replaced, exactly as they were.
    Unwrap(WrapArgs),
    /// Show what switchyard fixes, measured: the fixture server directly vs through switchyard.
    Demo,
    /// Work with policy plugins.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// Runs one server instance for the router, so its process group dies with the router.
    #[command(hide = true)]
    Supervise {
        /// The router's pid.
        router: i32,
        /// The server command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// The scriptable MCP server used by tests, the demo and the benchmarks.
    #[command(hide = true)]
    Fixture {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(clap::Args)]
struct WrapArgs {
    /// A client config file (default: every file of --client found here).
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    /// The client whose configs to change (with FILE: the client that reads FILE, when its name
    /// does not say).
    #[arg(long, value_enum)]
    client: Option<ClientName>,
    /// A project directory whose `.mcp.json`, `.cursor/mcp.json`, `.vscode/mcp.json`,
    /// `.codex/config.toml` and `.gemini/settings.json` count too (default: the current
    /// directory).
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// The switchyard config that receives the servers (wrap) [default:
    /// ~/.config/switchyard/switchyard.toml].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Only these servers (their names in the client's file).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// Show the change as a diff; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Wrap files that git tracks too (a project's `.mcp.json` in its repository): the wrapped
    /// entries hold this machine's paths, which would go to everyone who shares the repository.
    #[arg(long)]
    include_tracked: bool,
    /// One entry, NAME, running `switchyard connect --group NAME`, in place of the servers of
    /// [groups.NAME] (made from the file's servers when the config has no such group) (wrap).
    #[arg(long, value_name = "NAME")]
    group: Option<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ClientName {
    ClaudeDesktop,
    ClaudeCode,
    Cursor,
    Vscode,
    Codex,
    Gemini,
}

impl WrapArgs {
    fn options(self) -> switchyard_clients::wrap::Options {
        use switchyard_clients::Client;
        switchyard_clients::wrap::Options {
            client: self.client.map(|c| match c {
                ClientName::ClaudeDesktop => Client::ClaudeDesktop,
                ClientName::ClaudeCode => Client::ClaudeCode,
                ClientName::Cursor => Client::Cursor,
                ClientName::Vscode => Client::VsCode,
                ClientName::Codex => Client::Codex,
                ClientName::Gemini => Client::Gemini,
            }),
            path: self.file,
            project: self.project,
            config: self.config,
            only: self.only,
            dry_run: self.dry_run,
            include_tracked: self.include_tracked,
            group: self.group,
        }
    }
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Load a plugin, run `init`, and print its decision and annotations for a sample call,
    /// with everything the plugin logged or printed.
    Check {
        /// The plugin component (.wasm).
        file: PathBuf,
        /// JSON handed to the plugin's `init` (default `{}`).
        #[arg(long, conflicts_with = "config_file")]
        config: Option<String>,
        /// A switchyard.toml: the config and limits of this file's [[plugins]] entry are used.
        #[arg(long, value_name = "SWITCHYARD_TOML")]
        config_file: Option<PathBuf>,
        /// The sample call as JSON, every field optional: {"server", "session", "client"
        /// (a name, or {"name", "version", "transport", "dir", "token"}), "era", "task" (a task
        /// id, or {"id", "tool"}), "method", "tool", "arguments", "annotations" (declared
        /// hints, spec names), "attempt"}.
        #[arg(long)]
        call: Option<String>,
        /// Also time N warm `decide` calls of the sample call and print their p50 and p99.
        #[arg(long, value_name = "N", default_value_t = 0)]
        bench: u32,
    },
    /// Start a plugin project in NAME (a new directory): the policy WIT, a plugin that passes
    /// everything through (with one commented example per export), a README and calls.jsonl.
    New {
        /// The plugin's name and directory (lowercase letters, digits, `-`, `_`).
        name: PathBuf,
        /// The language to write the plugin in.
        #[arg(long, value_enum)]
        lang: PluginLang,
    },
    /// Build the plugin project in DIR into DIR/<DIR's name>.wasm with the language's own
    /// toolchain (cargo, componentize-py, jco), then check that the host accepts it.
    Build {
        /// The project directory (default: the current directory).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Replay recorded calls (DIR/calls.jsonl), and the params and results recorded for its
    /// content hooks, against the built plugin in the real host and print a diff for every
    /// answer that differs from the recorded one.
    Test {
        /// The project directory (default: the current directory).
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// The recorded calls, one JSON object a line (default: DIR/calls.jsonl).
        #[arg(long, value_name = "JSONL")]
        calls: Option<PathBuf>,
        /// The component to test (default: DIR/<DIR's name>.wasm, what `plugin build` writes).
        #[arg(long, value_name = "WASM")]
        plugin: Option<PathBuf>,
        /// JSON handed to the plugin's `init` (default `{}`).
        #[arg(long, conflicts_with = "config_file")]
        config: Option<String>,
        /// A switchyard.toml: the config and limits of the plugin's [[plugins]] entry are used.
        #[arg(long, value_name = "SWITCHYARD_TOML")]
        config_file: Option<PathBuf>,
    },
    /// Write the example plugins (hints, fs-keys, timeouts, guard, template, tool-filter,
    /// rate-limit, placement, redact, path-guard, result-cap) into DIR, to copy from.
    Examples {
        /// A new or empty directory (not your live plugins directory: every file there is loaded).
        dir: PathBuf,
    },
}

/// The languages `plugin new` writes projects in.
#[derive(Clone, Copy, clap::ValueEnum)]
enum PluginLang {
    Rust,
    Python,
    Js,
}

impl From<PluginLang> for switchyard_policy::project::Lang {
    fn from(l: PluginLang) -> Self {
        match l {
            PluginLang::Rust => Self::Rust,
            PluginLang::Python => Self::Python,
            PluginLang::Js => Self::Js,
        }
    }
}

fn main() -> ExitCode {
    // The daemon and the supervisors are started through /proc/self/exe (which survives the
    // binary being replaced); their process name would be `exe`, which `pgrep switchyard`,
    // `top` and `killall` do not find.
    switchyard_os::process::name_main_thread();
    switchyard_os::process::keep_std_handles_from_children();
    switchyard_os::exe::init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let argv: Vec<String> = std::env::args().collect();
            let hint = commands::run::without_dashes_hint(&argv).filter(|_| e.kind() != ErrorKind::DisplayHelp);
            let _ = e.print();
            if let Some(line) = hint {
                let _ = writeln!(
                    std::io::stderr(),
                    "\nThe server command goes after `--`, so that its options are not read as switchyard's:\n  {line}"
                );
            }
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    let code = match cli.command {
        Command::Fixture { args } => ExitCode::from(switchyard_fixture::main_with_args(args) as u8),
        #[cfg(unix)]
        Command::Supervise { router, command } => switchyard_router::upstream::stdio::supervisor::run(router, &command),
        #[cfg(windows)]
        Command::Supervise { .. } => {
            // Windows servers run in a Job Object of the router's, never under a supervisor.
            let _ = writeln!(std::io::stderr(), "switchyard supervise: not used on Windows");
            ExitCode::from(2)
        }
        // run says why it fails on stderr itself, before it tells the client.
        Command::Run(args) => match commands::run::run_blocking(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        },
        Command::Daemon(args) => report(commands::daemon::daemon_blocking(args)),
        Command::Check(args) => report(commands::check::check_blocking(args)),
        Command::Status { json, which } => report(commands::status::status_blocking(which, json)),
        Command::Calls(args) => report(commands::calls::calls_blocking(args)),
        Command::Token { config, url, http } => report(
            switchyard_router::downstream::http::token::command(
                config.as_deref(),
                url,
                http,
                commands::daemon::served_http,
            )
            .map(|text| {
                let _ = std::io::stdout().write_all(text.as_bytes());
            }),
        ),
        Command::Stop { which } => report(commands::stop::stop_blocking(which)),
        Command::Login(args) => report(commands::login::login_blocking(args)),
        Command::Logout(args) => report(commands::login::logout_blocking(args)),
        Command::Clients { project, json } => {
            report(switchyard_clients::list::run(project.as_deref(), json).map(|text| {
                let _ = std::io::stdout().write_all(text.as_bytes());
            }))
        }
        Command::Wrap(args) => report(switchyard_clients::wrap::wrap(&args.options()).map(|text| {
            let _ = std::io::stdout().write_all(text.as_bytes());
        })),
        Command::Unwrap(args) => report(switchyard_clients::wrap::unwrap(&args.options()).map(|text| {
            let _ = std::io::stdout().write_all(text.as_bytes());
        })),
        #[cfg(unix)]
        Command::Demo => report(commands::demo::run_blocking()),
        // Its scenarios kill servers and routers with POSIX signals.
        #[cfg(windows)]
        Command::Demo => report(Err(anyhow::anyhow!(
            "the demo runs on Linux and macOS (it shows kill -9 and SIGTERM); on Windows try `switchyard run -- switchyard fixture` with a client"
        ))),
        Command::Connect { name, config, socket, env, group } => {
            // connect says why it fails on stderr itself, as it happens.
            let name = name.unwrap_or_default();
            match commands::run::connect_blocking(commands::connect::Options { name, config, socket, env, group }) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
        Command::Plugin { command: PluginCommand::Check { file, config, config_file, call, bench } } => {
            let opts = switchyard_policy::check::Options {
                config_json: config.as_deref(),
                config_file: config_file.as_deref(),
                call_json: call.as_deref(),
                bench,
            };
            let checked = switchyard_policy::check::run(&file, &opts);
            print!("{}", checked.text);
            report(checked.result)
        }
        Command::Plugin { command: PluginCommand::New { name, lang } } => {
            report(switchyard_policy::project::new_project(&name, lang.into()).map(|written| {
                for p in written {
                    println!("{}", p.display());
                }
            }))
        }
        Command::Plugin { command: PluginCommand::Build { dir } } => {
            report(switchyard_policy::project::build::build(&dir).map(|wasm| println!("{}", wasm.display())))
        }
        Command::Plugin { command: PluginCommand::Test { dir, calls, plugin, config, config_file } } => {
            report(plugin_test(&dir, calls, plugin, config.as_deref(), config_file.as_deref()))
        }
        Command::Plugin { command: PluginCommand::Examples { dir } } => {
            report(switchyard_policy::embedded::write_examples(&dir).map(|written| {
                for p in written {
                    println!("{}", p.display());
                }
            }))
        }
    };
    // Queued log lines (and the count of any that were dropped) reach stderr before exit.
    switchyard_core::logging::flush();
    code
}

/// `plugin test`: the project's defaults for what is not given, then the replay's report.
fn plugin_test(
    dir: &std::path::Path,
    calls: Option<PathBuf>,
    plugin: Option<PathBuf>,
    config_json: Option<&str>,
    config_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use switchyard_policy::project;
    let plugin = match plugin {
        Some(p) => p,
        None => project::output_path(dir)?,
    };
    let calls = calls.unwrap_or_else(|| dir.join("calls.jsonl"));
    let replayed = project::recorded::replay(&plugin, &calls, &project::recorded::Options { config_json, config_file });
    print!("{}", replayed.text);
    replayed.result
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Never eprintln!: it panics when stderr is closed.
            switchyard_core::logging::write(format!("switchyard: error: {e:#}\n").into_bytes());
            ExitCode::FAILURE
        }
    }
}
