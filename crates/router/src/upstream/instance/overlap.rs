//! Does an instance answer one request at a time? What its answers to calls that overlapped say.
//!
//! A call sent while another ran and answered after it proves nothing by itself: a server that
//! runs calls side by side answers five equal calls sent at once in the order they were sent,
//! each after its own full time. So a call counts as having waited only when it took clearly
//! longer than calls of its kind (same method and tool) take alone, which a server that runs them
//! side by side does not make it do.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use switchyard_core::call::Call;

/// How many waits behind another call, with no answer ever out of order, make switchyard say
/// that a server seems to answer one request at a time.
const SERIAL_EVIDENCE: u32 = 3;
/// How much longer than its kind takes alone a call must take to count as having waited.
const SERIAL_WAIT: Duration = Duration::from_millis(500);
/// Kinds of call whose time alone is kept (a server has a bounded set of tools; a client that
/// invents names gets no more than this).
const KINDS: usize = 256;

/// How an instance has answered calls that overlapped: whether it ever answered a later call
/// before an earlier one (it runs calls concurrently), how long each kind of call took at most
/// when no other call was in flight, and how often a call sent while another ran took clearly
/// longer than that (it may run one at a time).
#[derive(Default)]
pub(super) struct Overlap {
    out_of_order: bool,
    alone: HashMap<u64, Duration>,
    waited_behind: u32,
    told: bool,
}

/// A client call's answer, as the overlap watch sees it.
pub(super) struct Answered {
    /// What it was ([`kind`]).
    pub kind: u64,
    /// Whether another client call was in flight when it was sent.
    pub behind: bool,
    /// Whether a client call sent before it is still unanswered.
    pub earlier_pending: bool,
    /// From its sending to its answer.
    pub took: Duration,
}

/// What a call is, for comparing how long calls take: its method and, for `tools/call` and
/// `prompts/get`, the name it calls.
pub(super) fn kind(call: &Call) -> u64 {
    let mut h = DefaultHasher::new();
    call.method().hash(&mut h);
    call.name().hash(&mut h);
    h.finish()
}

impl Overlap {
    /// Notes an answer; `Some(how long it waited)` the first time the instance looks like it
    /// answers one request at a time (said once).
    pub(super) fn answered(&mut self, a: &Answered) -> Option<Duration> {
        if a.earlier_pending {
            self.out_of_order = true;
            return None;
        }
        if !a.behind {
            if self.alone.len() < KINDS || self.alone.contains_key(&a.kind) {
                let longest = self.alone.entry(a.kind).or_default();
                *longest = (*longest).max(a.took);
            }
            return None;
        }
        // Of a kind never seen alone, how long it takes is unknown: no evidence either way.
        let waited = a.took.checked_sub(*self.alone.get(&a.kind)?)?;
        if waited < SERIAL_WAIT {
            return None;
        }
        self.waited_behind += 1;
        if self.out_of_order || self.told || self.waited_behind < SERIAL_EVIDENCE {
            return None;
        }
        self.told = true;
        Some(waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn answer(kind: u64, behind: bool, took: u64) -> Answered {
        Answered { kind, behind, earlier_pending: false, took: ms(took) }
    }

    /// Five equal calls sent at once to a server that runs them side by side come back in
    /// order, each after its own time: no call waited.
    #[test]
    fn equal_calls_answered_in_order_after_their_own_time_did_not_wait() {
        let mut o = Overlap::default();
        for _ in 0..3 {
            assert_eq!(o.answered(&answer(1, false, 2000)), None);
            for n in 1..5 {
                assert_eq!(o.answered(&answer(1, true, 2000 + n)), None);
            }
        }
        assert_eq!(o.waited_behind, 0);
    }

    /// Equal calls queued behind each other on a serial server: each takes its own time more
    /// than the one before; the third such wait is said, once.
    #[test]
    fn calls_that_took_their_time_again_behind_another_waited() {
        let mut o = Overlap::default();
        assert_eq!(o.answered(&answer(1, false, 2000)), None);
        assert_eq!(o.answered(&answer(1, true, 4000)), None);
        assert_eq!(o.answered(&answer(1, true, 6000)), None);
        assert_eq!(o.answered(&answer(1, true, 8000)), Some(ms(6000)));
        assert_eq!(o.answered(&answer(1, true, 10000)), None, "said once");
    }

    /// A call of a kind never seen alone gives no evidence; once seen alone, it does.
    #[test]
    fn a_kind_never_seen_alone_is_no_evidence() {
        let mut o = Overlap::default();
        for _ in 0..5 {
            assert_eq!(o.answered(&answer(2, true, 5000)), None);
        }
        assert_eq!(o.waited_behind, 0);
        o.answered(&answer(2, false, 10));
        o.answered(&answer(2, true, 700));
        assert_eq!(o.waited_behind, 1);
    }

    /// One answer out of order proves the server runs calls side by side: never said after it.
    #[test]
    fn an_answer_out_of_order_rules_it_out() {
        let mut o = Overlap::default();
        o.answered(&answer(1, false, 10));
        o.answered(&Answered { kind: 1, behind: true, earlier_pending: true, took: ms(5) });
        for _ in 0..5 {
            assert_eq!(o.answered(&answer(1, true, 3000)), None);
        }
    }

    /// The times alone of at most [`KINDS`] kinds are kept; one already kept is still updated.
    #[test]
    fn the_kinds_kept_are_bounded() {
        let mut o = Overlap::default();
        for k in 0..(KINDS as u64 + 10) {
            o.answered(&answer(k, false, 10));
        }
        assert_eq!(o.alone.len(), KINDS);
        o.answered(&answer(0, false, 900));
        assert_eq!(o.alone[&0], ms(900));
    }
}
