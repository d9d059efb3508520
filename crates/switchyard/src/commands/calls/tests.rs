use super::*;
use switchyard_core::audit::{AuditLog, Client, Ended, Settings};
use switchyard_core::metrics::Outcome;

fn rec(time: &str, server: &str, tool: &str, client: &str, outcome: Outcome) -> Record {
    Record {
        time: time.into(),
        client: Client { name: Some(client.into()), transport: "socket".into(), ..Default::default() },
        session: "unix-3".into(),
        server: server.into(),
        method: "tools/call".into(),
        tool: Some(tool.into()),
        outcome: Ended::of(outcome, None, true),
        attempts: 1,
        ..Default::default()
    }
}

fn args() -> CallsArgs {
    CallsArgs::default()
}

#[test]
fn since_takes_an_age_or_a_time() {
    let now = SystemTime::now();
    let ten = parse_since("10m").unwrap();
    let age = now.duration_since(ten).unwrap().as_secs();
    assert!((599..=601).contains(&age), "{age}");
    assert!(now.duration_since(parse_since("2h").unwrap()).unwrap().as_secs() >= 7199);
    assert_eq!(time::rfc3339(parse_since("2026-11-29T14:00:00Z").unwrap()), "2026-11-29T14:00:00.000Z");
    for bad in ["10", "ten minutes", "5y", "-3m"] {
        assert!(parse_since(bad).unwrap_err().contains("neither an age"), "{bad}");
    }
}

#[test]
fn filters_keep_what_they_name() {
    let calls = [
        rec("2026-11-29T10:00:00.000Z", "fs", "read", "claude-code", Outcome::Ok),
        rec("2026-11-29T11:00:00.000Z", "fs", "write", "Cursor", Outcome::ToolError),
        rec("2026-11-29T12:00:00.000Z", "git", "read", "claude-code", Outcome::Lost),
    ];
    let kept = |a: CallsArgs| {
        let f = Filter::of(&a);
        calls.iter().filter(|r| f.keeps(r)).map(|r| r.time[11..13].to_string()).collect::<Vec<_>>()
    };
    assert_eq!(kept(args()), ["10", "11", "12"]);
    assert_eq!(kept(CallsArgs { server: Some("fs".into()), ..args() }), ["10", "11"]);
    assert_eq!(kept(CallsArgs { tool: Some("read".into()), ..args() }), ["10", "12"]);
    assert_eq!(kept(CallsArgs { client: Some("cursor".into()), ..args() }), ["11"]);
    assert_eq!(kept(CallsArgs { client: Some("unix-3".into()), ..args() }), ["10", "11", "12"]);
    assert_eq!(kept(CallsArgs { failed: true, ..args() }), ["11", "12"]);
    let since = parse_since("2026-11-29T10:30:00Z").ok();
    assert_eq!(kept(CallsArgs { since, failed: true, server: Some("git".into()), ..args() }), ["12"]);
}

fn write(log: &AuditLog, records: &[Record]) {
    for r in records {
        log.write(log.admit().unwrap(), r.clone());
    }
    log.flush(Duration::from_secs(10));
}

#[test]
fn a_log_is_read_with_its_rotated_files_and_followed_across_a_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.audit.jsonl");
    let one = rec("2026-11-29T10:00:00.000Z", "fs", "t00", "c", Outcome::Ok).line().len() as u64 + 1;
    let settings =
        Settings { path: path.clone(), max_bytes: one * 2, keep: 5, queue: 16, strict: false, arguments: false };
    let audit = AuditLog::start(&settings).unwrap();
    let numbered = |n: u32| rec(&format!("2026-11-29T10:00:{n:02}.000Z"), "fs", &format!("t{n:02}"), "c", Outcome::Ok);
    for n in 0..5 {
        write(&audit, &[numbered(n)]);
    }
    assert!(switchyard_core::audit::numbered(&path, 2).exists());
    let all = |_: &Record| true;
    let mut log = Log::new(&path, &all);
    let tools =
        |lines: Vec<read::Line>| lines.into_iter().map(|(r, _)| r.tool.unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(tools(log.read_all().unwrap()), ["t00", "t01", "t02", "t03", "t04"]);
    assert!(log.read_new().unwrap().is_empty());
    // t05 ends the current file, t06 starts a new one: a follower sees both, in order.
    write(&audit, &[numbered(5)]);
    write(&audit, &[numbered(6)]);
    assert_eq!(tools(log.read_new().unwrap()), ["t05", "t06"]);
    // A half-written line waits for its end.
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"{\"time\":").unwrap();
    assert!(log.read_new().unwrap().is_empty());
}

