//! The content plugins of `switchyard:policy@0.3.0` (examples/plugins: `redact`, `path-guard`,
//! `result-cap`, and the `hook-probe` fixture) in front of the real server-filesystem from
//! npm: what a client reads through `switchyard run`, the daemon (`connect NAME`) and its HTTP
//! front, in enforce and audit mode, and when a hook traps under `fail = "open"` and `"closed"`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::npm_setup::{ensure_npm, filesystem_entry};
use crate::setup::*;
use switchyard_testkit::daemon::{Home, example};
use switchyard_testkit::*;

const SLOW: Duration = Duration::from_secs(30);

/// A made-up AWS key pair of the documented shapes (never issued).
const KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

/// The `[[plugins]]` entry docs/plugins.md gives `file` (its ```toml block naming it), so that
/// what the tests run is what a user copies.
pub(crate) fn documented_entry(file: &str) -> String {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/plugins.md");
    let text = std::fs::read_to_string(&docs).unwrap();
    let named = format!("file = \"{file}\"");
    text.split("```toml\n")
        .skip(1)
        .filter_map(|b| b.split_once("```").map(|(block, _)| block))
        .find(|b| b.starts_with("[[plugins]]\n") && b.lines().nth(1) == Some(named.as_str()))
        .unwrap_or_else(|| panic!("docs/plugins.md has no ```toml block with the entry of {file}"))
        .to_string()
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
    let entry = documented_entry("redact.wasm");
    let entry = entry.as_str();

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

    // A key given twice: path-guard (serde_json) judges the last value, a server whose parser
    // takes the first would read /etc/passwd. Refused by switchyard (also when one of the two is
    // written with an escape, and at any depth) though path-guard allows the last.
    let inside = json!(creds.to_str().unwrap());
    for args in [
        format!(r#"{{"path":"/etc/passwd","path":{inside}}}"#),
        format!(r#"{{"p\u0061th":"/etc/passwd","path":{inside}}}"#),
        format!(r#"{{"paths":[{inside}],"x":{{"y":1,"y":2}}}}"#),
    ] {
        let tool = if args.contains("paths") { "read_multiple_files" } else { "read_text_file" };
        s.client
            .send_raw(&format!(
                r#"{{"jsonrpc":"2.0","id":"twice","method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}"#
            ))
            .await;
        let r = s.client.recv_until(|m| m["id"] == "twice").await;
        let text = tool_text(&r);
        assert_eq!(r["result"]["isError"], true, "{args}: {r}");
        assert!(text.contains("refused by switchyard") && text.contains("twice"), "{args}: {r}");
    }
    // The same path once is read as before.
    assert!(s.client.call_text("read_text_file", read(&creds)).await.contains(KEY_ID));
}

/// A file of `bytes` bytes of plain lines, the fake key id on its last line.
fn large_file(dir: &Path, name: &str, bytes: usize) -> (PathBuf, String) {
    let line = "0123456789abcdef".repeat(4) + "\n";
    let mut text = line.repeat(bytes / line.len());
    text.push_str(&format!("aws_access_key_id = {KEY_ID}\n"));
    let path = dir.join(name);
    std::fs::write(&path, &text).unwrap();
    (path, text)
}

/// The tester's case: redact under its documented entry redacts a 600 KB file read through
/// server-filesystem (1.2 MB: the text twice), which the 5 ms budget and the 1 MiB payload limit
/// of before let through in clear (failing open).
#[tokio::test]
async fn redact_under_its_documented_entry_redacts_a_600_kb_file() {
    let (work, _) = served_dir();
    let (big, text) = large_file(work.path(), "big.txt", 600 * 1024);
    let entry = documented_entry("redact.wasm");
    assert!(entry.contains("fail = \"closed\""), "{entry}");
    let mut s = run_in_front(work.path(), &entry, &[&example("redact.wasm")]).await;
    let r = s.client.call_tool("read_text_file", read(&big)).await;
    assert!(!r.to_string().contains(KEY_ID), "the key got through: {}", &tool_text(&r)[..200]);
    let said = tool_text(&r);
    assert_eq!(said.len(), text.len() - KEY_ID.len() + "[redacted: aws-access-key]".len(), "{}", &said[..200]);
    assert!(said.ends_with("aws_access_key_id = [redacted: aws-access-key]\n"));
    let structured = r["result"]["structuredContent"]["content"].as_str().unwrap();
    assert_eq!(structured, said, "the structured copy is redacted too");
}

/// Issue 42 and the tester's case: result-cap under its documented entry cuts a 5 MB file read
/// through server-filesystem (10 MB: the text twice) to its cap; the model reads how much of the
/// text it sees and how to ask for less, and structuredContent is kept, its text cut the same
/// way (clients check it against read_text_file's output schema).
#[tokio::test]
async fn result_cap_under_its_documented_entry_cuts_a_5_mb_read_with_a_note() {
    let (work, _) = served_dir();
    let (big, text) = large_file(work.path(), "big.log", 5 * 1024 * 1024);
    let entry = documented_entry("result-cap.wasm");
    let cap = 65536;
    assert!(entry.contains(&format!("max_bytes = {cap}")), "{entry}");
    let mut s = run_in_front(work.path(), &entry, &[&example("result-cap.wasm")]).await;
    let r = s.client.call_tool("read_text_file", read(&big)).await;
    assert_ne!(r["result"]["isError"], true, "{r}");
    let size = r["result"].to_string().len();
    assert!(size <= cap, "over the cap: {size} bytes");
    let content = r["result"]["content"].as_array().unwrap();
    let (kept, note) = (content[0]["text"].as_str().unwrap(), content.last().unwrap()["text"].as_str().unwrap());
    assert!(kept.len() > cap / 4 && text.starts_with(kept), "{} bytes kept", kept.len());
    let said = format!(
        "Its text was {} bytes: the first {} bytes are above, the last {} bytes were cut",
        text.len(),
        kept.len(),
        text.len() - kept.len()
    );
    assert!(note.contains(&said) && note.contains("a limit of 65536 bytes"), "{note}");
    let structured = r["result"]["structuredContent"]["content"].as_str().expect("structuredContent is kept");
    assert!(structured.len() > cap / 4 && text.starts_with(structured), "{} bytes kept", structured.len());
}

/// Both plugins under their documented entries: redact reads the result before result-cap cuts
/// it, so no token is cut in two with a part of it left for the model (found by the re-trial:
/// with result-cap first, 18 of a GitHub token's 40 characters came through).
#[tokio::test]
async fn redact_and_result_cap_as_documented_cut_no_token_in_two() {
    let (work, _) = served_dir();
    let token = format!("ghp_{}", "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6");
    // A token every 100 bytes: wherever the cut falls, it falls through one.
    let line = format!("{token} {}\n", "x".repeat(100 - token.len() - 2));
    let text = line.repeat(10 * 1024);
    let big = work.path().join("tokens.txt");
    std::fs::write(&big, &text).unwrap();
    let config = format!("{}\n{}", documented_entry("redact.wasm"), documented_entry("result-cap.wasm"));
    let plugins = [example("redact.wasm"), example("result-cap.wasm")];
    let mut s = run_in_front(work.path(), &config, &[&plugins[0], &plugins[1]]).await;
    let r = s.client.call_tool("read_text_file", read(&big)).await;
    assert_ne!(r["result"]["isError"], true, "{r}");
    let all = r["result"].to_string();
    assert!(all.len() <= 65536, "not cut: {} bytes", all.len());
    assert!(!all.contains("ghp_"), "a token, or part of one, came through: {}", &all[all.len() - 600..]);
    assert!(tool_text(&r).starts_with("[redacted: github-token] x"), "{}", &tool_text(&r)[..200]);
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
