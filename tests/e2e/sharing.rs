//! End-to-end tests of clients of different kinds sharing one server's instances through a
//! daemon, with the fixture server: they share while the server cannot tell them apart, and
//! split once it asks a client something; no client's roots ever reach another's instance.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::daemon::{Home, fixture_pid, leave};
use switchyard_testkit::*;

const SLOW: Duration = Duration::from_secs(20);

/// A kind of client: its `clientInfo` name, protocol version and capabilities, as Claude Code,
/// Codex CLI and Gemini CLI (`mcp list`) send them.
struct Kind(&'static str, &'static str, fn() -> Value);

const CLAUDE: Kind = Kind(
    "claude-code",
    "2025-11-25",
    || json!({"roots": {"listChanged": true}, "elicitation": {"form": {}, "url": {}}}),
);
const CODEX: Kind = Kind("codex-mcp-client", "2025-06-18", || json!({"elicitation": {"form": {}, "url": {}}}));
const GEMINI: Kind = Kind("mcp-test-client", "2025-06-18", || json!({}));

/// A client of `kind` on `connect alpha`, initialised (a client with roots gives `/project-a`);
/// its initialize result.
async fn open(home: &Home, kind: &Kind) -> (Proc, Client, Value) {
    let mut p = home.connect("alpha");
    let mut c = p.client();
    if (kind.2)().get("roots").is_some() {
        c.roots = Some(json!({"roots": [{"uri": "file:///project-a", "name": "a"}]}));
    }
    let params =
        json!({"protocolVersion": kind.1, "capabilities": (kind.2)(), "clientInfo": {"name": kind.0, "version": "1"}});
    let r = c.request("initialize", params).await;
    assert!(r["result"].is_object(), "{r}");
    c.notify("notifications/initialized", json!({})).await;
    (p, c, r["result"].clone())
}

/// Every instance of every server (siblings included) status shows.
fn instances(status: &Value) -> usize {
    status["servers"].as_array().unwrap().iter().map(|s| s["instances"].as_array().map_or(0, Vec::len)).sum()
}

/// The first client of a kind the daemon has not seen is served apart while the server's
/// answers to it are learned; once it leaves, its instance stops, and clients of its kind share
/// the first kind's instance.
async fn learn(home: &Home, kind: &Kind, first: u32) {
    let (p, mut c, told) = open(home, kind).await;
    assert_eq!(told["protocolVersion"], kind.1, "{told}");
    assert_ne!(fixture_pid(&mut c).await.0, first, "{} shared before the server's answers were known", kind.0);
    leave(p, c).await;
    home.wait_status("the learning instance stopped", SLOW, |s| instances(s) == 1).await;
}

/// Claude Code, Codex and Gemini CLI as the fixture sees them (two protocol versions, three sets
/// of capabilities): the fixture answers them alike and never asks a client anything, so once
/// it is known, they share one instance, each told its own protocol version; status names each
/// client and its kind.
#[tokio::test]
async fn clients_of_other_kinds_share_a_server_that_never_asks_them_anything() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (pa, mut claude, told) = open(&home, &CLAUDE).await;
    assert_eq!(told["protocolVersion"], "2025-11-25");
    let first = fixture_pid(&mut claude).await.0;
    learn(&home, &CODEX, first).await;
    learn(&home, &GEMINI, first).await;
    let (pc, mut codex, told) = open(&home, &CODEX).await;
    let (pg, mut gemini, told_g) = open(&home, &GEMINI).await;
    assert_eq!(
        (told["protocolVersion"].as_str(), told_g["protocolVersion"].as_str()),
        (Some("2025-06-18"), Some("2025-06-18"))
    );
    for c in [&mut codex, &mut gemini, &mut claude] {
        assert_eq!(fixture_pid(c).await.0, first, "a client of another kind got an instance of its own");
        assert_eq!(c.call_text("echo", json!({"text": "mine"})).await, "mine");
    }
    let status = home.status_json().await;
    assert_eq!(instances(&status), 1, "{status:#}");
    let alpha = &status["servers"][0];
    let names: Vec<&str> = alpha["clients"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    for name in ["claude-code", "codex-mcp-client", "mcp-test-client"] {
        assert!(names.contains(&name), "{name} not named: {alpha:#}");
    }
    assert_eq!(alpha["instances"][0]["clients"], json!(["claude-code 1", "codex-mcp-client 1", "mcp-test-client 1"]));
    let text = home.status_text().await;
    assert!(
        text.contains(
            "serves codex-mcp-client 1 (protocol 2025-06-18; elicitation), sharing instances started for another kind"
        ),
        "{text}"
    );
    assert!(home.logs().contains("share alpha, started for clients of protocol 2025-11-25"), "{}", home.logs());
    leave(pc, codex).await;
    leave(pg, gemini).await;
    leave(pa, claude).await;
    home.stop().await;
}

