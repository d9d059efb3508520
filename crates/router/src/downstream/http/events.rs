//! The SSE streams of an HTTP session (2025-11-25 era) as lanes that outlive the HTTP response
//! reading them: every event gets an id (`LANE.SEQ`), a cut response leaves its lane queued for
//! a client that resumes it (`GET` + `Last-Event-ID`), and delivered events are kept, bounded per
//! session, for the replay such a resume starts with.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::peer::Backlog;

/// Lane numbers are unique in the process, so an event id of one session never names an
/// event of another.
static NEXT_LANE: AtomicU64 = AtomicU64::new(1);

/// A lane nobody read for this long (its response was cut and never resumed) is dropped with
/// what it still holds.
pub const DETACHED_TTL: Duration = Duration::from_secs(60);

/// Bytes a kept event costs besides its frame (bookkeeping), so that even empty events count.
const KEPT_OVERHEAD: usize = 32;

/// A lane whose reader took nothing for this long while it holds more than half the session's
/// backlog limit is dropped (the client stopped reading that stream): it is cut before the
/// session's own rules (over the limit with nothing taken for `BACKLOG_STALL`) would end the
/// whole session and its other streams.
pub const STALLED: Duration = Duration::from_millis(crate::peer::BACKLOG_STALL.as_millis() as u64 / 2);

/// Lanes dropped unread remembered per session, at most (a resume of one is told what happened
/// instead of getting an empty stream).
const LOST_MAX: usize = 1024;

/// One line of the session's output on its way to a client, counted in the session's backlog
/// until it is dropped: once taken by a response body, or discarded because nobody can take
/// it any more.
pub struct Taken {
    pub line: String,
    /// The raw id of the request it is about, when the line does not name it.
    pub related: Option<String>,
    pub backlog: Arc<Backlog>,
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.backlog.wrote(self.line.len() + 1);
    }
}

/// Who reads a lane now: one response body at a time.
struct Reader {
    n: u64,
    wake: Arc<Notify>,
}

/// One SSE stream of a session.
struct Lane {
    pending: VecDeque<Taken>,
    pending_bytes: usize,
    reader: Option<Reader>,
    /// Since when nobody reads it (None while read).
    detached: Option<Instant>,
    /// When its reader last took a message (or it was opened).
    last_take: Instant,
    /// Sent after `pending`, before the end: the error that stands in for the response of a
    /// request whose stream was dropped while a client still held it open.
    farewell: Option<Bytes>,
    /// Nothing more comes (its response is queued, or the session ended): it ends once
    /// `pending` is delivered.
    closed: bool,
    /// Carries the response alone as `application/json`: no ids, nothing kept for replay.
    json_only: bool,
    /// The id (JSON text) of the request whose stream it is; None for a GET stream.
    request: Option<String>,
}

/// A delivered event, kept for a resume.
struct Kept {
    seq: u64,
    lane: u64,
    /// Its SSE frame (empty for a priming event, which replays as nothing).
    frame: Bytes,
}

/// What a resume starts with (the replay) and, while its lane runs, the reader made for it.
type Resumed = (VecDeque<Bytes>, Option<(u64, u64, Arc<Notify>)>);

/// What a reader gets next from its lane.
pub enum Next {
    /// An SSE frame (for a JSON-only lane, the response line itself).
    Ready(Bytes),
    /// Nothing yet.
    Wait,
    /// The lane is over for this reader.
    End,
}

/// Why a resume was refused.
#[derive(Debug, PartialEq)]
pub enum Unknown {
    /// Not an id this front gives.
    Malformed,
    /// Not an event of this session, or one no longer kept.
    NotKept,
    /// An event of a GET stream that was dropped unread.
    Dropped,
}

/// The lanes of one session and the events they delivered.
pub struct Lanes {
    lanes: HashMap<u64, Lane>,
    next_seq: u64,
    next_reader: u64,
    kept: VecDeque<Kept>,
    kept_bytes: usize,
    /// Bytes of delivered events kept per session, and of what a detached lane may hold.
    limit: usize,
    /// Lanes dropped unread (their number, their request's id), oldest first.
    lost: VecDeque<(u64, Option<String>)>,
    ended: bool,
}

impl Lanes {
    pub fn new(limit: usize) -> Lanes {
        Lanes {
            lanes: HashMap::new(),
            next_seq: 1,
            next_reader: 1,
            kept: VecDeque::new(),
            kept_bytes: 0,
            limit,
            lost: VecDeque::new(),
            ended: false,
        }
    }

