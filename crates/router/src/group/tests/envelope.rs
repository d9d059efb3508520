//! The client's messages as a group reads them, held to what a session of one server does:
//! every request answered once (a batch as one array), its id given back as the text it came
//! as, an over-long request answered under its id, a bad envelope or bad params refused.

use super::*;
use switchyard_core::codec;

/// The answers of the message the group sent whose raw text contains `needle`.
fn raw_with(c: &Client, needle: &str) -> Vec<String> {
    c.raw.lock().unwrap().iter().filter(|l| l.contains(needle)).cloned().collect()
}

/// Sends a ping under id `marker` and waits for its answer: whatever the group sent for what
/// came before it is in by then.
async fn fence(c: &mut Client, marker: &str) {
    c.write_line(&format!(r#"{{"jsonrpc":"2.0","id":"{marker}","method":"ping"}}"#)).await;
    c.take(|m| m["id"] == marker).await;
}

#[tokio::test(start_paused = true)]
async fn a_batch_is_answered_as_one_array_each_request_once() {
    let fa = FakeConnector::new(behaviour("a"));
    let mut c = Client::open(group(&["a"]), vec![Ok(server("a", &fa))]);
    c.initialize(json!({})).await;
    c.names("tools/list", "tools").await;
    c.write_line(concat!(
        r#"[{"jsonrpc":"2.0","id":"b1","method":"ping"},{"jsonrpc":"2.0","id":"b2","method":"ping"},"#,
        r#"{"jsonrpc":"2.0","id":"b3","method":"tools/call","params":{"name":"a__echo","arguments":{}}},"#,
        r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"},{"jsonrpc":"1.0","id":"b4","method":"ping"}]"#
    ))
    .await;
    let array = c.take(Value::is_array).await;
    let mut ids: Vec<&str> = array.as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["b1", "b2", "b3", "b4"], "{array}");
    let by = |id: &str| array.as_array().unwrap().iter().find(|a| a["id"] == id).unwrap().clone();
    assert_eq!(by("b3")["result"]["content"][0]["text"], "a:echo", "{array}");
    assert_eq!(by("b4")["error"]["code"], codec::INVALID_REQUEST, "{array}");
    fence(&mut c, "after").await;
    // Nothing but the array answered them.
    for id in ["b1", "b2", "b3", "b4"] {
        assert_eq!(raw_with(&c, &format!(r#""{id}""#)).len(), 1, "{:?}", c.raw.lock().unwrap());
    }
    // A batch of notifications only is answered with nothing; an empty one is refused.
    c.write_line(r#"[{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]"#).await;
    c.write_line("[]").await;
    let empty = c.take(|m| m["id"].is_null()).await;
    assert_eq!(empty["error"]["code"], codec::INVALID_REQUEST, "{empty}");
    assert_eq!(c.raw.lock().unwrap().iter().filter(|l| l.starts_with('[')).count(), 1);
    c.leave().await;
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_request_of_a_batch_leaves_the_array_without_it() {
    let fa = FakeConnector::new(behaviour("a"));
    let mut c = Client::open(group(&["a"]), vec![Ok(server("a", &fa))]);
    c.initialize(json!({})).await;
    c.names("tools/list", "tools").await;
    c.write_line(concat!(
        r#"[{"jsonrpc":"2.0","id":"w","method":"tools/call","params":{"name":"a__wait","arguments":{}}},"#,
        r#"{"jsonrpc":"2.0","id":"p","method":"ping"}]"#
    ))
    .await;
    fence(&mut c, "sent").await;
    assert!(raw_with(&c, r#""p""#).is_empty(), "the array went before `w` was answered");
    c.write_line(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"w"}}"#).await;
    let array = c.take(Value::is_array).await;
    assert_eq!(array, json!([{"jsonrpc": "2.0", "id": "p", "result": {}}]));
    c.leave().await;
}

#[tokio::test(start_paused = true)]
async fn an_id_past_what_a_float_holds_comes_back_as_the_text_it_was() {
    let fa = FakeConnector::new(behaviour("a"));
    let mut c = Client::open(group(&["a"]), vec![Ok(server("a", &fa))]);
    c.initialize(json!({})).await;
    c.names("tools/list", "tools").await;
    let big = "1180591620717411303424"; // 2^70
    let call = "1180591620717411303425";
    c.write_line(&format!(r#"{{"jsonrpc":"2.0","id":{big},"method":"ping"}}"#)).await;
    c.write_line(&format!(
        r#"{{"jsonrpc":"2.0","id":{call},"method":"tools/call","params":{{"name":"a__echo","arguments":{{"n":{big}}}}}}}"#
    ))
    .await;
    fence(&mut c, "after").await;
    c.take(|m| m["result"]["content"].is_array()).await;
    assert_eq!(raw_with(&c, &format!(r#""id":{big},"#)).len(), 1, "{:?}", c.raw.lock().unwrap());
    let answered = raw_with(&c, &format!(r#""id":{call},"#));
    assert!(answered.len() == 1 && answered[0].contains("a:echo"), "{answered:?}");
    // The arguments reach the server as they were sent, not through a float either.
    let sent = fa.link(0).lines().into_iter().find(|l| l.contains("tools/call")).expect("the call");
    assert!(sent.contains(&format!(r#""n":{big}"#)), "{sent}");
    c.leave().await;
}

#[tokio::test(start_paused = true)]
async fn an_over_long_request_is_answered_once_under_its_own_id() {
    let fa = FakeConnector::new(behaviour("a"));
    let mut c = Client::open(group(&["a"]), vec![Ok(server("a", &fa))]);
    c.initialize(json!({})).await;
    let pad = "x".repeat(2 << 20);
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":"long","method":"tools/call","params":{{"name":"a__echo","arguments":{{"pad":"{pad}"}}}}}}"#
    );
    c.write_line(&line).await;
    let answer = c.take(|m| m["id"] == "long").await;
    assert_eq!(answer["error"]["code"], codec::INVALID_REQUEST, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("over the limit"), "{answer}");
    fence(&mut c, "after").await;
    assert_eq!(raw_with(&c, r#""long""#).len(), 1);
    assert!(c.held.iter().all(|m| !m["id"].is_null()), "{:?}", c.held);
    c.leave().await;
}

#[tokio::test(start_paused = true)]
async fn a_bad_envelope_or_bad_params_is_refused_and_says_what_is_wrong() {
    let fa = FakeConnector::new(behaviour("a"));
    let mut c = Client::open(group(&["a"]), vec![Ok(server("a", &fa))]);
    c.initialize(json!({})).await;
    c.names("tools/list", "tools").await;
    let refused = [
        (r#"{"jsonrpc":"1.0","id":"v","method":"ping"}"#, json!("v"), "`jsonrpc` must be \"2.0\""),
        (r#"{"jsonrpc":"2.0","id":{"o":1},"method":"ping"}"#, Value::Null, "`id` must be a string or an integer"),
        (r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#, Value::Null, "`id` must be a string or an integer"),
        (r#"{"jsonrpc":"2.0","id":"d1","id":"d2","method":"ping"}"#, Value::Null, "duplicate field `id`"),
        (
            r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":"string"}"#,
            json!("s"),
            "`params` must be an object",
        ),
    ];
    for (i, (line, id, why)) in refused.iter().enumerate() {
        c.write_line(line).await;
        fence(&mut c, &format!("f{i}")).await;
        let got = c.take(|m| m.get("result").is_none() && m["id"] == *id).await;
        assert_eq!(got["error"]["code"], codec::INVALID_REQUEST, "{line}: {got}");
        assert!(got["error"]["message"].as_str().unwrap().contains(why), "{line}: {got}");
    }
    let bad_params = [
        (json!({"name": 5}), "`params.name` of `tools/call` must be a string, not 5"),
        (json!({"arguments": {}}), "`tools/call` needs `params.name`"),
        (json!([1]), "the `params` of `tools/call` must be an object"),
    ];
    for (params, why) in bad_params {
        let got = c.request("tools/call", params.clone()).await;
        assert_eq!(got["error"]["code"], codec::INVALID_PARAMS, "{params}: {got}");
        assert!(got["error"]["message"].as_str().unwrap().contains(why), "{params}: {got}");
    }
    let got = c.request("resources/read", json!({"uri": 7})).await;
    assert!(
        got["error"]["message"].as_str().unwrap().contains("`params.uri` of `resources/read` must be a string"),
        "{got}"
    );
    // None of them reached the server.
    assert!(received(&fa.link(0), "tools/call").is_empty());
    c.leave().await;
}

/// As a session of one server refuses it: a request under an id still in flight is answered
/// with -32600 and reaches no server; the first goes on alone (answered once, the client's
/// cancel reaching it), and once it is done the id is free again.
#[tokio::test(start_paused = true)]
async fn a_request_under_an_id_in_flight_is_refused_and_the_first_goes_on() {
    let fa = FakeConnector::new(behaviour("a"));
    let mut c = Client::open(group(&["a"]), vec![Ok(server("a", &fa))]);
    c.initialize(json!({})).await;
    c.names("tools/list", "tools").await;
    let call = |tool: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":"w","method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#)
    };
    c.write_line(&call("a__wait")).await;
    c.write_line(&call("a__echo")).await;
    let refused = c.take(|m| m["id"] == "w").await;
    assert_eq!(refused["error"]["code"], codec::INVALID_REQUEST, "{refused}");
    let why = refused["error"]["message"].as_str().unwrap();
    assert!(why.contains(r#"id "w" is already in use by a request still in flight"#), "{why}");
    fence(&mut c, "sent").await;
    let sent = received(&fa.link(0), "tools/call");
    assert_eq!(sent.len(), 1, "the second reached the server: {sent:?}");
    // The client's cancel reaches the call that runs, and nothing more answers it.
    c.write_line(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"w"}}"#).await;
    fence(&mut c, "cancelled").await;
    let cancels = received(&fa.link(0), "notifications/cancelled");
    assert_eq!(cancels.len(), 1, "{:?}", fa.link(0).lines());
    assert_eq!(cancels[0]["params"]["requestId"], sent[0]["id"]);
    assert_eq!(raw_with(&c, r#""w""#).len(), 1, "{:?}", c.raw.lock().unwrap());
    // The id is free again.
    c.write_line(&call("a__echo")).await;
    let again = c.take(|m| m["id"] == "w").await;
    assert_eq!(again["result"]["content"][0]["text"], "a:echo", "{again}");
    // A batch may not take it while it is in flight either, nor give it twice.
    c.write_line(&call("a__wait")).await;
    fence(&mut c, "waiting").await;
    c.write_line(&format!("[{},{}]", call("a__echo"), r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#)).await;
    let array = c.take(Value::is_array).await;
    let w = array.as_array().unwrap().iter().find(|a| a["id"] == "w").expect("w in the array").clone();
    assert!(w["error"]["message"].as_str().unwrap().contains("already in use"), "{array}");
    assert_eq!(received(&fa.link(0), "tools/call").len(), 3, "{:?}", fa.link(0).lines());
    c.leave().await;
}

/// JSON-RPC 2.0: a request whose id is no string and no integer is answered with `"id": null`
/// (the id could not be read), saying what is wrong; an integer however written (`1e3`, `-0`)
/// comes back as written.
#[tokio::test(start_paused = true)]
async fn an_id_that_is_no_string_or_integer_is_answered_under_null() {
    let fa = FakeConnector::new(behaviour("a"));
    let mut c = Client::open(group(&["a"]), vec![Ok(server("a", &fa))]);
    c.initialize(json!({})).await;
    for (i, (id, what)) in [
        (r#"{"o":1}"#, "an object"),
        ("true", "a boolean"),
        ("false", "a boolean"),
        ("[]", "an array"),
        ("1.5", "a fractional part"),
    ]
    .into_iter()
    .enumerate()
    {
        c.write_line(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)).await;
        fence(&mut c, &format!("f{i}")).await;
        let got = c.take(|m| m.get("error").is_some()).await;
        assert_eq!((&got["id"], &got["error"]["code"]), (&Value::Null, &json!(codec::INVALID_REQUEST)), "{id}: {got}");
        assert!(got["error"]["message"].as_str().unwrap().contains(what), "{id}: {got}");
    }
    for id in ["1e3", "-0"] {
        c.write_line(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)).await;
        fence(&mut c, id).await;
        assert_eq!(raw_with(&c, &format!(r#""id":{id},"result""#)).len(), 1, "{:?}", c.raw.lock().unwrap());
    }
    c.leave().await;
}

/// A request the group answers itself (a list it merges) and the client cancelled keeps its id
/// until the group's work for it is done: its late answer is dropped, never taken for the answer
/// to a later request under the same id, and the id is free after.
#[tokio::test(start_paused = true)]
async fn a_cancelled_list_s_late_answer_is_no_later_request_s() {
    let fa = FakeConnector::new(behaviour("a"));
    let fb = FakeConnector::new(super::lists_late("b", Duration::from_secs(30)));
    let mut c = Client::open(group(&["a", "b"]), vec![Ok(server("a", &fa)), Ok(server("b", &fb))]);
    c.initialize(json!({})).await;
    c.write_line(r#"{"jsonrpc":"2.0","id":"L","method":"tools/list"}"#).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.write_line(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"L"}}"#).await;
    let wait = r#"{"jsonrpc":"2.0","id":"L","method":"tools/call","params":{"name":"a__wait","arguments":{}}}"#;
    c.write_line(wait).await;
    let refused = c.take(|m| m["id"] == "L").await;
    assert!(refused["error"]["message"].as_str().unwrap_or_default().contains("already in use"), "{refused}");
    // The list is merged after 5 s, and answers nothing.
    tokio::time::sleep(Duration::from_secs(10)).await;
    fence(&mut c, "after").await;
    assert_eq!(raw_with(&c, r#""L""#).len(), 1, "{:?}", c.raw.lock().unwrap());
    assert!(received(&fa.link(0), "tools/call").is_empty());
    c.write_line(wait).await;
    fence(&mut c, "sent").await;
    assert_eq!(received(&fa.link(0), "tools/call").len(), 1, "the id is free once the list is done");
    c.leave().await;
}
