//! The content plugins of `switchyard:policy@0.3.0` (examples/plugins: `redact`, `path-guard`,
//! `result-cap`, and the `hook-probe` fixture) in front of the real server-filesystem from
//! npm: what a client reads through `switchyard run`, the daemon (`connect NAME`) and its HTTP
//! front, in enforce and audit mode, and when a hook traps under `fail = "open"` and `"closed"`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::npm_setup::{ensure_npm, filesystem_entry};
use crate::setup::*;
use switchyard_testkit::daemon::Home;
use switchyard_testkit::*;

const SLOW: Duration = Duration::from_secs(30);

/// A made-up AWS key pair of the documented shapes (never issued).
const KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

fn example(name: &str) -> PathBuf {
    switchyard_testkit::example_plugins().join(name)
}

/// A directory for server-filesystem to serve, with `creds.txt` holding the fake key pair.
fn served_dir() -> (TempDir, PathBuf) {
    let work = temp_dir();
    let creds = work.path().join("creds.txt");
    std::fs::write(&creds, format!("[default]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n"))
        .unwrap();
    (work, creds)
}

fn server(dir: &Path) -> Vec<String> {
    ["node", filesystem_entry().to_str().unwrap(), dir.to_str().unwrap()].map(String::from).to_vec()
}

/// `switchyard run` in front of server-filesystem serving `dir`, with `plugins` and `config`;
/// initialised without roots, so the server keeps the directory it was started with.
async fn run_in_front(dir: &Path, config: &str, plugins: &[&Path]) -> Setup {
    ensure_npm();
    let mut s = Setup::in_front_of(&server(dir), &[], Some(config), plugins).await;
    s.client.timeout = SLOW;
    let init = s.client.request("initialize", init_params(json!({}))).await;
    assert!(init.get("result").is_some(), "{init}");
    s.client.notify("notifications/initialized", json!({})).await;
    s
}

fn read(path: &Path) -> Value {
    json!({"path": path.to_str().unwrap()})
}

/// The redacted text of the fake credentials file, as every way in must show it.
fn assert_redacted(text: &str, via: &str) {
    assert!(!text.contains(KEY_ID) && !text.contains(SECRET), "{via}: a key got through:\n{text}");
    assert!(
        text.contains("aws_access_key_id = [redacted: aws-access-key]")
            && text.contains("aws_secret_access_key = [redacted: aws-secret-key]"),
        "{via}: not redacted as expected:\n{text}"
    );
    assert!(text.starts_with("[default]\n"), "{via}: the rest of the file is as it was:\n{text}");
}

/// Waits until `stderr` holds `needle`, then returns it.
async fn stderr_with(stderr: &Stderr, needle: &str) -> String {
    let end = Instant::now() + SLOW;
    loop {
        let text = stderr.text();
        if text.contains(needle) || Instant::now() > end {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Issue 42: a file holding a cloud key, read through server-filesystem, reaches the client
/// with the key redacted through `switchyard run`, the daemon (`connect fs`) and its HTTP front.
#[tokio::test]
async fn redact_hides_a_cloud_key_through_run_the_daemon_and_the_http_front() {
    let (work, creds) = served_dir();
    let entry = "[[plugins]]\nfile = \"redact.wasm\"\n";

    let mut s = run_in_front(work.path(), entry, &[&example("redact.wasm")]).await;
    assert_redacted(&s.client.call_text("read_text_file", read(&creds)).await, "switchyard run");

    let home = Home::new();
    let args = json!([filesystem_entry().to_str().unwrap(), work.path().to_str().unwrap()]);
    home.write_config(&format!(
        "[servers.fs]\ncommand = \"node\"\nargs = {args}\n[http]\nlisten = \"127.0.0.1:0\"\n{entry}"
    ));
    let plugins = home.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(example("redact.wasm"), plugins.join("redact.wasm")).unwrap();
    let (base, token) = home.start_http().await;

    let mut p = home.connect("fs");
    let mut c = p.client();
    c.timeout = SLOW;
    let init = c.request("initialize", init_params(json!({}))).await;
    assert!(init.get("result").is_some(), "{init}");
    c.notify("notifications/initialized", json!({})).await;
    assert_redacted(&c.call_text("read_text_file", read(&creds)).await, "the daemon (connect fs)");

    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = Http { client: reqwest::Client::new(), url: format!("{base}/mcp/fs"), token, session: None };
    let mut http = http.initialized().await;
    let r = http
        .post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "read_text_file", "arguments": read(&creds)}}))
        .await;
    assert_redacted(tool_text(&r), "the HTTP front");
    assert!(!home.logs().contains(KEY_ID), "the daemon's log holds the key");
    c.close().await;
    p.wait_timeout(SLOW).await;
    home.shutdown().await;
}

