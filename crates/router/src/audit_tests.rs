//! The audit line of calls run in-process: what it says of a call that ran and of one that
//! lost its instance, of one switchyard refused itself, and a strict log refusing calls it
//! cannot record.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, DuplexStream, WriteHalf};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::call_path_tests::start;
use crate::server::Server;
use switchyard_core::audit::{AuditLog, Record, Settings};

struct Client {
    out: WriteHalf<DuplexStream>,
    inbox: mpsc::UnboundedReceiver<Value>,
    next: u64,
}

impl Client {
    async fn connect(server: &Arc<Server>) -> Client {
        let (out, inbox) = crate::test_session::open(server, CancellationToken::new());
        let mut c = Client { out, inbox, next: 1 };
        let init =
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
        assert!(c.request("initialize", init).await.get("result").is_some());
        c.write(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        c
    }

    async fn write(&mut self, msg: Value) {
        self.out.write_all(format!("{msg}\n").as_bytes()).await.expect("the session reads");
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        loop {
            let m = tokio::time::timeout(Duration::from_secs(10), self.inbox.recv())
                .await
                .expect("an answer")
                .expect("open");
            if m["id"] == id {
                return m;
            }
        }
    }
}

fn settings(path: &std::path::Path, strict: bool) -> Settings {
    Settings { path: path.to_path_buf(), max_bytes: u64::MAX, keep: 1, queue: 64, strict, arguments: false }
}

fn records(path: &std::path::Path) -> Vec<Record> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn a_call_s_line_says_where_it_ran_what_it_waited_for_and_how_it_ended() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let (server, fake) = start("", false);
    let log = AuditLog::start(&settings(&path, false)).unwrap();
    server.audit_into(log.clone());
    let mut c = Client::connect(&server).await;
    let traced = json!({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"});
    let resp = c.request("tools/call", json!({"name": "echo", "arguments": {"text": "hi"}, "_meta": traced})).await;
    assert_eq!(resp["result"]["content"][0]["text"], "hi");
    // A write lost with its instance: it may have run.
    let pending = tokio::spawn(async move {
        let resp = c.request("tools/call", json!({"name": "write", "arguments": {"ms": 60_000}})).await;
        (c, resp)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    fake.link(0).end("killed by signal 9");
    let (_c, lost) = pending.await.unwrap();
    assert!(lost.get("error").is_some(), "{lost}");
    log.flush(Duration::from_secs(10));
    let lines = records(&path);
    let calls: Vec<&Record> = lines.iter().filter(|r| r.method == "tools/call").collect();
    assert_eq!(calls.len(), 2, "{lines:?}");
    let ok = calls[0];
    assert_eq!((ok.tool.as_deref(), &*ok.outcome.result, ok.attempts), (Some("echo"), "ok", 1));
    assert_eq!(ok.instance.as_deref(), Some("fake#1"));
    assert_eq!(ok.client.name.as_deref(), Some("t"));
    assert_eq!(ok.arguments_sha256.as_deref(), Some(switchyard_core::audit::sha256_hex(br#"{"text":"hi"}"#).as_str()));
    let decided = ok.decision.as_ref().expect("a decision");
    assert_eq!((&*decided.concurrency, &*decided.pool, decided.timeout_ms), ("shared", "default", 300_000));
    assert!(ok.response_bytes > 0 && ok.request_bytes > 0);
    // In the trace the client gave it.
    assert_eq!(ok.trace_id.as_deref(), Some("0af7651916cd43dd8448eb211c80319c"));
    assert_eq!(calls[1].trace_id, None);
    let lost = calls[1];
    assert_eq!((&*lost.outcome.result, lost.outcome.unknown), ("lost", true), "{lost:?}");
}

/// /dev/full takes no write: the disk is full.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_strict_log_that_cannot_write_refuses_the_next_calls_with_the_reason() {
    let (server, _fake) = start("", false);
    let log = AuditLog::start(&settings(std::path::Path::new("/dev/full"), true)).unwrap();
    server.audit_into(log.clone());
    let mut c = Client::connect(&server).await;
    // Its line is lost (the disk refuses it) once the call has run.
    let first = c.request("tools/call", json!({"name": "echo", "arguments": {"text": "one"}})).await;
    assert_eq!(first["result"]["content"][0]["text"], "one");
    log.flush(Duration::from_secs(10));
    assert_eq!(log.lost(), 1);
    // From then on calls are refused, as the host's refusal of a tool call: a result the model reads.
    let refused = c.request("tools/call", json!({"name": "echo", "arguments": {"text": "two"}})).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let text = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("/dev/full cannot be written") && text.contains("strict = true"), "{text}");
    assert!(text.contains("refused by switchyard itself") && !text.contains("policy plugin `switchyard`"), "{text}");
    let listed = c.request("tools/list", json!({})).await;
    assert!(listed["error"]["message"].as_str().is_some_and(|m| m.contains("strict")), "{listed}");
}

#[tokio::test]
async fn a_call_refused_as_busy_is_switchyard_s_own_refusal_with_no_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let (server, _fake) = start("[pools.default]\nmax = 1\nmax_inflight = 1\nmax_queue = 1\n", false);
    let log = AuditLog::start(&settings(&path, false)).unwrap();
    server.audit_into(log.clone());
    let (mut a, mut b, mut c) =
        (Client::connect(&server).await, Client::connect(&server).await, Client::connect(&server).await);
    let slow =
        tokio::spawn(async move { a.request("tools/call", json!({"name": "sleep", "arguments": {"ms": 400}})).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let queued =
        tokio::spawn(async move { b.request("tools/call", json!({"name": "echo", "arguments": {"text": "q"}})).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let busy = c.request("tools/call", json!({"name": "echo", "arguments": {"text": "busy"}})).await;
    assert_eq!(busy["error"]["code"], -32002, "{busy}");
    assert!(slow.await.unwrap().get("result").is_some());
    assert!(queued.await.unwrap().get("result").is_some());
    log.flush(Duration::from_secs(10));
    let lines = records(&path);
    let calls: Vec<&Record> = lines.iter().filter(|r| r.method == "tools/call").collect();
    assert_eq!(calls.len(), 3, "{lines:?}");
    let refused: Vec<&&Record> = calls.iter().filter(|r| r.outcome.code == Some(-32002)).collect();
    assert_eq!(refused.len(), 1, "{calls:?}");
    let r = refused[0];
    assert_eq!((r.attempts, r.refused_by.as_deref(), r.instance.as_deref()), (0, Some("switchyard"), None), "{r:?}");
    for ran in calls.iter().filter(|r| r.outcome.code.is_none()) {
        assert_eq!((ran.attempts, ran.refused_by.as_deref()), (1, None), "{ran:?}");
    }
}
