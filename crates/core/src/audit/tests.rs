use std::time::Duration;

use super::file::{self, numbered};
use super::*;

fn settings(path: &std::path::Path) -> Settings {
    Settings { path: path.to_path_buf(), max_bytes: 1 << 20, keep: 3, queue: 64, strict: false, arguments: false }
}

fn record(n: u32) -> Record {
    Record {
        time: "2026-11-29T14:03:07.123Z".into(),
        client: Client { name: Some("claude-code".into()), transport: "socket".into(), ..Default::default() },
        session: "unix-1".into(),
        server: "fs".into(),
        method: "tools/call".into(),
        tool: Some(format!("tool{n}").into()),
        outcome: Ended::of(Outcome::Ok, None, true),
        attempts: 1,
        ..Default::default()
    }
}

fn lines(path: &std::path::Path) -> Vec<Record> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

const FLUSH: Duration = Duration::from_secs(10);

#[test]
fn a_record_is_one_line_that_reads_back_and_leaves_out_what_is_not_there() {
    let r = record(1);
    let line = r.line();
    assert!(!line.contains('\n'));
    assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), r);
    for absent in ["trace_id", "arguments", "instance", "refused_by", "is_error", "unknown"] {
        assert!(!line.contains(absent), "{absent} in {line}");
    }
    assert_eq!(sha256_hex(b"{}"), "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
}

#[test]
fn how_a_call_ended_is_told_apart() {
    let lost_sent = Ended::of(Outcome::Lost, Some(-32603), true);
    assert!(lost_sent.unknown && lost_sent.failed() && lost_sent.result == "lost");
    // Lost before it reached an instance: it did not run.
    assert!(!Ended::of(Outcome::Lost, None, false).unknown);
    let tool_error = Ended::of(Outcome::ToolError, None, true);
    assert!(tool_error.is_error && tool_error.failed() && !tool_error.unknown);
    assert!(Ended::of(Outcome::Timeout, Some(-32001), true).timeout);
    assert!(Ended::of(Outcome::Cancelled, None, true).cancelled);
    assert!(!Ended::of(Outcome::Ok, None, true).failed());
}

#[test]
fn lines_are_written_to_a_file_only_its_user_may_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let log = AuditLog::start(&settings(&path)).unwrap();
    for n in 0..10 {
        log.write(log.admit().unwrap(), record(n));
    }
    log.flush(FLUSH);
    let got = lines(&path);
    assert_eq!(got.len(), 10);
    assert_eq!(got[9].tool.as_deref(), Some("tool9"));
    assert_eq!(log.lost(), 0);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
}

#[test]
fn the_writer_puts_in_the_time_a_call_ended_and_the_hash_of_its_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let log = AuditLog::start(&settings(&path)).unwrap();
    let at = |ms| std::time::UNIX_EPOCH + Duration::from_millis(ms);
    let bare = |n| Record { time: String::new(), ..record(n) };
    let hashed = Deferred { ended: at(1_795_960_987_123), arguments_sha256: Some(sha256(b"{}")), trace_id: None };
    log.write_deferred(log.admit().unwrap(), bare(1), hashed);
    log.write(log.admit().unwrap(), record(2));
    // The writer's buffers are reused: a shorter text leaves nothing of the last, and a call
    // without arguments gets no hash.
    log.write_deferred(
        log.admit().unwrap(),
        bare(3),
        Deferred { ended: at(5), arguments_sha256: None, trace_id: None },
    );
    log.flush(FLUSH);
    let got: Vec<(String, Option<String>)> = lines(&path).into_iter().map(|r| (r.time, r.arguments_sha256)).collect();
    let sha = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a".to_string();
    assert_eq!(
        got,
        [
            ("2026-11-29T14:03:07.123Z".to_string(), Some(sha)),
            ("2026-11-29T14:03:07.123Z".to_string(), None),
            ("1970-01-01T00:00:00.005Z".to_string(), None),
        ]
    );
}

