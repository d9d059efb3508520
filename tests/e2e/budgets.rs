//! End-to-end tests of what a client is shown of a server's tools: names within its budget
//! (and a call by a shortened name reaching the right tool), search mode's two tools, and
//! tools/list_changed only when the list that client sees changed. Through the daemon and
//! `connect NAME`, with the fixture server.

use std::time::Duration;

use crate::setup::*;
use serde_json::{Value, json};
use switchyard_testkit::daemon::*;
use switchyard_testkit::*;

/// Two tools whose names share their first 60 characters: cut to the budget alone they would
/// be one name.
const LONG_A: &str = "create_or_update_the_branch_protection_rule_of_a_repository_for_an_organisation_a";
const LONG_B: &str = "create_or_update_the_branch_protection_rule_of_a_repository_for_an_organisation_b";

fn list_changes(seen: &[Value], buffered: &std::collections::VecDeque<Value>) -> usize {
    seen.iter().chain(buffered).filter(|m| m["method"] == "notifications/tools/list_changed").count()
}

/// Claude Code counts `mcp__SERVER__` into its 64 characters: tools over that are shown
/// shortened, each differently, and a call by the shortened name runs the right tool. Status
/// says what was shortened, and the log says it once.
#[tokio::test]
async fn a_name_over_claude_codes_budget_is_shortened_and_called_back() {
    let home = Home::new();
    home.write_config(&home.fixture("fx", &["--extra-tool", LONG_A, "--extra-tool", LONG_B]));
    let (_p, mut c) = home.client_named("fx", "claude-code").await;
    let shown = tool_names(&c.request("tools/list", json!({})).await);
    assert!(shown.iter().all(|n| "mcp__fx__".len() + n.chars().count() <= 64), "{shown:?}");
    assert!(shown.contains(&"echo".to_string()), "a name that fits stays: {shown:?}");
    let short: Vec<&String> = shown.iter().filter(|n| n.starts_with("create_or_update")).collect();
    assert_eq!(short.len(), 2, "{shown:?}");
    assert_ne!(short[0], short[1]);
    let mut ran = Vec::new();
    for name in &short {
        ran.push(c.call_text(name, json!({})).await);
    }
    ran.sort();
    assert_eq!(ran, vec![format!("{LONG_A} ran"), format!("{LONG_B} ran")]);

    // The same names again in a second session: a plan depends on the names only.
    let (_p2, mut c2) = home.client_named("fx", "claude-code").await;
    assert_eq!(tool_names(&c2.request("tools/list", json!({})).await), shown);

    let status = home.status_json().await;
    let text = status.to_string();
    assert!(
        text.contains(LONG_A) && text.contains(short[0].as_str()),
        "status does not say what was shortened:\n{status:#}"
    );
    let human = home.status_text().await;
    assert!(human.contains("claude clients: 2 tool name(s) shortened"), "{human}");
}

/// A server that announces tools/list_changed with its list as it was: no client hears of it.
/// A real change: the client hears once. switchyard declares `tools.listChanged` itself.
#[tokio::test]
async fn list_changed_reaches_a_client_only_when_its_list_changed() {
    let home = Home::new();
    // A server that does not say its tools may change: switchyard does, for it.
    home.write_config(&home.fixture("fx", &["--no-list-changed"]));
    let (_p, mut c, init) = home.initialized(&["fx"], "e2e", json!({})).await;
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true, "{init}");
    c.request("tools/list", json!({})).await;

    // change_tools without `add` sends list_changed with nothing changed.
    for _ in 0..3 {
        c.call_text("change_tools", json!({})).await;
    }
    let seen = drain(&mut c, Duration::from_millis(1500)).await;
    assert_eq!(list_changes(&seen, c.buffered()), 0, "an unchanged list was announced: {seen:?}");

    c.call_text("change_tools", json!({"add": "fresh"})).await;
    let seen = drain(&mut c, Duration::from_millis(1500)).await;
    assert_eq!(list_changes(&seen, c.buffered()), 1, "a changed list is announced once: {seen:?}");
}

