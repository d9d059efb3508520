//! The HTTP front given what a hostile client sends: bodies that are no JSON or are batches, and
//! servers or groups that do not exist, on every endpoint and with every method.

use reqwest::Method;
use serde_json::{Value, json};
use switchyard_testkit::daemon::*;

/// A client of a daemon's front.
struct Client {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Client {
    /// `method` on `path` with `body` (sent as it is) and, when given, a session id: the status
    /// and the answer (JSON, or the text of a plain one). A POST takes its answer as JSON.
    async fn send(&self, method: Method, path: &str, sid: Option<&str>, body: &str) -> (u16, Value) {
        let accept = if method == Method::GET { "text/event-stream" } else { "application/json" };
        let mut r = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .header("accept", accept)
            .body(body.to_string());
        if let Some(s) = sid {
            r = r.header("mcp-session-id", s).header("mcp-protocol-version", "2025-06-18");
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// A new session at `path` (initialize, then initialized): its id.
    async fn session(&self, path: &str) -> String {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "hostile", "version": "1"}}});
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(init.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "initialize at {path}");
        let sid = resp.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let (status, _) = self
            .send(Method::POST, path, Some(&sid), r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        assert_eq!(status, 202);
        sid
    }
}

async fn start() -> (Home, Client) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let home = Home::new();
    home.write_config(&format!(
        "{}[groups.work]\nservers = [\"alpha\"]\n[http]\nlisten = \"127.0.0.1:0\"\n",
        home.fixture("alpha", &[])
    ));
    let (base, token) = home.start_http().await;
    (home, Client { base, token, http: reqwest::Client::new() })
}

/// The JSON-RPC error of an answer: its id and code.
fn error_of(answer: &Value) -> (Value, Value) {
    (answer["id"].clone(), answer["error"]["code"].clone())
}

/// A body that is no JSON is a parse error (-32700, id null) on every endpoint, with a session
/// or without, also when it begins as a batch would; a batch that is JSON is refused as one.
#[tokio::test]
async fn a_body_that_is_no_json_is_a_parse_error_on_every_endpoint() {
    let (home, c) = start().await;
    let server = c.session("/mcp/alpha").await;
    let group = c.session("/groups/work/mcp").await;
    let broken = [
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping""#,
        "[",
        " [1,",
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}] x"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping""#,
    ];
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#;
    for (path, sid) in [
        ("/mcp", None),
        ("/mcp/alpha", None),
        ("/mcp/alpha", Some(&server)),
        ("/groups/work/mcp", None),
        ("/groups/work/mcp", Some(&group)),
    ] {
        for body in broken {
            let (status, answer) = c.send(Method::POST, path, sid.map(String::as_str), body).await;
            assert_eq!(
                (status, error_of(&answer)),
                (400, (Value::Null, json!(-32700))),
                "{path} {sid:?} {body}: {answer}"
            );
            assert!(answer["error"]["message"].as_str().unwrap().starts_with("Parse error"), "{answer}");
        }
        let (status, answer) = c.send(Method::POST, path, sid.map(String::as_str), batch).await;
        assert_eq!((status, error_of(&answer)), (400, (Value::Null, json!(-32600))), "{path} {sid:?}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains("batches are not served"), "{answer}");
    }
    // The sessions go on.
    let ping = r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#;
    for (path, sid) in [("/mcp/alpha", &server), ("/groups/work/mcp", &group)] {
        let (status, answer) = c.send(Method::POST, path, Some(sid), ping).await;
        assert_eq!((status, answer["id"].clone()), (200, json!("p")), "{path}: {answer}");
    }
    home.shutdown().await;
}

/// A server or group the config does not have is 404 whatever the request holds: its body is
/// not read (a batch, a broken body, an initialize alike), and GET and DELETE, with a session id
/// or without, are told the same, naming what is not there.
#[tokio::test]
async fn an_unknown_server_or_group_is_404_whatever_the_request_holds() {
    let (home, c) = start().await;
    let server = c.session("/mcp/alpha").await;
    let group = c.session("/groups/work/mcp").await;
    let bodies = [
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping""#,
        "not json",
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}"#,
    ];
    let unknown = [("/mcp/nope", "no server named `nope`"), ("/groups/nope/mcp", "no group named `nope`")];
    for (path, said) in unknown {
        // A session id of another endpoint's, or none.
        for sid in [None, Some(server.as_str()), Some(group.as_str())] {
            for body in bodies {
                let (status, answer) = c.send(Method::POST, path, sid, body).await;
                assert_eq!(
                    (status, error_of(&answer)),
                    (404, (Value::Null, json!(-32600))),
                    "{path} {sid:?} {body}: {answer}"
                );
                assert!(answer["error"]["message"].as_str().unwrap().contains(said), "{path}: {answer}");
            }
            for method in [Method::GET, Method::DELETE] {
                let (status, answer) = c.send(method.clone(), path, sid, "").await;
                assert_eq!(status, 404, "{method} {path} {sid:?}: {answer}");
                assert!(answer["error"]["message"].as_str().unwrap().contains(said), "{method} {path}: {answer}");
            }
        }
        // A 2026-07-28 request, and a GET in that protocol's name (which has no GET): the same.
        let modern = r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#;
        let resp = c
            .http
            .post(format!("{}{path}", c.base))
            .bearer_auth(&c.token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .body(modern)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        let resp = c
            .http
            .get(format!("{}{path}", c.base))
            .bearer_auth(&c.token)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{path}");
    }
    // The sessions of the endpoints that are there still serve.
    for (path, sid) in [("/mcp/alpha", &server), ("/groups/work/mcp", &group)] {
        let (status, answer) =
            c.send(Method::POST, path, Some(sid), r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
        assert_eq!((status, answer["id"].clone()), (200, json!(2)), "{path}: {answer}");
    }
    // The group taken out of the config: its path is unknown, but to its session, which lives
    // on (without members) and can still be ended.
    home.write_config(&format!("{}[http]\nlisten = \"127.0.0.1:0\"\n", home.fixture("alpha", &[])));
    let started = std::time::Instant::now();
    while c.send(Method::GET, "/groups/work/mcp", None, "").await.0 != 404 {
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "the group is still served");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(c.send(Method::DELETE, "/groups/work/mcp", Some(&group), "").await.0, 204);
    let (status, answer) = c.send(Method::DELETE, "/groups/work/mcp", Some(&group), "").await;
    assert_eq!(status, 404);
    assert!(answer["error"]["message"].as_str().unwrap().contains("no group named `work`"), "{answer}");
    assert_eq!(c.send(Method::DELETE, "/mcp/alpha", Some(&server), "").await.0, 204);
    home.shutdown().await;
}