/// A client of the daemon's HTTP front that takes JSON answers.
struct Http {
    client: reqwest::Client,
    url: String,
    token: String,
    session: Option<String>,
}

impl Http {
    async fn post(&mut self, body: Value) -> Value {
        let mut r = self
            .client
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(body.to_string());
        if let Some(s) = &self.session {
            r = r.header("mcp-session-id", s).header("mcp-protocol-version", "2025-06-18");
        }
        let resp = tokio::time::timeout(SLOW, r.send()).await.expect("the front went silent").unwrap();
        if let Some(sid) = resp.headers().get("mcp-session-id") {
            self.session = Some(sid.to_str().unwrap().to_string());
        }
        let text = resp.text().await.unwrap();
        if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}")) }
    }

    async fn initialized(mut self) -> Http {
        let init =
            self.post(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init_params(json!({}))}));
        let init = init.await;
        assert!(init.get("result").is_some() && self.session.is_some(), "{init}");
        self.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        self
    }
}

/// Issue 42: in audit mode the plugin runs, the client reads the file as it is, and the log
/// says once what the plugin would have done (never the key).
#[tokio::test]
async fn audit_mode_returns_the_key_unchanged_and_logs_one_line() {
    let (work, creds) = served_dir();
    let entry = "[[plugins]]\nfile = \"redact.wasm\"\nmode = \"audit\"\n";
    let mut s = run_in_front(work.path(), entry, &[&example("redact.wasm")]).await;
    let text = s.client.call_text("read_text_file", read(&creds)).await;
    assert_eq!(text, std::fs::read_to_string(&creds).unwrap(), "audit mode changed the result");
    let log = stderr_with(&s.router.stderr, "would modify").await;
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("would modify")).collect();
    assert_eq!(lines.len(), 1, "one line for one call:\n{log}");
    assert!(lines[0].contains("redact") && lines[0].contains("read_text_file"), "{}", lines[0]);
    assert!(!log.contains(KEY_ID) && !log.contains(SECRET), "the log holds the key:\n{log}");
    // A file without a secret is not modified, so nothing more is logged.
    let plain = work.path().join("plain.txt");
    std::fs::write(&plain, "nothing to hide\n").unwrap();
    assert_eq!(s.client.call_text("read_text_file", read(&plain)).await, "nothing to hide\n");
    let log = s.router.stderr.text();
    assert_eq!(log.lines().filter(|l| l.contains("would modify")).count(), 1, "{log}");
}

/// Issue 42: a path outside path-guard's root is refused before server-filesystem sees it, as
/// a tool result (`isError`) the model can read, naming the plugin, the argument and the root;
/// a path inside is read as usual.
#[tokio::test]
async fn path_guard_refuses_a_path_outside_its_root_as_a_readable_error() {
    let (work, creds) = served_dir();
    let root = work.path().to_str().unwrap();
    let entry = format!("[[plugins]]\nfile = \"path-guard.wasm\"\nconfig = {{ roots = [{}] }}\n", json!(root));
    let mut s = run_in_front(work.path(), &entry, &[&example("path-guard.wasm")]).await;
    assert!(s.client.call_text("read_text_file", read(&creds)).await.contains(KEY_ID));

    let r = s.client.call_tool("read_text_file", json!({"path": "/etc/hostname"})).await;
    let text = refusal_text(&r);
    assert!(text.contains("path-guard") && text.contains("outside the allowed roots"), "{r}");
    assert!(text.contains("`path`") && text.contains(root), "names the argument and the root: {text}");
    let escape = format!("{root}/../../etc/hostname");
    let r = s.client.call_tool("read_text_file", json!({"path": escape})).await;
    assert!(refusal_text(&r).contains("outside the allowed roots"), "{r}");
    // A list of paths is checked whole: one outside refuses the call.
    let r = s.client.call_tool("read_multiple_files", json!({"paths": [creds.to_str().unwrap(), "/etc/passwd"]})).await;
    assert!(refusal_text(&r).contains("/etc/passwd"), "{r}");
    // move_file names two: its destination is checked too.
    let r = s
        .client
        .call_tool("move_file", json!({"source": creds.to_str().unwrap(), "destination": "/tmp/stolen.txt"}))
        .await;
    assert!(refusal_text(&r).contains("`destination`"), "{r}");
    assert!(creds.is_file(), "the refused move reached the server");
}

