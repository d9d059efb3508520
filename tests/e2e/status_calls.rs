//! What `status` shows of a call in flight, live: where it waits, on which instance, and the
//! last progress its server reported.

use std::time::Duration;

use serde_json::json;
use switchyard_testkit::daemon::*;

/// A long call with progress through the daemon: status shows it at the server, on its
/// instance, with the progress the client was sent; once it ends it is gone from status.
#[tokio::test]
async fn status_shows_a_call_in_flight_with_its_last_progress() {
    let home = Home::new();
    home.write_config(&home.fixture("slow", &[]));
    let (p, mut c) = home.client("slow").await;
    let params = json!({"name": "sleep", "arguments": {"ms": 4000, "progress_ms": 200},
                        "_meta": {"progressToken": "watch"}});
    let id = c.send_request("tools/call", params).await;
    let status = home
        .wait_status("the call's progress", Duration::from_secs(10), |s| {
            s["servers"][0]["calls"][0]["progress"]["progress"].as_f64().is_some_and(|p| p > 0.0)
        })
        .await;
    let shown = &status["servers"][0]["calls"][0];
    assert_eq!(shown["call"], "tools/call `sleep`", "{status:#}");
    assert_eq!(shown["state"], "in flight", "{status:#}");
    assert_eq!(shown["instance"], "slow#1", "{status:#}");
    assert!(shown["progress"]["age_ms"].as_u64().is_some_and(|a| a < 5000), "{status:#}");
    let text = home.status_text().await;
    assert!(text.contains("call tools/call `sleep` of session") && text.contains(", progress "), "{text}");
    let resp = c.wait_response(&id).await;
    assert!(resp.get("result").is_some(), "{resp}");
    let status = home.status_json().await;
    assert_eq!(status["servers"][0]["calls"], json!([]), "no call left shown: {status:#}");
    drop((c, p));
    home.shutdown().await;
}

/// Found from outside: `status` went on saying a plugin "has no [[plugins]] entry" after its
/// entry had been added and the config reloaded. What status says of the plugins is what the
/// config in force makes of them: once the entry is in force, no such problem is shown, neither
/// as a problem nor among the recent warnings (the log keeps it).
#[tokio::test]
async fn status_drops_a_plugins_missing_entry_once_a_reload_adds_it() {
    let home = Home::new();
    home.install_plugins(&[("tool-filter.wasm", example("tool-filter.wasm"))]);
    let fs = home.fixture("fs", &[]);
    home.write_config(&fs);
    let (p, c) = home.client("fs").await;
    let missing = "tool-filter.wasm has no [[plugins]] entry";
    let said = |s: &serde_json::Value| s["plugin_problems"].to_string().contains(missing);
    home.wait_status("the plugin without an entry", Duration::from_secs(20), said).await;
    assert!(home.status_text().await.contains(missing));

    let filter = r#"{"clients": {"cursor": {"hide": ["write*"]}}}"#;
    home.replace_config(&format!("{fs}[[plugins]]\nfile = \"tool-filter.wasm\"\nconfig = '{filter}'\n"));
    let status = home
        .wait_status("the entry in force", Duration::from_secs(20), |s| s["plugins"] == json!(["tool-filter.wasm"]))
        .await;
    assert!(!said(&status), "{status:#}");
    assert!(!status.to_string().contains(missing), "{status:#}");
    let text = home.status_text().await;
    assert!(!text.contains(missing) && !text.contains("problem:"), "{text}");
    // The log keeps what was said then.
    assert!(home.logs().contains(missing));
    leave(p, c).await;
    home.shutdown().await;
}

/// The last error `status` shows of server `name` (JSON and text agree).
async fn last_error(home: &Home, name: &str) -> String {
    let status = home
        .wait_status("a last error", Duration::from_secs(10), |s| {
            status_server(s, name).is_some_and(|s| s["last_error"].is_string())
        })
        .await;
    let error = status_server(&status, name).unwrap()["last_error"].as_str().unwrap().to_string();
    let text = home.status_text().await;
    assert!(text.contains(&format!("last error: {error}")), "{text}");
    error
}

