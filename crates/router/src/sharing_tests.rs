//! Clients of different kinds sharing a server's instances by the evidence (`server::alike`),
//! in-process against a fake server, under paused time: when they share, when they split again,
//! and that nothing of one client reaches another.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, DuplexStream, WriteHalf};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::server::Server;
use crate::server::answers::Answers;
use crate::upstream::fake::{Behaviour, FakeConnector, FakeLink};
use switchyard_config::Config;
use switchyard_core::metrics::Metrics;
use switchyard_policy::Policy;

const CLAUDE: (&str, &str, fn() -> Value) =
    ("claude-code", "2025-11-25", || json!({"roots": {"listChanged": true}, "elicitation": {"form": {}, "url": {}}}));
const CODEX: (&str, &str, fn() -> Value) =
    ("codex-mcp-client", "2025-06-18", || json!({"elicitation": {"form": {}, "url": {}}}));
const GEMINI: (&str, &str, fn() -> Value) = ("mcp-test-client", "2025-06-18", || json!({}));

/// A server that answers each client the version it asked; `by_caps`: it lists an `elicit` tool
/// to clients that declare elicitation (as server-everything does). Its tools answer `NAME`.
fn server(by_caps: bool) -> Behaviour {
    let caps_of: Arc<Mutex<Vec<(usize, Value)>>> = Arc::default();
    Arc::new(move |link, msg| {
        let Some(id) = msg.request else { return };
        let m: Value = serde_json::from_str(&msg.line).expect("JSON");
        let me = Arc::as_ptr(link) as usize;
        let result = match m["method"].as_str().unwrap_or_default() {
            "initialize" => {
                caps_of.lock().unwrap().push((me, m["params"]["capabilities"].clone()));
                json!({"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {"listChanged": true}},
                       "serverInfo": {"name": "fake", "version": "1"}})
            }
            "tools/list" => {
                let caps = caps_of.lock().unwrap().iter().find(|(l, _)| *l == me).map(|(_, c)| c.clone());
                let mut tools = vec![json!({"name": "echo", "inputSchema": {"type": "object"}})];
                if by_caps && caps.is_some_and(|c| c.get("elicitation").is_some()) {
                    tools.push(json!({"name": "elicit", "inputSchema": {"type": "object"}}));
                }
                json!({"tools": tools})
            }
            // `wait` is answered by the test (or never), so a request of the server's can come
            // while it runs.
            "tools/call" if m["params"]["name"] == "wait" => return,
            "tools/call" => json!({"content": [{"type": "text", "text": m["params"]["name"]}]}),
            _ => json!({}),
        };
        link.reply(&json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string());
    })
}

/// A server family (base and siblings, one config) in front of `fake`, keeping its answers in
/// `answers` as a daemon does.
fn family(fake: &Arc<FakeConnector>, answers: &Arc<Answers>) -> Arc<Server> {
    let build = {
        let (fake, answers) = (fake.clone(), answers.clone());
        move || {
            let mut config: Config = toml::from_str("").expect("config");
            config.validate().expect("valid");
            let s = Server::new(
                &config,
                "fake",
                fake.clone(),
                Policy::disabled(),
                Arc::new(Metrics::new(Default::default)),
                crate::peer::Buffered::new(config.limits.max_buffered_bytes),
                CancellationToken::new(),
            );
            s.keep_answers(answers.clone(), "k".into());
            s
        }
    };
    let base = build();
    base.allow_siblings(Box::new(move |_| Ok(build())));
    base
}

/// A client in a session of the router.
struct Client {
    out: WriteHalf<DuplexStream>,
    inbox: mpsc::UnboundedReceiver<Value>,
    held: Vec<Value>,
    next: u64,
    /// Its initialize result.
    told: Value,
    ended: CancellationToken,
}

impl Client {
    /// Opens a session, initialises it as `kind`, and answers switchyard's roots/list (a client
    /// with roots gives `/project`).
    async fn connect(server: &Arc<Server>, kind: (&str, &str, fn() -> Value)) -> Client {
        Client::connect_in(server, kind, "file:///project").await
    }