/// Search mode (`[budgets.NAME] expose = "search"`): the client's list is `search_tools` and
/// `call_tool`; a search finds a tool with its schema, `call_tool` runs it under the server's
/// policy, a change of the server's tools is not announced (the two stay) but is searched.
#[tokio::test]
async fn search_mode_finds_and_calls_a_tool() {
    let home = Home::new();
    home.write_config(&format!("{}\n[budgets.e2e-search]\nexpose = \"search\"\n", home.fixture("fx", &[])));
    let (_p, mut c, init) = home.initialized(&["fx"], "e2e-search", json!({})).await;
    assert_eq!(init["result"]["capabilities"]["tools"]["listChanged"], true, "{init}");
    assert_eq!(tool_names(&c.request("tools/list", json!({})).await), vec!["search_tools", "call_tool"]);

    let found = c.call_tool("search_tools", json!({"query": "returns its text", "limit": 3})).await;
    let tools = found["result"]["structuredContent"]["tools"].as_array().cloned().unwrap_or_default();
    assert_eq!(tools.first().map(|t| t["name"].clone()), Some(json!("echo")), "{found}");
    assert!(tools[0]["inputSchema"]["properties"]["text"].is_object(), "{found}");
    assert!(tools.len() <= 3);

    assert_eq!(c.call_text("call_tool", json!({"name": "echo", "arguments": {"text": "hi"}})).await, "hi");
    let wrong = c.call_tool("call_tool", json!({"name": "no_such_tool"})).await;
    assert_eq!(wrong["result"]["isError"], true, "{wrong}");
    assert!(tool_text(&wrong).contains("search_tools"), "{wrong}");

    // The server's list changes: the client's two tools do not, and it is not told; the new
    // tool is found.
    c.call_text("call_tool", json!({"name": "change_tools", "arguments": {"add": "freshly_added"}})).await;
    let seen = drain(&mut c, Duration::from_millis(1500)).await;
    assert_eq!(list_changes(&seen, c.buffered()), 0, "{seen:?}");
    let found = c.call_tool("search_tools", json!({"query": "freshly added"})).await;
    assert!(found.to_string().contains("freshly_added"), "{found}");
    assert_eq!(c.call_text("call_tool", json!({"name": "freshly_added"})).await, "freshly_added ran");
}

/// Through a group, a member's tool names count the group's name and the member's prefix
/// (`mcp__g__fx__`), and a call by a shortened name comes back to the member's tool.
#[tokio::test]
async fn a_group_keeps_its_members_names_within_the_budget() {
    let home = Home::new();
    let fixture = home.fixture("fx", &["--extra-tool", LONG_A, "--extra-tool", LONG_B]);
    home.write_config(&format!("{fixture}\n[groups.g]\nservers = [\"fx\"]\n"));
    let (_p, mut c) = home.client_as(&["--group", "g"], "claude-code", json!({})).await;
    let shown = tool_names(&c.request("tools/list", json!({})).await);
    assert!(shown.iter().all(|n| "mcp__g__".len() + n.chars().count() <= 64), "{shown:?}");
    assert!(shown.contains(&"fx__echo".to_string()), "{shown:?}");
    let short: Vec<&String> = shown.iter().filter(|n| n.starts_with("fx__create_or_update")).collect();
    assert_eq!(short.len(), 2, "{shown:?}");
    let mut ran = Vec::new();
    for name in &short {
        ran.push(c.call_text(name, json!({})).await);
    }
    ran.sort();
    assert_eq!(ran, vec![format!("{LONG_A} ran"), format!("{LONG_B} ran")]);
}

