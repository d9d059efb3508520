//! An instance's in-flight table, replies and ends, over the fake transport.
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::upstream::fake::{Behaviour, CountEvents, FakeConnector, answer_all};
use switchyard_core::codec;
use switchyard_core::error::Delivery;

async fn start(behaviour: Behaviour) -> (Arc<FakeConnector>, Arc<Instance>) {
    let connector = FakeConnector::new(behaviour);
    let events: Arc<dyn Events> = Arc::new(CountEvents::default());
    let inst = Instance::start(&*connector, "t", 1, "default", ScopeKey::Shared, events).await.expect("connect");
    inst.mark_ready();
    (connector, inst)
}

fn request(id: &str, method: &str) -> Call {
    Call::parse(codec::request(id, method, "{}")).unwrap()
}

/// Keeps requests unanswered.
fn silent() -> Behaviour {
    Arc::new(|_, _| {})
}

#[tokio::test]
async fn a_request_goes_out_under_a_fresh_id_and_its_reply_comes_back() {
    let (c, inst) = start(answer_all()).await;
    let call = request(r#""client-7""#, "tools/list");
    let sent = inst.send(&call, 3, None, None, None).unwrap();
    let reply = sent.reply.await.unwrap().unwrap_or_else(|_| panic!("answered"));
    assert_eq!(&reply.line[reply.env.id.clone().unwrap()], sent.upstream_id.to_string());
    let out = c.link(0).sent.lock().unwrap().clone();
    assert_eq!(out[0].request, Some(sent.upstream_id));
    assert!(!out[0].line.contains("client-7"), "the client's id never reaches the server: {}", out[0].line);
}

#[tokio::test]
async fn a_lost_request_is_answered_alone_and_the_link_lives_on() {
    let (c, inst) = start(silent()).await;
    let a = inst.send(&request("1", "tools/call"), 1, None, None, None).unwrap();
    let b = inst.send(&request("2", "tools/call"), 2, None, None, None).unwrap();
    let lost = Lost { cause: "the stream ended".into(), delivery: Delivery::Maybe };
    c.link(0).lose(a.upstream_id, lost);
    match a.reply.await.unwrap() {
        Err(Unanswered::Lost { cause, delivery, instance }) => {
            assert_eq!((cause.as_str(), delivery, instance.as_str()), ("the stream ended", Delivery::Maybe, "t#1"))
        }
        _ => panic!("the lost call fails with Lost"),
    }
    assert!(!inst.is_dead());
    // The other call is still waiting, and is answered when its reply comes.
    c.link(0).reply(&format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, b.upstream_id));
    assert!(b.reply.await.unwrap().is_ok());
    // A loss reported twice, or for an unknown id, changes nothing.
    c.link(0).lose(a.upstream_id, Lost { cause: "again".into(), delivery: Delivery::No });
    assert!(!inst.is_dead());
}

#[tokio::test]
async fn the_end_of_the_link_answers_every_call_and_refuses_new_ones() {
    let (c, inst) = start(silent()).await;
    let calls: Vec<Sent> =
        (0..5).map(|i| inst.send(&request(&i.to_string(), "ping"), 1, None, None, None).unwrap()).collect();
    c.link(0).end("the SSE stream from http://x/sse ended");
    for s in calls {
        match s.reply.await.unwrap() {
            Err(Unanswered::Died(d)) => {
                assert_eq!(d.status, "the SSE stream from http://x/sse ended");
                assert_eq!(d.instance, "t#1");
                assert_eq!(d.stderr, vec!["last words".to_string()]);
            }
            _ => panic!("every call in flight is answered with the end"),
        }
    }
    assert!(inst.is_dead());
    assert!(matches!(inst.send(&request("9", "ping"), 1, None, None, None), Err(Unanswered::Died(_))));
    assert!(inst.write("{}".into()).is_err());
    tokio::time::timeout(Duration::from_secs(1), inst.dead()).await.expect("dead resolves");
}