    /// A new lane, not read yet; `request`: the id (JSON text) of the request it is for.
    pub fn open(&mut self, json_only: bool, request: Option<&str>) -> u64 {
        let n = NEXT_LANE.fetch_add(1, Ordering::Relaxed);
        let lane = Lane {
            pending: VecDeque::new(),
            pending_bytes: 0,
            reader: None,
            detached: Some(Instant::now()),
            last_take: Instant::now(),
            farewell: None,
            closed: self.ended,
            json_only,
            request: request.map(str::to_string),
        };
        self.lanes.insert(n, lane);
        n
    }

    pub fn exists(&self, lane: u64) -> bool {
        self.lanes.get(&lane).is_some_and(|l| !l.closed)
    }

    /// Whether a response body reads the lane now.
    pub fn attached(&self, lane: u64) -> bool {
        self.lanes.get(&lane).is_some_and(|l| l.reader.is_some() && !l.closed)
    }

    /// Whether any lane is read now (the client is there).
    pub fn any_attached(&self) -> bool {
        self.lanes.values().any(|l| l.reader.is_some())
    }

    pub fn is_json_only(&self, lane: u64) -> bool {
        self.lanes.get(&lane).is_some_and(|l| l.json_only)
    }

    /// Queues `t` on `lane`. A lane nobody reads holds at most the store's limit; past it, it is
    /// dropped with what it holds (the client did not come back for it). `Err`: no such lane
    /// taking messages; `t` is handed back.
    pub fn push(&mut self, lane: u64, t: Taken) -> Result<(), Taken> {
        let limit = self.limit;
        let Some(l) = self.lanes.get_mut(&lane).filter(|l| !l.closed) else {
            return Err(t);
        };
        // What a stream nobody takes from may hold: the store's size, and at least half the
        // session's backlog limit (two of its largest messages), so a cut stream keeps a big
        // response for the client that resumes it.
        let cap = limit.max(t.backlog.limit() / 2);
        if l.reader.is_none() && l.pending_bytes + t.line.len() > cap {
            tracing::warn!(
                "dropped an HTTP stream cut and not resumed, with {} queued messages ({} bytes, more than {cap}); its request is answered with an error if the client resumes",
                l.pending.len() + 1,
                l.pending_bytes + t.line.len()
            );
            self.drop_lane(lane);
            return Ok(());
        }
        if l.reader.is_some() && l.pending_bytes + t.line.len() > cap && l.last_take.elapsed() >= STALLED {
            tracing::warn!(
                "dropped an HTTP stream whose client stopped reading it: {} messages ({} bytes) waited and it took none for {} s; the session and its other streams go on",
                l.pending.len() + 1,
                l.pending_bytes + t.line.len(),
                STALLED.as_secs_f64()
            );
            self.drop_lane(lane);
            return Ok(());
        }
        l.pending_bytes += t.line.len();
        l.pending.push_back(t);
        if let Some(r) = &l.reader {
            r.wake.notify_one();
        }
        Ok(())
    }

    /// Nothing more comes on `lane`: it ends after what it holds.
    pub fn close(&mut self, lane: u64) {
        if let Some(l) = self.lanes.get_mut(&lane) {
            l.closed = true;
            match &l.reader {
                Some(r) => r.wake.notify_one(),
                None if l.pending.is_empty() => {
                    self.lanes.remove(&lane);
                }
                None => {}
            }
        }
    }

    /// Takes what `lane` holds, to move it to another lane.
    pub fn take_pending(&mut self, lane: u64) -> VecDeque<Taken> {
        match self.lanes.get_mut(&lane) {
            Some(l) => {
                l.pending_bytes = 0;
                std::mem::take(&mut l.pending)
            }
            None => VecDeque::new(),
        }
    }

    /// Makes a reader of `lane` (a lane read by another body takes the new one; the old ends).
    fn attach(&mut self, lane: u64) -> Option<(u64, Arc<Notify>)> {
        let l = self.lanes.get_mut(&lane)?;
        let n = self.next_reader;
        self.next_reader += 1;
        let wake = Arc::new(Notify::new());
        if let Some(old) = l.reader.replace(Reader { n, wake: wake.clone() }) {
            old.wake.notify_one();
        }
        l.detached = None;
        l.last_take = Instant::now();
        Some((n, wake))
    }

