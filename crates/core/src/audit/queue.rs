//! [`Queue`]: how audit lines go from the calls to the writer thread. Callers push into one
//! buffer; the writer swaps it for its own, emptied, and works through what it took. The two
//! buffers keep their memory, so queuing a line allocates nothing once they have grown to the
//! calls' pace (a channel would allocate a block every few dozen lines, on the caller's side).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A queue of many producers and one taker, who takes everything queued at once.
#[doc(hidden)]
pub struct Queue<T> {
    state: Mutex<State<T>>,
    /// The most items taken at once so far: the buffer handed back to the producers is made
    /// this large, by the taker, so that they seldom grow it.
    most: AtomicUsize,
}

struct State<T> {
    items: Vec<T>,
    /// No more items will come: the taker takes what is left and stops.
    closed: bool,
    /// The taker stopped: nothing pushed would be taken.
    ended: bool,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Queue { state: Mutex::new(State { items: Vec::new(), closed: false, ended: false }), most: AtomicUsize::new(0) }
    }
}

impl<T> Queue<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        // A push or a swap cannot leave the state half changed: a panic elsewhere is no reason
        // to stop queuing.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `item`; gives it back when the taker stopped.
    pub fn push(&self, item: T) -> Result<(), T> {
        let mut state = self.state();
        if state.ended {
            return Err(item);
        }
        state.items.push(item);
        Ok(())
    }

    /// Moves everything queued into `into`, which must be empty, and gives the producers its
    /// memory in exchange. False once the queue is closed: what `into` now holds is the last.
    pub fn take(&self, into: &mut Vec<T>) -> bool {
        debug_assert!(into.is_empty(), "the taker works through what it took before taking more");
        // Grown here, on the taker's side, rather than by a producer pushing into it.
        into.reserve(self.most.load(Ordering::Relaxed));
        let open = {
            let mut state = self.state();
            std::mem::swap(&mut state.items, into);
            !state.closed
        };
        self.most.fetch_max(into.len(), Ordering::Relaxed);
        open
    }

    /// The taker is going idle: the producers' buffer gives back what it holds beyond room for
    /// `keep` items (or what is queued), and the next take reserves no more than that. A burst
    /// grows the buffers; without this they would hold that memory for the life of the log.
    pub fn settle(&self, keep: usize) {
        {
            let mut state = self.state();
            let room = keep.max(state.items.len());
            state.items.shrink_to(room);
        }
        self.most.store(keep, Ordering::Relaxed);
    }

    /// No more items will be pushed: the taker's next [`Queue::take`] is its last.
    pub fn close(&self) {
        self.state().closed = true;
    }

    /// The taker stopped: pushes fail from now on, and what is queued is given back (to be
    /// dropped outside the lock).
    pub fn end(&self) -> Vec<T> {
        let mut state = self.state();
        state.ended = true;
        std::mem::take(&mut state.items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_taker_gets_all_in_order_and_the_buffers_keep_their_memory() {
        let q = Queue::default();
        let mut taken = Vec::new();
        for round in 0..3 {
            for n in 0..100 {
                q.push(round * 100 + n).unwrap();
            }
            assert!(q.take(&mut taken));
            assert_eq!(taken, (round * 100..round * 100 + 100).collect::<Vec<_>>());
            taken.clear();
        }
        // Both buffers have room for a hundred: the producers' side never grows again.
        assert!(taken.capacity() >= 100);
        assert!(q.take(&mut taken) && taken.is_empty());
        assert!(taken.capacity() >= 100 && q.state().items.capacity() >= 100);
    }

    #[test]
    fn a_burst_grows_the_buffers_and_settling_gives_the_memory_back() {
        let q = Queue::default();
        let mut taken = Vec::new();
        for round in 0..2 {
            for n in 0..10_000 {
                q.push(round * 10_000 + n).unwrap();
            }
            assert!(q.take(&mut taken));
            taken.clear();
        }
        assert!(taken.capacity() >= 10_000 && q.state().items.capacity() >= 10_000);
        // The writer settles both before it sleeps.
        q.settle(64);
        taken.shrink_to(64);
        assert!(q.state().items.capacity() <= 64, "the producers' buffer kept {}", q.state().items.capacity());
        assert!(q.take(&mut taken) && taken.is_empty());
        assert!(taken.capacity() <= 64, "the taker reserved {} after settling", taken.capacity());
        // What is queued when it settles stays queued.
        for n in 0..100 {
            q.push(n).unwrap();
        }
        q.settle(8);
        taken.clear();
        assert!(q.take(&mut taken));
        assert_eq!(taken.len(), 100);
    }

    #[test]
    fn a_closed_queue_is_taken_one_last_time_and_an_ended_one_refuses_items() {
        let q = Queue::default();
        q.push(1).unwrap();
        q.close();
        let mut taken = Vec::new();
        assert!(!q.take(&mut taken), "closed: this take is the last");
        assert_eq!(taken, [1]);
        q.push(2).unwrap();
        assert_eq!(q.end(), [2]);
        assert_eq!(q.push(3), Err(3));
    }
}