/// The shared fixture is asked for its roots by a Codex client's call: its instance also serves
/// Claude Code, whose roots the server has never been told, so the request is refused and the
/// call sees no one's roots. From then on a new Codex client gets an instance of its own, the
/// Codex client already sharing keeps its place, and Claude Code's roots reach its instance
/// only once no other kind of client shares it.
#[tokio::test]
async fn a_server_that_asks_for_roots_splits_new_clients_and_shows_none_another_s_roots() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (pa, mut claude, _) = open(&home, &CLAUDE).await;
    let first = fixture_pid(&mut claude).await.0;
    learn(&home, &CODEX, first).await;
    let (pc, mut codex, _) = open(&home, &CODEX).await;
    assert_eq!(fixture_pid(&mut codex).await.0, first);
    let r = codex.call_tool("roots", json!({})).await;
    let said = r["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(said.contains("roots differ") && !said.contains("project-a"), "{said}");
    assert!(home.logs().contains("the server asks clients for roots"), "{}", home.logs());
    let (pn, mut newer, _) = open(&home, &CODEX).await;
    assert_ne!(fixture_pid(&mut newer).await.0, first, "a new client of another kind shared after the server asked");
    assert_eq!(fixture_pid(&mut codex).await.0, first, "the client sharing lost its instance");
    let r = claude.call_tool("roots", json!({})).await;
    assert!(!r.to_string().contains("project-a"), "Claude Code's roots reached an instance Codex uses: {r}");
    leave(pc, codex).await;
    home.wait_status("Codex gone from alpha", SLOW, |s| {
        s["servers"][0]["clients"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != "codex-mcp-client" || c["sessions"] == 0)
    })
    .await;
    let roots = claude.call_text("roots", json!({})).await;
    assert!(roots.contains("file:///project-a"), "{roots}");
    leave(pn, newer).await;
    leave(pa, claude).await;
    home.stop().await;
}

/// A client whose `clientInfo.name` holds a lone surrogate escape (valid JSON, no valid
/// Unicode) keeps the rest of what it said: status and its calls' audit lines show the name
/// with U+FFFD in the escape's place, its version, and its protocol version. (A client of its
/// kind came first: the fixture, strict as serde_json is, refuses such an initialize itself.)
#[tokio::test]
async fn a_client_name_with_a_lone_surrogate_costs_nothing_else_it_said() {
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let (p0, c0) = home.client_as(&["alpha"], "first", json!({"elicitation": {}})).await;
    let mut p = home.connect("alpha");
    let mut c = p.client();
    c.send_raw(r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"\ud800x","version":"4.5.6"}}}"#).await;
    let told = c.wait_response(&json!("init")).await;
    assert!(told["result"].is_object(), "{told}");
    c.notify("notifications/initialized", json!({})).await;
    assert_eq!(c.call_text("echo", json!({"text": "hi"})).await, "hi");

    let status = home.status_json().await;
    let clients = status["servers"][0]["clients"].as_array().cloned().unwrap_or_default();
    let client = clients.iter().find(|c| c["name"] != "first").unwrap_or_else(|| panic!("{status:#}"));
    let said = |k: &str| client[k].as_str().unwrap_or_default().to_string();
    assert_eq!([said("name"), said("version"), said("protocol")], ["\u{fffd}x", "4.5.6", "2025-06-18"], "{status:#}");
    assert_eq!(
        status["servers"][0]["instances"][0]["clients"],
        json!(["first 1.0.0", "\u{fffd}x 4.5.6"]),
        "{status:#}"
    );

    let dir = home.path().join("state/switchyard");
    let deadline = std::time::Instant::now() + SLOW;
    let line = loop {
        let text: String = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".audit.jsonl"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect();
        let echo = text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|l| l["tool"] == "echo");
        if let Some(line) = echo {
            break line;
        }
        assert!(std::time::Instant::now() < deadline, "no audit line for the call in {}", dir.display());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((&line["client"]["name"], &line["client"]["version"]), (&json!("\u{fffd}x"), &json!("4.5.6")), "{line}");
    leave(p, c).await;
    leave(p0, c0).await;
    home.stop().await;
}