#[test]
fn a_row_says_how_the_call_ended_and_escapes_what_clients_name_themselves() {
    let mut r = rec("2026-11-29T10:00:00.123Z", "fs", "write", "evil\nclient", Outcome::Lost);
    r.outcome.code = Some(-32603);
    r.duration_ms = 12.34;
    let row = show::row(&r);
    assert!(row.starts_with("2026-11-29 10:00:00.123 fs"), "{row}");
    assert!(
        row.contains("lost -32603 (ran?)") && row.contains("12.3") && row.contains("evil\\nclient unix-3"),
        "{row}"
    );
    assert_eq!(row.matches('\n').count(), 1);
}

#[test]
fn a_row_says_what_content_hooks_did_to_the_call() {
    let mut r = rec("2026-11-29T10:00:00.123Z", "fs", "read_text_file", "claude-code", Outcome::Ok);
    let note = |plugin: &str, phase: &str, verdict: &str, mode: &str| switchyard_core::audit::HookNote {
        plugin: plugin.into(),
        phase: phase.into(),
        verdict: verdict.into(),
        mode: mode.into(),
    };
    r.hooks = vec![note("redact.wasm", "result", "modify", "enforce"), note("guard.wasm", "request", "deny", "audit")];
    let row = show::row(&r);
    assert!(
        row.trim_end().ends_with("[redact.wasm modified the result]  [guard.wasm would deny the request (audit)]"),
        "{row}"
    );
    r.hooks = vec![note("cap.wasm", "result", "failed", "enforce")];
    assert!(show::row(&r).contains("[cap.wasm failed on the result]"));
}

#[test]
fn no_log_is_an_error_that_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("s.toml");
    std::fs::write(&config, "[audit]\nenabled = false\n[servers.a]\ncommand = \"x\"\n").unwrap();
    let e = logs(&CallsArgs { config: Some(config.clone()), ..args() }).unwrap_err().to_string();
    assert!(e.contains("audit log is off") && e.contains("enabled = false"), "{e}");
    let log = dir.path().join("a.jsonl");
    std::fs::write(&config, format!("[audit]\npath = {:?}\n[servers.a]\ncommand = \"x\"\n", log)).unwrap();
    let e = logs(&CallsArgs { config: Some(config.clone()), ..args() }).unwrap_err().to_string();
    assert!(e.contains("no call was logged yet") && e.contains("a.jsonl"), "{e}");
    let e = logs(&CallsArgs { file: vec![log.clone()], ..args() }).unwrap_err().to_string();
    assert!(e.contains("there is no audit log"), "{e}");
    std::fs::write(&log, "").unwrap();
    assert_eq!(logs(&CallsArgs { config: Some(config), ..args() }).unwrap().0, [log]);
}

fn good(n: u32) -> String {
    rec(&format!("2026-11-29T10:00:{n:02}.000Z"), "fs", &format!("t{n:02}"), "c", Outcome::Ok).line()
}

#[test]
fn bad_lines_are_told_by_file_and_line_then_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.audit.jsonl");
    let bad = "{\"time\":\n".repeat(7);
    std::fs::write(&path, format!("{}\n{bad}{}\n", good(1), good(2))).unwrap();
    let all = |_: &Record| true;
    let mut log = Log::new(&path, &all);
    assert_eq!(log.read_all().unwrap().len(), 2);
    let notes = log.notes();
    assert_eq!(notes.len(), 6, "{notes:?}");
    for (i, n) in notes[..5].iter().enumerate() {
        assert!(n.contains(&format!("d.audit.jsonl:{} skipped: it is not a call record", i + 2)), "{n}");
    }
    assert!(notes[5].contains("7 lines of the audit log were skipped in all; 2 more"), "{}", notes[5]);
    // Told once.
    assert!(log.notes().is_empty());
}

#[test]
fn a_line_longer_than_any_record_is_skipped_without_holding_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.audit.jsonl");
    // A tail of NULs a crash left, longer than any line, then a line a later writer ended it
    // with; then a short run of NULs just before a record.
    let mut bytes = format!("{}\n", good(1)).into_bytes();
    bytes.resize(bytes.len() + switchyard_core::audit::MAX_LINE + 10, 0);
    bytes.extend_from_slice(format!("\n{}\n", good(2)).as_bytes());
    bytes.extend_from_slice(&[0; 100]);
    bytes.extend_from_slice(format!("{}\n", good(3)).as_bytes());
    std::fs::write(&path, bytes).unwrap();
    let all = |_: &Record| true;
    let mut log = Log::new(&path, &all);
    let tools: Vec<String> = log.read_all().unwrap().into_iter().map(|(r, _)| r.tool.unwrap().to_string()).collect();
    assert_eq!(tools, ["t01", "t02", "t03"]);
    let notes = log.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("d.audit.jsonl:2 skipped: it is longer than 16 MiB"), "{}", notes[0]);
}

