//! A user's daemon under test: a home of its own (every XDG directory in one temp dir), its
//! config file, `connect` clients, `status` and `stop`, and a sweep of the processes it left.
//!
//! Every switchyard process a test starts gets the home's environment, so the daemon it starts
//! (and that daemon's servers) can be found again in the process table by that environment,
//! whatever their command lines look like: that is how a test asserts "no orphans" and how Drop
//! makes sure no test leaves a daemon or a server behind.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Client, Proc, TempDir, bin, pid_alive, temp_dir};

/// How long a `status` or `stop` command may take before the test fails.
const CLI_LIMIT: Duration = Duration::from_secs(20);
/// How long a client of [`Home::client_as`] waits for an answer, and [`leave`] for its
/// `connect` to exit.
const CLIENT_LIMIT: Duration = Duration::from_secs(20);

/// One test's user: XDG_RUNTIME_DIR, XDG_STATE_HOME, XDG_CONFIG_HOME and HOME under a temp dir,
/// and a config file `switchyard.toml` in it.
pub struct Home {
    pub dir: TempDir,
    pub config: PathBuf,
}

/// A process of this test's home, from /proc.
#[derive(Debug, Clone)]
pub struct ProcInfo {
    pub pid: u32,
    pub argv: Vec<String>,
}

impl ProcInfo {
    /// Whether it is `switchyard SUBCOMMAND ...` (argv[1]).
    pub fn is(&self, subcommand: &str) -> bool {
        self.argv.get(1).is_some_and(|a| a == subcommand)
    }
}

