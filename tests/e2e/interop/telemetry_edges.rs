//! What the outside trial of traces and metrics found at their edges, through the real binary
//! and the real OTLP receiver (see [`super::telemetry`]): the span of a resources/subscribe
//! (answered by switchyard itself), what `status` says is exported (metrics alone; a typo in
//! `[telemetry]` while the daemon runs on the last version that loaded), an
//! `OTEL_TRACES_EXPORTER` switchyard does not have, and a console exporter with no endpoint.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_testkit::Proc;
use switchyard_testkit::daemon::Home;

use super::telemetry::{Receiver, conventions, fixture_router};

#[tokio::test]
async fn a_subscribe_has_its_server_span_with_the_uri_redacted_and_no_client_span() {
    let c = conventions();
    let receiver = Receiver::start();
    let mut router = fixture_router(&[], &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint())]);
    let mut client = router.client();
    client.initialize().await;
    let uri = "fixture://readme#access_token=SECRETS";
    for method in ["resources/subscribe", "resources/unsubscribe"] {
        let id = client.send_request(method, json!({"uri": uri})).await;
        let answer = client.wait_response(&id).await;
        assert_eq!(answer["result"], json!({}), "{answer}");
    }
    // Without a uri: refused by switchyard, and the span says so.
    let id = client.send_request("resources/subscribe", json!({})).await;
    assert_eq!(client.wait_response(&id).await["error"]["code"], -32602);
    let shown = "fixture://readme#access_token=REDACTED";
    let attr = |span: &Value, key: &str| span["attributes"][&c[key]].clone();
    let mut served = Vec::new();
    for method in ["resources/subscribe", "resources/unsubscribe"] {
        let name = format!("{method} {shown}");
        let span = receiver.find(&name, |s| s["name"] == name).await;
        assert_eq!(span["kind"], "SERVER", "{span}");
        assert_eq!(attr(&span, "MCP_METHOD_NAME"), method, "{span}");
        assert_eq!(attr(&span, "MCP_RESOURCE_URI"), shown, "{span}");
        assert!(attr(&span, "MCP_SESSION_ID").is_string() && attr(&span, "ERROR_TYPE").is_null(), "{span}");
        served.push(span);
    }
    let refused = receiver.find("the refused subscribe", |s| s["name"] == "resources/subscribe").await;
    assert_eq!((attr(&refused, "ERROR_TYPE"), refused["status"].clone()), (json!("-32602"), json!("ERROR")));
    // A call after them: once its spans came, theirs would have too; none is a subscribe's CLIENT.
    assert_eq!(client.call_text("echo", json!({"text": "after"})).await, "after");
    receiver.find("the echo's CLIENT span", |s| s["kind"] == "CLIENT" && s["name"] == "tools/call echo").await;
    let spans = receiver.spans();
    for span in &served {
        let children: Vec<&Value> = spans.iter().filter(|s| s["parent_span_id"] == span["span_id"]).collect();
        assert!(children.is_empty(), "a shared subscription has no CLIENT span of one client's: {children:#?}");
    }
    let all = serde_json::to_string(&spans).unwrap();
    assert!(!all.contains("SECRETS"), "{all}");
}

#[tokio::test]
async fn status_says_what_the_daemon_exports_from_the_config_it_runs_on() {
    let receiver = Receiver::start();
    let home = Home::new();
    // Metrics alone: traces are off, and status says where metrics go.
    let metrics = format!("{}/v1/metrics", receiver.endpoint());
    let secret = "x-key = \"SECRETH\"";
    let table = format!("[telemetry]\nmetrics_endpoint = \"{metrics}\"\nheaders = {{ {secret} }}\n");
    home.write_config(&format!("{}\n{table}", home.fixture("alpha", &[])));
    let (mut connect, mut client) = home.client("alpha").await;
    let s = home.status_json().await;
    assert_eq!((s["traces"].clone(), s["metrics"].clone()), (Value::Null, json!({"endpoint": metrics})), "{s}");
    let text = home.status_text().await;
    assert!(text.contains(&format!("  traces: off\n  metrics: {metrics} (OTLP over HTTP)\n")), "{text}");
    assert!(!text.contains("SECRETH") && !s.to_string().contains("SECRETH"), "{text}");
    client.close().await;
    connect.wait_timeout(Duration::from_secs(10)).await;
    home.shutdown().await;
    // A typo in [telemetry]: the daemon starts on the last version of the file that loaded, and
    // exports as that version says.
    let typo = format!("[telemetry]\nendpiont = \"{}\"\n", receiver.endpoint());
    home.write_config(&format!("{}\n{typo}", home.fixture("alpha", &[])));
    let (mut connect, mut client) = home.client("alpha").await;
    let s = home.status_json().await;
    assert_eq!((s["traces"].clone(), s["metrics"].clone()), (Value::Null, json!({"endpoint": metrics})), "{s}");
    let text = home.status_text().await;
    assert!(text.contains(&format!("  metrics: {metrics} (OTLP over HTTP)\n")), "{text}");
    client.close().await;
    connect.wait_timeout(Duration::from_secs(10)).await;
    home.shutdown().await;
}