/// What it was doing when it ended is kept for the death's account: the client calls still
/// waiting then (not the router's own requests, nor calls answered or cancelled before).
#[tokio::test]
async fn the_end_keeps_how_many_client_calls_were_waiting() {
    let (c, inst) = start(silent()).await;
    let answered = inst.send(&request("1", "tools/call"), 1, None, None, None).unwrap();
    let cancelled = inst.send(&request("2", "tools/call"), 1, None, None, None).unwrap();
    let _waiting = inst.send(&request("3", "tools/call"), 2, None, None, None).unwrap();
    let _own = inst.send_own("ping", "{}", true).unwrap();
    c.link(0).reply(&format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, answered.upstream_id));
    inst.cancel(cancelled.upstream_id, "stop");
    assert_eq!((inst.answered_calls(), inst.calls_at_end()), (1, 0));
    c.link(0).end("exit status 7");
    assert_eq!((inst.answered_calls(), inst.calls_at_end()), (1, 1));

    let (c, idle) = start(silent()).await;
    c.link(0).end("exit status 7");
    assert_eq!((idle.answered_calls(), idle.calls_at_end()), (0, 0));
}

#[tokio::test]
async fn a_cancel_tells_the_server_and_the_transport_and_drops_the_late_answer() {
    let (c, inst) = start(silent()).await;
    let sent = inst.send(&request("1", "tools/call"), 4, None, None, None).unwrap();
    inst.cancel(sent.upstream_id, "user said stop");
    let link = c.link(0);
    let last = link.lines().pop().unwrap();
    assert!(last.contains("notifications/cancelled") && last.contains("user said stop"), "{last}");
    assert_eq!(*link.abandoned.lock().unwrap(), vec![sent.upstream_id]);
    // The abandoned call still owns what the server sends until its late answer.
    assert_eq!(inst.owners(Duration::from_secs(60)).abandoned, vec![4]);
    link.reply(&format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, sent.upstream_id));
    assert!(inst.owners(Duration::from_secs(60)).abandoned.is_empty());
    assert!(sent.reply.await.is_err(), "a cancelled call gets no reply");
}

#[tokio::test]
async fn a_renewed_session_forgets_what_was_set_up_there() {
    let (c, inst) = start(answer_all()).await;
    inst.update_applied(|a| {
        a.level = Some(7);
        a.uris.insert("file:///x".into());
    });
    c.link(0).renew();
    assert_eq!(inst.applied(), Applied::default());
}

