//! Sign-in against a real authorization server: oidc-provider (pinned in tests/npm, set up by
//! tests/npm/oauth-server.mjs) guards a real MCP server (the TypeScript SDK's, in
//! tests/npm/oauth-mcp-server.mjs) that takes only JWT access tokens signed for its own URL.
//! The browser is curl following redirects with cookies; the provider's sign-in page logs a
//! fixed user in and grants consent by itself.
//!
//! The conformance suite's `auth/*` scenarios (conformance_auth.rs) check each step against
//! the spec's own test servers; this checks that the whole flow works with a server built for
//! production: dynamic registration, PKCE, the resource indicator as the token's audience,
//! refresh tokens (which oidc-provider gives only for `offline_access` with consent), refresh
//! before expiry and after a refusal (by `run` and by the daemon), `login --no-browser`,
//! `logout`, and that no token shows in a log, `status` or the process list.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use switchyard_testkit::KillOnDrop;
use switchyard_testkit::http_servers::{free_port, local, wait_for_port};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::npm_setup::{ensure_npm, npm_dir};

/// The browser: follows every redirect, keeping the provider's cookies, to switchyard's
/// loopback listener.
const BROWSER: &str = "curl -sS -L -b /dev/null -o /dev/null --max-time 30";
/// Access tokens last this long: under switchyard's refresh margin (60 s), so a token is
/// refreshed at half its life ([`REFRESH_AT`] left), used as it is before then.
const ACCESS_TOKEN_TTL: u64 = 20;
/// How long before its expiry a token of [`ACCESS_TOKEN_TTL`] is refreshed: half its life.
const REFRESH_AT: u64 = ACCESS_TOKEN_TTL / 2;
/// How long a server may take to start, and an awaited event to come.
const LIMIT: Duration = Duration::from_secs(30);

/// The authorization server and the MCP server it guards, each printing its events (JSON lines)
/// to a file. Their output is shown when a test fails.
struct Servers {
    issuer: String,
    url: String,
    dir: tempfile::TempDir,
    _children: Vec<KillOnDrop>,
}

impl Servers {
    fn start() -> Servers {
        ensure_npm();
        let curl = Command::new("curl").arg("--version").stdout(Stdio::null()).status();
        assert!(curl.is_ok_and(|s| s.success()), "the browser stand-in needs curl on PATH");
        let dir = switchyard_testkit::temp_dir();
        let (as_port, mcp_port) = (free_port(), free_port());
        let issuer = format!("http://127.0.0.1:{as_port}");
        let url = format!("http://127.0.0.1:{mcp_port}/mcp");
        let spawn = |name: &str, args: &[&str]| {
            let out = std::fs::File::create(dir.path().join(format!("{name}.out"))).unwrap();
            let err = std::fs::File::create(dir.path().join(format!("{name}.err"))).unwrap();
            KillOnDrop(
                Command::new("node")
                    .arg(npm_dir().join(format!("{name}.mjs")))
                    .args(args)
                    .current_dir(npm_dir())
                    .stdin(Stdio::null())
                    .stdout(out)
                    .stderr(err)
                    .spawn()
                    .unwrap_or_else(|e| panic!("start {name}: {e}")),
            )
        };
        let children = vec![
            spawn("oauth-server", &[&as_port.to_string(), &url, &ACCESS_TOKEN_TTL.to_string()]),
            spawn("oauth-mcp-server", &[&mcp_port.to_string(), &issuer]),
        ];
        let servers = Servers { issuer, url, dir, _children: children };
        for port in [as_port, mcp_port] {
            assert!(wait_for_port(local(port), LIMIT), "a server did not listen on {port}");
        }
        servers
    }

    /// The events `name` printed so far.
    fn events(&self, name: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.path().join(format!("{name}.out"))).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    /// The authorization server's events named `event`.
    fn provider(&self, event: &str) -> Vec<Value> {
        self.events("oauth-server").into_iter().filter(|e| e["event"] == event).collect()
    }

    /// The token grants the provider made, by grant type.
    fn grants(&self) -> Vec<String> {
        self.provider("grant").iter().map(|g| g["grant_type"].as_str().unwrap().to_string()).collect()
    }

    /// Tells the MCP server to refuse every token it has seen (as if they were revoked).
    fn revoke_seen(&self) {
        let admin = self.url.replace("/mcp", "/test/revoke-seen");
        let out = Command::new("curl").args(["-sS", "-f", "-X", "POST", &admin]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for name in ["oauth-server", "oauth-mcp-server"] {
                for ext in ["out", "err"] {
                    let text =
                        std::fs::read_to_string(self.dir.path().join(format!("{name}.{ext}"))).unwrap_or_default();
                    eprintln!("--- {name} {ext} ---\n{text}");
                }
            }
        }
    }
}

/// The one token file under `state` (XDG_STATE_HOME), checked to be the user's alone.
fn token_file(state: &Path) -> (PathBuf, Value) {
    // Beside the token file are the empty files that lock a sign-in.
    let files: Vec<PathBuf> = std::fs::read_dir(state.join("switchyard/oauth"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&files[0]).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "the token file's mode");
    let stored = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    (files[0].clone(), stored)
}