    /// A priming event for `lane`: an id (kept, so the client may resume from it) and no data.
    fn prime(&mut self, lane: u64) -> Bytes {
        let seq = self.keep(lane, Bytes::new());
        Bytes::from(format!("id: {lane}.{seq}\ndata:\n\n"))
    }

    fn keep(&mut self, lane: u64, frame: Bytes) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.kept_bytes += frame.len() + KEPT_OVERHEAD;
        self.kept.push_back(Kept { seq, lane, frame });
        while self.kept_bytes > self.limit
            && let Some(old) = self.kept.pop_front()
        {
            self.kept_bytes -= old.frame.len() + KEPT_OVERHEAD;
        }
        seq
    }

    /// The next thing for reader `reader` of `lane`.
    pub fn next(&mut self, lane: u64, reader: u64) -> Next {
        let Some(l) = self.lanes.get_mut(&lane) else {
            return Next::End;
        };
        if l.reader.as_ref().is_none_or(|r| r.n != reader) {
            return Next::End;
        }
        let Some(t) = l.pending.pop_front() else {
            if let Some(frame) = l.farewell.take() {
                return Next::Ready(frame);
            }
            if l.closed {
                self.lanes.remove(&lane);
                return Next::End;
            }
            return Next::Wait;
        };
        l.pending_bytes -= t.line.len();
        l.last_take = Instant::now();
        if l.json_only {
            return Next::Ready(Bytes::from(t.line.clone()));
        }
        // The id is given on delivery: ids then rise in the order the client sees them.
        let seq = self.next_seq;
        let frame = Bytes::from(format!("id: {lane}.{seq}\nevent: message\ndata: {}\n\n", t.line));
        let kept = self.keep(lane, frame.clone());
        debug_assert_eq!(kept, seq);
        Next::Ready(frame)
    }

    /// The reader `reader` of `lane` is gone (its response ended or was cut).
    fn detach(&mut self, lane: u64, reader: u64) {
        if let Some(l) = self.lanes.get_mut(&lane)
            && l.reader.as_ref().is_some_and(|r| r.n == reader)
        {
            l.reader = None;
            l.detached = Some(Instant::now());
            if l.closed && l.pending.is_empty() {
                self.lanes.remove(&lane);
            }
        }
    }

    /// For `Last-Event-ID`: the kept events of that event's lane after it, and a reader of the
    /// lane when it still runs (else the resume ends after the replay).
    fn resume(&mut self, event_id: &str) -> Result<Resumed, Unknown> {
        let (lane, seq) = event_id.trim().split_once('.').ok_or(Unknown::Malformed)?;
        let (lane, seq): (u64, u64) =
            (lane.parse().map_err(|_| Unknown::Malformed)?, seq.parse().map_err(|_| Unknown::Malformed)?);
        let at = self.kept.binary_search_by_key(&seq, |k| k.seq).ok().filter(|at| self.kept[*at].lane == lane);
        let replay = |at: usize| -> VecDeque<Bytes> {
            self.kept
                .iter()
                .skip(at + 1)
                .filter(|k| k.lane == lane && !k.frame.is_empty())
                .map(|k| k.frame.clone())
                .collect()
        };
        if let Some((_, request)) = self.lost.iter().find(|(n, _)| *n == lane) {
            // Dropped: a request's stream ends with an error in place of its response (exactly
            // one answer, never silence), whether or not the event named is still kept; a GET
            // stream is refused.
            let Some(id) = request else {
                return Err(Unknown::Dropped);
            };
            let mut replay = at.map(replay).unwrap_or_default();
            replay.push_back(dropped_error(id));
            return Ok((replay, None));
        }
        let Some(at) = at else { return Err(Unknown::NotKept) };
        let replay = replay(at);
        let reader = self.attach(lane).map(|(n, wake)| (lane, n, wake));
        Ok((replay, reader))
    }

    /// Drops a lane nobody reads, with what it holds, remembering it for a later resume.
    fn drop_lane(&mut self, lane: u64) {
        // A request's stream a client still holds open ends with the error for its request,
        // after nothing else (what it held is given up).
        if let Some(l) = self.lanes.get_mut(&lane)
            && let (Some(r), Some(id)) = (&l.reader, &l.request)
        {
            l.pending.clear();
            l.pending_bytes = 0;
            l.closed = true;
            l.farewell = Some(if l.json_only { Bytes::from(dropped_line(id)) } else { dropped_error(id) });
            r.wake.notify_one();
            let id = l.request.clone();
            if self.lost.len() >= LOST_MAX {
                self.lost.pop_front();
            }
            self.lost.push_back((lane, id));
            return;
        }
        if let Some(l) = self.lanes.remove(&lane) {
            // Its reader, if any (a GET stream's), finds the lane gone and ends its response.
            if let Some(r) = &l.reader {
                r.wake.notify_one();
            }
            if self.lost.len() >= LOST_MAX {
                self.lost.pop_front();
            }
            self.lost.push_back((lane, l.request));
        }
    }

    /// Drops lanes nobody read for [`DETACHED_TTL`].
    pub fn sweep(&mut self, now: Instant) {
        let stale: Vec<u64> = self
            .lanes
            .iter()
            .filter(|(_, l)| l.detached.is_some_and(|since| now.duration_since(since) >= DETACHED_TTL))
            .map(|(n, _)| *n)
            .collect();
        if !stale.is_empty() {
            tracing::info!(
                "dropped {} HTTP stream(s) cut and not resumed within {} s",
                stale.len(),
                DETACHED_TTL.as_secs()
            );
        }
        for n in stale {
            self.drop_lane(n);
        }
    }

    /// The session ended: every lane ends after what it holds, if it is read; else it is dropped.
    pub fn end(&mut self) {
        self.ended = true;
        self.lanes.retain(|_, l| {
            l.closed = true;
            if let Some(r) = &l.reader {
                r.wake.notify_one();
            }
            l.reader.is_some()
        });
    }
}