#[test]
fn the_file_is_rotated_by_size_and_only_keep_files_stay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let one = record(0).line().len() as u64 + 1;
    // Three lines to a file.
    let log = AuditLog::start(&Settings { max_bytes: one * 3, keep: 2, ..settings(&path) }).unwrap();
    for n in 0..10 {
        log.write(log.admit().unwrap(), record(n));
        // One line per write, so the files fill line by line.
        log.flush(FLUSH);
    }
    let tools = |p: &std::path::Path| lines(p).into_iter().map(|r| r.tool.unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(tools(&path), ["tool9"]);
    assert_eq!(tools(&numbered(&path, 1)), ["tool6", "tool7", "tool8"]);
    assert_eq!(tools(&numbered(&path, 2)), ["tool3", "tool4", "tool5"]);
    assert!(!numbered(&path, 3).exists(), "only two rotated files are kept");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for p in [path.clone(), numbered(&path, 1)] {
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        }
    }
}

#[test]
fn a_full_queue_loses_and_counts_lines_and_never_blocks_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let log = AuditLog::start(&Settings { queue: 4, ..settings(&path) }).unwrap();
    {
        let _held = log.pause();
        for n in 0..10 {
            // Each returns at once: the writer is held back.
            log.write(log.admit().unwrap(), record(n));
        }
        // The writer may have taken the first line before it found the pause.
        assert!((5..=6).contains(&log.lost()), "lost {}", log.lost());
    }
    log.flush(FLUSH);
    let written = lines(&path).len() as u64;
    assert_eq!(written + log.lost(), 10);
    assert_eq!(log.losses().queue_full, log.lost(), "the queue was full; no write failed");
    // Room again once the writer caught up.
    log.write(log.admit().unwrap(), record(10));
    log.flush(FLUSH);
    assert_eq!(lines(&path).len() as u64, written + 1);
}

#[test]
fn a_strict_log_refuses_calls_it_has_no_room_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let log = AuditLog::start(&Settings { queue: 2, strict: true, ..settings(&path) }).unwrap();
    let (a, b) = (log.admit().unwrap(), log.admit().unwrap());
    let e = log.admit().err().expect("no room for a third call");
    assert!(matches!(e, Refused::Full(_)));
    assert!(e.to_string().contains("strict = true"), "{e}");
    assert_eq!(log.losses(), Losses { queue_full: 0, write_failed: 0, refused: 1 });
    // A place given back (a call that never wrote its line) is free again.
    drop(a);
    let c = log.admit().unwrap();
    log.write(b, record(1));
    log.write(c, record(2));
    log.flush(FLUSH);
    assert_eq!(lines(&path).len(), 2);
    assert_eq!(log.lost(), 0);
}

/// /dev/full takes no write: the disk is full.
#[cfg(target_os = "linux")]
#[test]
fn a_failing_disk_loses_lines_and_a_strict_log_then_refuses_calls() {
    let full = std::path::Path::new("/dev/full");
    let lenient = AuditLog::start(&Settings { max_bytes: u64::MAX, ..settings(full) }).unwrap();
    lenient.write(lenient.admit().unwrap(), record(1));
    lenient.flush(FLUSH);
    assert_eq!(lenient.lost(), 1);
    // The call is never refused.
    assert!(lenient.admit().is_ok());

    let strict = AuditLog::start(&Settings { max_bytes: u64::MAX, strict: true, ..settings(full) }).unwrap();
    strict.write(strict.admit().unwrap(), record(1));
    strict.flush(FLUSH);
    assert_eq!(strict.lost(), 1);
    let e = strict.admit().err().expect("a strict log refuses calls while its disk fails");
    assert!(matches!(&e, Refused::Failing(_, why) if why.contains("No space left")), "{e}");
    assert!(e.to_string().contains("/dev/full cannot be written"), "{e}");
}