    /// [`Client::connect`], a client with roots giving `root`.
    async fn connect_in(server: &Arc<Server>, kind: (&str, &str, fn() -> Value), root: &str) -> Client {
        let ended = CancellationToken::new();
        let (out, inbox) = crate::test_session::open(server, ended.clone());
        let mut c = Client { out, inbox, held: Vec::new(), next: 1, told: Value::Null, ended };
        let (name, version, caps) = kind;
        let params =
            json!({"protocolVersion": version, "capabilities": caps(), "clientInfo": {"name": name, "version": "1"}});
        let resp = c.request("initialize", params).await;
        c.told = resp["result"].clone();
        c.write(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        if caps().get("roots").is_some() {
            let ask = c.next_request("roots/list").await;
            c.write(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [{"uri": root}]}})).await;
        }
        c
    }

    async fn write(&mut self, msg: Value) {
        self.out.write_all(format!("{msg}\n").as_bytes()).await.expect("the session reads");
    }

    async fn next_message(&mut self) -> Value {
        let next = tokio::time::timeout(Duration::from_secs(60), self.inbox.recv()).await;
        next.expect("nothing within a minute").expect("the session ended")
    }

    /// Sends a request; its id.
    async fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next;
        self.next += 1;
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        id
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        loop {
            if let Some(i) = self.held.iter().position(|m| m.get("method").is_none() && m["id"] == id) {
                return self.held.remove(i);
            }
            let m = self.next_message().await;
            self.held.push(m);
        }
    }

    async fn next_request(&mut self, method: &str) -> Value {
        loop {
            if let Some(i) = self.held.iter().position(|m| m["method"] == method) {
                return self.held.remove(i);
            }
            let m = self.next_message().await;
            self.held.push(m);
        }
    }

    async fn tools(&mut self) -> Vec<String> {
        let r = self.request("tools/list", json!({})).await;
        r["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    }

    async fn call(&mut self, tool: &str) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": {}})).await
    }

    /// Leaves, and gives the router a moment to see it.
    async fn leave(self) {
        self.ended.cancel();
        tokio::time::sleep(Duration::from_secs(3)).await;
    }

    /// What reached it and was not taken: server requests and notifications included.
    fn unread(&mut self) -> Vec<Value> {
        while let Ok(m) = self.inbox.try_recv() {
            self.held.push(m);
        }
        std::mem::take(&mut self.held)
    }
}

fn links(fake: &FakeConnector) -> usize {
    fake.links.lock().unwrap().len()
}

fn live_links(fake: &FakeConnector) -> usize {
    fake.links.lock().unwrap().iter().filter(|l| !l.is_ended()).count()
}

fn received(link: &FakeLink, method: &str) -> Vec<Value> {
    let all = link.lines().iter().map(|l| serde_json::from_str::<Value>(l).expect("JSON")).collect::<Vec<_>>();
    all.into_iter().filter(|m| m["method"] == method).collect()
}

/// The response `link` sent the server for its own request `id`.
fn answered(link: &FakeLink, id: &str) -> Value {
    let all = link.lines().iter().map(|l| serde_json::from_str::<Value>(l).expect("JSON")).collect::<Vec<_>>();
    all.into_iter().find(|m| m["id"] == id && m.get("method").is_none()).unwrap_or(Value::Null)
}

