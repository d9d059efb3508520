//! Tests of `switchyard:policy@0.2.0` beside 0.1.0: the caller, the tool-list hook, the rate
//! limits of `host.take`, `[[plugins]] servers`, and a 0.1.0 plugin built before 0.2 existed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::annotate::{ClientView, check_call, rewrite_list, rewrite_tools_list};
use super::*;
use switchyard_core::decision::{Caller, Concurrency, TaskRef, Transport};

const EXAMPLES: &str = env!("SWITCHYARD_EXAMPLE_PLUGINS");

fn example(name: &str) -> PathBuf {
    Path::new(EXAMPLES).join(name)
}

/// The `hints` example as built from the 0.1.0 contract before 0.2 was added, kept as it was.
fn hints_0_1_0() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/hints-0.1.0.wasm")
}

fn load(name: &str, path: &Path, config: &str, servers: Option<&[&str]>) -> Arc<Loaded> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut e = PluginEntry::defaults_for(name);
    e.config = Some(toml::Value::String(config.to_string()));
    // Epoch deadlines count wall-clock time; a busy test machine must not trip them.
    e.deadline_ms = 1_000;
    e.servers = servers.map(|s| s.iter().map(|n| n.to_string()).collect());
    Arc::new(Loaded::load(name, &bytes, &e).unwrap_or_else(|e| panic!("{name} does not load: {e:#}")))
}

fn client(name: &str) -> Caller {
    Caller {
        name: Some(name.into()),
        version: Some("1.0".into()),
        transport: Transport::Socket,
        dir: Some("/work/project".into()),
        token: None,
        era: "2025-11-25".into(),
    }
}

fn call_by(caller: Caller, server: &str, tool: &str) -> CallInfo {
    CallInfo {
        server: server.into(),
        session: "s1".into(),
        caller,
        method: "tools/call".into(),
        tool: Some(tool.into()),
        arguments: Some("{}".into()),
        declared: Hints::default(),
        attempt: 0,
        task: None,
    }
}

fn listed(server: &str, name: &str) -> ListedTool {
    ListedTool {
        kind: Kind::Tool,
        server: server.into(),
        name: name.into(),
        title: None,
        description: Some(format!("the {name} tool")),
        declared: Hints::default(),
    }
}

const FILTER: &str = r#"{"clients": {"cursor": {"hide": ["write_*"], "rename": {"read_file": "cat"}},
    "claude-*": {}, "only-*": {"only": ["read_*"]}}}"#;