/// `[groups.NAME] expose = "search"`: the group's client gets the two tools; a search ranks
/// every member's tools as the group names them, `call_tool` runs one on its member, and a
/// member's change of tools is not announced (the two stay) but is found.
#[tokio::test]
async fn search_mode_through_a_group_finds_and_calls_every_members_tools() {
    let home = Home::new();
    let servers = format!("{}{}", home.fixture("fx", &[]), home.fixture("fy", &[]));
    home.write_config(&format!("{servers}\n[groups.g]\nservers = [\"fx\", \"fy\"]\nexpose = \"search\"\n"));
    let config = home.config_str();
    let mut p = home.spawn("connect --group g", &["connect", "--group", "g", "--config", &config]);
    let mut c = p.client();
    c.initialize().await;
    assert_eq!(tool_names(&c.request("tools/list", json!({})).await), vec!["search_tools", "call_tool"]);

    let found = c.call_tool("search_tools", json!({"query": "process id", "limit": 2})).await;
    let mut top: Vec<String> = found["result"]["structuredContent"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["name"].as_str().unwrap_or_default().to_string())
        .collect();
    top.sort();
    assert_eq!(top, vec!["fx__pid", "fy__pid"], "{found}");

    let pid = c.call_text("call_tool", json!({"name": "fy__pid", "arguments": {}})).await;
    assert_eq!(serde_json::from_str::<Value>(&pid).unwrap()["name"], "fy", "{pid}");
    assert_eq!(c.call_text("call_tool", json!({"name": "fx__echo", "arguments": {"text": "hi"}})).await, "hi");

    c.call_text("call_tool", json!({"name": "fx__change_tools", "arguments": {"add": "freshly_added"}})).await;
    let seen = drain(&mut c, Duration::from_millis(1500)).await;
    assert_eq!(list_changes(&seen, c.buffered()), 0, "{seen:?}");
    let found = c.call_tool("search_tools", json!({"query": "freshly added"})).await;
    assert!(found.to_string().contains("fx__freshly_added"), "{found}");
    assert_eq!(c.call_text("call_tool", json!({"name": "fx__freshly_added"})).await, "freshly_added ran");
}

/// A list longer than the client takes is passed whole, and said: in status, and once in the
/// daemon's log.
#[tokio::test]
async fn a_list_over_the_count_budget_is_passed_whole_and_said() {
    let home = Home::new();
    home.write_config(&format!("{}\n[budgets.e2e]\ntools_max = 5\n", home.fixture("fx", &[])));
    let (_p, mut c) = home.client_named("fx", "e2e").await;
    let shown = tool_names(&c.request("tools/list", json!({})).await);
    assert!(shown.len() > 5, "the whole list: {shown:?}");
    c.request("tools/list", json!({})).await;
    let human = home.status_text().await;
    assert!(human.contains(&format!("e2e clients: {} tools, over the 5 they take", shown.len())), "{human}");
    let status = home.status_json().await;
    assert!(status.to_string().contains(r#""tools_max":5"#), "{status:#}");
    let logs: String = std::fs::read_dir(home.path().join("state/switchyard"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert_eq!(logs.matches("over the 5 this client takes").count(), 1, "said once for two lists:\n{logs}");
}

/// Search mode for Claude Code, which acts on list_changed: a tool a search found joins its
/// list (it is told so, once), and it may call it by name.
#[tokio::test]
async fn a_found_tool_joins_the_list_of_a_client_that_acts_on_list_changed() {
    let home = Home::new();
    home.write_config(&format!("{}\n[budgets.claude]\nexpose = \"search\"\n", home.fixture("fx", &[])));
    let (_p, mut c) = home.client_named("fx", "claude-code").await;
    assert_eq!(tool_names(&c.request("tools/list", json!({})).await), vec!["search_tools", "call_tool"]);
    c.call_text("search_tools", json!({"query": "returns its text", "limit": 1})).await;
    c.recv_notification("notifications/tools/list_changed").await;
    assert_eq!(tool_names(&c.request("tools/list", json!({})).await), vec!["search_tools", "call_tool", "echo"]);
    assert_eq!(c.call_text("echo", json!({"text": "direct"})).await, "direct");
    // Found again: nothing new, no notice.
    c.call_text("search_tools", json!({"query": "returns its text", "limit": 1})).await;
    let seen = drain(&mut c, Duration::from_millis(800)).await;
    assert_eq!(list_changes(&seen, c.buffered()), 0, "{seen:?}");
}