/// An instance that started, initialised and died during a call is not said to have failed to
/// start: status says it ended with its exit status in its first call (or in a call after
/// answering N), which the client's own error agreed with.
#[tokio::test]
async fn status_says_an_instance_died_during_a_call_not_that_it_failed_to_start() {
    let home = Home::new();
    home.write_config(&home.fixture("fx", &[]));
    let (p, mut c) = home.client("fx").await;
    let crashed = c.call_tool("crash", json!({"code": 7})).await;
    assert!(crashed["error"]["message"].as_str().is_some_and(|m| m.contains("exit status 7")), "{crashed}");
    let error = last_error(&home, "fx").await;
    assert!(!error.contains("start failed"), "{error}");
    assert_eq!(
        error,
        "fx#1 ended (exit status 7) in its first call, after it started; not a failed start: the next instance starts at once"
    );

    // Its successor answers two calls, then dies in the third.
    for text in ["a", "b"] {
        assert_eq!(c.call_text("echo", json!({"text": text})).await, text);
    }
    let crashed = c.call_tool("crash", json!({"code": 7})).await;
    assert!(crashed.get("error").is_some(), "{crashed}");
    let status = home
        .wait_status("the second death", Duration::from_secs(10), |s| {
            status_server(s, "fx").is_some_and(|s| s["last_error"].as_str().is_some_and(|e| e.contains("2 calls")))
        })
        .await;
    let error = status_server(&status, "fx").unwrap()["last_error"].as_str().unwrap().to_string();
    assert!(error.ends_with("ended (exit status 7) in a call, after answering 2 calls"), "{error}");
    leave(p, c).await;
    home.shutdown().await;
}

/// Found from outside: a tool that crashes its server, called five times in a row, held the
/// server down for every client ("failed to start 5 times in a row") though it starts fine.
/// Each crash is answered with its own error (instance, tool, exit status, that it may have
/// run), the next call gets a fresh instance, and the server works on: restarts are only paced
/// (at most 0.8 s here), and status says how the last instance died.
#[tokio::test]
async fn a_tool_that_crashes_its_server_in_every_call_never_holds_the_server_down() {
    let home = Home::new();
    home.write_config(&home.fixture("fx", &[]));
    let (p, mut c) = home.client("fx").await;
    for n in 1..=6 {
        let crashed = c.call_tool("crash", json!({"code": 7})).await;
        let message = crashed["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("instance fx#{n} ended (exit status 7) during tools/call `crash`")),
            "{crashed}"
        );
        assert!(message.contains("may have run") && !message.contains("failed to start"), "{crashed}");
    }
    assert_eq!(c.call_text("echo", json!({"text": "alive"})).await, "alive");
    let error = last_error(&home, "fx").await;
    assert!(
        error.starts_with("fx#6 ended (exit status 7) in its first call, after it started; not a failed start, but 6 instances in a row ended before answering a call"),
        "{error}"
    );
    let status = home.status_json().await;
    assert_eq!(status_server(&status, "fx").unwrap()["restarts"], 6, "{status:#}");
    leave(p, c).await;
    home.shutdown().await;
}

/// Found from outside: with the default pool, one client calling a crashing tool in a loop took
/// every call of another client down with it (0 of 11 answered, each after up to 9.7 s). Now a
/// tool in flight when its instance died runs alone until one of its calls is answered: the
/// other client's calls never share an instance with `crash`, and all are answered.
#[tokio::test]
async fn a_client_calling_a_crashing_tool_in_a_loop_does_not_starve_another_client() {
    let home = Home::new();
    home.write_config(&home.fixture("fx", &[]));
    let (pa, mut a) = home.client("fx").await;
    let (pb, mut b) = home.client("fx").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let crashing = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut crashed = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let resp = a.call_tool("crash", json!({"code": 7})).await;
                let message = resp["error"]["message"].as_str().unwrap_or_default().to_string();
                assert!(message.contains("ended (exit status 7) during tools/call `crash`"), "{resp}");
                crashed += 1;
            }
            (a, crashed)
        })
    };
    for n in 0..20 {
        let asked = std::time::Instant::now();
        let text = format!("b{n}");
        assert_eq!(b.call_text("echo", json!({"text": text})).await, text);
        assert!(asked.elapsed() < Duration::from_secs(3), "echo {n} took {:?}", asked.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (a, crashed) = crashing.await.expect("A's loop");
    assert!(crashed >= 3, "A's crash calls ran meanwhile: {crashed}");
    let (pc, mut c) = home.client("fx").await;
    let listed = c.request("tools/list", json!({})).await;
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    leave(pc, c).await;
    leave(pb, b).await;
    leave(pa, a).await;
    home.shutdown().await;
}
