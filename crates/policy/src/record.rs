//! `--record-calls FILE`: live traffic written as recorded calls (the calls.jsonl that
//! `switchyard plugin test` replays): each call the chain decides, with the client's session
//! and the chain's answer, and each tool it annotates, with the hints it gave.
//!
//! Lines go through a bounded queue to a writer thread of their own, so a slow disk never
//! holds up a call; when the queue is full a line is dropped and counted. Arguments are
//! written only when asked (`--record-arguments`): they may hold anything a user typed.

use std::collections::HashSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use anyhow::Context;
use serde_json::{Map, Value, json};

use crate::project::recorded::{decision_to_json, hints_to_json, kind_name, listing_to_json};
use switchyard_core::decision::{CallInfo, Caller, Decision, Hints, Rejection, Transport};

use crate::{Kind, ListedTool, Listing};

/// Lines waiting for the writer at most.
const QUEUE: usize = 4096;
/// Distinct annotated tools remembered so that a re-listed tool is written once.
const MAX_TOOLS_SEEN: usize = 100_000;

/// Where recorded calls go.
pub struct Recorder {
    tx: SyncSender<String>,
    path: PathBuf,
    with_arguments: bool,
    dropped: AtomicU64,
    /// Annotate lines written already: clients list tools again and again.
    tools_seen: Mutex<HashSet<String>>,
}

impl Recorder {
    /// Opens `path` for appending (created when missing) and starts the writer thread.
    pub fn start(path: &Path, with_arguments: bool) -> anyhow::Result<Recorder> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {} to record calls into (--record-calls)", path.display()))?;
        let (tx, rx) = sync_channel(QUEUE);
        let shown = path.to_path_buf();
        std::thread::Builder::new()
            .name("switchyard-record".into())
            .spawn(move || write_lines(rx, file, &shown))
            .context("cannot start the call recorder's thread")?;
        tracing::info!(
            file = %path.display(),
            "recording calls{}",
            if with_arguments { " with their arguments" } else { " (without arguments)" }
        );
        Ok(Recorder {
            tx,
            path: path.to_path_buf(),
            with_arguments,
            dropped: AtomicU64::new(0),
            tools_seen: Mutex::new(HashSet::new()),
        })
    }

    /// Records one call and the chain's answer to it.
    pub(crate) fn decide(&self, call: &CallInfo, answer: &Result<Decision, Rejection>) {
        let mut c = Map::new();
        c.insert("server".into(), json!(&*call.server));
        c.insert("method".into(), json!(call.method));
        if let Some(t) = call.tool.as_deref() {
            c.insert("tool".into(), json!(t));
        }
        if self.with_arguments
            && let Some(a) = &call.arguments
        {
            c.insert("arguments".into(), serde_json::from_str(a).unwrap_or_else(|_| json!(a)));
        }
        let declared = hints_to_json(&call.declared);
        if declared.as_object().is_some_and(|o| !o.is_empty()) {
            c.insert("annotations".into(), declared);
        }
        if call.attempt > 0 {
            c.insert("attempt".into(), json!(call.attempt));
        }
        // Who called, as a 0.2 plugin is told (`plugin test` replays it so).
        insert_caller(&mut c, &call.caller);
        if let Some(task) = &call.task {
            let mut t = Map::new();
            t.insert("id".into(), json!(task.id));
            if let Some(tool) = &task.tool {
                t.insert("tool".into(), json!(tool));
            }
            c.insert("task".into(), t.into());
        }
        let expect = match answer {
            Ok(d) => json!({"verdict": "continue", "decision": decision_to_json(d)}),
            Err(r) => json!({"verdict": "reject", "reason": r.reason}),
        };
        self.send(json!({"call": c, "client": &*call.session, "expect": expect}).to_string());
    }

    /// Records how one listed item is shown to one client, once per distinct (item, client,
    /// answer): the line `plugin test` replays as a `list-tool` for that client.
    pub(crate) fn listed(&self, tool: &ListedTool, caller: &Caller, shown: &Listing) {
        let mut t = Map::new();
        t.insert("server".into(), json!(tool.server));
        t.insert("name".into(), json!(tool.name));
        if tool.kind != Kind::Tool {
            t.insert("kind".into(), json!(kind_name(tool.kind)));
        }
        for (k, v) in [("title", &tool.title), ("description", &tool.description)] {
            if let Some(v) = v {
                t.insert(k.into(), json!(v));
            }
        }
        let declared = hints_to_json(&tool.declared);
        if declared.as_object().is_some_and(|o| !o.is_empty()) {
            t.insert("annotations".into(), declared);
        }
        insert_caller(&mut t, caller);
        let expect = listing_to_json(shown, &Listing::of(tool));
        self.once(json!({"tool": t, "expect": expect}).to_string());
    }

    /// Records one annotated tool, once per distinct (tool, declared, answer).
    pub(crate) fn annotate(&self, server: &str, tool: &str, declared: &Hints, hints: &Hints) {
        let tool = json!({"server": server, "name": tool, "annotations": hints_to_json(declared)});
        self.once(json!({"tool": tool, "expect": {"hints": hints_to_json(hints)}}).to_string());
    }

    /// Sends `line` unless the same line was sent before (clients list tools again and again).
    fn once(&self, line: String) {
        {
            let mut seen = self.tools_seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.contains(&line) {
                return;
            }
            if seen.len() < MAX_TOOLS_SEEN {
                seen.insert(line.clone());
            }
        }
        self.send(line);
    }

    fn send(&self, line: String) {
        match self.tx.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                // Relaxed: a count for a log line.
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n == 1 || n.is_multiple_of(1000) {
                    tracing::warn!(file = %self.path.display(), "recording cannot keep up: {n} calls left out so far");
                }
            }
            // The writer stopped after a write error, which it logged.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// `client` and `era` of `obj` for `who`, as a 0.2 plugin is told them; nothing for a stdio
