//! The audit lines of requests switchyard refuses itself before any policy is asked, because
//! the server is down: a local server that exits as it starts, a remote one nobody listens on.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard_testkit::daemon::*;

/// Every line of every audit log of `home`.
fn audit_records(home: &Home) -> Vec<Value> {
    let dir = home.path().join("state/switchyard");
    let mut text = String::new();
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        if entry.file_name().to_string_lossy().contains(".audit.jsonl") {
            text.push_str(&std::fs::read_to_string(entry.path()).unwrap());
        }
    }
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

#[tokio::test]
async fn requests_refused_with_the_server_down_each_have_one_audit_line() {
    let home = Home::new();
    let dead = home.fixture("dead", &["--exit-on-start", "3"]);
    // Port 9 (discard): nothing listens there, the connection is refused.
    home.write_config(&format!("{dead}[servers.remote]\nurl = \"http://127.0.0.1:9/mcp\"\n"));
    for server in ["dead", "remote"] {
        let mut p = home.connect(server);
        let mut c = p.client();
        let init = json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "switchyard-e2e", "version": "0.0.0"},
        });
        let resp = c.request("initialize", init).await;
        assert!(resp.get("error").is_some(), "{server}: {resp}");
        c.notify("notifications/initialized", json!({})).await;
        let call = c.request("tools/call", json!({"name": "echo", "arguments": {"text": server}})).await;
        let list = c.request("tools/list", json!({})).await;
        for resp in [&call, &list] {
            assert_eq!(resp["error"]["code"], -32003, "{server}: {resp}");
            let message = resp["error"]["message"].as_str().unwrap();
            assert!(message.contains(&format!("server `{server}` is not initialised")), "{message}");
        }
        // Each answered once.
        c.expect_silence(Duration::from_millis(300)).await;
        leave(p, c).await;
    }
    // Stopping the daemon writes what its log holds.
    home.stop().await;
    let mut records = audit_records(&home);
    records.sort_by_key(|r| (r["server"].to_string(), r["method"].to_string()));
    let seen: Vec<(&str, &str)> =
        records.iter().map(|r| (r["server"].as_str().unwrap(), r["method"].as_str().unwrap())).collect();
    assert_eq!(
        seen,
        [("dead", "tools/call"), ("dead", "tools/list"), ("remote", "tools/call"), ("remote", "tools/list")],
        "{records:#?}"
    );
    for r in &records {
        assert_eq!(r["refused_by"], "switchyard", "{r}");
        assert_eq!(r["attempts"], 0, "{r}");
        assert_eq!(
            (r["outcome"]["result"].as_str(), r["outcome"]["code"].as_i64()),
            (Some("error"), Some(-32003)),
            "{r}"
        );
        assert!(r.get("instance").is_none() && r["response_bytes"].as_u64() > Some(0), "{r}");
        assert_eq!(r["client"]["name"], "switchyard-e2e", "{r}");
    }
    assert_eq!(records[0]["tool"], "echo");
    assert_eq!(
        records[0]["arguments_sha256"].as_str(),
        Some(switchyard_core::audit::sha256_hex(json!({"text": "dead"}).to_string().as_bytes()).as_str())
    );
}
