//! The calls a server is running, for `status`, the page and `/metrics`: what each is, whose it
//! is, how old, what it waits for, when its link last carried anything for it, and the last
//! progress the server reported. A call is
//! registered when it starts and leaves when it ends, whatever way it ends (its [`Track`] is
//! dropped).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::pool::Pool;
use crate::upstream::Instance;

/// What a call is doing now.
#[derive(Clone)]
pub enum Stage {
    /// The policy's plugins are deciding how the call runs.
    Policy,
    /// Waiting for the server's gate (an exclusive or keyed call ahead of it).
    Gate,
    /// Waiting for an instance of this pool (starting, or all busy).
    Instance(Arc<Pool>),
    /// Sent to this instance under this upstream id; waiting for its answer.
    InFlight(Arc<Instance>, u64),
    /// An attempt failed; the next (`attempt` of at most `of`) starts at `at`.
    Repeating { attempt: u32, of: u32, at: Instant, after: String },
}

/// What logs, errors and status call a call: its method, or "tools/call `NAME`". Written out
/// only when one of them shows it, so a call that runs quietly never formats it.
#[derive(Clone, Debug)]
pub struct What {
    method: Cow<'static, str>,
    tool: Option<Arc<str>>,
}

impl What {
    /// A call of `method`, of `tool` for a `tools/call`.
    pub fn new(method: Cow<'static, str>, tool: Option<Arc<str>>) -> What {
        What { method, tool }
    }
}

impl fmt::Display for What {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tool {
            Some(t) => write!(f, "tools/call `{t}`"),
            None => f.write_str(&self.method),
        }
    }
}

struct Entry {
    what: What,
    session: Arc<str>,
    started: Instant,
    stage: Stage,
    /// None for a call that asked for no progress.
    progress: Option<Arc<LastProgress>>,
}

/// The last progress notification a call passed on to its client (a call's progress only ever
/// increases, so the last is the furthest).
#[derive(Default)]
pub struct LastProgress(Mutex<Option<Seen>>);

struct Seen {
    at: Instant,
    progress: f64,
    total: Option<f64>,
    message: Option<String>,
}

impl LastProgress {
    /// Notes a progress notification passed on now.
    pub fn saw(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        *self.0.lock().expect("lock") = Some(Seen { at: Instant::now(), progress, total, message });
    }

    fn status(&self, now: Instant) -> Value {
        match &*self.0.lock().expect("lock") {
            None => Value::Null,
            Some(s) => json!({
                "progress": s.progress,
                "total": s.total,
                "message": s.message,
                "age_ms": now.saturating_duration_since(s.at).as_millis() as u64,
            }),
        }
    }
}

/// Every call the server is running.
#[derive(Default)]
pub struct Calls {
    next: AtomicU64,
    running: Mutex<BTreeMap<u64, Entry>>,
}

/// One call's place in [`Calls`]; dropping it takes the call out.
pub struct Track<'a> {
    calls: &'a Calls,
    id: u64,
}

impl Calls {
    /// Registers a call (`what`: e.g. "tools/call `echo`") of `session`, before its policy
    /// decision; `progress` is where its progress is noted as it passes (None: it asked for none).
    pub fn start(&self, what: What, session: Arc<str>, progress: Option<Arc<LastProgress>>) -> Track<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let entry = Entry { what, session, started: Instant::now(), stage: Stage::Policy, progress };
        self.running.lock().expect("lock").insert(id, entry);
        Track { calls: self, id }
    }

    /// How many calls are repeating (between two attempts) now.
    pub fn repeating(&self) -> usize {
        self.running.lock().expect("lock").values().filter(|e| matches!(e.stage, Stage::Repeating { .. })).count()
    }

    /// How many calls in flight have had nothing from their link for `at_least`.
    pub fn silent(&self, at_least: Duration) -> usize {
        let running = self.running.lock().expect("lock");
        running
            .values()
            .filter(|e| match &e.stage {
                Stage::InFlight(inst, upstream) => inst.silent_for(*upstream).is_some_and(|s| s >= at_least),
                _ => false,
            })
            .count()
    }

    /// The calls as `status --json` shows them, oldest first.
    pub fn status(&self) -> Vec<Value> {
        let now = Instant::now();
        let running = self.running.lock().expect("lock");
        running
            .values()
            .map(|e| {
                let ms = |d: Duration| d.as_millis() as u64;
                let (state, instance, silent) = match &e.stage {
                    Stage::Policy => ("the policy is deciding".to_string(), None, None),
                    Stage::Gate => ("waiting for the gate".to_string(), None, None),
                    Stage::Instance(pool) => (format!("waiting for an instance of pool `{}`", pool.name), None, None),
                    Stage::InFlight(inst, upstream) => {
                        ("in flight".to_string(), Some(inst.label().to_string()), inst.silent_for(*upstream))
                    }
                    Stage::Repeating { attempt, of, at, after } => {
                        let wait = at.saturating_duration_since(now).as_millis();
                        (
                            format!("repeating (attempt {attempt} of at most {of}) in {wait} ms, after: {after}"),
                            None,
                            None,
                        )
                    }
                };
                json!({
                    "call": e.what.to_string(),
                    "session": &*e.session,
                    "age_ms": ms(now.saturating_duration_since(e.started)),
                    "state": state,
                    "instance": instance,
                    "silent_ms": silent.map(ms),
                    "progress": e.progress.as_ref().map_or(Value::Null, |p| p.status(now)),
                })
            })
            .collect()
    }
}

impl Track<'_> {
    pub fn set(&self, stage: Stage) {
        if let Some(e) = self.calls.running.lock().expect("lock").get_mut(&self.id) {
            e.stage = stage;
        }
    }
}

impl Drop for Track<'_> {
    fn drop(&mut self) {
        self.calls.running.lock().expect("lock").remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_call_is_shown_while_it_runs_with_its_stage_and_age() {
        let calls = Calls::default();
        let progress = Arc::new(LastProgress::default());
        let what = What::new("tools/call".into(), Some("echo".into()));
        assert_eq!(What::new("tools/list".into(), None).to_string(), "tools/list");
        let track = calls.start(what, "stdio-1".into(), Some(progress.clone()));
        assert_eq!(calls.status()[0]["state"], "the policy is deciding");
        assert_eq!(calls.status()[0]["progress"], Value::Null, "no progress yet");
        tokio::time::advance(Duration::from_millis(1500)).await;
        let spawner: crate::pool::Spawner = Arc::new(|_, _| Box::pin(std::future::pending()));
        track.set(Stage::Instance(Pool::new("default", "t", Default::default(), spawner)));
        let shown = calls.status();
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0]["call"], "tools/call `echo`");
        assert_eq!(shown[0]["session"], "stdio-1");
        assert_eq!(shown[0]["age_ms"], 1500);
        assert_eq!(shown[0]["state"], "waiting for an instance of pool `default`");
        progress.saw(3.0, Some(10.0), Some("indexing".into()));
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(
            calls.status()[0]["progress"],
            json!({"progress": 3.0, "total": 10.0, "message": "indexing", "age_ms": 250})
        );
        let at = Instant::now() + Duration::from_millis(400);
        track.set(Stage::Repeating { attempt: 2, of: 9, at, after: "instance fake#1 ended".into() });
        assert_eq!(calls.repeating(), 1);
        assert_eq!(
            calls.status()[0]["state"],
            "repeating (attempt 2 of at most 9) in 400 ms, after: instance fake#1 ended"
        );
        drop(track);
        assert!(calls.status().is_empty(), "an ended call is gone");
    }
}