/// The SSE event that stands in for the response of request `id` whose stream was dropped.
fn dropped_error(id: &str) -> Bytes {
    Bytes::from(format!("event: message\ndata: {}\n\n", dropped_line(id)))
}

/// The JSON-RPC error of [`dropped_error`], as a line.
fn dropped_line(id: &str) -> String {
    switchyard_core::codec::response_error(
        id,
        switchyard_core::codec::INTERNAL_ERROR,
        "the response to this request was dropped: its HTTP stream was cut and not resumed, or its client stopped reading it, while it held more than it may; send the request again",
        None,
    )
}

/// Something holding a session's lanes (its routes), which a [`Feed`] reads through.
pub trait HasLanes: Send + 'static {
    fn lanes(&mut self) -> &mut Lanes;
}

/// One response body reading a lane: a priming event, what a resume replays, then the lane.
pub struct Feed<R: HasLanes> {
    routes: Arc<Mutex<R>>,
    /// (lane, reader) while it reads one.
    lane: Option<(u64, u64)>,
    wake: Arc<Notify>,
    first: VecDeque<Bytes>,
}

impl<R: HasLanes> Feed<R> {
    /// A reader of the new `lane` (`prime`: its first event is a priming one).
    pub fn open(routes: &Arc<Mutex<R>>, lanes: &mut Lanes, lane: u64, prime: bool) -> Feed<R> {
        let (n, wake) = lanes.attach(lane).expect("the lane was just opened");
        let first =
            if prime && !lanes.is_json_only(lane) { VecDeque::from([lanes.prime(lane)]) } else { VecDeque::new() };
        Feed { routes: routes.clone(), lane: Some((lane, n)), wake, first }
    }

    /// A reader resuming after event `event_id`.
    pub fn resume(routes: &Arc<Mutex<R>>, lanes: &mut Lanes, event_id: &str) -> Result<Feed<R>, Unknown> {
        let (mut first, reader) = lanes.resume(event_id)?;
        let (lane, wake) = match reader {
            Some((lane, n, wake)) => {
                first.push_front(lanes.prime(lane));
                (Some((lane, n)), wake)
            }
            None => (None, Arc::new(Notify::new())),
        };
        Ok(Feed { routes: routes.clone(), lane, wake, first })
    }

    /// The next frame; None when the stream is over.
    pub async fn next(&mut self) -> Option<Bytes> {
        if let Some(b) = self.first.pop_front() {
            return Some(b);
        }
        let (lane, reader) = self.lane?;
        loop {
            match self.routes.lock().expect("lock").lanes().next(lane, reader) {
                Next::Ready(b) => return Some(b),
                Next::End => {
                    self.lane = None;
                    return None;
                }
                Next::Wait => {}
            }
            self.wake.notified().await;
        }
    }
}

impl<R: HasLanes> Drop for Feed<R> {
    fn drop(&mut self) {
        if let Some((lane, reader)) = self.lane.take() {
            self.routes.lock().expect("lock").lanes().detach(lane, reader);
        }
    }
}
