//! Where clients come from: stdin/stdout ([`stdio`]), the daemon's local endpoint for shared
//! use (a Unix socket, `unix`; a named pipe on Windows, `pipe`), and HTTP ([`http`]).

pub mod http;
mod local;
#[cfg(windows)]
pub mod pipe;
pub mod stdio;
#[cfg(unix)]
pub mod unix;

#[cfg(windows)]
pub use pipe::{Bound, bind, listen};
#[cfg(unix)]
pub use unix::{Bound, bind, listen};

use std::time::Duration;

use switchyard_core::backoff::{Backoff, Jitter};
use tokio::time::Instant;

/// What an accept loop does when `accept` fails: says so at most once per 5 s (with a count of
/// the failures in between), and waits longer after each failure in a row, 10 ms doubling to
/// 1 s, so that a loop out of descriptors waits for connections to close instead of spinning.
pub(crate) struct AcceptFailures {
    in_a_row: u32,
    unreported: u64,
    last_warn: Option<Instant>,
}

impl AcceptFailures {
    const WAIT: Backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1), Jitter::None);
    const WARN_EVERY: Duration = Duration::from_secs(5);

    pub(crate) fn new() -> AcceptFailures {
        AcceptFailures { in_a_row: 0, unreported: 0, last_warn: None }
    }

    /// A connection was accepted: the next failure waits the shortest time again.
    pub(crate) fn accepted(&mut self) {
        self.in_a_row = 0;
    }

    /// Accepting on `on` failed with `e`: logs it unless one was logged in the last 5 s.
    pub(crate) fn failed(&mut self, e: &std::io::Error, on: &dyn std::fmt::Display) {
        self.unreported += 1;
        if self.last_warn.is_none_or(|t| t.elapsed() >= Self::WARN_EVERY) {
            let others = if self.unreported > 1 {
                format!(" ({} failures since the last report)", self.unreported)
            } else {
                String::new()
            };
            tracing::warn!("accept on {on} failed: {e}{others}");
            self.last_warn = Some(Instant::now());
            self.unreported = 0;
        }
    }

    /// How long to wait before the next accept; each call in a row waits twice as long.
    pub(crate) fn wait(&mut self) -> Duration {
        self.in_a_row += 1;
        Self::WAIT.delay(self.in_a_row - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_failures_wait_longer_in_a_row_and_start_over_after_an_accept() {
        let mut f = AcceptFailures::new();
        let waits: Vec<u128> = (0..9).map(|_| f.wait().as_millis()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        f.accepted();
        assert_eq!(f.wait(), Duration::from_millis(10));
    }
}