impl Home {
    pub fn new() -> Home {
        let dir = temp_dir();
        for sub in ["run", "state", "config"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        // XDG_RUNTIME_DIR is 0700 on a real system; the daemon's own directory goes inside.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path().join("run"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let config = dir.path().join("switchyard.toml");
        Home { dir, config }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_str(&self) -> String {
        self.config.display().to_string()
    }

    pub fn runtime_dir(&self) -> PathBuf {
        self.path().join("run")
    }

    /// The environment of every switchyard process of this test.
    pub fn envs(&self) -> Vec<(String, String)> {
        let p = |sub: &str| self.path().join(sub).display().to_string();
        vec![
            ("XDG_RUNTIME_DIR".into(), p("run")),
            ("XDG_STATE_HOME".into(), p("state")),
            ("XDG_CONFIG_HOME".into(), p("config")),
            ("HOME".into(), self.path().display().to_string()),
        ]
    }

    /// The `XDG_RUNTIME_DIR=...` entry that marks this test's processes.
    fn marker(&self) -> String {
        format!("XDG_RUNTIME_DIR={}", self.runtime_dir().display())
    }

    /// The journal file of the fixture server `name` (see [`Home::fixture`]).
    pub fn journal(&self, name: &str) -> PathBuf {
        self.path().join(format!("{name}.journal.jsonl"))
    }

    /// A `[servers.NAME]` table running the fixture as `--name NAME`, journalling to
    /// [`Home::journal`], with `extra` fixture arguments.
    pub fn fixture(&self, name: &str, extra: &[&str]) -> String {
        self.fixture_named(name, name, extra)
    }

    /// Like [`Home::fixture`], with `--name LABEL` (what the `pid` tool reports) set apart from
    /// the server's name in the config.
    pub fn fixture_named(&self, name: &str, label: &str, extra: &[&str]) -> String {
        let mut args = vec!["fixture".to_string(), "--name".into(), label.into()];
        args.extend(["--journal".into(), self.journal(name).display().to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        format!("[servers.{name}]\ncommand = {}\nargs = {}\n", json!(bin()), json!(args))
    }

    /// Writes the config file in place (as most editors do).
    pub fn write_config(&self, text: &str) {
        std::fs::write(&self.config, text).unwrap();
    }

    /// Writes the config file as a whole new file renamed over the old one (as careful tools do).
    pub fn replace_config(&self, text: &str) {
        let tmp = self.path().join(".switchyard.toml.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.config).unwrap();
    }

    /// `switchyard ARGS...` with this home's environment and stdio piped (a Proc).
    pub fn spawn(&self, label: &str, args: &[&str]) -> Proc {
        let mut argv = vec![bin().to_string()];
        argv.extend(args.iter().map(|s| s.to_string()));
        let envs = self.envs();
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Proc::spawn_env(label, &argv, &envs)
    }

    /// The command line of `switchyard connect SERVER --config FILE`, for a client that starts
    /// its server itself (an SDK client); give it this home's [`Home::envs`].
    pub fn connect_command(&self, server: &str) -> Vec<String> {
        [bin(), "connect", server, "--config", &self.config_str()].map(String::from).to_vec()
    }

    /// `switchyard connect SERVER --config FILE`, as a client launches it.
    pub fn connect(&self, server: &str) -> Proc {
        let config = self.config_str();
        self.spawn(&format!("connect {server}"), &["connect", server, "--config", &config])
    }

    /// `switchyard connect SERVER --config FILE --env NAME,...` for the names of `vars`, with
    /// `vars` in its environment, as an MCP client's entry with an `env` launches it.
    pub fn connect_env(&self, server: &str, vars: &[(&str, &str)]) -> Proc {
        let config = self.config_str();
        let names = vars.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(",");
        let mut argv = vec![bin().to_string()];
        argv.extend(["connect", server, "--config", &config, "--env", &names].map(String::from));
        let mut envs = self.envs();
        envs.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Proc::spawn_env(&format!("connect {server} --env {names}"), &argv, &envs)
    }

    /// [`Home::connect_env`] and an initialized client on it.
    pub async fn client_env(&self, server: &str, vars: &[(&str, &str)]) -> (Proc, Client) {
        let mut p = self.connect_env(server, vars);
        let mut c = p.client();
        c.initialize().await;
        (p, c)
    }

    /// `connect` and an initialized client on it.
    pub async fn client(&self, server: &str) -> (Proc, Client) {
        let mut p = self.connect(server);
        let mut c = p.client();
        c.initialize().await;
        (p, c)
    }

    /// `switchyard connect ARGS --config FILE` (ARGS: `[SERVER]`, or `["--group", NAME]`) and a
    /// client on it that initialises as client `name` declaring `capabilities`; it waits
    /// [`CLIENT_LIMIT`] for each answer.
    pub async fn client_as(&self, args: &[&str], name: &str, capabilities: Value) -> (Proc, Client) {
        let (p, c, _) = self.initialized(args, name, capabilities).await;
        (p, c)
    }

    /// `switchyard connect SERVER` and a client on it that initialises as client `name`,
    /// declaring no capabilities (see [`Home::client_as`]).
    pub async fn client_named(&self, server: &str, name: &str) -> (Proc, Client) {
        self.client_as(&[server], name, json!({})).await
    }

    /// [`Home::client_as`], with the answer to its `initialize`.
    pub async fn initialized(&self, args: &[&str], name: &str, capabilities: Value) -> (Proc, Client, Value) {
        let config = self.config_str();
        let mut argv = vec!["connect"];
        argv.extend(args);
        argv.extend(["--config", &config]);
        let mut p = self.spawn(&argv[..argv.len() - 2].join(" "), &argv);
        let mut c = p.client();
        c.timeout = CLIENT_LIMIT;
        let params = json!({
            "protocolVersion": "2025-06-18",
            "capabilities": capabilities,
            "clientInfo": {"name": name, "version": "1.0.0"},
        });
        let resp = c.request("initialize", params).await;
        assert!(resp.get("result").is_some(), "initialize of `{}` as {name} failed: {resp}", args.join(" "));
        c.notify("notifications/initialized", json!({})).await;
        (p, c, resp)
    }

    /// Copies `plugins` (file name, where from) into the plugins directory beside the config,
    /// each renamed into place ([`crate::install_plugin`]).
    pub fn install_plugins(&self, plugins: &[(&str, PathBuf)]) {
        let dir = self.path().join("plugins");
        for (name, from) in plugins {
            crate::install_plugin(&dir, from, name);
        }
    }

    /// Copies the example plugin `file` ([`example`]) into the plugins directory beside the config.
    pub fn install_example(&self, file: &str) {
        self.install_plugins(&[(file, example(file))]);
    }

    /// `switchyard ARGS...` run to completion (failing the test after CLI_LIMIT).
    pub async fn cli(&self, args: &[&str]) -> Output {
        let mut cmd = tokio::process::Command::new(bin());
        cmd.args(args).envs(self.envs()).stdin(std::process::Stdio::null()).kill_on_drop(true);
        match tokio::time::timeout(CLI_LIMIT, cmd.output()).await {
            Ok(out) => out.unwrap_or_else(|e| panic!("run switchyard {args:?}: {e}")),
            Err(_) => panic!("switchyard {args:?} did not finish within {CLI_LIMIT:?}"),
        }
    }

    /// `switchyard status --json --config FILE`, parsed; fails the test when it fails.
    pub async fn status_json(&self) -> Value {
        let config = self.config_str();
        let out = self.cli(&["status", "--json", "--config", &config]).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "status --json failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("status --json printed no JSON object ({e}):\n{stdout}"))
    }

    /// `switchyard status --config FILE` (the text form); fails the test when it fails.
    pub async fn status_text(&self) -> String {
        let config = self.config_str();
        let out = self.cli(&["status", "--config", &config]).await;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "status failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Polls `status --json` until `pred` holds for it; returns that status.
    pub async fn wait_status(&self, what: &str, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let status = self.status_json().await;
            if pred(&status) {
                return status;
            }
            if Instant::now() >= deadline {
                panic!("status never showed {what} within {limit:?}; last status:\n{status:#}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts the daemon of this home's config (which has an `[http]` table) in the background;
    /// its front's base URL (`http://127.0.0.1:PORT`, from `status`) and bearer token (from
    /// `switchyard token`). The daemon starts with the usual soft limit of open files (1024),
    /// which it raises itself for HTTP clients.
    pub async fn start_http(&self) -> (String, String) {
        self.start_http_limited("ulimit -Sn 1024").await
    }

    /// [`Home::start_http`] with a hard limit of `n` open files too (a desktop's usual 1024,
    /// say), so the daemon cannot raise its soft limit past it.
    pub async fn start_http_with_open_files(&self, n: u32) -> (String, String) {
        self.start_http_limited(&format!("ulimit -Sn {n} && ulimit -Hn {n}")).await
    }

    async fn start_http_limited(&self, ulimit: &str) -> (String, String) {
        let cfg = self.config_str();
        let mut cmd = tokio::process::Command::new("sh");
        let script = format!(r#"{ulimit} && exec "$0" daemon --config "$1" --detach"#);
        cmd.arg("-c").arg(script).arg(bin()).arg(&cfg);
        let out = cmd.envs(self.envs()).stdin(std::process::Stdio::null()).output().await.unwrap();
        assert!(out.status.success(), "daemon --detach failed: {}", String::from_utf8_lossy(&out.stderr));
        let status = self.status_json().await;
        let listen = status["http"]["listen"].as_str().unwrap_or_else(|| panic!("no http in status: {status}"));
        let base = format!("http://{listen}");
        let out = self.cli(&["token", "--config", &cfg]).await;
        let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert!(token.len() > 20, "`switchyard token` printed no token");
        (base, token)
    }

    /// The daemon's pid, from `status --json`.
    pub async fn daemon_pid(&self) -> u32 {
        let status = self.status_json().await;
        status["pid"].as_u64().unwrap_or_else(|| panic!("status has no pid: {status}")) as u32
    }

    /// `switchyard stop --config FILE`; fails the test when it fails.
    pub async fn stop(&self) -> Output {
        let config = self.config_str();
        let out = self.cli(&["stop", "--config", &config]).await;
        assert!(
            out.status.success(),
            "stop failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// The end of a test: `stop`, then no process of this home may be left (none orphaned).
    pub async fn shutdown(&self) {
        if !self.daemons().is_empty() {
            self.stop().await;
        }
        self.wait_no_processes(Duration::from_secs(10)).await;
    }

    /// Every live process of this home (connects, daemons, their supervisors and servers), from
    /// /proc: started with this home's environment, or naming a file of this home on its command
    /// line (a client that starts `connect` with a bare environment, as the SDKs and Codex do,
    /// starts a daemon without the environment; its `--config` is still this home's).
    pub fn processes(&self) -> Vec<ProcInfo> {
        let marker = self.marker();
        let home = self.path().display().to_string();
        let mut found = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else { return found };
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
            let argv: Vec<String> = cmdline
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let ours = environ.split(|b| *b == 0).any(|var| var == marker.as_bytes())
                || argv.iter().any(|a| a.starts_with(&home));
            if !ours || !pid_alive(pid) {
                continue;
            }
            found.push(ProcInfo { pid, argv });
        }
        found
    }

    /// This home's `switchyard daemon` processes (a `--detach` launcher included while it runs).
    pub fn daemons(&self) -> Vec<ProcInfo> {
        self.processes().into_iter().filter(|p| p.is("daemon")).collect()
    }

    /// This home's fixture server processes (not their supervisors).
    pub fn servers(&self) -> Vec<ProcInfo> {
        self.processes().into_iter().filter(|p| p.is("fixture")).collect()
    }

    /// Waits until no process of this home is left; panics naming the survivors.
    pub async fn wait_no_processes(&self, limit: Duration) {
        self.wait_processes("no process of the test", limit, |ps| ps.is_empty()).await;
    }

    /// Polls the process table until `pred` holds for this home's processes; returns them.
    pub async fn wait_processes(
        &self,
        what: &str,
        limit: Duration,
        pred: impl Fn(&[ProcInfo]) -> bool,
    ) -> Vec<ProcInfo> {
        let deadline = Instant::now() + limit;
        loop {
            let ps = self.processes();
            if pred(&ps) {
                return ps;
            }
            if Instant::now() >= deadline {
                panic!("{what}: not so within {limit:?}; processes of the test:\n{}", render(&ps));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The daemon's socket, if it is there.
    pub fn socket(&self) -> Option<PathBuf> {
        let path = self.socket_path();
        path.exists().then_some(path)
    }

    /// Where this config's daemon has its socket, worked out as the docs say (docs/daemon.md):
    /// in the user's runtime directory, found from the uid alone, named from the config file's
    /// stem and a hash of its absolute path.
    pub fn socket_path(&self) -> PathBuf {
        use sha2::Digest;
        use std::os::unix::fs::MetadataExt;
        let uid = rustix::process::getuid().as_raw();
        let system = PathBuf::from(format!("/run/user/{uid}"));
        let dir = match std::fs::metadata(&system) {
            Ok(m) if m.is_dir() && m.uid() == uid => system.join("switchyard"),
            _ => PathBuf::from(format!("/tmp/switchyard-{uid}")),
        };
        let parent = std::fs::canonicalize(self.config.parent().unwrap()).unwrap();
        let canonical = parent.join(self.config.file_name().unwrap());
        let hash = sha2::Sha256::digest(canonical.as_os_str().as_encoded_bytes());
        let hex: String = hash.iter().take(6).map(|b| format!("{b:02x}")).collect();
        let stem = canonical.file_stem().unwrap().to_string_lossy();
        dir.join(format!("{stem}-{hex}.sock"))
    }

    /// Everything in the daemon's log files (the state directory), for failures and log checks.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let Ok(dir) = std::fs::read_dir(self.path().join("state/switchyard")) else { return out };
        // Not the HTTP front's token files, nor the daemon's copy of the config file that last
        // loaded (it holds what the file holds): a secret has no place in a test's output.
        let mut files: Vec<PathBuf> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_none_or(|x| x != "token"))
            .filter(|p| !p.to_string_lossy().ends_with(".last-good.toml"))
            .collect();
        files.sort();
        for f in files {
            out += &format!("--- {} ---\n{}", f.display(), std::fs::read_to_string(&f).unwrap_or_default());
        }
        out
    }
}

impl Default for Home {
    fn default() -> Self {
        Home::new()
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- processes of the test ---\n{}--- daemon logs ---\n{}",
                render(&self.processes()),
                self.logs()
            );
        }
        // A clean stop first (the daemon stops its servers), then SIGKILL for whatever is left.
        if !self.daemons().is_empty() {
            let config = self.config_str();
            let mut cmd = std::process::Command::new(bin());
            cmd.args(["stop", "--config", &config])
                .envs(self.envs())
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            if let Ok(mut child) = cmd.spawn() {
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left = self.processes();
            if left.is_empty() || Instant::now() >= deadline {
                break;
            }
            for p in left {
                crate::signal_pid(p.pid, libc::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One line per process: pid and command line.
pub fn render(ps: &[ProcInfo]) -> String {
    ps.iter().map(|p| format!("  {} {}\n", p.pid, p.argv.join(" "))).collect()
}

/// Closes a client's input and waits for its `connect` to exit.
pub async fn leave(mut p: Proc, mut c: Client) {
    c.close().await;
    p.wait_timeout(CLIENT_LIMIT).await;
}

/// The names of a `tools/list` response's tools, in order.
pub fn tool_names(list: &Value) -> Vec<String> {
    let tools = list["result"]["tools"].as_array().unwrap_or_else(|| panic!("no tools in {list}"));
    tools
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_else(|| panic!("a tool without a name in {list}")).to_string())
        .collect()
}

/// The example plugin `file` as the build made it (examples/plugins).
pub fn example(file: &str) -> PathBuf {
    super::example_plugins().join(file)
}

/// The servers of a status, by name.
pub fn status_server<'a>(status: &'a Value, name: &str) -> Option<&'a Value> {
    status["servers"].as_array()?.iter().find(|s| s["name"] == name)
}

/// How many sessions a server has in a status (0 when it is not listed).
pub fn sessions(status: &Value, name: &str) -> usize {
    status_server(status, name).and_then(|s| s["sessions"].as_array()).map_or(0, Vec::len)
}

/// The pids of a server's instances in a status.
pub fn instance_pids(status: &Value, name: &str) -> Vec<u32> {
    status_server(status, name)
        .and_then(|s| s["instances"].as_array())
        .map(|is| is.iter().filter_map(|i| i["pid"].as_u64()).map(|p| p as u32).collect())
        .unwrap_or_default()
}

/// The `pid` tool's answer: the instance's pid and `--name`.
pub async fn fixture_pid(c: &mut Client) -> (u32, String) {
    let text = c.call_text("pid", json!({})).await;
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("pid tool answered {text:?}: {e}"));
    (v["pid"].as_u64().expect("pid") as u32, v["name"].as_str().unwrap_or_default().to_string())
}

/// The parent of `pid` (0 when it is gone).
pub fn parent_pid(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0)
}

/// How many times the fixture behind `journal` started.
pub fn starts(journal: &Path) -> usize {
    super::events(&super::journal(journal), "start").count()
}
