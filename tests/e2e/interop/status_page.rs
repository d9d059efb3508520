//! The HTTP front's `/metrics`, `/api/status` and live status page through the real
//! daemon; the page is loaded in headless Chromium (Debian's `chromium`), which must be
//! installed: without it these tests fail, they do not skip.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::daemon::*;
use switchyard_testkit::*;

/// The page's accent colour (`--accent` in ui/app.css), which fills its header band.
const ACCENT: [u8; 3] = [0x0e, 0x74, 0x90];
/// The page's background (`--bg`).
const BACKGROUND: [u8; 3] = [0xf5, 0xf6, 0xf8];
const CHROMIUM_LIMIT: Duration = Duration::from_secs(90);

/// A daemon serving two fixture servers and HTTP on an ephemeral loopback port.
struct Daemon {
    home: Home,
    base: String,
    token: String,
    /// What `switchyard token --url` printed.
    page: String,
    http: reqwest::Client,
}

impl Daemon {
    async fn start() -> Daemon {
        Daemon::start_with(|home| {
            format!(
                "{}[servers.alpha.limits]\ncall_timeout_ms = 2000\n{}",
                home.fixture("alpha", &[]),
                home.fixture("beta", &[])
            )
        })
        .await
    }

    /// A daemon serving the servers `servers` writes, and HTTP.
    async fn start_with(servers: impl FnOnce(&Home) -> String) -> Daemon {
        let home = Home::new();
        home.write_config(&format!("{}[http]\nlisten = \"127.0.0.1:0\"\n", servers(&home)));
        Daemon::start_in(home).await
    }

    /// A daemon for the config `home` holds (one it ran before, it may be).
    async fn start_in(home: Home) -> Daemon {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cfg = home.config_str();
        let out = home.cli(&["daemon", "--config", &cfg, "--detach"]).await;
        assert!(out.status.success(), "daemon --detach failed: {}", String::from_utf8_lossy(&out.stderr));
        let status = home.status_json().await;
        let listen = status["http"]["listen"].as_str().unwrap_or_else(|| panic!("no http in status: {status}"));
        let base = format!("http://{listen}");
        // The running daemon says where it serves HTTP (port 0 in the config).
        let out = home.cli(&["token", "--config", &cfg, "--url"]).await;
        let page = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let token = page
            .strip_prefix(&format!("{base}/#token="))
            .unwrap_or_else(|| panic!("token --url printed {page:?}, not {base}/#token=..."))
            .to_string();
        assert!(token.len() > 20, "{page}");
        Daemon { home, base, token, page, http: reqwest::Client::new() }
    }

    async fn get(&self, path: &str, token: Option<&str>) -> reqwest::Response {
        let mut r = self.http.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send().await.unwrap()
    }

    async fn metrics(&self) -> String {
        let resp = self.get("/metrics", Some(&self.token)).await;
        assert_eq!(resp.status(), 200);
        let kind = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
        resp.text().await.unwrap()
    }
}

/// The samples of an exposition, checked line by line: every line is a comment (`# HELP`,
/// `# TYPE`, `# UNIT`, `# EOF` last) or `name{labels} value` with a number for value.
fn samples(text: &str) -> Vec<(String, f64)> {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "the exposition does not end with # EOF");
    let mut out = Vec::new();
    for line in &lines {
        if let Some(c) = line.strip_prefix("# ") {
            assert!(["HELP ", "TYPE ", "UNIT ", "EOF"].iter().any(|k| c.starts_with(k)), "bad comment: {line}");
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name: {line}"
        );
        if name_end < series.len() {
            assert!(series.ends_with('}'), "unclosed labels: {line}");
        }
        let v: f64 = value.parse().unwrap_or_else(|_| panic!("bad value: {line}"));
        out.push((series.to_string(), v));
    }
    out
}

/// The value of the series with exactly these labels (0 when absent).
fn value(samples: &[(String, f64)], series: &str) -> f64 {
    samples.iter().find(|(s, _)| s == series).map_or(0.0, |(_, v)| *v)
}