#[tokio::test]
async fn an_exporter_switchyard_does_not_have_is_warned_once_and_otlp_sent() {
    let receiver = Receiver::start();
    let mut router = fixture_router(
        &[],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()), ("OTEL_TRACES_EXPORTER", "zipkin")],
    );
    let mut client = router.client();
    client.initialize().await;
    assert_eq!(client.call_text("echo", json!({"text": "z"})).await, "z");
    receiver.find("the echo's span", |s| s["name"] == "tools/call echo").await;
    let log = log_once_it_has(&router, "OTEL_TRACES_EXPORTER").await;
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("OTEL_TRACES_EXPORTER")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    let want = "OTEL_TRACES_EXPORTER is `zipkin`: switchyard exports traces over OTLP only";
    assert!(lines[0].contains("WARN") && lines[0].contains(want), "{}", lines[0]);
    assert!(lines[0].contains(&format!("to {}/v1/traces all the same", receiver.endpoint())), "{}", lines[0]);
}

/// `OTEL_TRACES_EXPORTER=console` and `OTEL_METRICS_EXPORTER=console` with no endpoint: nothing
/// on stdout (a `run`'s stdout carries the MCP protocol alone), nothing exported, and each said
/// once in the log at start, which `status` shows among its recent warnings, beside `off`.
#[tokio::test]
async fn a_console_exporter_with_no_endpoint_is_warned_once_and_status_shows_it() {
    let console = [("OTEL_TRACES_EXPORTER", "console"), ("OTEL_METRICS_EXPORTER", "console")];
    let mut router = fixture_router(&[], &console);
    let mut client = router.client();
    client.initialize().await;
    assert_eq!(client.call_text("echo", json!({"text": "c"})).await, "c", "stdout carries answers alone");
    let log = log_once_it_has(&router, "OTEL_METRICS_EXPORTER").await;
    for signal in ["traces", "metrics"] {
        let name = format!("OTEL_{}_EXPORTER", signal.to_uppercase());
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(&name)).collect();
        assert_eq!(lines.len(), 1, "{log}");
        let want = format!("{name} is `console`: switchyard prints no {signal} ");
        assert!(lines[0].contains("WARN") && lines[0].contains(&want), "{}", lines[0]);
        assert!(lines[0].contains(&format!("{signal} go nowhere; set OTEL_EXPORTER_OTLP_ENDPOINT")), "{}", lines[0]);
    }

    // The daemon `connect` starts inherits the variables; status says both are off, and why.
    let home = Home::new();
    home.write_config(&home.fixture("alpha", &[]));
    let config = home.config_str();
    let mut envs = home.envs();
    envs.extend(console.map(|(k, v)| (k.to_string(), v.to_string())));
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let argv = [switchyard_testkit::bin(), "connect", "alpha", "--config", &config].map(String::from);
    let mut connect = Proc::spawn_env("connect alpha", &argv, &envs);
    let mut client = connect.client();
    client.initialize().await;
    let s = home.status_json().await;
    assert_eq!((s["traces"].clone(), s["metrics"].clone()), (Value::Null, Value::Null), "{s}");
    let recent = s["recent_errors"].as_array().cloned().unwrap_or_default();
    for signal in ["TRACES", "METRICS"] {
        let said = recent
            .iter()
            .filter(|r| {
                r["message"].as_str().is_some_and(|m| m.contains(&format!("OTEL_{signal}_EXPORTER is `console`")))
            })
            .count();
        assert_eq!(said, 1, "{s}");
    }
    let text = home.status_text().await;
    assert!(text.contains("  traces: off\n  metrics: off\n"), "{text}");
    assert!(text.contains("WARN OTEL_TRACES_EXPORTER is `console`: switchyard prints no traces"), "{text}");
    assert!(
        text.contains(
            "metrics go nowhere; set OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://127.0.0.1:4318) or [telemetry] endpoint\n"
        ),
        "{text}"
    );
    client.close().await;
    connect.wait_timeout(Duration::from_secs(10)).await;
    home.shutdown().await;
}

/// The router's log once it has `text` (its warnings at start are written by the logging
/// thread, maybe after the first answer), or as it is after 5 s.
async fn log_once_it_has(router: &Proc, text: &str) -> String {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let log = router.stderr.text();
        if log.contains(text) || Instant::now() > until {
            return log;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