#[test]
fn a_0_1_0_plugin_built_before_0_2_still_loads_and_behaves_as_before() {
    let old = load("hints.wasm", &hints_0_1_0(), r#"{"tools":{"read_*":{"readOnlyHint":true,"title":"Read"}}}"#, None);
    assert_eq!(old.plugin().contract(), Contract::V1);
    let set = Arc::new(PluginSet::new(vec![old]));
    assert!(!set.may_hide_or_rename("fs"), "a 0.1 plugin hides and renames nothing");
    let d = set.decide(&call_by(client("cursor"), "fs", "read_file")).unwrap();
    assert_eq!(d.concurrency, Some(Concurrency::Shared));
    assert_eq!(set.decide(&call_by(client("cursor"), "fs", "write_file")).unwrap(), Decision::default());
    let h = set.annotate("fs", "read_file", &Hints::default());
    assert_eq!((h.read_only, h.title.as_deref()), (Some(true), Some("Read")));
    // Through the tool-list hook, a 0.1 plugin changes the annotations only.
    let shown = set.list_tool(&listed("fs", "read_file"), &client("cursor"), tokio::time::Instant::now(), false);
    assert_eq!(shown.listing.hints.read_only, Some(true));
    assert_eq!((shown.listing.name.as_str(), shown.hidden_by.as_deref()), ("read_file", None));
    // The example built now from the same source is of 0.2, and answers alike.
    let now = load(
        "hints.wasm",
        &example("hints.wasm"),
        r#"{"tools":{"read_*":{"readOnlyHint":true,"title":"Read"}}}"#,
        None,
    );
    assert_eq!(now.plugin().contract(), Contract::V2);
    let new = Arc::new(PluginSet::new(vec![now]));
    for tool in ["read_file", "write_file"] {
        let call = call_by(client("cursor"), "fs", tool);
        assert_eq!(new.decide(&call), set.decide(&call), "{tool}");
        assert_eq!(new.annotate("fs", tool, &Hints::default()), set.annotate("fs", tool, &Hints::default()), "{tool}");
    }
    let prompt = ListedTool { kind: Kind::Prompt, ..listed("fs", "read_me") };
    let shown = new.list_tool(&prompt, &client("cursor"), tokio::time::Instant::now(), false);
    assert_eq!(shown.listing.hints, Hints::default(), "a prompt has no annotations to override");
}

#[test]
fn tool_filter_hides_and_renames_per_client_name() {
    let set = PluginSet::new(vec![load("tool-filter.wasm", &example("tool-filter.wasm"), FILTER, None)]);
    assert!(set.may_hide_or_rename("fs"));
    let scoped = PluginSet::new(vec![load("tool-filter.wasm", &example("tool-filter.wasm"), FILTER, Some(&["fs"]))]);
    assert!(scoped.may_hide_or_rename("fs") && !scoped.may_hide_or_rename("github"), "checked only where it applies");
    let now = tokio::time::Instant::now();
    let show = |who: &str, tool: &str| set.list_tool(&listed("fs", tool), &client(who), now, false);
    let w = show("cursor", "write_file");
    assert!(w.listing.hidden && w.hidden_by.as_deref() == Some("tool-filter.wasm"), "{w:?}");
    let r = show("cursor", "read_file");
    assert_eq!((r.listing.name.as_str(), r.renamed_by.as_deref()), ("cat", Some("tool-filter.wasm")));
    assert_eq!(r.listing.description.as_deref(), Some("the read_file tool"), "the rest is kept");
    for tool in ["write_file", "read_file"] {
        let c = show("claude-code", tool);
        assert_eq!((c.listing.hidden, c.listing.name.as_str()), (false, tool), "claude-code sees {tool} as is");
    }
    assert!(show("only-reads", "write_file").listing.hidden, "`only` leaves out what it does not match");
    assert!(!show("only-reads", "read_text").listing.hidden);
    // A client that gave no name is matched as "" (no glob here matches it).
    let nameless = set.list_tool(&listed("fs", "write_file"), &Caller::default(), now, false);
    assert!(!nameless.listing.hidden);
}

/// A named token of the HTTP front is the daemon's word, a client's name its own: a `tokens`
/// rule that matches the token applies in place of the client rule.
#[test]
fn tool_filter_judges_a_client_by_its_named_token_before_its_name() {
    let cfg = r#"{"clients": {"cursor": {"hide": ["write_*"]}}, "tokens": {"ci-*": {"only": ["read_*"]}}}"#;
    let set = PluginSet::new(vec![load("tool-filter.wasm", &example("tool-filter.wasm"), cfg, None)]);
    let now = tokio::time::Instant::now();
    let with_token = |name: &str, token: Option<&str>| Caller {
        transport: Transport::Http,
        token: token.map(Into::into),
        ..client(name)
    };
    let hidden = |who: &Caller, tool: &str| set.list_tool(&listed("fs", tool), who, now, false).listing.hidden;
    // A client calling itself `cursor` with the CI token: the token's rule, not cursor's.
    let ci = with_token("cursor", Some("ci-nightly"));
    assert!(hidden(&ci, "search") && !hidden(&ci, "read_file"), "`only` of the token's rule");
    assert!(hidden(&ci, "write_file"), "not read_*");
    // Another named token no rule matches: judged by the name, as without a token.
    let laptop = with_token("cursor", Some("laptop"));
    assert!(hidden(&laptop, "write_file") && !hidden(&laptop, "search"));
    let e = load_err(r#"{"tokens": {"ci": {"hide": "x"}}}"#);
    assert!(e.contains("tokens.ci.hide"), "{e}");
    let e = load_err(r#"{"tokens": {"bad name!": {"hide": ["*"]}}}"#);
    assert!(e.contains("tokens.bad name!: no token can have that name"), "{e}");
    let e = load_err(r#"{"token": {}}"#);
    assert!(e.contains("unknown key `token` (tool-filter knows `clients` and `tokens`)"), "{e}");
    // A name no client would take is refused where it is written.
    let e = load_err(r#"{"clients": {"*": {"rename": {"read_file": "read file"}}}}"#);
    assert!(e.contains(r#"clients.*.rename.read_file: "read file" is not a tool name clients take"#), "{e}");
    let long = "x".repeat(129);
    let e = load_err(&format!(r#"{{"tokens": {{"ci": {{"rename": {{"t": "{long}"}}}}}}}}"#));
    assert!(e.contains("tokens.ci.rename.t"), "{e}");
    assert!(load_err_or_ok(r#"{"clients": {"*": {"rename": {"read_file": "fs.read-file_2"}}}}"#).is_none());
    // Prompts and resource templates have no such form in the spec: their names are left alone.
    assert!(load_err_or_ok(r#"{"clients": {"*": {"prompts": {"rename": {"p": "Review code"}}}}}"#).is_none());
}

/// [`load_err`], or None when `config` is taken.
fn load_err_or_ok(config: &str) -> Option<String> {
    let bytes = std::fs::read(example("tool-filter.wasm")).unwrap();
    let mut e = PluginEntry::defaults_for("tool-filter.wasm");
    e.config = Some(toml::Value::String(config.to_string()));
    Loaded::load("tool-filter.wasm", &bytes, &e).err().map(|e| format!("{e:#}"))
}

/// The error `init` gives `tool-filter` for `config`.
fn load_err(config: &str) -> String {
    let bytes = std::fs::read(example("tool-filter.wasm")).unwrap();
    let mut e = PluginEntry::defaults_for("tool-filter.wasm");
    e.config = Some(toml::Value::String(config.to_string()));
    match Loaded::load("tool-filter.wasm", &bytes, &e) {
        Ok(_) => panic!("{config} was taken"),
        Err(e) => format!("{e:#}"),
    }
}

#[tokio::test]
async fn a_tools_list_is_rewritten_for_its_client_and_calls_are_checked_against_it() {
    let set = Arc::new(PluginSet::new(vec![load("tool-filter.wasm", &example("tool-filter.wasm"), FILTER, None)]));
    let result = r#"{"tools":[{"name":"read_file","description":"reads","inputSchema":{"type":"object"}},{"name":"write_file","inputSchema":{}},{"name":"list_dir","annotations":{"readOnlyHint":true},"x-new":1}],"nextCursor":null}"#;
    let cursor = client("cursor");
    let out = rewrite_tools_list(&set, "s1", &cursor, "fs", result).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(out.result.as_deref().unwrap()).unwrap();
    let names: Vec<&str> = v["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["cat", "list_dir"]);
    assert_eq!(v["tools"][0]["description"], "reads");
    assert_eq!(v["tools"][1]["x-new"], 1, "an unchanged tool is copied through");
    assert!(v["nextCursor"].is_null());
    assert_eq!(
        out.view,
        ClientView { renamed: [("cat".to_string(), "read_file".to_string())].into(), ..Default::default() }
    );
    // The same list for claude-code is left as the server sent it.
    let out = rewrite_tools_list(&set, "s2", &client("claude-code"), "fs", result).await.unwrap();
    assert_eq!(out.result, None);

    let known = |name: &str| listed("fs", name);
    let view = out_view();
    let view = Some(&view);
    assert_eq!(check_call(&set, "s1", &cursor, view, "cat", known).await, Ok(Some("read_file".to_string())));
    let e = check_call(&set, "s1", &cursor, view, "write_file", known).await.unwrap_err();
    assert_eq!(e.plugin, "tool-filter.wasm");
    assert!(e.reason.contains("tool `write_file` is not available to client `cursor`"), "{}", e.reason);
    assert!(e.reason.ends_with("use another tool") && e.retry_after.is_none(), "{e:?}");
    // Hidden also without a list seen first.
    assert!(check_call(&set, "s1", &cursor, None, "write_file", known).await.is_err());
    let e = check_call(&set, "s1", &cursor, view, "read_file", known).await.unwrap_err();
    assert!(e.reason.contains("as `cat`; call it by that name"), "{}", e.reason);
    assert_eq!(check_call(&set, "s2", &client("claude-code"), None, "write_file", known).await, Ok(None));
}

/// A rename onto the name of another tool still shown would list two tools of one name (a call
/// under it reaches only one): that tool keeps its own name, and both stay callable by it. A
/// swap of two names clashes with nothing and stands.
#[tokio::test]
async fn a_rename_onto_another_shown_tool_s_name_is_not_shown() {
    let result = r#"{"tools":[{"name":"read","inputSchema":{}},{"name":"write","inputSchema":{}},{"name":"echo","inputSchema":{}}]}"#;
    let names = |out: &annotate::Rewritten| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(out.result.as_deref().unwrap_or(result)).unwrap();
        v["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    };
    let cursor = client("cursor");
    let known = |name: &str| listed("fs", name);
    let clash = r#"{"clients": {"cursor": {"rename": {"read": "write", "echo": "say"}}}}"#;
    let set = Arc::new(PluginSet::new(vec![load("tool-filter.wasm", &example("tool-filter.wasm"), clash, None)]));
    let out = rewrite_tools_list(&set, "s1", &cursor, "fs", result).await.unwrap();
    assert_eq!(names(&out), ["read", "write", "say"]);
    assert_eq!(out.view.unrenamed, ["read".to_string()].into());
    assert_eq!(out.view.renamed, [("say".to_string(), "echo".to_string())].into());
    let view = Some(&out.view);
    assert_eq!(check_call(&set, "s1", &cursor, view, "read", known).await, Ok(None));
    assert_eq!(check_call(&set, "s1", &cursor, view, "write", known).await, Ok(None), "the real `write`");
    assert_eq!(check_call(&set, "s1", &cursor, view, "say", known).await, Ok(Some("echo".to_string())));

    let swap = r#"{"clients": {"cursor": {"rename": {"read": "write", "write": "read"}}}}"#;
    let set = Arc::new(PluginSet::new(vec![load("tool-filter.wasm", &example("tool-filter.wasm"), swap, None)]));
    let out = rewrite_tools_list(&set, "s2", &cursor, "fs", result).await.unwrap();
    assert_eq!(names(&out), ["write", "read", "echo"]);
    assert!(out.view.unrenamed.is_empty());
    assert_eq!(check_call(&set, "s2", &cursor, Some(&out.view), "write", known).await, Ok(Some("read".to_string())));
}

fn out_view() -> ClientView {
    ClientView { renamed: [("cat".to_string(), "read_file".to_string())].into(), ..Default::default() }
}

#[test]
fn a_plugin_scoped_to_a_server_leaves_the_others_alone() {
    let cfg = r#"{"tools":{"*":{"readOnlyHint":true}}}"#;
    let set = PluginSet::new(vec![load("hints.wasm", &example("hints.wasm"), cfg, Some(&["fs"]))]);
    assert_eq!(set.annotate("fs", "write_file", &Hints::default()).read_only, Some(true));
    assert_eq!(set.annotate("github", "write_file", &Hints::default()), Hints::default());
    assert_eq!(set.decide(&call_by(client("c"), "fs", "x")).unwrap().concurrency, Some(Concurrency::Shared));
    assert_eq!(set.decide(&call_by(client("c"), "github", "x")).unwrap(), Decision::default());
    let now = tokio::time::Instant::now();
    let gh = set.list_tool(&listed("github", "write_file"), &client("c"), now, false);
    assert_eq!(gh.listing.hints, Hints::default());
}

#[tokio::test(start_paused = true)]
async fn rate_limit_refuses_the_eleventh_call_in_a_minute_for_one_client_only() {
    // A name of its own: the buckets of a plugin name live as long as the process.
    let name = "rate-limit-unit.wasm";
    let cfg = r#"{"tools":{"search_*":{"per_client_per_minute":10}}}"#;
    let set = Arc::new(PluginSet::new(vec![load(name, &example("rate-limit.wasm"), cfg, None)]));
    for n in 1..=10 {
        set.decide_async(&call_by(client("cursor"), "fs", "search_files"))
            .await
            .unwrap_or_else(|r| panic!("call {n}: {r:?}"));
    }
    let r = set.decide_async(&call_by(client("cursor"), "fs", "search_files")).await.unwrap_err();
    assert_eq!(r.plugin, name);
    assert!(r.reason.contains("rate limit `search_*` (at most 10 calls a minute per client)"), "{}", r.reason);
    assert!(r.reason.contains("client `cursor`") && r.reason.ends_with("on server `fs`"), "{}", r.reason);
    // When the next call is allowed, the host knows from `take`: one token every 6 s.
    assert_eq!(r.retry_after, Some(Duration::from_secs(6)));
    // Another client has its own bucket; other tools are not limited.
    set.decide_async(&call_by(client("claude-code"), "fs", "search_files")).await.unwrap();
    set.decide_async(&call_by(client("cursor"), "fs", "read_file")).await.unwrap();
    // Six seconds on, one more call of cursor's is free.
    tokio::time::advance(Duration::from_secs(6)).await;
    set.decide_async(&call_by(client("cursor"), "fs", "search_files")).await.unwrap();
    assert!(set.decide_async(&call_by(client("cursor"), "fs", "search_files")).await.is_err());
    // A client is what switchyard knows of it: the same name with a named token of its own, or
    // on another server, has a count of its own.
    let on_token = Caller { token: Some("ci".into()), ..client("cursor") };
    set.decide_async(&call_by(on_token, "fs", "search_files")).await.unwrap();
    set.decide_async(&call_by(client("cursor"), "github", "search_files")).await.unwrap();
    // The clients that gave no name share one count: connecting again starts none afresh.
    let nameless =
        |session: &str| CallInfo { session: session.into(), ..call_by(Caller::default(), "fs", "search_files") };
    for n in 0..10 {
        set.decide_async(&nameless(&format!("s-{n}"))).await.unwrap_or_else(|r| panic!("call {n}: {r:?}"));
    }
    let r = set.decide_async(&nameless("s-new")).await.unwrap_err();
    assert!(r.reason.contains("the clients that gave no name on server `fs`"), "{}", r.reason);
}

/// How each plugin's refusals of tools/call are answered is its entry's `refusals`; a refusal
/// of the host's own (named `switchyard`) is a result.
#[test]
fn a_plugin_refuses_with_an_error_only_when_its_entry_says_so() {
    let guard = |file: &str, refusals: Refusals| {
        let mut e = PluginEntry::defaults_for(file);
        e.refusals = refusals;
        e.config = Some(toml::Value::String(r#"{"deny": ["delete_*"]}"#.into()));
        e.deadline_ms = 1_000;
        Arc::new(Loaded::load(file, &std::fs::read(example("guard.wasm")).unwrap(), &e).unwrap())
    };
    let set = PluginSet::new(vec![guard("a.wasm", Refusals::Error), guard("b.wasm", Refusals::Result)]);
    assert!(set.refuses_with_error("a.wasm"));
    assert!(!set.refuses_with_error("b.wasm") && !set.refuses_with_error("switchyard"));
    let r = set.decide(&call_by(client("cursor"), "fs", "delete_file")).unwrap_err();
    assert_eq!((r.plugin.as_str(), r.retry_after), ("a.wasm", None), "{r:?}");
}

#[test]
fn plugin_check_takes_a_client_and_shows_the_tool_list_hook() {
    let report = check::run(
        &example("tool-filter.wasm"),
        &check::Options {
            config_json: Some(FILTER),
            call_json: Some(r#"{"tool": "write_file", "client": {"name": "cursor", "transport": "http"}}"#),
            ..Default::default()
        },
    );
    report.result.unwrap();
    assert!(report.text.contains("contract: switchyard:policy@0.2.0"), "{}", report.text);
    assert!(report.text.contains("client:   cursor over http"), "{}", report.text);
    assert!(report.text.contains("list:     tool `write_file` hidden from this client"), "{}", report.text);
    let report = check::run(
        &example("tool-filter.wasm"),
        &check::Options {
            config_json: Some(FILTER),
            call_json: Some(r#"{"tool": "read_file", "client": "cursor"}"#),
            ..Default::default()
        },
    );
    assert!(report.text.contains("tool `read_file` shown as `cat`"), "{}", report.text);
    let report = check::run(
        &example("tool-filter.wasm"),
        &check::Options { call_json: Some(r#"{"client": {"nmae": "x"}}"#), ..Default::default() },
    );
    let e = report.result.unwrap_err().to_string();
    assert!(e.contains("unknown field `nmae`"), "{e}");
}

#[test]
fn a_changed_tool_list_hook_is_told_apart_from_an_unchanged_one() {
    let filter = |cfg: &str| PluginSet::new(vec![load("tool-filter.wasm", &example("tool-filter.wasm"), cfg, None)]);
    let hints = |cfg: &str| PluginSet::new(vec![load("hints.wasm", &hints_0_1_0(), cfg, None)]);
    assert!(filter(FILTER).shows_tools_as(&filter(FILTER)));
    assert!(!filter(FILTER).shows_tools_as(&filter(r#"{"clients": {"cursor": {"hide": ["*"]}}}"#)));
    assert!(!filter(FILTER).shows_tools_as(&PluginSet::empty()), "a hook removed");
    // 0.1 plugins change annotations only, which are compared on their own.
    assert!(hints("{}").shows_tools_as(&hints(r#"{"tools":{"*":{"title":"x"}}}"#)));
}

/// The probe fixture: refuses `methods`, saying as JSON what it was told of the call.
fn probe(methods: &str) -> Arc<Loaded> {
    let path = Path::new(env!("SWITCHYARD_TEST_PLUGINS")).join("probe-caller.wasm");
    load("probe-caller.wasm", &path, &format!(r#"{{"methods": {methods}}}"#), None)
}

#[test]
fn a_request_about_a_task_tells_the_plugin_which_task_and_the_tool_that_created_it() {
    let set = PluginSet::new(vec![probe(r#"["tasks/get", "tools/call"]"#)]);
    let task = TaskRef { id: "sy-task.abc".into(), tool: Some("research".into()) };
    let get =
        CallInfo { method: "tasks/get".into(), tool: None, task: Some(task), ..call_by(client("cursor"), "fs", "x") };
    let seen: serde_json::Value = serde_json::from_str(&set.decide(&get).unwrap_err().reason).unwrap();
    assert_eq!(seen["task"], serde_json::json!({"id": "sy-task.abc", "tool": "research"}), "{seen}");
    assert_eq!(seen["client"]["name"], "cursor", "{seen}");
    let seen: serde_json::Value =
        serde_json::from_str(&set.decide(&call_by(client("cursor"), "fs", "read_file")).unwrap_err().reason).unwrap();
    assert_eq!(seen["task"], serde_json::Value::Null, "a call about no task: {seen}");

    // `plugin check --call` takes a task and says it.
    let report = check::run(
        &Path::new(env!("SWITCHYARD_TEST_PLUGINS")).join("probe-caller.wasm"),
        &check::Options {
            config_json: Some(r#"{"methods": ["tasks/get"]}"#),
            call_json: Some(r#"{"method": "tasks/get", "task": {"id": "sy-task.abc", "tool": "research"}}"#),
            ..Default::default()
        },
    );
    report.result.unwrap();
    assert!(report.text.contains("task:     sy-task.abc, created by `research`"), "{}", report.text);
    assert!(report.text.contains(r#""task":{"id":"sy-task.abc","tool":"research"}"#), "{}", report.text);
    let report = check::run(
        &example("tool-filter.wasm"),
        &check::Options { call_json: Some(r#"{"task": {"id": "t", "tol": "x"}}"#), ..Default::default() },
    );
    let e = report.result.unwrap_err().to_string();
    assert!(e.contains("unknown field `tol`"), "{e}");
}

#[tokio::test]
async fn prompts_and_resource_templates_are_shown_per_client_and_a_hidden_prompt_is_refused() {
    let cfg = r#"{"clients": {"cursor": {"prompts": {"hide": ["secret_*"], "rename": {"greet": "hello"}},
        "resource_templates": {"hide": ["logs"], "rename": {"file": "doc"}}}}}"#;
    let set = Arc::new(PluginSet::new(vec![load("tool-filter.wasm", &example("tool-filter.wasm"), cfg, None)]));
    let names = |v: &serde_json::Value, key: &str| -> Vec<String> {
        v[key].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    };
    let cursor = client("cursor");
    let prompts = r#"{"prompts":[{"name":"greet","description":"Greets","arguments":[]},{"name":"secret_plan"}]}"#;
    let out = rewrite_list(&set, "s1", &cursor, "fs", Kind::Prompt, prompts).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(out.result.as_deref().unwrap()).unwrap();
    assert_eq!(names(&v, "prompts"), ["hello"]);
    assert_eq!(v["prompts"][0]["description"], "Greets");
    assert_eq!(
        out.view,
        ClientView { renamed: [("hello".to_string(), "greet".to_string())].into(), ..Default::default() }
    );
    let claude = rewrite_list(&set, "s2", &client("claude-code"), "fs", Kind::Prompt, prompts).await.unwrap();
    assert_eq!(claude.result, None, "another client is shown them as listed");

    let templates = r#"{"resourceTemplates":[{"uriTemplate":"file:///{path}","name":"file"},{"uriTemplate":"log://{id}","name":"logs"}]}"#;
    let t = rewrite_list(&set, "s1", &cursor, "fs", Kind::ResourceTemplate, templates).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(t.result.as_deref().unwrap()).unwrap();
    assert_eq!(names(&v, "resourceTemplates"), ["doc"]);
    assert_eq!(v["resourceTemplates"][0]["uriTemplate"], "file:///{path}", "read by the same URIs");

    // A rule about prompts leaves tools of the same names alone.
    let tools = r#"{"tools":[{"name":"greet","inputSchema":{}},{"name":"secret_plan","inputSchema":{}}]}"#;
    assert_eq!(rewrite_tools_list(&set, "s1", &cursor, "fs", tools).await.unwrap().result, None);

    let prompt = |name: &str| ListedTool { kind: Kind::Prompt, ..listed("fs", name) };
    let view = Some(&out.view);
    let e = check_call(&set, "s1", &cursor, view, "secret_plan", prompt).await.unwrap_err();
    assert_eq!(e.plugin, "tool-filter.wasm");
    assert!(e.reason.contains("prompt `secret_plan` is not available to client `cursor`"), "{}", e.reason);
    assert_eq!(check_call(&set, "s1", &cursor, view, "hello", prompt).await, Ok(Some("greet".to_string())));
    let e = check_call(&set, "s1", &cursor, view, "greet", prompt).await.unwrap_err();
    assert!(e.reason.contains("prompt `greet` as `hello`; ask for it by that name"), "{}", e.reason);
    assert_eq!(check_call(&set, "s2", &client("claude-code"), None, "greet", prompt).await, Ok(None));

    // A 0.1 plugin knows tools only: it leaves prompts as listed.
    let old =
        Arc::new(PluginSet::new(vec![load("hints.wasm", &hints_0_1_0(), r#"{"tools":{"*":{"title":"T"}}}"#, None)]));
    assert_eq!(rewrite_list(&old, "s1", &cursor, "fs", Kind::Prompt, prompts).await.unwrap().result, None);
}

#[tokio::test]
async fn a_call_checked_after_its_client_was_shown_the_tool_costs_no_plugin_call() {
    let metrics = Arc::new(switchyard_core::metrics::Metrics::new(Default::default));
    let filter = load("tool-filter.wasm", &example("tool-filter.wasm"), FILTER, None);
    let set = Arc::new(PluginSet { metrics: Some(metrics.clone()), ..PluginSet::new(vec![filter]) });
    let asked = || -> u64 {
        let prefix = r#"switchyard_plugin_decision_seconds_count{plugin="tool-filter.wasm",op="list_tool"} "#;
        let text = metrics.encode();
        text.lines().find_map(|l| l.strip_prefix(prefix)).map_or(0, |n| n.parse().unwrap())
    };
    let cursor = client("cursor");
    let result = r#"{"tools":[{"name":"read_file","description":"the read_file tool","inputSchema":{}},{"name":"write_file","description":"the write_file tool","inputSchema":{}}]}"#;
    let out = rewrite_tools_list(&set, "s1", &cursor, "fs", result).await.unwrap();
    assert_eq!(asked(), 2, "each tool asked about once");
    let known = |name: &str| listed("fs", name);
    let view = Some(&out.view);
    assert_eq!(check_call(&set, "s1", &cursor, view, "cat", known).await, Ok(Some("read_file".to_string())));
    assert!(check_call(&set, "s1", &cursor, view, "write_file", known).await.is_err());
    assert_eq!(asked(), 2, "the calls are checked against what the list was shown");
    assert_eq!(rewrite_tools_list(&set, "s1", &cursor, "fs", result).await.unwrap().view, out.view);
    assert_eq!(asked(), 2, "a list asked again is answered the same, without asking");
    // Another client is asked about once.
    let claude = client("claude-code");
    for _ in 0..3 {
        assert_eq!(check_call(&set, "s2", &claude, None, "write_file", known).await, Ok(None));
    }
    assert_eq!(asked(), 3);
    // A tool listed with other words is another tool to ask about.
    let reworded = |name: &str| ListedTool { description: Some("new words".into()), ..listed("fs", name) };
    assert!(check_call(&set, "s1", &cursor, view, "write_file", reworded).await.is_err());
    assert_eq!(asked(), 4);
}

/// The `placement` example places each tool's calls as configured (a tool no glob matches,
/// and any other request, as the plugins before it did), and a 0.1 plugin after it keeps its
/// placement, which it cannot see.
#[test]
fn placement_places_tools_as_configured_and_a_0_1_plugin_after_it_keeps_that() {
    use switchyard_core::decision::Placement;
    const PLACE: &str =
        r#"{"tools": {"*": "shared", "browser_*": "client", "shell": "session", "index_*": {"key": "index"}}}"#;
    let placer = load("placement.wasm", &example("placement.wasm"), PLACE, None);
    let set = PluginSet::new(vec![placer]);
    let placed = |tool: &str| set.decide(&call_by(client("cursor"), "fs", tool)).unwrap().placement;
    assert_eq!(placed("browser_open"), Some(Placement::Client));
    assert_eq!(placed("shell"), Some(Placement::Session));
    assert_eq!(placed("index_build"), Some(Placement::Key("index".into())));
    assert_eq!(placed("read_file"), Some(Placement::Shared));
    let listing = CallInfo { method: "resources/list".into(), tool: None, ..call_by(client("cursor"), "fs", "x") };
    assert_eq!(set.decide(&listing).unwrap().placement, None, "only tools/call is placed");

    // Before the 0.1 `hints` (a higher priority runs first): its decision joins, the placement stays.
    let bytes = std::fs::read(example("placement.wasm")).unwrap();
    let mut first = PluginEntry::defaults_for("placement.wasm");
    first.config = Some(toml::Value::String(PLACE.to_string()));
    (first.deadline_ms, first.priority) = (1_000, 10);
    let first = Arc::new(Loaded::load("placement.wasm", &bytes, &first).unwrap());
    let old = load("hints.wasm", &hints_0_1_0(), r#"{"tools":{"browser_*":{"readOnlyHint":true}}}"#, None);
    let chain = PluginSet::new(vec![old, first]);
    assert_eq!(chain.names(), ["placement.wasm", "hints.wasm"]);
    let d = chain.decide(&call_by(client("cursor"), "fs", "browser_open")).unwrap();
    assert_eq!((d.placement, d.concurrency), (Some(Placement::Client), Some(Concurrency::Shared)));

    // A config it cannot use is refused, saying where.
    for (bad, says) in [
        (r#"{"tools": {"x": "everywhere"}}"#, "tools.x: unknown placement `everywhere`"),
        (r#"{"tools": {"x": {"key": ""}}}"#, "tools.x.key must be the key's name"),
        (r#"{"tool": {}}"#, "unknown key `tool`"),
    ] {
        let mut e = PluginEntry::defaults_for("placement.wasm");
        e.config = Some(toml::Value::String(bad.to_string()));
        let err = format!("{:#}", Loaded::load("placement.wasm", &bytes, &e).err().expect(bad));
        assert!(err.contains(says), "{bad}: {err}");
    }
}

/// `plugin test` asks a 0.2 plugin `list-tool` for the client a `tool` line names and holds
/// it to the whole listing (hidden, name, hints); a 0.1 plugin is held to its hints.
#[test]
fn recorded_tool_lines_are_replayed_for_their_client() {
    use crate::project::recorded::{Options, replay};
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls.jsonl");
    let lines = [
        r#"{"tool": {"server": "fs", "name": "write_file", "client": {"name": "cursor"}}, "expect": {"hidden": true}}"#,
        r#"{"tool": {"server": "fs", "name": "read_file", "client": "cursor"}, "expect": {"name": "cat"}}"#,
        r#"{"tool": {"server": "fs", "name": "write_file", "client": "claude-code"}, "expect": {}}"#,
        // Recorded before the plugin hid it: the replay fails and shows the difference.
        r#"{"tool": {"server": "fs", "name": "write_notes", "client": "cursor"}, "expect": {"hints": {}}}"#,
    ];
    std::fs::write(&calls, lines.join("\n")).unwrap();
    let opts = Options { config_json: Some(FILTER), config_file: None };
    let r = replay(&example("tool-filter.wasm"), &calls, &opts);
    assert!(r.result.is_err(), "{}", r.text);
    assert!(r.text.contains("ok    line 1: list-tool write_file for cursor"), "{}", r.text);
    assert!(r.text.contains("ok    line 2: list-tool read_file for cursor"), "{}", r.text);
    assert!(r.text.contains("ok    line 3: list-tool write_file for claude-code"), "{}", r.text);
    assert!(r.text.contains("FAIL  line 4: list-tool write_notes for cursor"), "{}", r.text);
    assert!(r.text.contains("+  \"hidden\": true,"), "{}", r.text);
    assert!(r.text.contains("3 of 4 recorded calls match"), "{}", r.text);

    // A 0.1 plugin changes the hints only, whoever the client is.
    let lines = [
        r#"{"tool": {"name": "read", "client": "cursor"}, "expect": {"hints": {"readOnlyHint": true}}}"#,
        r#"{"tool": {"name": "read", "client": "cursor"}, "expect": {"hidden": true}}"#,
    ];
    std::fs::write(&calls, lines.join("\n")).unwrap();
    let opts = Options { config_json: Some(r#"{"tools": {"read": {"readOnlyHint": true}}}"#), config_file: None };
    let r = replay(&hints_0_1_0(), &calls, &opts);
    assert!(r.text.contains("ok    line 1: annotate read"), "{}", r.text);
    assert!(r.text.contains("FAIL  line 2: annotate read"), "{}", r.text);
}

/// The Python and JavaScript `hints` examples are twins of the Rust one: the Rust `hints`
/// gives the answers recorded for them (examples/plugins/{python,js}/hints/calls.jsonl).
#[test]
fn the_rust_hints_example_gives_the_answers_recorded_for_its_twins() {
    use crate::project::recorded::{Options, replay};
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/plugins");
    let dir = tempfile::tempdir().unwrap();
    for lang in ["python", "js"] {
        let twin = examples.join(lang).join("hints");
        let config = std::fs::read_to_string(twin.join("config.json")).unwrap();
        // Epoch deadlines count wall-clock time; a busy test machine must not trip them.
        let toml = dir.path().join(format!("{lang}.toml"));
        let entry = format!("[[plugins]]\nfile = \"hints.wasm\"\ndeadline_ms = 1000\nconfig = '{}'\n", config.trim());
        std::fs::write(&toml, entry).unwrap();
        let opts = Options { config_json: None, config_file: Some(&toml) };
        let r = replay(&example("hints.wasm"), &twin.join("calls.jsonl"), &opts);
        assert!(r.result.is_ok(), "{lang}: {:#?}\n{}", r.result, r.text);
        assert!(r.text.contains("list-tool prompt read for cursor"), "{lang}: {}", r.text);
    }
}
