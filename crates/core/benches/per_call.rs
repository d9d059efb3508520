//! What switchyard-core does for every call, before and after, in one run: the audit line of a
//! call (serde_json, as the writer thread wrote it before, against the hand-written line), the
//! queue that takes it to the writer thread (a std channel, against the double buffer) and the
//! metrics of a call (the label sets looked up in each family, against the series kept).

use std::borrow::Cow;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};
use switchyard_core::audit::{Client, Decided, Deferred, Ended, PluginRef, Queue, Record, Waits, sha256};
use switchyard_core::metrics::{Call, Live, Metrics, Outcome, ToolNames};

/// A `tools/call` as the router records it: the time and the arguments' hash are the writer's.
fn record() -> (Record, Deferred) {
    let record = Record {
        time: String::new(),
        client: Client {
            name: Some("claude-code".into()),
            version: Some("2.0.31".into()),
            transport: Cow::Borrowed("stdio"),
            ..Default::default()
        },
        session: "stdio-1".into(),
        server: "everything".into(),
        instance: Some("everything#1".into()),
        method: Cow::Borrowed("tools/call"),
        tool: Some("echo".into()),
        decision: Some(Decided {
            concurrency: Cow::Borrowed("shared"),
            keys: 0,
            pool: Cow::Borrowed("default"),
            timeout_ms: 60_000,
            retry: None,
        }),
        plugins: vec![PluginRef { name: "hints.wasm".into(), sha256: "ab".repeat(32) }],
        wait_ms: Waits { queue: 0.012, gate: 0.003 },
        outcome: Ended::of(Outcome::Ok, None, true),
        attempts: 1,
        duration_ms: 1.234,
        request_bytes: 118,
        response_bytes: 96,
        ..Default::default()
    };
    let arguments_sha256 = Some(sha256(br#"{"message":"hi"}"#));
    let deferred = Deferred { ended: SystemTime::now(), arguments_sha256, trace_id: None };
    (record, deferred)
}

/// The writer thread before: the deferred texts formatted into the record, then serde_json.
fn serde_line(batch: &mut Vec<u8>, record: &mut Record, deferred: &Deferred, texts: &mut (String, String)) {
    texts.0.clear();
    switchyard_core::audit::time::write_rfc3339(&mut texts.0, deferred.ended);
    record.time = std::mem::take(&mut texts.0);
    if let Some(digest) = &deferred.arguments_sha256 {
        texts.1.clear();
        switchyard_core::ids::write_hex(&mut texts.1, digest);
        record.arguments_sha256 = Some(std::mem::take(&mut texts.1));
    }
    serde_json::to_writer(&mut *batch, &*record).expect("a record always serialises");
    texts.0 = std::mem::take(&mut record.time);
    texts.1 = record.arguments_sha256.take().unwrap_or_default();
}

fn audit(c: &mut Criterion) {
    let (mut record, deferred) = record();
    let mut batch = Vec::with_capacity(64 * 1024);
    // Both write the same bytes: the bench compares like with like.
    let mut texts = (String::new(), String::new());
    serde_line(&mut batch, &mut record, &deferred, &mut texts);
    let by_serde = std::mem::take(&mut batch);
    record.write_line(&mut batch, Some(&deferred));
    assert_eq!(String::from_utf8_lossy(&batch), String::from_utf8_lossy(&by_serde));

    let mut g = c.benchmark_group("audit line");
    g.bench_function("serde_json (before)", |b| {
        b.iter(|| {
            batch.clear();
            serde_line(&mut batch, &mut record, black_box(&deferred), &mut texts);
            black_box(batch.len())
        })
    });
    g.bench_function("by hand (after)", |b| {
        b.iter(|| {
            batch.clear();
            black_box(&record).write_line(&mut batch, Some(black_box(&deferred)));
            black_box(batch.len())
        })
    });
    g.finish();
}

/// A line on its way to the audit writer, by its size (a record, what the writer fills in, a
/// flag): what the queue moves for each call.
const WORDS: usize = std::mem::size_of::<(Record, Option<Deferred>, bool)>().div_ceil(8);
type Queued = [u64; WORDS];

/// Lines queued before the writer takes them (at its 50 ms tick, a busy router queues more).
const BURST: usize = 64;

/// The lines of a burst of calls queued, then taken by the writer, here on one thread (in the
/// router the writer's thread frees the channel's blocks, which costs the callers more).
fn audit_queue(c: &mut Criterion) {
    let line: Queued = [7; WORDS];
    let mut g = c.benchmark_group("audit queue, 64 lines in and out");
    g.bench_function("std channel (before)", |b| {
        let (tx, rx) = std::sync::mpsc::channel::<Queued>();
        b.iter(|| {
            for _ in 0..BURST {
                tx.send(black_box(line)).expect("the receiver is here");
            }
            black_box(rx.try_iter().map(|l| l[0]).sum::<u64>())
        })
    });
    g.bench_function("double buffer (after)", |b| {
        let queue = Queue::<Queued>::default();
        let mut taken = Vec::new();
        b.iter(|| {
            for _ in 0..BURST {
                queue.push(black_box(line)).expect("the taker is here");
            }
            queue.take(&mut taken);
            black_box(taken.drain(..).map(|l| l[0]).sum::<u64>())
        })
    });
    g.finish();
}

/// One `tools/call` answered: its gate wait, its attempt timed, then the call counted and
/// timed, as the router reports them.
fn one_call(m: &Metrics, server: &Arc<str>, tool: &Arc<str>) {
    m.gate_wait(server, "shared", Duration::from_micros(3));
    let took = Duration::from_micros(840);
    m.attempt(server, "tools/call", Some(tool), "", "pipe", took);
    let call = Call {
        server,
        method: "tools/call",
        tool: Some(tool),
        outcome: Outcome::Ok,
        code: None,
        session_label: "stdio-1",
        elapsed: Duration::from_micros(910),
    };
    m.call(call);
}

fn metrics(c: &mut Criterion) {
    let server: Arc<str> = Arc::from("everything");
    let names = ToolNames::default();
    let tool = names.label("echo", |_| true);
    let mut g = c.benchmark_group("metrics of a call");
    for (name, m) in [
        ("label sets looked up (before)", Metrics::finding_series_each_call(Live::default)),
        ("series kept (after)", Metrics::new(Live::default)),
    ] {
        g.bench_function(name, |b| b.iter(|| one_call(&m, black_box(&server), black_box(&tool))));
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = audit, audit_queue, metrics
}
criterion_main!(benches);
