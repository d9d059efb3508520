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
    let (head_fd, input_fd) = journal::create().unwrap();
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
    head.set_mid_line(true);

    let r = recover(&head_fd, &input_fd).unwrap();
    assert_eq!(r.open, ["1"], "id 2's line is sent on again, not answered");
    assert_eq!(r.pending, &text[first_end..]);
    assert_eq!(r.memory, memory);
    assert!(r.mid_line && !r.skipping);

    // Answered: freed; a freed slot is used again for the next id.
    assert_eq!(head.free(&["1".to_string()]), 1);
    head.book("\"x\"", 1, false).unwrap();
    head.set_position(Position { start: text.len() as u64 - 5, filled: text.len() as u64, lines: 2, skipping: false });
    head.set_mid_line(false);
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
    let (head_fd, _) = journal::create().unwrap();
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
    let (head, input) = journal::create().unwrap();
    send_fds(a.as_fd(), [r.as_fd(), w.as_fd(), head.as_fd(), input.as_fd()]).unwrap();
    let handed = recv_fds(b.as_fd()).unwrap();
    for fd in [&handed.input, &handed.output, &handed.head, &handed.input_buf] {
        assert!(rustix::io::fcntl_getfd(fd).unwrap().contains(rustix::io::FdFlags::CLOEXEC));
    }
    assert!(is_pipe(&handed.input) && is_pipe(&handed.output) && !is_pipe(&handed.head));
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