/// The access and refresh tokens of a token file.
fn secrets(stored: &Value) -> Vec<String> {
    let t = &stored["tokens"];
    let out: Vec<String> =
        ["access_token", "refresh_token"].iter().filter_map(|k| t[k].as_str()).map(str::to_string).collect();
    assert_eq!(out.len(), 2, "an access token and a refresh token are kept");
    out
}

/// Fails when a process's command line holds one of `secrets`.
fn assert_not_in_process_list(secrets: &[String]) {
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline);
        for s in secrets {
            assert!(!cmdline.contains(s.as_str()), "a token is in the command line of {:?}", entry.path());
        }
    }
}

/// `whoami`'s answer.
async fn whoami(c: &mut switchyard_testkit::Client) -> Value {
    serde_json::from_str(&c.call_text("whoami", json!({})).await).unwrap()
}

/// Waits until the access token kept under `state` is due for a refresh ([`REFRESH_AT`] before
/// its expiry): about half of [`ACCESS_TOKEN_TTL`].
async fn wait_for_refresh_margin(state: &Path) {
    let (_, stored) = token_file(state);
    let expires_at = stored["tokens"]["expires_at"].as_u64().unwrap();
    let now = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let deadline = Instant::now() + Duration::from_secs(ACCESS_TOKEN_TTL);
    while now() + REFRESH_AT < expires_at {
        assert!(Instant::now() < deadline, "the clock did not reach the refresh margin");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_url_signs_in_on_the_first_call_and_refreshes_before_expiry_and_after_a_refusal() {
    let servers = Servers::start();
    let dir = switchyard_testkit::temp_dir();
    let state = dir.path().join("state");
    let argv: Vec<String> = [switchyard_testkit::bin(), "run", "--url", &servers.url].map(String::from).to_vec();
    let envs = [("XDG_STATE_HOME", state.to_str().unwrap()), ("BROWSER", BROWSER), ("RUST_LOG", "trace")];
    let mut p = switchyard_testkit::Proc::spawn_env("run --url", &argv, &envs);
    let mut c = p.client();

    // The first request meets the 401 and signs in; nothing else is done by hand.
    c.initialize().await;
    let me = whoami(&mut c).await;
    assert_eq!(me["sub"], "test-user", "{me}");
    assert_eq!(me["aud"], servers.url.as_str(), "the token is for this server alone: {me}");
    let registered = servers.provider("registration");
    assert_eq!(registered.len(), 1, "{registered:?}");
    assert_eq!(registered[0]["auth_method"], "none", "a public client, registered dynamically");
    assert_eq!(registered[0]["application_type"], "native");
    let authorized = servers.provider("authorization");
    assert_eq!(authorized.len(), 1, "{authorized:?}");
    assert_eq!(authorized[0]["code_challenge_method"], "S256");
    assert_eq!(authorized[0]["resource"], servers.url.as_str());
    assert_eq!(authorized[0]["scope"], "mcp:tools offline_access", "offline access survived (prompt=consent)");
    assert_eq!(servers.grants(), ["authorization_code"]);
    assert!(servers.provider("grant").iter().all(|g| g["resource"] == servers.url.as_str()));
    let first = servers.events("oauth-mcp-server");
    assert!(first.iter().any(|e| e["token"] == "none"), "the server was first asked without a token: {first:?}");

    let (_, stored) = token_file(&state);
    let mut seen = secrets(&stored);
    assert_eq!(stored["tokens"]["resource"], servers.url.as_str());
    assert_eq!(stored["tokens"]["issuer"], servers.issuer.as_str());

    // A token with more than the margin left is used as it is.
    assert_eq!(whoami(&mut c).await["jti"], me["jti"]);
    assert_eq!(servers.grants(), ["authorization_code"]);

    // The server refuses the token (as if revoked): switchyard refreshes and sends the call
    // again, with no new sign-in.
    servers.revoke_seen();
    let after_refusal = whoami(&mut c).await;
    assert_ne!(after_refusal["jti"], me["jti"], "a new token");
    assert_eq!(servers.grants(), ["authorization_code", "refresh_token"]);
    assert_eq!(servers.provider("authorization").len(), 1, "no second sign-in");
    let (_, stored) = token_file(&state);
    seen.extend(secrets(&stored));

    // Once the token is past half its life (it lives less than the 60 s margin), the next call
    // refreshes it before it is sent.
    wait_for_refresh_margin(&state).await;
    let refreshed = whoami(&mut c).await;
    assert_ne!(refreshed["jti"], after_refusal["jti"], "a new token");
    assert_eq!(servers.grants(), ["authorization_code", "refresh_token", "refresh_token"]);
    let refused = servers.events("oauth-mcp-server").iter().filter(|e| e["token"] == "refused").count();
    assert_eq!(refused, 1, "only the revoked token was refused: the refresh came before expiry");
    let (_, stored) = token_file(&state);
    seen.extend(secrets(&stored));

    assert_not_in_process_list(&seen);
    c.close().await;
    p.wait_timeout(Duration::from_secs(10)).await;
    let log = p.stderr.text();
    assert!(log.contains("sign in at"), "the sign-in was logged:\n{log}");
    for s in &seen {
        assert!(!log.contains(s.as_str()), "a token is in the log at trace level");
    }

    // `run --url`'s server is in no config file: it is signed out of by its URL.
    let no_config = dir.path().join("no-config");
    let out = Command::new(switchyard_testkit::bin())
        .args(["logout", &servers.url])
        .env("XDG_STATE_HOME", &state)
        .env("XDG_CONFIG_HOME", &no_config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("Signed out of server"), "{said}");
    let left: Vec<PathBuf> =
        std::fs::read_dir(state.join("switchyard/oauth")).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.iter().all(|p| p.extension().is_some_and(|e| e == "lock")), "the token file is gone: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_no_browser_then_connect_then_logout_through_the_daemon() {
    let servers = Servers::start();
    let home = switchyard_testkit::daemon::Home::new();
    // The daemon never opens a browser: only `login` signs in.
    home.write_config(&format!(
        "[servers.tracker]\nurl = {:?}\n[servers.tracker.oauth]\nopen_browser = false\nlogin_timeout_ms = 1500\n",
        servers.url
    ));
    let config = home.config_str();

    // `login --no-browser` prints the URL and waits; the browser is pointed at it by hand.
    let mut login = tokio::process::Command::new(switchyard_testkit::bin())
        .args(["login", "tracker", "--no-browser", "--config", &config])
        .envs(home.envs())
        .env("BROWSER", "false")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(login.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.trim().strip_prefix(&format!("{}/auth?", servers.issuer)) {
                return format!("{}/auth?{url}", servers.issuer);
            }
        }
        panic!("login ended without printing the URL");
    })
    .await
    .expect("login printed the URL");
    let browser = Command::new("sh").arg("-c").arg(format!("{BROWSER} \"$1\"")).arg("browser").arg(&url).status();
    assert!(browser.unwrap().success(), "the browser followed the redirects");
    let done = tokio::time::timeout(LIMIT, login.wait_with_output()).await.expect("login ended").unwrap();
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "login failed: {said}");
    assert!(said.contains("Signed in to server `tracker`; the token expires in"), "{said}");
    assert!(said.contains("and is refreshed before then"), "a refresh token came: {said}");
    assert_eq!(servers.grants(), ["authorization_code"]);

    let state = home.path().join("state");
    let (file, stored) = token_file(&state);
    let mut seen = secrets(&stored);

    let (_relay, mut c) = home.client("tracker").await;
    let me = whoami(&mut c).await;
    assert_eq!(me["sub"], "test-user");
    // The daemon refreshes the token `login` got, without the client noticing.
    let refreshes = servers.grants().len();
    wait_for_refresh_margin(&state).await;
    let refreshed = whoami(&mut c).await;
    assert_ne!(refreshed["jti"], me["jti"], "a new token");
    assert_eq!(servers.grants()[refreshes..], ["refresh_token"]);
    let (_, stored) = token_file(&state);
    seen.extend(secrets(&stored));

    let text = home.status_text().await;
    assert!(text.contains("tracker: signed in (the token expires in"), "{text}");
    let status = home.status_json().await;
    let sign_in = &status["servers"][0]["sign_in"];
    assert_eq!(sign_in["state"], "signed_in", "{status}");
    assert_eq!(sign_in["issuer"], servers.issuer.as_str());
    assert!(sign_in["expires_at"].as_u64().unwrap() > SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs());
    let json = status.to_string();
    let logs = home.logs();
    for s in &seen {
        assert!(!text.contains(s.as_str()) && !json.contains(s.as_str()), "status shows a token");
        assert!(!logs.contains(s.as_str()), "the daemon's log holds a token");
    }
    assert_not_in_process_list(&seen);

    // `logout` forgets the tokens, and the running daemon follows: the next call is refused
    // within the bound, naming `switchyard login`.
    let out = home.cli(&["logout", "tracker", "--config", &config]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!file.exists(), "the token file is gone");
    assert!(home.status_text().await.contains("tracker: not signed in (`switchyard login tracker`)"));
    let asked = Instant::now();
    let resp = c.call_tool("whoami", json!({})).await;
    let waited = asked.elapsed();
    let why = resp["error"]["message"].as_str().unwrap_or_else(|| panic!("an error: {resp}")).to_string();
    assert!(why.contains("nobody signed in within 1 s") && why.contains("`switchyard login tracker`"), "{why}");
    // One sign-in's wait (1.5 s), not one per repeat of the call.
    assert!(!why.contains("repeated"), "{why}");
    assert!(waited < Duration::from_secs(5), "the call waited {waited:?}");
    assert_eq!(servers.provider("authorization").len(), 1, "the daemon did not sign in by itself");
    let text = home.status_text().await;
    assert!(
        text.contains("tracker: not signed in: the last sign-in failed: the browser sign-in failed: nobody signed in"),
        "{text}"
    );
    c.close().await;
    home.shutdown().await;
}
