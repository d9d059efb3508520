use std::os::fd::{AsFd, OwnedFd};

use super::journal::{self, Head, Position};
use super::*;

fn pipe() -> (OwnedFd, OwnedFd) {
    let (r, w) = std::io::pipe().expect("pipe");
    (r.into(), w.into())
}

fn write_all(fd: &OwnedFd, bytes: &[u8]) {
    let mut done = 0;
    while done < bytes.len() {
        done += rustix::io::write(fd, &bytes[done..]).expect("write");
    }
}

#[test]
fn a_recovered_journal_holds_only_what_was_recorded_as_taken_up() {
    let (head_fd, input_fd) = journal::create(&[], false).unwrap();
    let head = Head::open(head_fd.as_fd()).unwrap();
    let text =
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"b\"}\n{\"par";
    rustix::fs::ftruncate(&input_fd, 4096).unwrap();
    rustix::io::pwrite(&input_fd, text, 0).unwrap();
    // Line 0 taken up (id 1), line 1 booked but not yet recorded as taken up (id 2).
    head.book("1", 0, false).unwrap();
    head.book("2", 1, false).unwrap();
    let first_end = text.iter().position(|&b| b == b'\n').unwrap() + 1;
    head.set_position(Position { start: first_end as u64, filled: text.len() as u64, lines: 1, skipping: false });
    let memory = Memory { initialize: Some("{\"id\":0}".into()), initialized: true, ..Memory::default() };
    assert!(head.set_memory(&memory));

    let r = recover(&head_fd, &input_fd).unwrap();
    assert_eq!(r.open, ["1"], "id 2's line is sent on again, not answered");
    assert_eq!(r.pending, &text[first_end..]);
    assert_eq!(r.memory, memory);
    assert!(!r.skipping);

    // Answered: freed; a freed slot is used again for the next id.
    assert_eq!(head.free(&["1".to_string()]), 1);
    head.book("\"x\"", 1, false).unwrap();
    head.set_position(Position { start: text.len() as u64 - 5, filled: text.len() as u64, lines: 2, skipping: false });
    let mut open = recover(&head_fd, &input_fd).unwrap().open;
    open.sort();
    assert_eq!(open, ["\"x\"", "2"]);

    // A batch's requests come back together, to be answered as one array.
    head.book("7", 1, true).unwrap();
    head.book("8", 1, true).unwrap();
    let r = recover(&head_fd, &input_fd).unwrap();
    assert_eq!(r.batches, [vec!["7".to_string(), "8".to_string()]]);
    assert_eq!(r.open.len(), 4);
}

#[test]
fn slots_refuse_long_ids_and_run_out_at_the_count() {
    let (head_fd, _) = journal::create(&[], false).unwrap();
    let head = Head::open(head_fd.as_fd()).unwrap();
    assert_eq!(head.book(&"9".repeat(journal::ID_MAX + 1), 0, false), Err(journal::Full::IdTooLong));
    for i in 0..journal::SLOT_COUNT {
        head.book(&i.to_string(), 0, false).unwrap();
    }
    assert_eq!(head.book("again", 0, false), Err(journal::Full::NoSlot));
    assert_eq!(head.in_flight(), journal::SLOT_COUNT);
    assert_eq!(head.free(&["0".to_string()]), journal::SLOT_COUNT - 1);
    head.book("again", 0, false).unwrap();
}

#[test]
fn a_head_that_is_not_a_journal_is_refused() {
    let fd = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, journal::HEAD_LEN as u64).unwrap();
    assert!(Head::open(fd.as_fd()).is_err());
    let short = rustix::fs::memfd_create("y", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    assert!(Head::open(short.as_fd()).is_err());
}

#[test]
fn descriptors_cross_a_socket_and_arrive_close_on_exec() {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let (r, w) = pipe();
    let (head, input) = journal::create(&[], false).unwrap();
    send_fds(a.as_fd(), [r.as_fd(), w.as_fd(), head.as_fd(), input.as_fd()]).unwrap();
    let handed = recv_fds(b.as_fd()).unwrap();
    for fd in [&handed.input, &handed.output, &handed.head, &handed.input_buf] {
        assert!(rustix::io::fcntl_getfd(fd).unwrap().contains(rustix::io::FdFlags::CLOEXEC));
    }
    assert_eq!(
        (kind(&handed.input), kind(&handed.output), kind(&handed.head)),
        (Some(Stdio::Pipe), Some(Stdio::Pipe), None)
    );
    assert_eq!(kind(&a), Some(Stdio::Socket));
    // The same pipe: what goes in one end comes out of the other.
    write_all(&handed.output, b"hi");
    let mut buf = [0u8; 2];
    rustix::io::read(&r, &mut buf).unwrap();
    assert_eq!(&buf, b"hi");
    // Nothing more sent: would block, not a wrong read.
    b.set_nonblocking(true).unwrap();
    assert_eq!(recv_fds(b.as_fd()).err().map(|e| e.kind()), Some(std::io::ErrorKind::WouldBlock));
    drop(a);
    assert_eq!(recv_fds(b.as_fd()).err().map(|e| e.kind()), Some(std::io::ErrorKind::UnexpectedEof));
}