#[tokio::test]
async fn metrics_need_the_token_and_count_a_call_with_otel_names() {
    let d = Daemon::start().await;
    assert_eq!(d.get("/metrics", None).await.status(), 401);
    assert_eq!(d.get("/metrics", Some("sy_wrong")).await.status(), 401);
    assert_eq!(d.get("/api/status", None).await.status(), 401);
    let calls = r#"switchyard_calls_total{server="alpha",method="tools/call",tool="echo",outcome="ok"}"#;
    let before = samples(&d.metrics().await);
    assert_eq!(value(&before, calls), 0.0);

    let (_p, mut c) = d.home.client("alpha").await;
    // tools/list first: a tool is named in labels once its server declared it.
    let listed = c.request("tools/list", json!({})).await;
    assert!(listed["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{listed}");
    assert_eq!(c.call_text("echo", json!({"text": "counted"})).await, "counted");
    let unknown = c.call_tool("no_such_tool_at_all", json!({})).await;
    assert!(unknown.get("error").is_some() || unknown["result"]["isError"] == true, "{unknown}");

    let text = d.metrics().await;
    let after = samples(&text);
    assert_eq!(value(&after, calls), 1.0, "{text}");
    let op =
        r#"server="alpha",mcp_method_name="tools/call",gen_ai_tool_name="echo",error_type="",network_transport="unix""#;
    assert!(text.contains("mcp_server_operation_duration_seconds_bucket{"), "{text}");
    assert_eq!(value(&after, &format!("mcp_server_operation_duration_seconds_count{{{op}}}")), 1.0, "{text}");
    assert_eq!(value(&after, &format!(r#"mcp_server_operation_duration_seconds_bucket{{le="+Inf",{op}}}"#)), 1.0);
    // What the router answers itself (initialize from the server's cached result) counts too.
    let init =
        r#"server="alpha",mcp_method_name="initialize",gen_ai_tool_name="",error_type="",network_transport="unix""#;
    assert_eq!(value(&after, &format!("mcp_server_operation_duration_seconds_count{{{init}}}")), 1.0, "{text}");
    // A tool the server never declared is not a label of its own.
    assert!(!text.contains("no_such_tool_at_all"), "an undeclared tool became a label");
    assert!(text.contains(r#"tool="other""#), "{text}");
    // Live values, read at the scrape.
    assert_eq!(value(&after, r#"switchyard_sessions{server="alpha",transport="unix"}"#), 1.0, "{text}");
    assert!(value(&after, r#"switchyard_instance_starts_total{server="alpha",pool="default"}"#) >= 1.0, "{text}");
    assert!(value(&after, r#"switchyard_instances{server="alpha",pool="default",state="ready"}"#) >= 1.0);
    assert_eq!(value(&after, r#"switchyard_calls_in_flight{server="alpha"}"#), 0.0);
    assert!(value(&after, r#"switchyard_sessions_opened_total{transport="unix"}"#) >= 1.0);
    // No secret is a label.
    assert!(!text.contains(&d.token));

    // A call past its timeout, then an instance that dies under a call (and is started again).
    let slow = c.call_tool("sleep", json!({"ms": 20_000})).await;
    assert_eq!(slow["error"]["code"], -32001, "{slow}");
    let crashed = c.call_tool("crash", json!({})).await;
    assert!(crashed.get("error").is_some(), "{crashed}");
    let restarts = r#"switchyard_instance_restarts_total{server="alpha",pool="default"}"#;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let after = loop {
        let now = samples(&d.metrics().await);
        if value(&now, restarts) >= 1.0 {
            break now;
        }
        assert!(std::time::Instant::now() < deadline, "no restart counted:\n{}", d.metrics().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let outcome = |tool: &str, o: &str| {
        value(
            &after,
            &format!(r#"switchyard_calls_total{{server="alpha",method="tools/call",tool="{tool}",outcome="{o}"}}"#),
        )
    };
    assert_eq!((outcome("sleep", "timeout"), outcome("crash", "lost")), (1.0, 1.0));
    assert_eq!(value(&after, r#"switchyard_timeouts_total{server="alpha",tool="sleep"}"#), 1.0);
    assert_eq!(value(&after, r#"switchyard_instance_deaths_total{server="alpha",pool="default",cause="exit"}"#), 1.0);
    let timed_out = r#"server="alpha",mcp_method_name="tools/call",gen_ai_tool_name="sleep",error_type="-32001",network_transport="unix""#;
    assert_eq!(value(&after, &format!("mcp_server_operation_duration_seconds_count{{{timed_out}}}")), 1.0);
}

/// The count of `tool`'s successful calls on server `alpha` in an exposition.
fn alpha_calls(text: &str, tool: &str) -> f64 {
    let series = format!(r#"switchyard_calls_total{{server="alpha",method="tools/call",tool="{tool}",outcome="ok"}}"#);
    value(&samples(text), &series)
}

/// A client lists alpha's tools and calls `echo` `n` times; the (echo, other) counts seen after
/// each call.
async fn list_then_echo(d: &Daemon, n: usize) -> Vec<(f64, f64)> {
    let (p, mut c) = d.home.client("alpha").await;
    let listed = c.request("tools/list", json!({})).await;
    assert!(listed["result"]["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "echo")), "{listed}");
    let mut seen = Vec::new();
    for i in 0..n {
        assert_eq!(c.call_text("echo", json!({"text": format!("e{i}")})).await, format!("e{i}"));
        let text = d.metrics().await;
        seen.push((alpha_calls(&text, "echo"), alpha_calls(&text, "other")));
    }
    leave(p, c).await;
    seen
}

/// A daemon started again for a config it ran before answers a client's tools/list from what
/// the server listed before, while it starts: the tools that list names are named in the
/// metrics from the first call on, not counted as `other` until the server lists them itself.
#[tokio::test]
async fn a_tool_listed_from_memory_is_named_from_its_first_call() {
    let d = Daemon::start().await;
    assert_eq!(list_then_echo(&d, 1).await, vec![(1.0, 0.0)]);
    let mut home = d.home;
    home.stop().await;
    home.wait_no_processes(Duration::from_secs(20)).await;
    for start in 2..=3 {
        let d = Daemon::start_in(home).await;
        let seen = list_then_echo(&d, 3).await;
        assert_eq!(seen, vec![(1.0, 0.0), (2.0, 0.0), (3.0, 0.0)], "start {start}: (echo, other) after each call");
        home = d.home;
        home.stop().await;
        home.wait_no_processes(Duration::from_secs(20)).await;
    }
}

/// A server removed from the config and added back while the daemon runs: its tools, which the
/// client is given again, are named from the first call on (the count goes on under `echo`).
#[tokio::test]
async fn a_server_added_back_names_its_tools_from_the_first_call() {
    let d = Daemon::start().await;
    assert_eq!(list_then_echo(&d, 1).await, vec![(1.0, 0.0)]);
    let http = "[http]\nlisten = \"127.0.0.1:0\"\n";
    let beta = d.home.fixture("beta", &[]);
    let both = std::fs::read_to_string(d.home.config_str()).unwrap();
    d.home.write_config(&format!("{beta}{http}"));
    let limit = Duration::from_secs(20);
    d.home.wait_status("alpha gone", limit, |s| status_server(s, "alpha").is_none()).await;
    d.home.write_config(&both);
    d.home.wait_status("alpha back", limit, |s| status_server(s, "alpha").is_some()).await;
    assert_eq!(list_then_echo(&d, 2).await, vec![(2.0, 0.0), (3.0, 0.0)], "(echo, other) after each call");
}

/// A daemon started again answers a client's first tools/list from the server's earlier list
/// while the server (3 s to start) starts: that answer counts in `switchyard_calls_total` and is
/// timed, as any answered request is.
#[tokio::test]
async fn a_tools_list_answered_from_memory_is_counted_and_timed() {
    let d = Daemon::start_with(|home| home.fixture("alpha", &["--init-delay-ms", "3000"])).await;
    let listed = r#"switchyard_calls_total{server="alpha",method="tools/list",tool="",outcome="ok"}"#;
    let op =
        r#"server="alpha",mcp_method_name="tools/list",gen_ai_tool_name="",error_type="",network_transport="unix""#;
    let timed = format!("mcp_server_operation_duration_seconds_count{{{op}}}");
    let (p, mut c) = d.home.client("alpha").await;
    assert!(c.request("tools/list", json!({})).await["result"]["tools"].is_array());
    assert_eq!(value(&samples(&d.metrics().await), listed), 1.0, "the live list is counted");
    leave(p, c).await;
    let home = d.home;
    home.stop().await;
    home.wait_no_processes(Duration::from_secs(20)).await;

    let d = Daemon::start_in(home).await;
    let (p, mut c) = d.home.client("alpha").await;
    let asked = std::time::Instant::now();
    assert!(c.request("tools/list", json!({})).await["result"]["tools"].is_array());
    assert!(asked.elapsed() < Duration::from_secs(2), "not answered from memory: waited {:?}", asked.elapsed());
    let text = d.metrics().await;
    let now = samples(&text);
    assert_eq!((value(&now, listed), value(&now, &timed)), (1.0, 1.0), "{text}");
    leave(p, c).await;
}

/// A server whose config changed takes over the clients of the one it replaces: the tools they
/// were shown there are named in the metrics from their first call on it, though its own
/// tools/list (8 s to come) has not arrived yet.
#[tokio::test]
async fn a_changed_server_names_the_tools_of_the_clients_it_takes_over_from_their_first_call() {
    let http = "[http]\nlisten = \"127.0.0.1:0\"\n";
    let d = Daemon::start_with(|home| home.fixture_named("alpha", "v1", &[])).await;
    let (p, mut c) = d.home.client("alpha").await;
    assert!(tool_names(&c.request("tools/list", json!({})).await).contains(&"echo".to_string()));
    assert_eq!(c.call_text("echo", json!({"text": "before"})).await, "before");
    d.home.replace_config(&format!("{}{http}", d.home.fixture_named("alpha", "v2", &["--list-delay-ms", "8000"])));
    let changed = std::time::Instant::now();
    while fixture_pid(&mut c).await.1 != "v2" {
        assert!(changed.elapsed() < Duration::from_secs(20), "the session never moved to the changed server");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(c.call_text("echo", json!({"text": "after"})).await, "after");
    assert!(changed.elapsed() < Duration::from_secs(8), "the changed server's own list may be in: too slow to tell");
    let text = d.metrics().await;
    assert_eq!((alpha_calls(&text, "echo"), alpha_calls(&text, "other")), (2.0, 0.0), "{text}");
    assert!(alpha_calls(&text, "pid") >= 1.0, "{text}");
    leave(p, c).await;
}

#[tokio::test]
async fn api_status_is_the_status_of_the_cli_with_recent_errors() {
    let d = Daemon::start().await;
    let resp = d.get("/api/status", Some(&d.token)).await;
    assert_eq!(resp.status(), 200);
    let api: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    let cli = d.home.status_json().await;
    let names = |s: &Value| -> Vec<String> {
        s["servers"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(names(&api), ["alpha", "beta"]);
    assert_eq!(names(&api), names(&cli));
    assert_eq!((api["pid"].clone(), api["http"].clone()), (cli["pid"].clone(), cli["http"].clone()));
    assert!(api["recent_errors"].is_array(), "{api}");
    assert!(!api.to_string().contains(&d.token));
    // `token --url --http ADDR` names that address instead of the running daemon's.
    let out = d.home.cli(&["token", "--config", &d.home.config_str(), "--url", "--http", "127.0.0.1:9"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("http://127.0.0.1:9/#token={}", d.token));

    // A config that does not load is an error of the daemon's log: status keeps it.
    let good = std::fs::read_to_string(&d.home.config).unwrap();
    d.home.write_config(&format!("{good}[servers.broken\n"));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let kept = loop {
        let resp = d.get("/api/status", Some(&d.token)).await;
        let api: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        let errors = api["recent_errors"].as_array().unwrap().clone();
        if let Some(e) = errors.iter().find(|e| e["message"].as_str().unwrap().contains("not applied")) {
            break e.clone();
        }
        assert!(std::time::Instant::now() < deadline, "the error is not in recent_errors: {api}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(kept["level"], "ERROR", "{kept}");
    assert!(kept["message"].as_str().unwrap().chars().count() <= 300, "{kept}");
    let text = d.home.status_text().await;
    assert!(text.contains("recent warnings and errors") && text.contains("not applied"), "{text}");
}

/// Runs headless Chromium on `url` with `args`; its stdout.
async fn chromium(profile: &Path, args: &[&str], url: &str) -> String {
    let mut cmd = tokio::process::Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--window-size=1200,800",
        "--virtual-time-budget=5000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args)
    .arg(url)
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    let out = match tokio::time::timeout(CHROMIUM_LIMIT, cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!(
            "cannot run chromium ({e}): the status page test needs it; install Debian's package: apt-get install --no-install-recommends chromium"
        ),
        Err(_) => panic!("chromium did not finish within {CHROMIUM_LIMIT:?} on {url}"),
    };
    assert!(out.status.success(), "chromium failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn the_status_page_goes_live_in_chromium_and_draws_its_servers() {
    let d = Daemon::start().await;
    let (_p, mut c) = d.home.client("beta").await;
    assert_eq!(c.call_text("echo", json!({"text": "hi"})).await, "hi");
    // The page itself needs no token and holds no data; it is strict about what it loads.
    let resp = d.get("/", None).await;
    assert_eq!(resp.status(), 200);
    let csp = resp.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"), "{csp}");
    assert!(!resp.text().await.unwrap().contains("alpha"), "the page holds data");

    let dir = temp_dir();
    let dom = chromium(&dir.path().join("profile"), &["--dump-dom"], &d.page).await;
    assert!(dom.contains(r#"data-state="live""#), "the page did not go live:\n{dom}");
    for name in ["alpha", "beta", "beta#1"] {
        assert!(dom.contains(&format!(">{name}<")), "{name} is not on the page:\n{dom}");
    }
    assert!(dom.contains("unix-"), "the session is not on the page:\n{dom}");

    // A call running is on the page, with its stage and instance.
    let slow = c.send_request("tools/call", json!({"name": "sleep", "arguments": {"ms": 60000}})).await;
    let dom = chromium(&dir.path().join("profile-calls"), &["--dump-dom"], &d.page).await;
    assert!(dom.contains("tools/call `sleep`") && dom.contains(">in flight<"), "the call is not on the page:\n{dom}");
    c.cancel(&slow, "done looking").await;

    // A refused token says how to get a good one.
    let bad = format!("{}/#token=sy_not_the_token", d.base);
    let dom = chromium(&dir.path().join("profile2"), &["--dump-dom"], &bad).await;
    assert!(dom.contains(r#"data-state="unauthorized""#) && dom.contains("switchyard token --url"), "{dom}");

    let shot = dir.path().join("page.png");
    chromium(&dir.path().join("profile3"), &[&format!("--screenshot={}", shot.display())], &d.page).await;
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).expect("no screenshot")));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1200, 800));
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{:?}", info.color_type);
    let px = |x: u32, y: u32| {
        let i = ((y * info.width + x) as usize) * channels;
        [buf[i], buf[i + 1], buf[i + 2]]
    };
    let near = |a: [u8; 3], b: [u8; 3]| a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= 6);
    let total = (info.width * info.height) as usize;
    let differ = (0..info.height)
        .flat_map(|y| (0..info.width).map(move |x| (x, y)))
        .filter(|&(x, y)| !near(px(x, y), BACKGROUND))
        .count();
    // The header band is about 7 % of the page; tables and text add more.
    assert!(differ * 100 > total * 8, "the page looks blank: {differ} of {total} pixels differ from the background");
    let band =
        (0..40).flat_map(|y| (0..info.width).map(move |x| (x, y))).filter(|&(x, y)| near(px(x, y), ACCENT)).count();
    assert!(band * 2 > 40 * info.width as usize, "the header band is not in the accent colour ({band} pixels)");
}

/// A remote server that nobody has signed in to says so in its row, with the command that
/// signs in; `/api/status` has its state and no token.
#[tokio::test]
async fn the_status_page_says_a_remote_server_needs_a_sign_in() {
    // Sign-in is on for a remote server without an Authorization header; nothing listens on
    // the discard port, and nothing needs to for the state.
    let d = Daemon::start_with(|_| "[servers.tracker]\nurl = \"http://127.0.0.1:9/mcp\"\n".to_string()).await;
    let resp = d.get("/api/status", Some(&d.token)).await;
    let api: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(api["servers"][0]["sign_in"]["state"], "not_signed_in", "{api}");
    let dir = temp_dir();
    let dom = chromium(&dir.path().join("profile"), &["--dump-dom"], &d.page).await;
    assert!(dom.contains(r#"data-state="live""#), "the page did not go live:\n{dom}");
    assert!(dom.contains("not signed in: switchyard login tracker"), "the sign-in is not on the page:\n{dom}");
}
