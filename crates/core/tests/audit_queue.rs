//! Queuing a call's audit line allocates nothing on the call's side once the queue has grown to
//! the calls' pace: counted by an allocator that counts the allocations of the thread that asks.
//! (Its own test binary: the library forbids the unsafe code an allocator needs.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, SystemTime};

use switchyard_core::audit::{AuditLog, Client, Deferred, Ended, Record, Settings, sha256};
use switchyard_core::metrics::Outcome;

/// The system's allocator, counting what the threads that ask for it allocate.
struct Counting;

thread_local! {
    /// Allocations made by this thread while it counts (None: it does not).
    static COUNTED: Cell<Option<u64>> = const { Cell::new(None) };
}

fn count() {
    // A thread being torn down has no counter left: it is not counting.
    let _ = COUNTED.try_with(|c| c.set(c.get().map(|n| n + 1)));
}

#[allow(unsafe_code)]
// SAFETY: every call is passed on unchanged to `System`, whose contract is the caller's; the
// count touches a const-initialised thread-local `Cell` only, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: see the impl.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: see the impl.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: see the impl.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: see the impl.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// How many allocations `f` makes on this thread.
fn allocations_in(f: impl FnOnce()) -> u64 {
    COUNTED.with(|c| c.set(Some(0)));
    f();
    COUNTED.with(|c| c.take()).unwrap_or(0)
}

fn record(n: u32) -> Record {
    Record {
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

/// Queues `n` lines as calls do (a place taken, then the line), the records made beforehand:
/// the allocations counted are the queue's alone.
fn queue_lines(log: &AuditLog, n: u32) -> u64 {
    let records: Vec<Record> = (0..n).map(record).collect();
    let deferred = Deferred { ended: SystemTime::now(), arguments_sha256: Some(sha256(b"{}")), trace_id: None };
    let mut records = records.into_iter();
    allocations_in(|| {
        for record in &mut records {
            log.write_deferred(log.admit().expect("a lenient log admits every call"), record, deferred);
        }
    })
}

#[test]
fn queuing_lines_allocates_nothing_on_the_callers_side_once_warm() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.audit.jsonl");
    let settings =
        Settings { path: path.clone(), max_bytes: 1 << 30, keep: 1, queue: 4096, strict: false, arguments: false };
    let log = AuditLog::start(&settings).unwrap();
    const N: u32 = 200;
    // Warm-up: bursts larger than the one counted, each written out before the next.
    for _ in 0..2 {
        queue_lines(&log, 2 * N);
        log.flush(Duration::from_secs(10));
    }
    let counted = queue_lines(&log, N);
    log.flush(Duration::from_secs(10));
    assert_eq!(counted, 0, "queuing {N} lines allocated {counted} times on the caller's thread");
    assert_eq!(log.lost(), 0);
    let written = std::fs::read_to_string(&path).unwrap().lines().count();
    assert_eq!(written, 5 * N as usize);
}
