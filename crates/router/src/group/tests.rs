//! A group session in-process over fake servers, under paused time: merged lists, calls routed
//! by name, a member that is down, a server's request and its answer, cancels, a slow member.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, WriteHalf};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::server::Server;
use crate::session::{Opening, Sessions, Writer};
use crate::upstream::fake::{Behaviour, FakeConnector, FakeLink};
use switchyard_config::{Config, Group, Member};
use switchyard_core::codec::LineReader;
use switchyard_core::metrics::Metrics;
use switchyard_policy::Policy;

mod envelope;

/// A server named `name` with tools `echo` and `wait` (never answered: the test answers it),
/// a resource `NAME://doc`, and a prompt `hello`.
fn behaviour(name: &'static str) -> Behaviour {
    Arc::new(move |link, msg| {
        let Some(id) = msg.request else { return };
        let m: Value = serde_json::from_str(&msg.line).expect("JSON");
        let result = match m["method"].as_str().unwrap_or_default() {
            "initialize" => json!({"protocolVersion": m["params"]["protocolVersion"],
                "capabilities": {"tools": {}, "prompts": {}, "resources": {}},
                "serverInfo": {"name": name, "version": "1"}, "instructions": format!("I am {name}")}),
            // Two pages: the group reads both.
            "tools/list" if m["params"]["cursor"].is_null() => {
                json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}], "nextCursor": "2"})
            }
            "tools/list" => json!({"tools": [{"name": "wait", "inputSchema": {"type": "object"}}]}),
            "prompts/list" => json!({"prompts": [{"name": "hello"}]}),
            "resources/list" => json!({"resources": [{"uri": format!("{name}://doc"), "name": "doc"}]}),
            "resources/templates/list" => json!({"resourceTemplates": []}),
            "resources/read" => json!({"contents": [{"uri": m["params"]["uri"], "text": name}]}),
            "tools/call" if m["params"]["name"] == "wait" => return,
            "tools/call" => {
                json!({"content": [{"type": "text", "text": format!("{name}:{}", m["params"]["name"].as_str().unwrap_or_default())}]})
            }
            _ => json!({}),
        };
        link.reply(&json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string());
    })
}

fn server(name: &str, fake: &Arc<FakeConnector>) -> Arc<Server> {
    server_of("", name, fake)
}

/// A server of a config file whose text is `toml` (its `[budgets]`, say).
fn server_of(toml: &str, name: &str, fake: &Arc<FakeConnector>) -> Arc<Server> {
    let mut config: Config = toml::from_str(toml).expect("config");
    config.validate().expect("valid");
    Server::new(
        &config,
        name,
        fake.clone(),
        Policy::disabled(),
        Arc::new(Metrics::new(Default::default)),
        crate::peer::Buffered::new(config.limits.max_buffered_bytes),
        CancellationToken::new(),
    )
}

fn group(servers: &[&str]) -> Group {
    Group {
        name: "work".into(),
        members: servers.iter().map(|s| Member { server: s.to_string(), prefix: s.to_string() }).collect(),
        separator: "__".into(),
        expose: None,
    }
}

/// A client of a group session.
struct Client {
    out: WriteHalf<DuplexStream>,
    inbox: mpsc::UnboundedReceiver<Value>,
    /// Every line the group sent, as sent (an id's text, which a `Value` would round).
    raw: Arc<std::sync::Mutex<Vec<String>>>,
    held: Vec<Value>,
    next: u64,
    ended: CancellationToken,
    served: tokio::task::JoinHandle<()>,
}

impl Client {
    fn open(group: Group, joined: Vec<Result<Arc<Server>, String>>) -> Client {
        Client::open_with(group, joined, |_| ())
    }