#[test]
fn memory_keeps_what_a_replay_needs() {
    let mut m = Memory::default();
    let mut note = |line: &str| {
        let env = switchyard_core::codec::parse(line).unwrap();
        m.note(line, &env)
    };
    assert!(note(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#));
    assert!(note(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#));
    assert!(!note(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#));
    assert!(note(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#));
    assert!(!note(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#));
    assert!(note(r#"{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"a://b"}}"#));
    assert!(!note(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{}}"#));
    assert_eq!(m.listed, ["tools/list"]);
    assert_eq!(m.subscribed, ["a://b"]);
    assert!(m.initialized && m.initialize.is_some());
}

/// The router's side of a hand-off, in process: a fake server, real pipes for the client, a real
/// socket pair for `connect`.
mod served {
    use std::os::fd::OwnedFd;
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio_util::sync::CancellationToken;

    use super::super::{Handed, journal, recover};
    use crate::control::{self, Reply};
    use crate::session::{Opening, Sessions};

    struct Rig {
        /// The client's end of its input.
        to_router: Option<std::fs::File>,
        /// The client's end of its output.
        from_router: tokio::io::Lines<BufReader<tokio::net::unix::pipe::Receiver>>,
        /// connect's end of the socket.
        connect: Option<tokio::net::UnixStream>,
        head: OwnedFd,
        buf: OwnedFd,
        /// connect's own stdin (the client's input stays readable after a hand-back).
        _stdin: OwnedFd,
        sessions: Arc<Sessions>,
        server: Arc<crate::server::Server>,
        served: tokio::task::JoinHandle<()>,
    }

    fn rig() -> Rig {
        rig_with(b"", false)
    }

    /// A rig whose journal starts with `prefill` (and, with `skipping`, the rest of a skipped line).
    fn rig_with(prefill: &[u8], skipping: bool) -> Rig {
        let (server, _fake) = crate::call_path_tests::start("", false);
        let (in_r, in_w) = std::io::pipe().unwrap();
        let (out_r, out_w) = std::io::pipe().unwrap();
        let (head, buf) = journal::create(prefill, skipping).unwrap();
        let stdin = in_r.try_clone().unwrap().into();
        let handed = Handed {
            input: in_r.into(),
            output: out_w.into(),
            head: head.try_clone().unwrap(),
            input_buf: buf.try_clone().unwrap(),
        };
        let (connect, router) = tokio::net::UnixStream::pair().unwrap();
        let (r, w) = router.into_split();
        let sessions = Arc::new(Sessions::default());
        let opening = Opening {
            transport: "unix",
            sessions: sessions.clone(),
            speaks_control: true,
            client_dir: None,
            client_token: None,
        };
        let served = tokio::spawn(super::super::serve::serve(
            server.clone(),
            Ok(handed),
            (BufReader::new(r), w),
            opening,
            CancellationToken::new(),
        ));
        let out = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(out_r)).unwrap();
        Rig {
            to_router: Some(std::fs::File::from(OwnedFd::from(in_w))),
            from_router: BufReader::new(out).lines(),
            connect: Some(connect),
            head,
            buf,
            _stdin: stdin,
            sessions,
            server,
            served,
        }
    }

    impl Rig {
        fn send(&mut self, m: Value) {
            use std::io::Write;
            writeln!(self.to_router.as_ref().unwrap(), "{m}").unwrap();
        }

        async fn recv(&mut self) -> Value {
            let line = tokio::time::timeout(Duration::from_secs(5), self.from_router.next_line())
                .await
                .expect("an answer within 5 s")
                .unwrap()
                .expect("a line");
            serde_json::from_str(&line).unwrap()
        }

        async fn initialize(&mut self) {
            let params = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
            self.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}));
            assert!(self.recv().await["result"].is_object());
            self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        }

        fn call(&mut self, id: u64, tool: &str, ms: u64) {
            let params = json!({"name": tool, "arguments": {"ms": ms}});
            self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}));
        }

        /// The next line connect is told.
        /// The next line connect is told (read byte by byte: nothing after it is taken).
        async fn told_line(&mut self) -> String {
            let connect = self.connect.as_mut().unwrap();
            let mut line = Vec::new();
            let mut byte = [0u8; 1];
            while line.last() != Some(&b'\n') {
                let n = tokio::time::timeout(Duration::from_secs(5), connect.read(&mut byte))
                    .await
                    .expect("told within 5 s")
                    .unwrap();
                if n == 0 {
                    break;
                }
                line.push(byte[0]);
            }
            String::from_utf8(line).unwrap()
        }

        async fn told(&mut self) -> Option<Reply> {
            let line = self.told_line().await;
            (!line.is_empty()).then(|| control::reply(&line).unwrap())
        }
    }

    #[tokio::test]
    async fn a_handed_session_is_served_on_the_client_s_pipes_and_its_end_is_told() {
        let mut rig = rig();
        rig.initialize().await;
        rig.call(1, "echo", 0);
        assert_eq!(rig.recv().await["result"]["content"][0]["text"], "echo after 0 ms");
        // Answered and written: nothing left in flight; the set-up is in the journal.
        let j = recover(&rig.head, &rig.buf).unwrap();
        assert!(j.open.is_empty() && j.pending.is_empty(), "{j:?}");
        assert!(j.memory.initialize.is_some() && j.memory.initialized);
        rig.to_router = None;
        assert_eq!(rig.told().await, Some(Reply::Ended { reason: None }));
        rig.served.await.unwrap();
    }

    /// The limit is on the id's JSON text: a string id of 238 characters fits, one of 240 does
    /// not, and the error says the quotes count, so the client can tell why.
    #[tokio::test]
    async fn a_long_string_id_is_refused_with_its_json_text_counted_quotes_included() {
        let mut rig = rig();
        rig.initialize().await;
        let fits = "x".repeat(journal::ID_MAX - 2);
        rig.send(json!({"jsonrpc": "2.0", "id": fits, "method": "tools/call", "params": {"name": "echo", "arguments": {"ms": 0}}}));
        assert_eq!(rig.recv().await["result"]["content"][0]["text"], "echo after 0 ms");
        let long = "x".repeat(journal::ID_MAX);
        rig.send(json!({"jsonrpc": "2.0", "id": long, "method": "tools/call", "params": {"name": "echo", "arguments": {"ms": 0}}}));
        let refused = rig.recv().await;
        assert_eq!(refused["id"], long.as_str());
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("240 bytes of JSON text, a string's quotes included")
                && message.contains("this one has 242")
                && message.contains("at most 238 plain characters"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_call_in_flight_is_in_the_journal_until_its_answer_is_written() {
        let mut rig = rig();
        rig.initialize().await;
        rig.call(7, "sleep", 300);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(recover(&rig.head, &rig.buf).unwrap().open, ["7"]);
        assert_eq!(rig.recv().await["id"], 7);
        assert!(recover(&rig.head, &rig.buf).unwrap().open.is_empty());
    }

    #[tokio::test]
    async fn a_drain_hands_the_session_back_only_once_nothing_is_in_flight() {
        let mut rig = rig();
        rig.initialize().await;
        rig.call(1, "sleep", 400);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(rig.sessions.drain(&rig.server.base(), "server fake changed"), 1);
        // The session still takes up the client's lines meanwhile.
        rig.call(2, "echo", 0);
        assert_eq!(rig.recv().await["id"], 2);
        assert_eq!(rig.recv().await["id"], 1);
        assert_eq!(rig.told().await, Some(Reply::Handback { reason: "server fake changed".into() }));
        (&mut rig.served).await.unwrap();
        // Nothing owed; the control line never reached the client; what it sends now waits for
        // connect in its pipe.
        let j = recover(&rig.head, &rig.buf).unwrap();
        assert!(j.open.is_empty(), "{j:?}");
        rig.call(3, "echo", 0);
        let next = tokio::time::timeout(Duration::from_millis(300), rig.from_router.next_line()).await;
        assert!(matches!(next, Ok(Ok(None))), "the router still wrote to the client: {next:?}");
    }

    #[tokio::test]
    async fn connect_gone_lets_go_of_the_client_s_output_at_once() {
        let mut rig = rig();
        rig.initialize().await;
        rig.call(1, "hang", 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = tokio::time::Instant::now();
        rig.connect = None;
        let mut rest = String::new();
        let mut out = rig.from_router.into_inner();
        tokio::time::timeout(Duration::from_secs(1), out.read_to_string(&mut rest))
            .await
            .expect("the client's output closed within 1 s")
            .unwrap();
        println!("output closed {:?} after connect went", started.elapsed());
        rig.served.await.unwrap();
    }

    #[tokio::test]
    async fn a_line_too_long_for_one_unsplit_write_goes_through_connect_and_order_holds() {
        let mut rig = rig();
        rig.initialize().await;
        let text = "x".repeat(10_000);
        let params = json!({"name": "echo", "arguments": {"text": text}});
        rig.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}));
        let long = rig.told_line().await;
        let long: Value = serde_json::from_str(&long).unwrap();
        assert_eq!(long["id"], 1);
        assert_eq!(long["result"]["content"][0]["text"].as_str().map(str::len), Some(10_000));
        // The next answer waits until connect wrote the long one and said so.
        rig.call(2, "echo", 0);
        let early = tokio::time::timeout(Duration::from_millis(300), rig.from_router.next_line()).await;
        assert!(early.is_err(), "written before the long line was: {early:?}");
        // Until then the long line's request is owed, and so is the one behind it.
        let mut open = recover(&rig.head, &rig.buf).unwrap().open;
        open.sort();
        assert_eq!(open, ["1", "2"]);
        rig.connect.as_mut().unwrap().write_all(b".").await.unwrap();
        assert_eq!(rig.recv().await["id"], 2);
        assert!(recover(&rig.head, &rig.buf).unwrap().open.is_empty());
    }

    #[tokio::test]
    async fn the_rest_of_a_line_skipped_by_the_last_router_is_dropped_without_a_word() {
        let params =
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
        let init = format!("{}\n", json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}));
        let mut rig = rig_with(init.as_bytes(), true);
        assert!(rig.recv().await["result"].is_object());
        {
            use std::io::Write;
            writeln!(rig.to_router.as_ref().unwrap(), "{}\"}}}}", "y".repeat(5000)).unwrap();
        }
        rig.call(1, "echo", 0);
        let next = rig.recv().await;
        assert_eq!(next["id"], 1, "the rest of the skipped line was answered: {next}");
    }

    #[tokio::test]
    async fn an_answer_to_a_replayed_request_never_reaches_the_client() {
        let mut rig = rig();
        let params =
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
        rig.send(json!({"jsonrpc": "2.0", "id": "switchyard-replay-1", "method": "initialize", "params": params}));
        rig.call(1, "echo", 0);
        let first = rig.recv().await;
        assert_eq!(first["id"], 1, "{first}");
        assert!(recover(&rig.head, &rig.buf).unwrap().open.is_empty());
    }
}

/// Tests of the fixes the outside try found.
mod found {
    use std::os::fd::AsFd;

    use super::super::journal::{self, Head, Position};
    use super::super::recover;

    #[test]
    fn a_reused_id_in_flight_keeps_the_first_request_owed() {
        let (head_fd, input_fd) = journal::create(&[], false).unwrap();
        let head = Head::open(head_fd.as_fd()).unwrap();
        head.book("7", 0, false).unwrap();
        head.book("7", 1, false).unwrap();
        head.set_position(Position { lines: 2, ..Position::default() });
        // The second is refused, which frees one count: the first is still owed.
        assert_eq!(head.free(&["7".to_string()]), 1);
        assert_eq!(recover(&head_fd, &input_fd).unwrap().open, ["7"]);
        assert_eq!(head.free(&["7".to_string()]), 0);
        assert!(recover(&head_fd, &input_fd).unwrap().open.is_empty());
    }

    #[test]
    fn the_request_of_a_line_being_skipped_is_owed_at_once() {
        let (head_fd, input_fd) = journal::create(&[], false).unwrap();
        let head = Head::open(head_fd.as_fd()).unwrap();
        head.book("\"big\"", 3, false).unwrap();
        head.set_position(Position { start: 0, filled: 0, lines: 3, skipping: true });
        let r = recover(&head_fd, &input_fd).unwrap();
        assert_eq!(r.open, ["\"big\""], "its rest is dropped, so nobody else answers it");
        assert!(r.skipping);
        // Not skipping: the same slot's line is sent on again instead.
        head.set_position(Position { start: 0, filled: 0, lines: 3, skipping: false });
        assert!(recover(&head_fd, &input_fd).unwrap().open.is_empty());
    }
}