/// client that gave no name (what a line without them replays as).
fn insert_caller(obj: &mut Map<String, Value>, who: &Caller) {
    if who.name.is_some() || who.dir.is_some() || who.transport != Transport::Stdio {
        let mut client = Map::new();
        for (k, v) in [("name", &who.name), ("version", &who.version), ("dir", &who.dir), ("token", &who.token)] {
            if let Some(v) = v.as_deref() {
                client.insert(k.into(), json!(v));
            }
        }
        client.insert("transport".into(), json!(who.transport.name()));
        obj.insert("client".into(), client.into());
    }
    if !who.era.is_empty() {
        obj.insert("era".into(), json!(&*who.era));
    }
}

/// The writer thread: one line per message, each in one `write` to the file opened for
/// appending, so lines of two routers recording into one file never interleave.
fn write_lines(rx: Receiver<String>, mut file: std::fs::File, path: &Path) {
    while let Ok(mut line) = rx.recv() {
        line.push('\n');
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::error!(file = %path.display(), "recording calls stopped: cannot write: {e}");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::recorded::Case;
    use switchyard_core::decision::{Caller, TaskRef};

    #[test]
    fn recorded_lines_read_back_as_cases_and_arguments_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        for with_arguments in [false, true] {
            let path = dir.path().join(format!("calls-{with_arguments}.jsonl"));
            let r = Recorder::start(&path, with_arguments).unwrap();
            let call = CallInfo {
                server: "fs".into(),
                session: "s-1".into(),
                caller: Caller {
                    name: Some("cursor".into()),
                    version: Some("1.7".into()),
                    transport: Transport::Socket,
                    dir: None,
                    token: Some("laptop".into()),
                    era: "2025-11-25".into(),
                },
                method: "tools/call".into(),
                tool: Some("write".into()),
                arguments: Some(r#"{"path":"/secret"}"#.into()),
                declared: Hints { read_only: Some(false), ..Hints::default() },
                attempt: 0,
                task: Some(TaskRef { id: "sy-task.x".into(), tool: Some("research".into()) }),
            };
            r.decide(&call, &Ok(Decision { timeout_ms: Some(9), ..Decision::default() }));
            r.decide(&call, &Err(Rejection::new("guard", "no")));
            let hints = Hints { read_only: Some(true), ..Hints::default() };
            r.annotate("fs", "read", &Hints::default(), &hints);
            r.annotate("fs", "read", &Hints::default(), &hints);
            // A listed prompt as one client sees it (renamed), and the same for another client.
            let prompt = ListedTool {
                kind: Kind::Prompt,
                server: "fs".into(),
                name: "review".into(),
                title: Some("Review".into()),
                description: None,
                declared: Hints::default(),
            };
            let shown = Listing { name: "check".into(), ..Listing::of(&prompt) };
            r.listed(&prompt, &call.caller, &shown);
            r.listed(&prompt, &call.caller, &shown);
            let other = Caller { name: Some("claude-code".into()), ..call.caller.clone() };
            r.listed(&prompt, &other, &Listing::of(&prompt));
            drop(r);
            let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
            let text = loop {
                let text = std::fs::read_to_string(&path).unwrap();
                if text.lines().count() >= 5 || std::time::Instant::now() > end {
                    break text;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            };
            assert_eq!(text.lines().count(), 5, "{text}");
            assert_eq!(text.contains("/secret"), with_arguments, "{text}");
            let mut listed = Vec::new();
            for line in text.lines() {
                match Case::parse(line).unwrap() {
                    Case::Decide { call: read, .. } => {
                        assert_eq!(read.caller, call.caller, "the caller reads back as it was: {line}");
                        assert_eq!(read.task, call.task, "the task reads back as it was: {line}");
                    }
                    Case::List { tool, caller, expect, .. } if tool.kind == Kind::Prompt => {
                        assert_eq!(*tool, prompt, "the item reads back as it was: {line}");
                        listed.push((caller.name.as_deref().map(str::to_string), expect.name.clone()));
                    }
                    Case::List { .. } => {}
                    Case::Hook(h) => panic!("the recorder writes no hook lines: {}", h.label()),
                }
            }
            assert_eq!(
                listed,
                [(Some("cursor".to_string()), "check".to_string()), (Some("claude-code".into()), "review".into())],
                "each client's view, with who it was: {text}"
            );
            assert!(text.contains(r#""client":"s-1""#) && text.contains(r#""reason":"no""#), "{text}");
        }
    }
}