    /// [`Client::open`], `on_open` given the session when it runs.
    fn open_with(
        group: Group,
        joined: Vec<Result<Arc<Server>, String>>,
        on_open: impl FnOnce(&Arc<super::GroupSession>) + Send + 'static,
    ) -> Client {
        let (mine, theirs) = tokio::io::duplex(1 << 20);
        let (r, w) = tokio::io::split(theirs);
        let opening = Opening {
            transport: "unix",
            sessions: Arc::new(Sessions::default()),
            speaks_control: false,
            client_dir: None,
            client_token: None,
        };
        let ended = CancellationToken::new();
        let input = LineReader::new(BufReader::new(r), 1 << 20);
        let end = ended.clone();
        let served = tokio::spawn(async move {
            super::serve_with(&group, joined, input, Writer(w), opening, end, on_open).await;
        });
        let (r, out) = tokio::io::split(mine);
        let (tx, inbox) = mpsc::unbounded_channel();
        let raw = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = raw.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let msg = serde_json::from_str::<Value>(&line).expect("the group sends JSON");
                kept.lock().unwrap().push(line);
                let _ = tx.send(msg);
            }
        });
        Client { out, inbox, raw, held: Vec::new(), next: 1, ended, served }
    }

    /// Writes `line` as it is.
    async fn write_line(&mut self, line: &str) {
        self.out.write_all(format!("{line}\n").as_bytes()).await.expect("the group reads");
    }

    async fn write(&mut self, msg: Value) {
        self.out.write_all(format!("{msg}\n").as_bytes()).await.expect("the group reads");
    }

    async fn next_message(&mut self) -> Value {
        let next = tokio::time::timeout(Duration::from_secs(120), self.inbox.recv()).await;
        next.expect("nothing within two minutes").expect("the session ended")
    }

    async fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next;
        self.next += 1;
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        id
    }

    async fn response(&mut self, id: u64) -> Value {
        self.take(|m| m.get("method").is_none() && m["id"] == id).await
    }

    async fn take(&mut self, want: impl Fn(&Value) -> bool) -> Value {
        loop {
            if let Some(i) = self.held.iter().position(&want) {
                return self.held.remove(i);
            }
            let m = self.next_message().await;
            self.held.push(m);
        }
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        self.response(id).await
    }

    async fn initialize(&mut self, caps: Value) -> Value {
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": caps, "clientInfo": {"name": "test", "version": "1"}});
        let r = self.request("initialize", params).await;
        self.write(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        r
    }

    async fn names(&mut self, method: &str, key: &str) -> Vec<String> {
        let r = self.request(method, json!({})).await;
        r["result"][key].as_array().expect("a list").iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    }

    async fn leave(self) {
        self.ended.cancel();
        drop(self.out);
        let _ = tokio::time::timeout(Duration::from_secs(30), self.served).await;
    }
}

fn received(link: &FakeLink, method: &str) -> Vec<Value> {
    let all = link.lines().iter().map(|l| serde_json::from_str::<Value>(l).expect("JSON")).collect::<Vec<_>>();
    all.into_iter().filter(|m| m["method"] == method).collect()
}

#[tokio::test(start_paused = true)]
async fn tools_prompts_and_resources_of_every_member_are_merged_and_routed_back() {
    let (fa, fb) = (FakeConnector::new(behaviour("a")), FakeConnector::new(behaviour("b")));
    let mut c = Client::open(group(&["a", "b"]), vec![Ok(server("a", &fa)), Ok(server("b", &fb))]);
    let init = c.initialize(json!({})).await;
    let r = &init["result"];
    assert_eq!(r["protocolVersion"], "2025-11-25");
    assert_eq!(r["capabilities"]["tools"]["listChanged"], true, "{init}");
    let instructions = r["instructions"].as_str().unwrap();
    assert!(
        instructions.contains("I am a") && instructions.contains("I am b") && instructions.contains("b__NAME"),
        "{instructions}"
    );
    // Both pages of both servers, prefixed, in member order.
    assert_eq!(c.names("tools/list", "tools").await, ["a__echo", "a__wait", "b__echo", "b__wait"]);
    assert_eq!(c.names("prompts/list", "prompts").await, ["a__hello", "b__hello"]);
    let got = c.request("tools/call", json!({"name": "b__echo", "arguments": {}})).await;
    assert_eq!(got["result"]["content"][0]["text"], "b:echo", "{got}");
    assert_eq!(received(&fb.link(0), "tools/call")[0]["params"]["name"], "echo");
    assert!(received(&fa.link(0), "tools/call").is_empty(), "a was never called");
    // Resources keep their URIs and go to the server that listed them.
    let listed = c.request("resources/list", json!({})).await;
    assert_eq!(listed["result"]["resources"][1]["uri"], "b://doc");
    let read = c.request("resources/read", json!({"uri": "b://doc"})).await;
    assert_eq!(read["result"]["contents"][0]["text"], "b", "{read}");
    let unknown = c.request("resources/read", json!({"uri": "c://x"})).await;
    assert!(unknown["error"]["message"].as_str().unwrap().contains("`c://x`"), "{unknown}");
    let bad = c.request("tools/call", json!({"name": "zz__echo"})).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap().contains("a, b"), "{bad}");
    c.leave().await;
}