/// result-cap cuts a large file read through server-filesystem to its cap, and the model
/// reads how much was cut and how to ask for less; the structured copy of the text, too large
/// to keep, goes whole.
#[tokio::test]
async fn result_cap_cuts_a_large_read_with_a_note() {
    let (work, _) = served_dir();
    let big = work.path().join("big.log");
    let line = "0123456789abcdef".repeat(4) + "\n";
    std::fs::write(&big, line.repeat(20_000)).unwrap();
    // server-filesystem sends the text twice (content and structuredContent): 2.6 MB, over the
    // 1 MiB a hook is handed by default, so the entry raises that (and the deadline) for it.
    let entry = "[[plugins]]\nfile = \"result-cap.wasm\"\nmax_payload_kib = 4096\ndeadline_ms = 200\n\
                 config = { max_bytes = 8192, hint = \"read it with head or tail\" }\n";
    let mut s = run_in_front(work.path(), entry, &[&example("result-cap.wasm")]).await;
    let r = s.client.call_tool("read_text_file", read(&big)).await;
    assert_ne!(r["result"]["isError"], true, "{r}");
    assert!(r["result"].to_string().len() <= 8192, "over the cap: {} bytes", r["result"].to_string().len());
    let content = r["result"]["content"].as_array().unwrap();
    let (kept, note) = (content[0]["text"].as_str().unwrap(), content.last().unwrap()["text"].as_str().unwrap());
    assert!(kept.len() > 4096 && line.repeat(20_000).starts_with(kept), "{} bytes kept", kept.len());
    assert!(note.contains("over the limit of 8192 bytes") && note.contains("read it with head or tail"), "{note}");
    assert!(note.contains("(1 part left out whole)") && r["result"].get("structuredContent").is_none(), "{r}");
}

/// Issue 42: a hook that traps lets the result through under `fail = "open"` (and says so in
/// the log), and refuses the call under `fail = "closed"`.
#[tokio::test]
async fn a_trapping_hook_fails_open_or_closed_as_its_entry_says() {
    let (work, creds) = served_dir();
    let probe = switchyard_testkit::broken_plugins().join("hook-probe.wasm");
    for fail in ["open", "closed"] {
        let entry =
            format!("[[plugins]]\nfile = \"hook-probe.wasm\"\nfail = \"{fail}\"\nconfig = {{ result = \"trap\" }}\n");
        let mut s = run_in_front(work.path(), &entry, &[&probe]).await;
        let r = s.client.call_tool("read_text_file", read(&creds)).await;
        if fail == "open" {
            assert_ne!(r["result"]["isError"], true, "fail = open refused: {r}");
            assert!(tool_text(&r).contains(KEY_ID), "fail = open: the server's result passes as it was: {r}");
            let log = stderr_with(&s.router.stderr, "trap").await;
            assert!(log.contains("hook-probe"), "the trap is logged with the plugin's name:\n{log}");
        } else {
            assert_eq!(r["result"]["isError"], true, "fail = closed let it through: {r}");
            let text = tool_text(&r);
            assert!(text.contains("hook-probe") && !text.contains(KEY_ID), "{r}");
        }
    }
}