#[cfg(unix)]
#[test]
fn a_log_that_is_no_regular_file_is_an_error_not_an_endless_read() {
    let all = |_: &Record| true;
    let mut log = Log::new(std::path::Path::new("/dev/zero"), &all);
    let e = log.read_all().unwrap_err().to_string();
    assert!(e.contains("/dev/zero is not a regular file") && e.contains("--file"), "{e}");
}

#[test]
fn following_the_state_directory_takes_in_logs_begun_later_from_their_start() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("a.audit.jsonl");
    std::fs::write(&first, format!("{}\n", good(1))).unwrap();
    let all = |_: &Record| true;
    let mut followed = vec![Log::new(&first, &all)];
    followed[0].read_all().unwrap();
    // A daemon of another config, and a rotated file (not a log of its own).
    let later = dir.path().join("g-1234.audit.jsonl");
    std::fs::write(&later, format!("{}\n{}\n", good(2), good(3))).unwrap();
    std::fs::write(dir.path().join("a.audit.jsonl.1"), format!("{}\n", good(0))).unwrap();
    add_new(dir.path(), &mut followed, &all);
    add_new(dir.path(), &mut followed, &all);
    assert_eq!(followed.len(), 2);
    let tools: Vec<String> =
        followed.iter_mut().flat_map(|l| l.read_new().unwrap()).map(|(r, _)| r.tool.unwrap().to_string()).collect();
    assert_eq!(tools, ["t02", "t03"]);
}

#[test]
fn a_long_cell_never_pushes_the_next_columns_out_of_line() {
    let start_of = |row: &str, what: &str| row.find(what).unwrap_or_else(|| panic!("{what} in {row}"));
    let mut timeout = rec("2026-11-29T10:00:00.123Z", "fs", "write", "claude", Outcome::Timeout);
    timeout.outcome.code = Some(-32001);
    timeout.duration_ms = 4321.0;
    let mut shut = rec(
        "2026-11-29T10:00:00.123Z",
        "a-server-named-at-length",
        "a_tool_with_a_very_long_name_indeed",
        "claude",
        Outcome::ShuttingDown,
    );
    shut.outcome.code = Some(-32603);
    shut.duration_ms = 4321.0;
    let mut ok = rec("2026-11-29T10:00:00.123Z", "fs", "read", "claude", Outcome::Ok);
    ok.duration_ms = 4321.0;
    let rows: Vec<String> = [&timeout, &shut, &ok].iter().map(|r| show::row(r)).collect();
    assert!(rows[0].contains("timeout -32001 (ran?)") && rows[1].contains("shutting_down -32603 (ran?)"), "{rows:?}");
    for col in ["4321.0", "claude unix-3"] {
        let at: Vec<usize> = rows.iter().map(|r| r.chars().count() - r[start_of(r, col)..].chars().count()).collect();
        assert!(at.iter().all(|a| *a == at[0]), "{col} at {at:?}: {rows:?}");
    }
    assert!(rows[1].contains("a-server-name…"), "{}", rows[1]);
}

/// `{"text":"x","d":[[…]]}` with `n` arrays: it nests `n + 1` levels.
fn nested(n: usize) -> serde_json::Value {
    let mut d = serde_json::json!([]);
    for _ in 1..n {
        d = serde_json::json!([d]);
    }
    serde_json::json!({ "text": "x", "d": d })
}

#[test]
fn every_line_the_log_writes_is_read_back_however_deep_the_arguments_nest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.audit.jsonl");
    let settings =
        Settings { path: path.clone(), max_bytes: 1 << 30, keep: 1, queue: 16, strict: false, arguments: true };
    let audit = AuditLog::start(&settings).unwrap();
    let deep = switchyard_core::audit::ARGUMENTS_DEPTH;
    let depths = [1, 60, deep - 1, deep, deep + 1, 125, 126, 127];
    for (i, n) in depths.iter().enumerate() {
        let mut r = rec(&format!("2026-11-29T10:00:{i:02}.000Z"), "fs", &format!("t{n}"), "c", Outcome::Ok);
        r.arguments = Some(nested(*n));
        write(&audit, &[r]);
    }
    let all = |_: &Record| true;
    let mut log = Log::new(&path, &all);
    let read = log.read_all().unwrap();
    let notes = log.notes();
    assert!(notes.is_empty(), "{notes:?}");
    let kept: Vec<_> =
        read.iter().map(|(r, _)| (r.tool.as_deref().unwrap().to_string(), r.arguments.is_some())).collect();
    let wanted: Vec<_> = depths.iter().map(|n| (format!("t{n}"), *n < deep)).collect();
    assert_eq!(kept, wanted);
    assert_eq!(read[0].0.arguments, Some(nested(1)));
}