#[tokio::test]
async fn progress_goes_to_the_callers_sink_under_its_own_token() {
    struct Sink(Mutex<Vec<String>>);
    impl ProgressSink for Sink {
        fn progress(&self, line: String) {
            self.0.lock().unwrap().push(line);
        }
    }
    let (c, inst) = start(silent()).await;
    let line =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"tok-A"}}}"#;
    let call = Call::parse(line.to_string()).unwrap();
    let sink = Arc::new(Sink(Mutex::new(Vec::new())));
    let activity = Arc::new(Notify::new());
    let sent = inst.send(&call, 1, Some(sink.clone()), Some(activity.clone()), None).unwrap();
    let id = sent.upstream_id;
    c.link(0).reply(&format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{id},"progress":1}}}}"#
    ));
    let got = sink.0.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert!(got[0].contains(r#""progressToken":"tok-A""#), "{}", got[0]);
    tokio::time::timeout(Duration::from_secs(1), activity.notified()).await.expect("activity poked");
}

#[tokio::test]
async fn a_refused_connect_is_an_error_that_says_why() {
    let connector = FakeConnector::new(answer_all());
    *connector.refuse.lock().unwrap() = Some("connection refused by http://127.0.0.1:9/mcp".into());
    let events: Arc<dyn Events> = Arc::new(CountEvents::default());
    let err = Instance::start(&*connector, "t", 1, "default", ScopeKey::Shared, events).await.err().expect("refused");
    assert!(err.reason.contains("connection refused"));
}

/// Starts an instance whose events count, with nothing answered on its own.
async fn counted() -> (Arc<FakeConnector>, Arc<Instance>, Arc<CountEvents>) {
    let connector = FakeConnector::new(silent());
    let counts = Arc::new(CountEvents::default());
    let events: Arc<dyn Events> = counts.clone();
    let inst = Instance::start(&*connector, "t", 1, "default", ScopeKey::Shared, events).await.expect("connect");
    inst.mark_ready();
    (connector, inst, counts)
}

fn tool_call(id: u32, tool: &str, ms: u64) -> Call {
    let params = format!(r#"{{"name":"{tool}","arguments":{{"ms":{ms}}}}}"#);
    Call::parse(codec::request(&id.to_string(), "tools/call", &params)).unwrap()
}

/// Answers the calls in the order given, `gap` apart, after `first` has passed.
async fn answer_in_turn(c: &FakeConnector, calls: Vec<Sent>, first: Duration, gap: Duration) {
    tokio::time::advance(first).await;
    for (i, s) in calls.into_iter().enumerate() {
        if i > 0 {
            tokio::time::advance(gap).await;
        }
        c.link(0).reply(&format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#, s.upstream_id));
        s.reply.await.unwrap().unwrap_or_else(|_| panic!("answered"));
    }
}

/// Five equal 2 s calls sent at once to a server that runs them side by side all come back
/// about 2 s later, in the order they were sent: the server is never said to answer one request
/// at a time, however often it happens.
#[tokio::test(start_paused = true)]
async fn equal_calls_run_side_by_side_and_answered_in_order_are_not_called_serial() {
    let (c, inst, counts) = counted().await;
    for round in 0..4u32 {
        let calls: Vec<Sent> = (0..5)
            .map(|i| inst.send(&tool_call(round * 10 + i, "sleep", 2000), 1, None, None, None).unwrap())
            .collect();
        answer_in_turn(&c, calls, Duration::from_secs(2), Duration::from_millis(4)).await;
    }
    assert_eq!(counts.one_at_a_time.load(Ordering::SeqCst), 0);
}

/// The same calls on a server that runs one at a time come back 2 s apart: it is said, once.
#[tokio::test(start_paused = true)]
async fn equal_calls_answered_one_after_another_are_called_serial_once() {
    let (c, inst, counts) = counted().await;
    for round in 0..2u32 {
        let calls: Vec<Sent> = (0..5)
            .map(|i| inst.send(&tool_call(round * 10 + i, "sleep", 2000), 1, None, None, None).unwrap())
            .collect();
        answer_in_turn(&c, calls, Duration::from_secs(2), Duration::from_secs(2)).await;
    }
    assert_eq!(counts.one_at_a_time.load(Ordering::SeqCst), 1);
}

/// A quick call queued behind a slow one on a serial server: once the quick tool was seen alone,
/// its long wait counts; three such waits are said.
#[tokio::test(start_paused = true)]
async fn a_quick_call_that_waited_behind_a_slow_one_counts_once_its_time_alone_is_known() {
    let (c, inst, counts) = counted().await;
    let alone = inst.send(&tool_call(1, "echo", 0), 1, None, None, None).unwrap();
    answer_in_turn(&c, vec![alone], Duration::from_millis(10), Duration::ZERO).await;
    for round in 0..3u32 {
        let slow = inst.send(&tool_call(round * 10 + 2, "sleep", 700), 1, None, None, None).unwrap();
        tokio::time::advance(Duration::from_millis(50)).await;
        let quick = inst.send(&tool_call(round * 10 + 3, "echo", 0), 1, None, None, None).unwrap();
        answer_in_turn(&c, vec![slow, quick], Duration::from_millis(650), Duration::from_millis(10)).await;
        let said = counts.one_at_a_time.load(Ordering::SeqCst);
        assert_eq!(said, u64::from(round == 2), "round {round}");
    }
}