#[tokio::test(start_paused = true)]
async fn a_member_that_cannot_be_used_leaves_the_others_working_and_is_named() {
    let fa = FakeConnector::new(behaviour("a"));
    let joined = vec![Ok(server("a", &fa)), Err("no server named `b` in the config".to_string())];
    let mut c = Client::open(group(&["a", "b"]), joined);
    let init = c.initialize(json!({})).await;
    assert!(init.get("result").is_some(), "{init}");
    assert_eq!(c.names("tools/list", "tools").await, ["a__echo", "a__wait"]);
    let down = c.request("tools/call", json!({"name": "b__echo"})).await;
    let why = down["error"]["message"].as_str().unwrap();
    assert!(
        why.contains("server `b`") && why.contains("no server named `b`") && why.contains("other servers"),
        "{why}"
    );
    let up = c.request("tools/call", json!({"name": "a__echo"})).await;
    assert_eq!(up["result"]["content"][0]["text"], "a:echo");
    c.leave().await;
}

#[tokio::test(start_paused = true)]
async fn a_group_none_of_whose_servers_can_be_used_says_why_for_each() {
    let mut c = Client::open(group(&["a", "b"]), vec![Err("broken a".into()), Err("broken b".into())]);
    let init = c.request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}})).await;
    let why = init["error"]["message"].as_str().unwrap();
    assert!(why.contains("broken a") && why.contains("broken b"), "{why}");
    c.leave().await;
}