#[test]
fn a_strict_log_lets_calls_through_again_once_the_disk_takes_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let log = AuditLog::start(&Settings { strict: true, ..settings(&path) }).unwrap();
    log.break_disk(true);
    log.write(log.admit().unwrap(), record(1));
    log.flush(FLUSH);
    assert_eq!(log.lost(), 1);
    assert!(matches!(log.admit(), Err(Refused::Failing(..))));
    // While the disk fails, a refused call's line is lost too (counted as a refusal, not as
    // the line of a call that ran), and calls stay refused.
    log.write(log.unreserved(), record(2));
    log.flush(FLUSH);
    assert_eq!(log.lost(), 1);
    assert!(log.admit().is_err());
    assert_eq!(log.losses(), Losses { queue_full: 0, write_failed: 1, refused: 2 });
    // Once it takes lines again, the next refused call's line goes through, and so do calls.
    log.break_disk(false);
    log.write(log.unreserved(), record(3));
    log.flush(FLUSH);
    let tools: Vec<String> = lines(&path).into_iter().map(|r| r.tool.unwrap().to_string()).collect();
    assert_eq!(tools, ["tool3"]);
    assert!(log.admit().is_ok());
}

#[test]
fn lines_reach_the_file_on_their_own_whether_the_writer_slept_or_ticked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let log = AuditLog::start(&settings(&path)).unwrap();
    let wait_for = |n: usize| {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while lines(&path).len() < n {
            assert!(std::time::Instant::now() < until, "{n} lines did not reach the file by themselves");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // The first line wakes a sleeping writer; the next come while it ticks, or wake it again.
    log.write(log.admit().unwrap(), record(1));
    wait_for(1);
    for n in 2..=5 {
        log.write(log.admit().unwrap(), record(n));
    }
    wait_for(5);
    std::thread::sleep(Duration::from_millis(200));
    log.write(log.admit().unwrap(), record(6));
    wait_for(6);
}

fn line_of(n: u32) -> Vec<u8> {
    let mut line = record(n).line().into_bytes();
    line.push(b'\n');
    line
}

#[test]
fn a_write_a_full_disk_cuts_is_taken_back_to_its_last_whole_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let mut file = file::AuditFile::open(&path, u64::MAX, 1).unwrap();
    let (one, two) = (line_of(1), line_of(2));
    // Room for the first line and half the second.
    file.room = Some((one.len() + two.len() / 2) as u64);
    let e = file.append(&[one.clone(), two].concat()).expect_err("the disk is full");
    assert_eq!(e.written, 1, "the first line is whole in the file: {e:?}");
    assert_eq!(std::fs::read(&path).unwrap(), one);
    // Room again: the next line is a line of its own.
    file.room = None;
    file.append(&line_of(3)).unwrap();
    let tools: Vec<String> = lines(&path).into_iter().map(|r| r.tool.unwrap().to_string()).collect();
    assert_eq!(tools, ["tool1", "tool3"]);
}

#[test]
fn a_part_line_that_cannot_be_taken_back_is_ended_before_the_next_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let mut file = file::AuditFile::open(&path, u64::MAX, 1).unwrap();
    let one = line_of(1);
    file.room = Some(10);
    // Another process writes after the part: it is not ours to cut.
    file.others = b"zz".to_vec();
    let e = file.append(&one).expect_err("the disk is full");
    assert_eq!(e.written, 0);
    file.room = None;
    file.append(&line_of(2)).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(got.len(), 2, "{text}");
    assert_eq!(got[0].as_bytes(), [&one[..10], b"zz"].concat());
    assert_eq!(serde_json::from_str::<Record>(got[1]).unwrap().tool.as_deref(), Some("tool2"));
}

#[test]
fn a_log_left_ending_mid_line_is_not_joined_by_the_next_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let one = line_of(1);
    // A writer stopped with the disk full, or a crash, left half a line.
    std::fs::write(&path, [&one[..], &one[..20]].concat()).unwrap();
    let log = AuditLog::start(&settings(&path)).unwrap();
    log.write(log.admit().unwrap(), record(2));
    log.flush(FLUSH);
    let text = std::fs::read_to_string(&path).unwrap();
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(got.len(), 3, "{text}");
    assert_eq!(serde_json::from_str::<Record>(got[2]).unwrap().tool.as_deref(), Some("tool2"));
    assert_eq!(log.lost(), 0);
}

