//! Plugin worker threads: every plugin call (decide, annotate, init) runs here, never on the
//! async I/O thread.
//!
//! Two reasons. wasmtime-wasi's synchronous WASI bindings run blocking calls (a plugin writing
//! to stdout or stderr, which a panic does) through `block_on` on the current tokio handle,
//! which panics inside a runtime; these threads have none. And plugin CPU must not stall other
//! sessions: a fixed, small number of threads bounds the share plugins take of the machine,
//! and jobs are served round-robin per session, so one session's flood of slow calls delays
//! another session's call by at most one job per competing session.

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, OnceLock};

type Job = Box<dyn FnOnce() + Send>;

/// Jobs waiting, one FIFO per session (lane), lanes served in turn.
#[derive(Default)]
struct Lanes {
    lanes: HashMap<String, VecDeque<Job>>,
    /// Lanes with work, in the order they get their next turn.
    turn: VecDeque<String>,
}

impl Lanes {
    fn push(&mut self, lane: &str, job: Job) {
        match self.lanes.get_mut(lane) {
            Some(q) => q.push_back(job),
            None => {
                self.lanes.insert(lane.to_string(), VecDeque::from([job]));
                self.turn.push_back(lane.to_string());
            }
        }
    }

    /// The next job: the head of the lane whose turn it is; that lane goes to the back.
    fn pop(&mut self) -> Option<Job> {
        let lane = self.turn.pop_front()?;
        let q = self.lanes.get_mut(&lane).expect("a lane in turn has jobs");
        let job = q.pop_front().expect("a lane in turn has jobs");
        if q.is_empty() {
            self.lanes.remove(&lane);
        } else {
            self.turn.push_back(lane);
        }
        Some(job)
    }
}

struct Pool {
    lanes: Mutex<Lanes>,
    ready: Condvar,
}

/// Threads serving plugin calls: half the cores (at least one, at most four), so plugins can
/// never take the core the router and the servers need.
fn thread_count() -> usize {
    std::thread::available_parallelism().map(|n| n.get() / 2).unwrap_or(1).clamp(1, 4)
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let pool: &'static Pool =
            Box::leak(Box::new(Pool { lanes: Mutex::new(Lanes::default()), ready: Condvar::new() }));
        for n in 0..thread_count() {
            std::thread::Builder::new()
                .name(format!("switchyard-plugin-{n}"))
                .spawn(move || serve(pool))
                .expect("cannot start a plugin worker thread");
        }
        pool
    })
}

fn serve(pool: &'static Pool) {
    loop {
        let job = {
            let mut lanes = pool.lanes.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(job) = lanes.pop() {
                    break job;
                }
                lanes = pool.ready.wait(lanes).unwrap_or_else(|p| p.into_inner());
            }
        };
        job();
    }
}

/// Why a job gave no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the host failed while running the plugin: {0}")]
pub struct HostPanic(pub String);

/// Runs `f` on a plugin worker thread in `lane`'s turn and waits for it without blocking the
/// async thread. A job whose caller has gone (the request was cancelled) is skipped. A panic
/// in `f` is caught, so the thread lives on and the caller still gets an answer.
pub async fn run<R: Send + 'static>(lane: &str, f: impl FnOnce() -> R + Send + 'static) -> Result<R, HostPanic> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        if tx.is_closed() {
            return;
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| HostPanic(panic_text(&*p)));
        let _ = tx.send(r);
    });
    let pool = pool();
    pool.lanes.lock().unwrap_or_else(|p| p.into_inner()).push(lane, job);
    pool.ready.notify_one();
    rx.await.unwrap_or_else(|_| Err(HostPanic("the plugin worker dropped the call".into())))
}

/// Runs `f` on a thread of its own, outside any runtime (for loading, which may take long and
/// runs `init`), and waits for it without blocking the async thread.
pub async fn run_alone<R: Send + 'static>(name: &str, f: impl FnOnce() -> R + Send + 'static) -> anyhow::Result<R> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| anyhow::anyhow!("cannot start the {name} thread: {e}"))?;
    rx.await.map_err(|_| anyhow::anyhow!("the {name} thread failed (see the log above)"))
}

pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_take_turns_so_a_flood_does_not_starve_a_single_job() {
        let order = std::sync::Arc::new(Mutex::new(Vec::new()));
        let mut lanes = Lanes::default();
        let job = |tag: &'static str| -> Job {
            let order = order.clone();
            Box::new(move || order.lock().unwrap().push(tag))
        };
        for _ in 0..3 {
            lanes.push("flood", job("a"));
        }
        lanes.push("quiet", job("b"));
        lanes.push("flood", job("a"));
        while let Some(j) = lanes.pop() {
            j();
        }
        assert_eq!(*order.lock().unwrap(), ["a", "b", "a", "a", "a"]);
        assert!(lanes.lanes.is_empty() && lanes.turn.is_empty());
    }

    #[tokio::test]
    async fn jobs_run_outside_the_runtime_and_a_panic_is_an_answer() {
        let inside = run("t", || tokio::runtime::Handle::try_current().is_ok()).await.unwrap();
        assert!(!inside, "plugin workers must not see a tokio runtime");
        let e = run("t", || -> u32 { panic!("boom") }).await.unwrap_err();
        assert_eq!(e.0, "boom");
        assert_eq!(run("t", || 7).await.unwrap(), 7, "the worker lives on after a panic");
    }
}