#[tokio::test(start_paused = true)]
async fn a_server_request_reaches_the_client_and_its_answer_goes_back_to_that_server_only() {
    let (fa, fb) = (FakeConnector::new(behaviour("a")), FakeConnector::new(behaviour("b")));
    let mut c = Client::open(group(&["a", "b"]), vec![Ok(server("a", &fa)), Ok(server("b", &fb))]);
    c.initialize(json!({"sampling": {}})).await;
    let call = c.send("tools/call", json!({"name": "b__wait"})).await;
    // b asks the client for a sampling while the call runs.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let upstream_call = received(&fb.link(0), "tools/call")[0]["id"].clone();
    fb.link(0).reply(
        &json!({"jsonrpc": "2.0", "id": 77, "method": "sampling/createMessage", "params": {"messages": []}})
            .to_string(),
    );
    let ask = c.take(|m| m["method"] == "sampling/createMessage").await;
    c.write(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"role": "assistant", "content": {"type": "text", "text": "hi"}}})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let answered = |link: &FakeLink| -> Vec<Value> {
        link.lines()
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|m| m["id"] == 77 && m.get("result").is_some())
            .collect()
    };
    assert_eq!(answered(&fb.link(0)).len(), 1, "b got its answer: {:?}", fb.link(0).lines());
    assert!(answered(&fa.link(0)).is_empty(), "a got nothing");
    // The call's own answer comes back under the client's id.
    fb.link(0).reply(&json!({"jsonrpc": "2.0", "id": upstream_call, "result": {"content": []}}).to_string());
    let done = c.response(call).await;
    assert!(done.get("result").is_some(), "{done}");
    c.leave().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_reaches_the_member_that_runs_the_call() {
    let (fa, fb) = (FakeConnector::new(behaviour("a")), FakeConnector::new(behaviour("b")));
    let mut c = Client::open(group(&["a", "b"]), vec![Ok(server("a", &fa)), Ok(server("b", &fb))]);
    c.initialize(json!({})).await;
    let call = c.send("tools/call", json!({"name": "a__wait"})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let upstream = received(&fa.link(0), "tools/call")[0]["id"].clone();
    c.write(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": call, "reason": "no"}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cancels = received(&fa.link(0), "notifications/cancelled");
    assert_eq!(cancels.len(), 1, "{:?}", fa.link(0).lines());
    assert_eq!(cancels[0]["params"]["requestId"], upstream);
    assert!(received(&fb.link(0), "notifications/cancelled").is_empty());
    c.leave().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_member_joins_after_the_client_was_answered_and_its_tools_are_announced() {
    let fa = FakeConnector::new(behaviour("a"));
    let fb = FakeConnector::slow(behaviour("b"), Duration::from_secs(45));
    let mut c = Client::open(group(&["a", "b"]), vec![Ok(server("a", &fa)), Ok(server("b", &fb))]);
    let started = tokio::time::Instant::now();
    let init = c.initialize(json!({})).await;
    assert!(init.get("result").is_some(), "{init}");
    let waited = started.elapsed();
    assert!(waited >= super::INIT_WAIT && waited < super::INIT_WAIT + Duration::from_secs(1), "{waited:?}");
    assert_eq!(c.names("tools/list", "tools").await, ["a__echo", "a__wait"]);
    c.take(|m| m["method"] == "notifications/tools/list_changed").await;
    assert!(started.elapsed() >= Duration::from_secs(45));
    assert_eq!(c.names("tools/list", "tools").await, ["a__echo", "a__wait", "b__echo", "b__wait"]);
    c.leave().await;
}

#[tokio::test(start_paused = true)]
async fn a_member_whose_server_dies_answers_its_calls_with_an_error_and_the_others_go_on() {
    let (fa, fb) = (FakeConnector::new(behaviour("a")), FakeConnector::new(behaviour("b")));
    let mut c = Client::open(group(&["a", "b"]), vec![Ok(server("a", &fa)), Ok(server("b", &fb))]);
    c.initialize(json!({})).await;
    let call = c.send("tools/call", json!({"name": "b__wait"})).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    fb.link(0).end("killed by signal 9");
    let failed = c.response(call).await;
    let why = failed["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(why.contains("b") && why.contains("signal 9"), "{failed}");
    let other = c.request("tools/call", json!({"name": "a__echo"})).await;
    assert_eq!(other["result"]["content"][0]["text"], "a:echo");
    c.leave().await;
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_ends_every_member_session() {
    let (fa, fb) = (FakeConnector::new(behaviour("a")), FakeConnector::new(behaviour("b")));
    let (sa, sb) = (server("a", &fa), server("b", &fb));
    let mut c = Client::open(group(&["a", "b"]), vec![Ok(sa.clone()), Ok(sb.clone())]);
    c.initialize(json!({})).await;
    assert_eq!((sa.hub.session_count(), sb.hub.session_count()), (1, 1));
    c.leave().await;
    assert_eq!((sa.hub.session_count(), sb.hub.session_count()), (0, 0));
}

/// A client's `tools_max` is kept by the group's merged list, not by each member's: two
/// members of two tools each are within a budget of 3 alone, and over it together; the list is
/// passed whole and the group session says so in status.
#[tokio::test(start_paused = true)]
async fn a_merged_list_over_the_clients_count_budget_is_passed_whole_and_said() {
    let budgets = "[budgets.test]\ntools_max = 3\n";
    let (fa, fb) = (FakeConnector::new(behaviour("a")), FakeConnector::new(behaviour("b")));
    let (a, b) = (server_of(budgets, "a", &fa), server_of(budgets, "b", &fb));
    let (tx, mut opened) = mpsc::unbounded_channel();
    let mut c = Client::open_with(group(&["a", "b"]), vec![Ok(a.clone()), Ok(b.clone())], move |s| {
        let _ = tx.send(s.clone());
    });
    let session = opened.recv().await.expect("the session opens");
    c.initialize(json!({})).await;
    assert_eq!(session.status()["budget"], Value::Null, "nothing listed yet");
    assert_eq!(c.names("tools/list", "tools").await.len(), 4, "the list is passed whole");
    let said = session.status()["budget"].clone();
    assert_eq!(
        (said["client"].as_str(), said["tools"].as_u64(), said["tools_max"].as_u64()),
        (Some("test"), Some(4), Some(3))
    );
    assert!(a.budget_status().is_empty() && b.budget_status().is_empty(), "a member alone is within it");
    drop(session);
    c.leave().await;
}

/// Server `name` of [`behaviour`] whose lists are answered only `ready` after it was made (a
/// server restarting behind a session that is up).
fn lists_late(name: &'static str, ready: Duration) -> Behaviour {
    let inner = behaviour(name);
    let at = tokio::time::Instant::now() + ready;
    Arc::new(move |link, msg| {
        let m: Value = serde_json::from_str(&msg.line).expect("JSON");
        if m["method"] != "tools/list" || tokio::time::Instant::now() >= at {
            return inner(link, msg);
        }
        let (inner, link, msg) = (inner.clone(), link.clone(), msg.clone());
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            inner(&link, &msg);
        });
    })
}

/// Found from outside: a member whose server was restarting held a new session's first
/// `tools/list` until it was back (23 s). The list is answered within `LIST_READY` with the
/// members that are ready, and the client is told its list changed once the late one's is read.
#[tokio::test(start_paused = true)]
async fn a_member_slow_to_list_does_not_hold_the_clients_list() {
    let fa = FakeConnector::new(behaviour("a"));
    let fb = FakeConnector::new(lists_late("b", Duration::from_secs(30)));
    let mut c = Client::open(group(&["a", "b"]), vec![Ok(server("a", &fa)), Ok(server("b", &fb))]);
    c.initialize(json!({})).await;
    let asked = tokio::time::Instant::now();
    assert_eq!(c.names("tools/list", "tools").await, ["a__echo", "a__wait"]);
    assert!(asked.elapsed() <= Duration::from_secs(6), "the list waited {:?}", asked.elapsed());
    c.take(|m| m["method"] == "notifications/tools/list_changed").await;
    assert!(asked.elapsed() >= Duration::from_secs(25), "told at {:?}", asked.elapsed());
    assert_eq!(c.names("tools/list", "tools").await, ["a__echo", "a__wait", "b__echo", "b__wait"]);
    c.leave().await;
}

/// Found from outside: a client was told `list_changed` right after its initialize, before the
/// slow member was up, and again when it was. Initialize is answered within 5 s, and a client
/// that has not listed its tools is told nothing: the list it asks for has every member up.
#[tokio::test(start_paused = true)]
async fn a_client_is_told_its_list_changed_only_when_the_list_it_saw_did() {
    let fa = FakeConnector::new(behaviour("a"));
    let fb = FakeConnector::slow(behaviour("b"), Duration::from_secs(25));
    let mut c = Client::open(group(&["a", "b"]), vec![Ok(server("a", &fa)), Ok(server("b", &fb))]);
    let started = tokio::time::Instant::now();
    c.initialize(json!({})).await;
    assert!(started.elapsed() <= Duration::from_secs(5), "initialize waited {:?}", started.elapsed());
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert_eq!(c.names("tools/list", "tools").await, ["a__echo", "a__wait", "b__echo", "b__wait"]);
    tokio::time::sleep(Duration::from_secs(10)).await;
    while let Ok(m) = c.inbox.try_recv() {
        c.held.push(m);
    }
    let told: Vec<&Value> = c.held.iter().filter(|m| m["method"] == "notifications/tools/list_changed").collect();
    assert!(told.is_empty(), "told {told:?}");
    c.leave().await;
}

/// Found from outside: a server taken out of a group stayed in the sessions open then, and
/// their clients were not told. It leaves them: the client is told its list changed, the list
/// has the others only, and a call of its tools says why.
#[tokio::test(start_paused = true)]
async fn a_server_taken_out_of_the_group_leaves_its_open_sessions() {
    let (fa, fb) = (FakeConnector::new(behaviour("a")), FakeConnector::new(behaviour("b")));
    let (tx, mut opened) = mpsc::unbounded_channel();
    let mut c = Client::open_with(group(&["a", "b"]), vec![Ok(server("a", &fa)), Ok(server("b", &fb))], move |s| {
        let _ = tx.send(s.clone());
    });
    let session = opened.recv().await.expect("the session opens");
    c.initialize(json!({})).await;
    assert_eq!(c.names("tools/list", "tools").await.len(), 4);
    session.regroup(Some(&group(&["a"])));
    c.take(|m| m["method"] == "notifications/tools/list_changed").await;
    assert_eq!(c.names("tools/list", "tools").await, ["a__echo", "a__wait"]);
    let r = c.request("tools/call", json!({"name": "b__echo", "arguments": {}})).await;
    let text = r.to_string();
    assert!(text.contains("server `b`") && text.contains("taken out of group `work`"), "{r}");
    let r = c.request("tools/call", json!({"name": "a__echo", "arguments": {}})).await;
    assert_eq!(r["result"]["content"][0]["text"], "a:echo", "{r}");
    drop(session);
    c.leave().await;
}

/// Found from outside: through a group, a search added nothing to the list, where `connect`
/// of one server adds what a search found for a client whose budget says `add_found`. Now the
/// group does the same: the client is told its list changed (once for tools new to it), its
/// list is the two tools and those found, and a found tool is called by its name.
#[tokio::test(start_paused = true)]
async fn tools_a_search_finds_through_a_group_join_the_clients_list() {
    let budgets = "[budgets.test]\nadd_found = true\n";
    let (fa, fb) = (FakeConnector::new(behaviour("a")), FakeConnector::new(behaviour("b")));
    let searching = Group { expose: Some(switchyard_config::Expose::Search), ..group(&["a", "b"]) };
    let mut c = Client::open(searching, vec![Ok(server_of(budgets, "a", &fa)), Ok(server_of(budgets, "b", &fb))]);
    c.initialize(json!({})).await;
    assert_eq!(c.names("tools/list", "tools").await, ["search_tools", "call_tool"]);
    let r = c.request("tools/call", json!({"name": "search_tools", "arguments": {"query": "echo", "limit": 2}})).await;
    let found: Vec<&str> = r["result"]["structuredContent"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(found, ["a__echo", "b__echo"], "{r}");
    c.take(|m| m["method"] == "notifications/tools/list_changed").await;
    assert_eq!(c.names("tools/list", "tools").await, ["search_tools", "call_tool", "a__echo", "b__echo"]);
    // The same tools found again are not news.
    c.request("tools/call", json!({"name": "search_tools", "arguments": {"query": "echo", "limit": 2}})).await;
    let got = c.request("tools/call", json!({"name": "b__echo", "arguments": {}})).await;
    assert_eq!(got["result"]["content"][0]["text"], "b:echo", "{got}");
    while let Ok(m) = c.inbox.try_recv() {
        c.held.push(m);
    }
    let told = c.held.iter().filter(|m| m["method"] == "notifications/tools/list_changed").count();
    assert_eq!(told, 0, "told again: {:?}", c.held);
    c.leave().await;
}

/// A client whose budget does not say `add_found` keeps the two tools after a search.
#[tokio::test(start_paused = true)]
async fn a_search_through_a_group_adds_nothing_without_add_found() {
    let fa = FakeConnector::new(behaviour("a"));
    let searching = Group { expose: Some(switchyard_config::Expose::Search), ..group(&["a"]) };
    let mut c = Client::open(searching, vec![Ok(server("a", &fa))]);
    c.initialize(json!({})).await;
    c.request("tools/call", json!({"name": "search_tools", "arguments": {"query": "echo"}})).await;
    assert_eq!(c.names("tools/list", "tools").await, ["search_tools", "call_tool"]);
    c.leave().await;
}

/// A call through a group is routed by what its `Call` read, and its member's session is
/// handed that `Call`: the params are read once from the client's line to the server. A
/// completion is routed by its `ref` and reaches the member under the server's own names.
#[tokio::test(start_paused = true)]
async fn a_call_through_a_group_reads_its_params_once() {
    let (fa, fb) = (FakeConnector::new(behaviour("a")), FakeConnector::new(behaviour("b")));
    let mut c = Client::open(group(&["a", "b"]), vec![Ok(server("a", &fa)), Ok(server("b", &fb))]);
    c.initialize(json!({})).await;
    c.names("tools/list", "tools").await;
    c.names("prompts/list", "prompts").await;
    let reads = switchyard_core::codec::params_reads;
    let before = reads();
    let params = json!({"name": "b__echo", "arguments": {"text": "once"}, "_meta": {"progressToken": "p"}});
    let got = c.request("tools/call", params).await;
    assert_eq!(got["result"]["content"][0]["text"], "b:echo", "{got}");
    assert_eq!(reads() - before, 1, "a tools/call's params were read more than once through the group");
    let sent = received(&fb.link(0), "tools/call");
    assert_eq!((sent.len(), &sent[0]["params"]["arguments"]), (1, &json!({"text": "once"})), "{sent:?}");
    assert_eq!(sent[0]["params"]["_meta"]["progressToken"], sent[0]["id"], "{sent:?}");
    let before = reads();
    let prompt = json!({"ref": {"type": "ref/prompt", "name": "b__hello"}, "argument": {"name": "x", "value": "y"}});
    let got = c.request("completion/complete", prompt).await;
    assert!(got.get("result").is_some(), "{got}");
    assert_eq!(reads() - before, 1, "a completion's params were read more than once through the group");
    let sent = received(&fb.link(0), "completion/complete");
    assert_eq!(sent[0]["params"]["ref"], json!({"type": "ref/prompt", "name": "hello"}), "{sent:?}");
    assert_eq!(sent[0]["params"]["argument"], json!({"name": "x", "value": "y"}), "{sent:?}");
    c.names("resources/list", "resources").await;
    let resource = json!({"ref": {"type": "ref/resource", "uri": "a://doc"}, "argument": {"name": "x", "value": ""}});
    assert!(c.request("completion/complete", resource).await.get("result").is_some());
    assert_eq!(received(&fa.link(0), "completion/complete").len(), 1);
    let odd = c.request("completion/complete", json!({"ref": {"type": "ref/prompt", "name": 3}})).await;
    let why = odd["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("`params.ref.name` of `completion/complete` must be a string, not 3"), "{odd}");
    c.leave().await;
}

/// `call_tool` through a group runs the tool it names on its member, under the server's own
/// name, with the arguments it gives and the rest of the client's call (its `_meta`) as sent.
#[tokio::test(start_paused = true)]
async fn call_tool_through_a_group_reaches_the_member_under_the_server_s_name() {
    let (fa, fb) = (FakeConnector::new(behaviour("a")), FakeConnector::new(behaviour("b")));
    let searching = Group { expose: Some(switchyard_config::Expose::Search), ..group(&["a", "b"]) };
    let mut c = Client::open(searching, vec![Ok(server("a", &fa)), Ok(server("b", &fb))]);
    c.initialize(json!({})).await;
    let params = json!({"name": "call_tool", "arguments": {"name": "b__echo", "arguments": {"text": "via"}},
        "_meta": {"progressToken": "p"}});
    let got = c.request("tools/call", params).await;
    assert_eq!(got["result"]["content"][0]["text"], "b:echo", "{got}");
    let sent = received(&fb.link(0), "tools/call");
    assert_eq!((sent.len(), &sent[0]["params"]["name"]), (1, &json!("echo")), "{sent:?}");
    assert_eq!(sent[0]["params"]["arguments"], json!({"text": "via"}), "{sent:?}");
    assert_eq!(sent[0]["params"]["_meta"]["progressToken"], sent[0]["id"], "{sent:?}");
    let wrong = c.request("tools/call", json!({"name": "call_tool", "arguments": {"name": "zz"}})).await;
    assert_eq!(wrong["result"]["isError"], true, "{wrong}");
    assert!(received(&fa.link(0), "tools/call").is_empty());
    c.leave().await;
}