#[test]
fn a_line_is_never_longer_than_readers_take_arguments_give_way_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let log = AuditLog::start(&Settings { arguments: true, ..settings(&path) }).unwrap();
    let mut big = record(1);
    big.arguments_sha256 = Some("ab".repeat(32));
    big.arguments = Some(serde_json::json!({ "text": "x".repeat(MAX_LINE) }));
    let mut long_name = record(2);
    long_name.session = "s".repeat(MAX_LINE).into();
    log.write(log.admit().unwrap(), big);
    log.write(log.admit().unwrap(), long_name);
    log.write(log.admit().unwrap(), record(3));
    log.flush(FLUSH);
    let got = lines(&path);
    assert_eq!(got.len(), 2);
    assert!(got[0].arguments.is_none() && got[0].arguments_sha256.is_some(), "{:?}", got[0].arguments_sha256);
    assert_eq!(got[1].tool.as_deref(), Some("tool3"));
    assert_eq!(log.lost(), 1);
    assert!(std::fs::read_to_string(&path).unwrap().lines().all(|l| l.len() <= MAX_LINE));
}

/// `[[..[]..]]`, nesting `n` deep.
fn nest(n: usize) -> serde_json::Value {
    (1..n).fold(serde_json::json!([]), |v, _| serde_json::json!([v]))
}

#[test]
fn arguments_nested_deeper_than_calls_reads_back_are_left_out_by_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let log = AuditLog::start(&Settings { arguments: true, ..settings(&path) }).unwrap();
    for (n, deep) in [(1, ARGUMENTS_DEPTH), (2, ARGUMENTS_DEPTH + 1), (3, 127)] {
        let mut r = record(n);
        r.arguments_sha256 = Some("ab".repeat(32));
        r.arguments = Some(serde_json::json!({ "d": nest(deep - 1) }));
        assert_eq!(depth(r.arguments.as_ref().unwrap()), deep);
        log.write(log.admit().unwrap(), r);
    }
    log.flush(FLUSH);
    let got: Vec<(bool, bool)> =
        lines(&path).iter().map(|r| (r.arguments.is_some(), r.arguments_sha256.is_some())).collect();
    assert_eq!(got, [(true, true), (false, true), (false, true)]);
    assert_eq!(log.lost(), 0);
}

/// What the daemon log says while `f` runs on this thread.
fn said_in(f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Said(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Said {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let said = Said::default();
    let theirs = said.clone();
    let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || theirs.clone()).finish();
    tracing::subscriber::with_default(subscriber, f);
    String::from_utf8(said.0.lock().unwrap().clone()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn each_reason_to_leave_arguments_out_is_said_once_a_minute_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::start(&Settings { arguments: true, ..settings(&dir.path().join("a.audit.jsonl")) }).unwrap();
    let reasons = [
        LeftOut::TooDeep,
        LeftOut::NotUnicode,
        LeftOut::OutOfRange,
        LeftOut::TooLong,
        LeftOut::KeyTwice,
        LeftOut::Unreadable("EOF while parsing an object".into()),
    ];
    let told = |rounds: usize| {
        let said = said_in(|| {
            for _ in 0..rounds {
                for why in &reasons {
                    log.left_out("fs", Some("echo"), why);
                }
            }
        });
        said.lines().filter(|l| l.contains("arguments are left out")).map(str::to_string).collect::<Vec<_>>()
    };
    let first = told(3);
    assert_eq!(first.len(), reasons.len(), "each reason once: {first:#?}");
    for (line, why) in first.iter().zip(&reasons) {
        assert!(line.contains(&why.to_string()) && line.contains("fs") && line.contains("echo"), "{line}");
        assert!(!line.contains("since the last"), "{line}");
    }
    // Within the minute, none again; after it, each with how many were left out for it.
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(told(1), Vec::<String>::new());
    tokio::time::advance(Duration::from_secs(31)).await;
    let again = told(1);
    assert_eq!(again.len(), reasons.len(), "{again:#?}");
    for (line, why) in again.iter().zip(&reasons) {
        assert!(line.contains(&why.to_string()), "{line}");
        assert!(line.contains("(4 calls' arguments left out for this reason since the last such line)"), "{line}");
    }
}
