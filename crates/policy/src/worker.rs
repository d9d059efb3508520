//! Plugin worker threads: every plugin call (decide, annotate, init) runs here, never on the
//! async I/O thread.
//!
//! Two reasons. wasmtime-wasi's synchronous WASI bindings run blocking calls (a plugin writing
//! to stdout or stderr, which a panic does) through `block_on` on the current tokio handle,
//! which panics inside a runtime; these threads have none. And plugin CPU must not stall other
//! sessions: a small, fixed number of threads bounds the share plugins take of the machine;
//! jobs are served round-robin per session; and a session runs at most one job at a time, so
//! with two or more threads one session's slow or looping plugin calls can never hold up
//! another session's (the breaker in `wasm` then switches a plugin that keeps looping off).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Condvar, Mutex, OnceLock};

type Job = Box<dyn FnOnce() + Send>;

/// Jobs waiting, one FIFO per session (lane), lanes served in turn.
#[derive(Default)]
struct Lanes {
    lanes: HashMap<String, VecDeque<Job>>,
    /// Lanes with work, in the order they get their next turn.
    turn: VecDeque<String>,
    /// Lanes with a job running now: they wait for it before their next one starts.
    running: HashSet<String>,
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

    /// The next job: the head of the first lane in turn that has no job running; that lane goes
    /// to the back, and counts as running until [`Lanes::done`].
    fn pop(&mut self) -> Option<(String, Job)> {
        let at = self.turn.iter().position(|l| !self.running.contains(l))?;
        let lane = self.turn.remove(at).expect("position is in range");
        let q = self.lanes.get_mut(&lane).expect("a lane in turn has jobs");
        let job = q.pop_front().expect("a lane in turn has jobs");
        if q.is_empty() {
            self.lanes.remove(&lane);
        } else {
            self.turn.push_back(lane.clone());
        }
        self.running.insert(lane.clone());
        Some((lane, job))
    }

    /// The job of `lane` finished: its next one may start.
    fn done(&mut self, lane: &str) {
        self.running.remove(lane);
    }
}

struct Pool {
    lanes: Mutex<Lanes>,
    ready: Condvar,
}

/// Threads serving plugin calls: as many as cores, at least two (so one session's looping
/// plugin call never holds up another session's) and at most four.
fn thread_count() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(2, 4)
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
        let (lane, job) = {
            let mut lanes = pool.lanes.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(next) = lanes.pop() {
                    break next;
                }
                lanes = pool.ready.wait(lanes).unwrap_or_else(|p| p.into_inner());
            }
        };
        // Jobs catch their own panics (see `run`), so the lane is always released.
        job();
        pool.lanes.lock().unwrap_or_else(|p| p.into_inner()).done(&lane);
        // The lane's next job (or one another thread skipped) may be waiting for a thread.
        pool.ready.notify_all();
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
        while let Some((lane, j)) = lanes.pop() {
            j();
            lanes.done(&lane);
        }
        assert_eq!(*order.lock().unwrap(), ["a", "b", "a", "a", "a"]);
        assert!(lanes.lanes.is_empty() && lanes.turn.is_empty() && lanes.running.is_empty());
    }

    #[test]
    fn a_session_runs_one_job_at_a_time_so_others_get_the_free_threads() {
        let mut lanes = Lanes::default();
        for _ in 0..3 {
            lanes.push("looping", Box::new(|| {}));
        }
        let (first, _job) = lanes.pop().unwrap();
        assert_eq!(first, "looping");
        // Its job still runs: a second thread must not take the same session's next one...
        assert!(lanes.pop().is_none());
        // ...but takes another session's at once.
        lanes.push("quiet", Box::new(|| {}));
        assert_eq!(lanes.pop().unwrap().0, "quiet");
        lanes.done("looping");
        assert_eq!(lanes.pop().unwrap().0, "looping");
    }

    /// The outside tester's case: a plugin call that runs for seconds in one session must not
    /// delay another session's plugin call (the old single worker served them in turn).
    #[tokio::test]
    async fn a_slow_job_of_one_session_does_not_hold_up_another_sessions_job() {
        let slow = tokio::spawn(run("slow-session", || std::thread::sleep(std::time::Duration::from_secs(3))));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let started = std::time::Instant::now();
        run("other-session", || ()).await.unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "waited {:?}", started.elapsed());
        slow.await.unwrap().unwrap();
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