/// Three kinds of client, one server that cannot tell them apart: the first of each other kind
/// gets instances of its own while the server's answers to it are learned, which stop when it
/// leaves; from then on clients of every kind share one instance, each told its own protocol
/// version, each call answered to its own client.
#[tokio::test(start_paused = true)]
async fn clients_of_other_kinds_share_once_the_server_answered_them_alike() {
    let fake = FakeConnector::new(server(false));
    let base = family(&fake, &Arc::new(Answers::open(None)));
    let mut claude = Client::connect(&base, CLAUDE).await;
    assert_eq!(claude.tools().await, ["echo"]);
    for kind in [CODEX, GEMINI] {
        let mut first = Client::connect(&base, kind).await;
        assert_eq!(first.told["protocolVersion"], kind.1);
        assert_eq!(first.call("echo").await["result"]["content"][0]["text"], "echo");
        assert_eq!(live_links(&fake), 2, "the first {} is served apart while it is learned", kind.0);
        first.leave().await;
        assert_eq!(live_links(&fake), 1, "its instances stop with it: clients like it share the others now");
    }
    let before = links(&fake);
    let mut codex = Client::connect(&base, CODEX).await;
    let mut gemini = Client::connect(&base, GEMINI).await;
    assert_eq!(links(&fake), before, "no instance started for clients the server cannot tell apart");
    assert_eq!(
        (codex.told["protocolVersion"].as_str(), gemini.told["protocolVersion"].as_str()),
        (Some("2025-06-18"), Some("2025-06-18"))
    );
    assert_eq!(codex.told["capabilities"], claude.told["capabilities"]);
    for c in [&mut claude, &mut codex, &mut gemini] {
        assert_eq!(c.tools().await, ["echo"]);
        assert_eq!(c.call("echo").await["result"]["content"][0]["text"], "echo");
    }
    assert_eq!(received(&fake.link(0), "tools/call").len(), 3, "every call on the one instance");
    let status = base.status();
    let kinds: Vec<&str> = status["clients"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(kinds, ["mcp-test-client", "codex-mcp-client", "claude-code"], "{status:#}");
    assert_eq!(status["clients"][0]["joined"], true);
    assert_eq!(status["clients"][0]["kind"], "protocol 2025-06-18; no capabilities");
    assert_eq!(status["clients"][2]["sessions"], 1);
    assert_eq!(status["instances"][0]["clients"], json!(["claude-code 1", "codex-mcp-client 1", "mcp-test-client 1"]));
}

/// Clients the server answers differently never share: server-everything lists an elicitation
/// tool only to clients that declare elicitation.
#[tokio::test(start_paused = true)]
async fn a_server_that_lists_tools_by_capability_keeps_its_clients_apart() {
    let fake = FakeConnector::new(server(true));
    let base = family(&fake, &Arc::new(Answers::open(None)));
    let mut codex = Client::connect(&base, CODEX).await;
    let mut gemini = Client::connect(&base, GEMINI).await;
    gemini.tools().await;
    gemini.leave().await;
    let mut again = Client::connect(&base, GEMINI).await;
    assert_eq!(codex.tools().await, ["echo", "elicit"]);
    assert_eq!(again.tools().await, ["echo"], "a client was shown another kind's tools");
    assert_eq!(live_links(&fake), 2);
}

/// The server asks a client for its roots on an instance that serves clients whose roots
/// differ (they share it because it never asked before): refused, so no client's roots reach
/// instances another uses; from then on (in later runs too) a client of another kind gets
/// instances of its own, while those already sharing keep theirs and hear nothing of it.
#[tokio::test(start_paused = true)]
async fn a_server_that_starts_asking_splits_new_clients_and_tells_the_others_nothing() {
    let fake = FakeConnector::new(server(false));
    let answers = Arc::new(Answers::open(None));
    let base = family(&fake, &answers);
    let mut claude = Client::connect(&base, CLAUDE).await;
    Client::connect(&base, CODEX).await.leave().await;
    let mut codex = Client::connect(&base, CODEX).await;
    assert_eq!(live_links(&fake), 1, "{}", base.status());
    // The server asks during Claude Code's call: its roots would now be the instance's.
    let link = fake.link(0);
    link.reply(r#"{"jsonrpc":"2.0","id":"r1","method":"roots/list","params":{}}"#);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = answered(&link, "r1");
    assert!(refused["error"]["message"].as_str().is_some_and(|m| m.contains("roots differ")), "{refused}");
    assert!(claude.unread().iter().chain(codex.unread().iter()).all(|m| m["method"] != "roots/list"));
    assert_eq!(base.asked().iter().map(|f| f.name()).collect::<Vec<_>>(), ["roots"]);
    // A new Codex session now differs in what the server uses.
    let mut later = Client::connect(&base, CODEX).await;
    assert_eq!(later.call("echo").await["result"]["content"][0]["text"], "echo");
    assert_eq!(live_links(&fake), 2, "a new client of another kind got its own instance");
    assert_eq!(received(&fake.link(0), "tools/call").len(), 0);
    assert_eq!(codex.call("echo").await["result"]["content"][0]["text"], "echo", "the one sharing keeps its instance");
    assert_eq!(received(&fake.link(0), "tools/call").len(), 1);
    // A daemon started again remembers it.
    let fake2 = FakeConnector::new(server(false));
    let again = family(&fake2, &answers);
    let _claude = Client::connect(&again, CLAUDE).await;
    let _codex = Client::connect(&again, CODEX).await;
    assert_eq!(live_links(&fake2), 2);
}

/// A sampling request on a shared instance reaches only the session whose call made it, and
/// is refused for a client that did not declare sampling; the next client of the other kind
/// gets instances of its own.
#[tokio::test(start_paused = true)]
async fn a_request_from_a_shared_instance_reaches_its_own_client_only() {
    let fake = FakeConnector::new(server(false));
    let base = family(&fake, &Arc::new(Answers::open(None)));
    let sampling = ("sampler", "2025-06-18", (|| json!({"sampling": {}})) as fn() -> Value);
    let mut codex = Client::connect(&base, CODEX).await;
    Client::connect(&base, sampling).await.leave().await;
    let mut sampler = Client::connect(&base, sampling).await;
    assert_eq!(live_links(&fake), 1);
    let link = fake.link(0);
    let ask = r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}"#;
    // While the sampler's call runs on the instance, the server asks: the sampler is asked.
    sampler.send("tools/call", json!({"name": "wait", "arguments": {}})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    link.reply(ask);
    let asked = sampler.next_request("sampling/createMessage").await;
    sampler.write(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(answered(&link, "s1")["result"]["model"], "m");
    assert!(codex.unread().is_empty(), "another client saw the request");
    // The sampler's call ends.
    let wait = received(&link, "tools/call").into_iter().find(|m| m["params"]["name"] == "wait").expect("sent");
    link.reply(&json!({"jsonrpc": "2.0", "id": wait["id"], "result": {"content": []}}).to_string());
    let _ = sampler.next_message().await;
    // While Codex's call runs, the server asks again: Codex declared no sampling.
    codex.send("tools/call", json!({"name": "wait", "arguments": {}})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    link.reply(&ask.replace("s1", "s2"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = answered(&link, "s2");
    assert!(
        refused["error"]["message"].as_str().is_some_and(|m| m.contains("did not declare the `sampling`")),
        "{refused}"
    );
    assert!(codex.unread().iter().all(|m| m.get("method").is_none()), "Codex was asked");
    assert!(base.asked().iter().any(|f| f.name() == "sampling"));
    let _next = Client::connect(&base, sampling).await;
    assert_eq!(live_links(&fake), 2, "sampling splits clients that differ in it");
}

/// A client of another kind, with other roots, shares the instance of a server that never asked
/// for roots; when the server then asks, its instance would learn one client's roots for both:
/// refused, and the next such client gets an instance of its own.
#[tokio::test(start_paused = true)]
async fn a_roots_request_on_an_instance_of_clients_with_other_roots_is_refused() {
    let fake = FakeConnector::new(server(false));
    let base = family(&fake, &Arc::new(Answers::open(None)));
    let roots_only = ("zed", "2025-06-18", (|| json!({"roots": {}})) as fn() -> Value);
    let mut claude = Client::connect(&base, CLAUDE).await;
    Client::connect_in(&base, roots_only, "file:///other").await.leave().await;
    let mut other = Client::connect_in(&base, roots_only, "file:///other").await;
    assert_eq!(live_links(&fake), 1, "{}", base.status());
    assert!(base.roots_unshared().is_some());
    let link = fake.link(0);
    link.reply(r#"{"jsonrpc":"2.0","id":"r1","method":"roots/list","params":{}}"#);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = answered(&link, "r1");
    assert!(refused["error"]["message"].as_str().is_some_and(|m| m.contains("roots differ")), "{refused}");
    assert!(!refused.to_string().contains("/project") && !refused.to_string().contains("/other"), "{refused}");
    assert!(claude.unread().iter().chain(other.unread().iter()).all(|m| m["method"] != "roots/list"));
    let _next = Client::connect_in(&base, roots_only, "file:///other").await;
    assert_eq!(live_links(&fake), 2, "a client with other roots shared after the server asked");
    // Alone again, the first client's instance is told its roots.
    other.leave().await;
    assert!(base.roots_unshared().is_none());
    link.reply(r#"{"jsonrpc":"2.0","id":"r2","method":"roots/list","params":{}}"#);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(answered(&link, "r2")["result"]["roots"][0]["uri"], "file:///project");
}

/// The evidence of the profile a server's first instance serves costs the server no second
/// tools/list: the list switchyard fetches anyway (for hints, and so that new sessions cost the
/// server none) is the evidence.
#[tokio::test(start_paused = true)]
async fn the_evidence_is_the_tools_list_switchyard_fetches_anyway() {
    let fake = FakeConnector::new(server(false));
    let base = family(&fake, &Arc::new(Answers::open(None)));
    let _gemini = Client::connect(&base, GEMINI).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(received(&fake.link(0), "tools/list").len(), 1, "tools/list fetched again for the evidence");
    let (name, version, caps) = GEMINI;
    let params = json!({"protocolVersion": version, "capabilities": caps(), "clientInfo": {"name": name}});
    let profile = crate::server::profile::Profile::of_initialize(&params.to_string(), None);
    let evidence = base.answered(&profile).expect("the evidence of the first profile");
    assert_eq!(evidence.lists[0].1[0]["name"], "echo");
}

/// A client's roots/list_changed reaches the instances started for its own profile, even when
/// it declares no roots (switchyard has none to ask it for: the server decides what to do); a
/// client that shares by the evidence instances started for clients without roots does not
/// tell them of its roots (their server knows of none).
#[tokio::test(start_paused = true)]
async fn roots_changes_reach_instances_of_the_client_s_own_profile_only() {
    let fake = FakeConnector::new(server(false));
    let base = family(&fake, &Arc::new(Answers::open(None)));
    let changed = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"});
    let mut gemini = Client::connect(&base, GEMINI).await;
    gemini.write(changed.clone()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let passed = || received(&fake.link(0), "notifications/roots/list_changed").len();
    assert_eq!(passed(), 1, "the change of the client the instance was started for was not passed on");
    Client::connect(&base, CLAUDE).await.leave().await;
    let mut claude = Client::connect(&base, CLAUDE).await;
    assert_eq!(live_links(&fake), 1, "{}", base.status());
    claude.write(changed).await;
    let ask = claude.next_request("roots/list").await;
    claude.write(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [{"uri": "file:///elsewhere"}]}})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(passed(), 1, "a joined client's roots change reached instances of clients without roots");
    assert_eq!(live_links(&fake), 1);
}
