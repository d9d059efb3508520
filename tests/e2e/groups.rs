//! End-to-end tests of groups through the real binary: `switchyard connect --group NAME`
//! serving every member's tools under its prefix, a member killed with SIGKILL while the others
//! go on, a server's request routed to the client and back, per-client plugins still judging
//! each server on its own, and `status` showing the group's sessions.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::daemon::{Home, example, leave, tool_names};
use switchyard_testkit::*;

const SLOW: Duration = Duration::from_secs(20);

/// `switchyard connect --group GROUP` and a client on it that initialises as `name`.
async fn group_client(home: &Home, group: &str, name: &str) -> (Proc, Client) {
    home.client_as(&["--group", group], name, json!({"sampling": {}, "elicitation": {}})).await
}

/// The process id the fixture behind tool `pid_tool` reports.
async fn pid_of(c: &mut Client, pid_tool: &str) -> u32 {
    let text = c.call_text(pid_tool, json!({})).await;
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{pid_tool} answered {text:?}: {e}"));
    v["pid"].as_u64().expect("pid") as u32
}

#[tokio::test]
async fn a_group_serves_every_member_under_its_prefix_and_outlives_a_member_killed_with_sigkill() {
    let home = Home::new();
    home.write_config(&format!(
        "{}{}[groups.work]\nservers = [\"fs\", \"mem\"]\nprefix = {{ mem = \"memory\" }}\n",
        home.fixture("fs", &[]),
        home.fixture("mem", &[])
    ));
    let (p, mut c) = group_client(&home, "work", "claude-code").await;
    let names = tool_names(&c.request("tools/list", json!({})).await);
    assert!(names.contains(&"fs__echo".to_string()) && names.contains(&"memory__echo".to_string()), "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("fs__") || n.starts_with("memory__")), "{names:?}");
    assert_eq!(c.call_text("fs__echo", json!({"text": "to fs"})).await, "to fs");
    // Each call reached its own server, under the name that server knows.
    let fs_calls = journal(home.journal("fs"));
    assert!(received(&fs_calls, "tools/call").any(|m| m["params"]["name"] == "echo"), "{fs_calls:?}");
    let mem_pid = pid_of(&mut c, "memory__pid").await;
    let fs_pid = pid_of(&mut c, "fs__pid").await;
    assert_ne!(mem_pid, fs_pid);

    let status = home.status_json().await;
    let work = status["groups"].as_array().unwrap().iter().find(|g| g["name"] == "work").cloned();
    let work = work.unwrap_or_else(|| panic!("no group `work` in {status}"));
    let session = &work["sessions"][0];
    assert_eq!(session["members"][1]["server"], "mem", "{work}");
    assert_eq!(session["members"][1]["state"], "up", "{work}");
    assert_eq!(session["client"], "claude-code 1.0.0", "{work}");
    assert!(home.status_text().await.contains("group work"), "{}", home.status_text().await);

    // A call in flight on mem when it dies is answered with an error naming the server.
    let hung = c.send_request("tools/call", json!({"name": "memory__hang", "arguments": {}})).await;
    wait_journal(home.journal("mem"), SLOW, |e| received(e, "tools/call").any(|m| m["params"]["name"] == "hang")).await;
    signal_pid(mem_pid, libc::SIGKILL);
    let failed = c.wait_response(&hung).await;
    let text =
        failed["error"]["message"].as_str().map(str::to_string).unwrap_or_else(|| tool_text(&failed).to_string());
    assert!(text.contains("mem"), "{failed}");
    // fs never noticed; mem comes back on its own.
    assert_eq!(c.call_text("fs__echo", json!({"text": "still"})).await, "still");
    assert_eq!(pid_of(&mut c, "fs__pid").await, fs_pid);
    let again = pid_of(&mut c, "memory__pid").await;
    assert_ne!(again, mem_pid, "mem was started again");
    leave(p, c).await;
    home.shutdown().await;
}

#[tokio::test]
async fn the_group_all_has_every_server_and_an_unknown_group_is_refused_with_the_known_ones() {
    let home = Home::new();
    home.write_config(&format!("{}{}", home.fixture("a", &[]), home.fixture("b", &[])));
    let (p, mut c) = group_client(&home, "all", "e2e").await;
    let names = tool_names(&c.request("tools/list", json!({})).await);
    assert!(names.contains(&"a__echo".to_string()) && names.contains(&"b__echo".to_string()), "{names:?}");
    assert_eq!(c.call_text("b__echo", json!({"text": "b"})).await, "b");
    // A name given twice is refused as it is through one server's session: the group would
    // route by the last, a client may show the first.
    c.send_raw(r#"{"jsonrpc":"2.0","id":"twice","method":"tools/call","params":{"name":"a__echo","name":"b__echo","arguments":{"text":"twice"}}}"#).await;
    let r = c.wait_response(&json!("twice")).await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(r["error"]["message"].as_str().unwrap_or_default().contains("duplicate field `name`"), "{r}");
    let r = c.call_tool("c__echo", json!({"text": "x"})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("`c__echo`") && msg.contains("a, b"), "{r}");
    leave(p, c).await;

    let config = home.config_str();
    let mut p = home.spawn("connect --group nope", &["connect", "--group", "nope", "--config", &config]);
    let mut c = p.client();
    c.timeout = SLOW;
    let r = c.request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("no group named `nope`") && msg.contains("all"), "{r}");
    leave(p, c).await;
    home.shutdown().await;
}

#[tokio::test]
async fn a_server_request_reaches_the_group_client_and_its_answer_the_server_that_asked() {
    let home = Home::new();
    home.write_config(&format!("{}{}", home.fixture("a", &[]), home.fixture("b", &[])));
    let (p, mut c) = group_client(&home, "all", "e2e").await;
    let call = c.send_request("tools/call", json!({"name": "b__sample", "arguments": {"prompt": "2+2?"}})).await;
    let req = c.recv_request("sampling/createMessage").await;
    assert_eq!(req["params"]["messages"][0]["content"]["text"], "2+2?");
    c.respond(
        req["id"].clone(),
        json!({"role": "assistant", "model": "m", "content": {"type": "text", "text": "four"}}),
    )
    .await;
    assert_eq!(tool_text(&c.wait_response(&call).await), "four");
    let call = c.send_request("tools/call", json!({"name": "a__elicit", "arguments": {"message": "name?"}})).await;
    let req = c.recv_request("elicitation/create").await;
    c.respond(req["id"].clone(), json!({"action": "accept", "content": {"answer": "Ada"}})).await;
    assert!(tool_text(&c.wait_response(&call).await).contains("Ada"));
    // Each request went to the server that asked, and no other.
    let asked = |name: &str| received(&journal(home.journal(name)), "tools/call").count();
    assert_eq!((asked("a"), asked("b")), (1, 1));
    leave(p, c).await;
    home.shutdown().await;
}

#[tokio::test]
async fn tool_filter_and_rate_limit_still_judge_each_server_of_a_group_for_its_client() {
    let home = Home::new();
    let config = format!(
        "{}{}[[plugins]]\nfile = \"tool-filter.wasm\"\nservers = [\"fs\"]\nconfig = '{}'\n\
         [[plugins]]\nfile = \"rate-limit.wasm\"\nservers = [\"fs\"]\nconfig = {{ tools = {{ \"ech*\" = {{ per_client_per_minute = 3 }} }} }}\n\
         [groups.work]\nservers = [\"fs\", \"mem\"]\n",
        home.fixture("fs", &[]),
        home.fixture("mem", &[]),
        r#"{"clients": {"cursor": {"hide": ["write*"]}}}"#
    );
    home.write_config(&config);
    home.install_plugins(&[
        ("tool-filter.wasm", example("tool-filter.wasm")),
        ("rate-limit.wasm", example("rate-limit.wasm")),
    ]);
    let (cp, mut cursor) = group_client(&home, "work", "cursor").await;
    let (kp, mut claude) = group_client(&home, "work", "claude-code").await;
    let seen = tool_names(&cursor.request("tools/list", json!({})).await);
    assert!(
        !seen.contains(&"fs__write".to_string()) && seen.contains(&"mem__write".to_string()),
        "cursor sees {seen:?}"
    );
    let seen = tool_names(&claude.request("tools/list", json!({})).await);
    assert!(seen.contains(&"fs__write".to_string()), "claude-code sees {seen:?}");
    let r = cursor.call_tool("fs__write", json!({"path": "/a", "text": "x"})).await;
    assert!(refusal_text(&r).contains("not available to client `cursor`"), "{r}");
    cursor.call_text("mem__write", json!({"path": "/a", "text": "x"})).await;
    for n in 1..=3 {
        assert_eq!(cursor.call_text("fs__echo", json!({"text": format!("{n}")})).await, format!("{n}"));
    }
    let r = cursor.call_tool("fs__echo", json!({"text": "4"})).await;
    assert!(refusal_text(&r).contains("rate limit `ech*`"), "the 4th call passed: {r}");
    // mem has no limit, and claude-code has its own count.
    for n in 1..=4 {
        assert_eq!(cursor.call_text("mem__echo", json!({"text": format!("{n}")})).await, format!("{n}"));
    }
    assert_eq!(claude.call_text("fs__echo", json!({"text": "mine"})).await, "mine");
    leave(cp, cursor).await;
    leave(kp, claude).await;
    home.shutdown().await;
}

/// POSTs `body` to the daemon's front at `path` (in session `sid`), taking JSON only: the
/// response's status, session id header and body.
async fn post_json(
    base: &str,
    token: &str,
    path: &str,
    sid: Option<&str>,
    body: Value,
) -> (u16, Option<String>, Value) {
    let mut r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(body.to_string());
    if let Some(s) = sid {
        r = r.header("mcp-session-id", s).header("mcp-protocol-version", "2025-06-18");
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let sid = resp.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_string());
    let text = resp.text().await.unwrap();
    (status, sid, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

#[tokio::test]
async fn the_http_front_serves_a_group_at_groups_name_mcp() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let home = Home::new();
    home.write_config(&format!(
        "{}{}[groups.work]\nservers = [\"a\", \"b\"]\n[http]\nlisten = \"127.0.0.1:0\"\n",
        home.fixture("a", &[]),
        home.fixture("b", &[])
    ));
    let (base, token) = home.start_http().await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "http-e2e", "version": "1"}}});
    let (status, sid, body) = post_json(&base, &token, "/groups/work/mcp", None, init.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["serverInfo"]["name"], "switchyard group work", "{body}");
    let sid = sid.expect("a session id");
    let (status, _, _) = post_json(
        &base,
        &token,
        "/groups/work/mcp",
        Some(&sid),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let (_, _, body) = post_json(&base, &token, "/groups/work/mcp", Some(&sid), list).await;
    let names = tool_names(&body);
    assert!(names.contains(&"a__echo".to_string()) && names.contains(&"b__echo".to_string()), "{names:?}");
    let call = json!({"jsonrpc": "2.0", "id": "c", "method": "tools/call", "params": {"name": "b__echo", "arguments": {"text": "via http"}}});
    let (_, _, body) = post_json(&base, &token, "/groups/work/mcp", Some(&sid), call.clone()).await;
    assert_eq!(tool_text(&body), "via http", "{body}");
    // The group's session is no session of a server's endpoint, nor of another group's.
    let (status, _, _) = post_json(&base, &token, "/mcp/b", Some(&sid), call.clone()).await;
    assert_eq!(status, 404);
    let (status, _, body) = post_json(&base, &token, "/groups/nope/mcp", None, init).await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("no group named `nope`"), "{body}");
    // A 2026-07-28 request is refused with its own id (a client matches the answer by it).
    let modern = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
    let resp = reqwest::Client::new()
        .post(format!("{base}/groups/work/mcp"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .body(modern.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(body["id"], 1, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("initialize era"), "{body}");
    home.shutdown().await;
}

#[tokio::test]
async fn a_member_that_cannot_start_is_named_with_its_reason_and_the_others_serve() {
    let home = Home::new();
    home.write_config(&format!(
        "{}[servers.broken]\ncommand = \"/nonexistent/switchyard-test-server\"\n[groups.work]\nservers = [\"fs\", \"broken\"]\n",
        home.fixture("fs", &[])
    ));
    let started = std::time::Instant::now();
    let (p, mut c) = group_client(&home, "work", "e2e").await;
    assert!(started.elapsed() < Duration::from_secs(15), "initialize waited {:?}", started.elapsed());
    let names = tool_names(&c.request("tools/list", json!({})).await);
    assert!(names.iter().all(|n| n.starts_with("fs__")) && !names.is_empty(), "{names:?}");
    assert_eq!(c.call_text("fs__echo", json!({"text": "fine"})).await, "fine");
    let r = c.call_tool("broken__anything", json!({})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("server `broken`") && msg.contains("nonexistent"), "{r}");
    leave(p, c).await;
    home.shutdown().await;
}

/// Found from outside: a typo in `[groups]` found on a reload was logged without its line, and
/// none of the file's other edits was applied. Now the group in force stays, a group new in the
/// file is refused to its clients, each with the file, the line and what is wrong; `status`
/// shows both as problems, and the rest of the file applies (a server added in the same save).
#[tokio::test]
async fn a_group_typo_on_reload_is_named_with_its_line_and_the_rest_of_the_file_applies() {
    let home = Home::new();
    let servers = format!("{}{}", home.fixture("fs", &[]), home.fixture("mem", &[]));
    home.write_config(&format!("{servers}[groups.work]\nservers = [\"fs\"]\n"));
    let (p, mut c) = group_client(&home, "work", "e2e").await;
    assert_eq!(c.call_text("fs__echo", json!({"text": "before"})).await, "before");

    let text = format!(
        "{servers}{}[groups.work]\nservers = [\"fs\", \"mme\"]\n[groups.new]\nservers = [\"mem\"]\nseparator = \".\"\n",
        home.fixture("extra", &[])
    );
    let line = |key: &str| text.lines().position(|l| l.contains(key)).expect("the key") + 1;
    home.replace_config(&text);
    let status = home.wait_status("the groups' errors", SLOW, |s| s["group_errors"].is_array()).await;
    let said = status["group_errors"].to_string();
    let work = format!("switchyard.toml, line {}: group `work` names server `mme`", line("\"mme\""));
    assert!(said.contains(&work) && said.contains("the group in force stays"), "{said}");
    let new = format!("switchyard.toml, line {}: group `new`: separator \\\".\\\"", line("separator"));
    assert!(said.contains(&new), "{said}");
    assert!(home.logs().contains(&work), "the log does not say it:\n{}", home.logs());
    let shown = home.status_text().await;
    assert!(shown.contains("problem: group `work` is not changed as the config file says"), "{shown}");

    // The rest of the save applied; the group in force serves on.
    let (ep, mut extra) = home.client("extra").await;
    assert_eq!(extra.call_text("echo", json!({"text": "added"})).await, "added");
    leave(ep, extra).await;
    assert_eq!(c.call_text("fs__echo", json!({"text": "after"})).await, "after");
    leave(p, c).await;
    let config = home.config_str();
    let mut p = home.spawn("connect --group new", &["connect", "--group", "new", "--config", &config]);
    let mut c = p.client();
    c.timeout = SLOW;
    let r = c.request("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}})).await;
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("group `new` cannot be used") && msg.contains(&format!("line {}", line("separator"))), "{r}");
    leave(p, c).await;
    home.shutdown().await;
}

/// Through `connect --group`, each request gets one answer, as through `connect NAME`: a batch
/// one array, an id past what a float holds its own (connect, which books every id, then has
/// nothing left to answer when stdin closes), an over-long call its own id; a bad envelope or a
/// tool name that is no string is refused and says why.
#[tokio::test]
async fn a_group_client_gets_each_request_answered_once_and_a_bad_envelope_refused() {
    let home = Home::new();
    home.write_config(&format!(
        "{}{}[groups.work]\nservers = [\"a\", \"b\"]\n[limits]\nmax_message_bytes = 65536\n",
        home.fixture("a", &[]),
        home.fixture("b", &[])
    ));
    let (mut p, mut c) = group_client(&home, "work", "e2e").await;
    c.request("tools/list", json!({})).await;
    c.send_raw(r#"[{"jsonrpc":"2.0","id":"b1","method":"ping"},{"jsonrpc":"2.0","id":"b2","method":"tools/call","params":{"name":"b__echo","arguments":{"text":"in a batch"}}}]"#).await;
    let array = c.recv_until(Value::is_array).await;
    let ids: Vec<&Value> = array.as_array().unwrap().iter().map(|a| &a["id"]).collect();
    assert!(ids.len() == 2 && ids.contains(&&json!("b1")) && ids.contains(&&json!("b2")), "{array}");
    c.send_raw(r#"{"jsonrpc":"2.0","id":1180591620717411303424,"method":"ping"}"#).await;
    let big = c.recv_until(|m| is_response(m) && m["id"].is_f64()).await;
    assert_eq!(big["result"], json!({}), "{big}");
    let pad = "x".repeat(100_000);
    c.send_raw(&format!(r#"{{"jsonrpc":"2.0","id":"long","method":"tools/call","params":{{"name":"a__echo","arguments":{{"text":"{pad}"}}}}}}"#)).await;
    let long = c.wait_response(&json!("long")).await;
    assert_eq!(long["error"]["code"], -32600, "{long}");
    assert!(long["error"]["message"].as_str().unwrap().contains("over the limit of 65536 bytes"), "{long}");
    for (line, id, code, why) in [
        (r#"{"jsonrpc":"1.0","id":"v1","method":"ping"}"#, "v1", -32600, "`jsonrpc` must be \"2.0\""),
        (r#"{"jsonrpc":"2.0","id":"n5","method":"tools/call","params":{"name":5}}"#, "n5", -32602, "must be a string"),
        (r#"{"jsonrpc":"2.0","id":"ps","method":"tools/call","params":"string"}"#, "ps", -32600, "`params` must be"),
    ] {
        c.send_raw(line).await;
        let r = c.wait_response(&json!(id)).await;
        assert_eq!(r["error"]["code"], code, "{line}: {r}");
        assert!(r["error"]["message"].as_str().unwrap().contains(why), "{line}: {r}");
    }
    // An id that is no string or integer cannot be read: answered under null (JSON-RPC).
    c.send_raw(r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#).await;
    let r = c.recv_until(|m| is_response(m) && m["id"].is_null()).await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("not a boolean"), "{r}");
    // Nothing was left booked: stdin's end brings no second answer.
    c.close().await;
    let after = c.expect_eof().await;
    assert!(after.is_empty(), "answered again when stdin closed: {after:?}");
    p.wait_timeout(SLOW).await;
    home.shutdown().await;
}

/// `POST /groups/NAME/mcp` with an id past what a float holds is answered under that id, as
/// the client wrote it.
#[tokio::test]
async fn the_http_front_answers_a_group_request_under_an_id_past_a_float() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let home = Home::new();
    home.write_config(&format!(
        "{}[groups.work]\nservers = [\"a\"]\n[http]\nlisten = \"127.0.0.1:0\"\n",
        home.fixture("a", &[])
    ));
    let (base, token) = home.start_http().await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "http-e2e", "version": "1"}}});
    let (status, sid, body) = post_json(&base, &token, "/groups/work/mcp", None, init).await;
    assert_eq!(status, 200, "{body}");
    let sid = sid.expect("a session id");
    let resp = reqwest::Client::new()
        .post(format!("{base}/groups/work/mcp"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-06-18")
        .body(r#"{"jsonrpc":"2.0","id":1180591620717411303424,"method":"ping"}"#)
        .timeout(SLOW)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = tokio::time::timeout(SLOW, resp.text()).await.expect("an answer, not an open stream").unwrap();
    assert!(text.contains(r#""id":1180591620717411303424,"#), "{text}");
    home.shutdown().await;
}
