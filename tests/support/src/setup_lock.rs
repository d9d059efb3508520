//! The one lock over what the tests' own setup installs and shares between test processes
//! (npm's node_modules under tests/, the Python virtualenvs under target/tmp, the plugin
//! toolchains under target/tmp/plugin-langs; scripts/plugin-langs-bench.sh holds it shared too).
//!
//! Each fixture used to have a lock of its own, taken exclusively to check or install it and
//! then held shared for the life of the process. Two processes that took two of them in
//! opposite orders deadlocked: each held one shared and waited for the other exclusively. Now
//! there is one lock file, so there is no order to get wrong:
//!
//! - a process holds it shared while it uses any fixture (no one re-installs one under it);
//! - it checks a fixture under that shared lock, and only when the fixture must be made does
//!   it let go and wait for the lock exclusively, holding nothing else meanwhile, so no process
//!   can wait on it; it then makes the fixture and holds the lock shared again.
//!
//! A process that must make a fixture while another process uses any waits for that one to
//! end; it never waits for a process that waits for it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The lock file under cargo's target temp dir (never in the source tree).
const FILE: &str = "switchyard-setup.lock";

/// One process's hold on a setup lock file.
pub struct SetupLock {
    path: PathBuf,
    /// The file, held shared once opened; the mutex keeps this process's threads to one setup
    /// step at a time.
    held: Mutex<Option<File>>,
}

impl SetupLock {
    /// The lock at `path` (not taken yet).
    pub fn new(path: impl AsRef<Path>) -> SetupLock {
        SetupLock { path: path.as_ref().to_path_buf(), held: Mutex::new(None) }
    }

    /// Makes sure a fixture is there: `ready` says whether it is, `make` makes it (run with the
    /// lock held exclusively, only when `ready` says no). From its first call on, the process
    /// holds the lock shared.
    pub fn ensure(&self, ready: impl Fn() -> bool, make: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let file = match held.take() {
            Some(f) => f,
            None => {
                let f = File::options()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&self.path)
                    .map_err(|e| format!("open {}: {e}", self.path.display()))?;
                f.lock_shared().map_err(|e| format!("lock {} shared: {e}", self.path.display()))?;
                f
            }
        };
        if ready() {
            *held = Some(file);
            return Ok(());
        }
        // Let go first: a process waiting for this lock while holding it shared is the one
        // thing that could make two of them wait for each other.
        file.unlock().map_err(|e| format!("unlock {}: {e}", self.path.display()))?;
        file.lock().map_err(|e| format!("lock {}: {e}", self.path.display()))?;
        let made = if ready() { Ok(()) } else { make() };
        file.lock_shared().map_err(|e| format!("lock {} shared: {e}", self.path.display()))?;
        *held = Some(file);
        made
    }
}

/// This process's setup lock: `target/tmp/switchyard-setup.lock`.
pub fn setup_lock() -> &'static SetupLock {
    static LOCK: OnceLock<SetupLock> = OnceLock::new();
    LOCK.get_or_init(|| SetupLock::new(crate::target_tmp().join(FILE)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// Two processes (two holds on one file: flock tells open files apart as it tells
    /// processes) that each use a fixture and then both need one made, at once: with a lock per
    /// fixture, held shared while used, each waited for the other for ever. Here one makes its
    /// fixture, and the other makes its own once the first process ended.
    #[test]
    fn two_holders_that_both_need_a_fixture_made_do_not_wait_for_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let holders = [Arc::new(SetupLock::new(&path)), Arc::new(SetupLock::new(&path))];
        // Each uses a fixture that is there, and holds the lock shared for it.
        for h in &holders {
            h.ensure(|| true, || unreachable!("it is there")).unwrap();
        }
        let made: [Arc<AtomicBool>; 2] = Default::default();
        let mut running: Vec<Option<std::thread::JoinHandle<Result<(), String>>>> = (0..2)
            .map(|i| {
                let (h, flag) = (holders[i].clone(), made[i].clone());
                let ready = flag.clone();
                Some(std::thread::spawn(move || {
                    h.ensure(
                        move || ready.load(Ordering::SeqCst),
                        move || {
                            flag.store(true, Ordering::SeqCst);
                            Ok(())
                        },
                    )
                }))
            })
            .collect();
        let mut holders: Vec<Option<Arc<SetupLock>>> = holders.into_iter().map(Some).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while running.iter().any(Option::is_some) {
            assert!(Instant::now() < deadline, "both holders still wait: they wait for each other");
            for i in 0..2 {
                if running[i].as_ref().is_some_and(|t| t.is_finished()) {
                    running[i].take().unwrap().join().unwrap().unwrap();
                    assert!(made[i].load(Ordering::SeqCst), "holder {i} is done without its fixture");
                    // Its process ends: its hold goes, and the other may go on.
                    holders[i] = None;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A fixture that is there is only checked: no wait for an exclusive lock while another
    /// process holds the lock shared (with a lock per fixture, a second run waited for the
    /// first to end even when everything was installed).
    #[test]
    fn a_fixture_that_is_there_is_used_while_another_holder_uses_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let (a, b) = (SetupLock::new(&path), SetupLock::new(&path));
        a.ensure(|| true, || unreachable!("ready")).unwrap();
        let start = Instant::now();
        b.ensure(|| true, || unreachable!("ready")).unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
