//! The journal of a handed-off session: what `connect` needs to carry the session on when the
//! router lets go of it, alive or dead.
//!
//! Two memfds that `connect` makes and the router maps:
//! - the head ([`HEAD_LEN`] bytes): the input's position, the requests taken up and not yet
//!   answered (one slot each), whether a line is half written, and the session's set-up
//!   ([`Memory`], as JSON);
//! - the input buffer: the router reads the client's pipe straight into it, so the bytes it read
//!   and has not taken up are there without a copy.
//!
//! Every update is made so that a process killed between any two stores leaves a journal that
//! says something true: the input's position is written to the spare of two copies and then
//! made current with one store; a slot is filled before it is marked used; the set-up is written
//! to the spare of two halves and then made current. A request's slot carries the number of its
//! line, so a slot filled for a line whose taking-up was not yet recorded is told apart (that
//! line is sent on again, and its slot ignored).

use std::os::fd::{AsFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::Memory;

/// Says the head is a journal of this layout.
const MAGIC: u64 = u64::from_le_bytes(*b"SWYJRNL1");
/// Which input position copy is current (0 or 1).
const STATE_CURRENT: usize = 8;
/// Two copies of the input position, 32 bytes each: start, filled, lines taken up, skipping.
const STATE: usize = 16;
const STATE_LEN: usize = 32;
/// Which half holds the current set-up: 0 none, 1 or 2.
const MEMORY_CURRENT: usize = 100;
/// The length of each half's set-up.
const MEMORY_LEN: usize = 104;
/// The slots of requests in flight.
const SLOTS: usize = 4096;
const SLOT_LEN: usize = 256;
/// A slot: state (u32: 0 free, 1 used, 2 used by a request of a batch), id length (u32), line
/// number (u64), the id.
const SLOT_ID: usize = 16;
/// The longest request id a slot holds.
pub const ID_MAX: usize = SLOT_LEN - SLOT_ID;
/// How many requests may be in flight on one handed-off session.
pub const SLOT_COUNT: usize = 4096;
/// The two halves of the set-up.
const MEMORY: usize = SLOTS + SLOT_COUNT * SLOT_LEN;
const MEMORY_HALF: usize = 512 * 1024;
/// The size of the head memfd.
pub const HEAD_LEN: usize = MEMORY + 2 * MEMORY_HALF;

/// The most `connect` puts in a new journal's input buffer before a hand-off (the router takes
/// what fits its own buffer, which holds a line at its `max_message_bytes`).
pub const PREFILL_MAX: usize = 256 * 1024 * 1024;

/// Makes the two memfds of a new journal (in `connect`): the head, marked, and an input buffer
/// the router sizes, holding `prefill` (at most [`PREFILL_MAX`] bytes), which the router reads
/// before the client's pipe; with `skipping`, what it reads first, up to a newline, is the rest of
/// a line the last router was skipping as too long (dropped without a word: it was answered).
pub fn create(prefill: &[u8], skipping: bool) -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use rustix::fs::{MemfdFlags, ftruncate, memfd_create};
    if prefill.len() > PREFILL_MAX {
        return Err(std::io::Error::other(format!("{} bytes to send on first, over {PREFILL_MAX}", prefill.len())));
    }
    let head = memfd_create("switchyard-journal", MemfdFlags::CLOEXEC)?;
    ftruncate(&head, HEAD_LEN as u64)?;
    rustix::io::pwrite(&head, &MAGIC.to_le_bytes(), 0)?;
    let input = memfd_create("switchyard-input", MemfdFlags::CLOEXEC)?;
    if !prefill.is_empty() {
        ftruncate(&input, prefill.len() as u64)?;
        write_all_at(input.as_fd(), prefill, 0)?;
        // Position copy 0 (current while STATE_CURRENT is 0): start 0, filled, no lines yet.
        write_all_at(head.as_fd(), &(prefill.len() as u64).to_ne_bytes(), (STATE + 8) as u64)?;
    }
    if skipping {
        write_all_at(head.as_fd(), &1u64.to_ne_bytes(), (STATE + 24) as u64)?;
    }
    Ok((head, input))
}

fn write_all_at(fd: BorrowedFd<'_>, mut bytes: &[u8], mut offset: u64) -> std::io::Result<()> {
    while !bytes.is_empty() {
        match rustix::io::pwrite(fd, bytes, offset) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                bytes = &bytes[n..];
                offset += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A shared mapping of a whole memfd.
pub(crate) struct Map {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access goes through `&self` methods that
// use atomics for what two threads may touch, and `&mut self` for the rest.
#[allow(unsafe_code)]
unsafe impl Send for Map {}
#[allow(unsafe_code)]
unsafe impl Sync for Map {}

impl Map {
    /// Maps `len` bytes of `fd`, which must be at least that long.
    #[allow(unsafe_code)]
    pub(crate) fn new(fd: BorrowedFd<'_>, len: usize) -> std::io::Result<Map> {
        use rustix::mm::{MapFlags, ProtFlags, mmap};
        let size = rustix::fs::fstat(fd)?.st_size as usize;
        if size < len {
            return Err(std::io::Error::other(format!("the journal is {size} bytes, short of {len}")));
        }
        // SAFETY: a fresh mapping at an address the kernel picks; it is unmapped on drop only.
        let ptr =
            unsafe { mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, fd, 0) }?;
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| std::io::Error::other("mmap gave a null address"))?;
        Ok(Map { ptr, len })
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= self.len);
        // SAFETY: in bounds and aligned (the mapping is page-aligned), and only ever accessed
        // atomically at this offset.
        #[allow(unsafe_code)]
        unsafe {
            &*self.ptr.as_ptr().add(off).cast::<AtomicU64>()
        }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= self.len);
        // SAFETY: as in `u64_at`.
        #[allow(unsafe_code)]
        unsafe {
            &*self.ptr.as_ptr().add(off).cast::<AtomicU32>()
        }
    }

    /// Copies `bytes` in at `off`. Only one thread writes a given range at a time (the caller's
    /// discipline: slots under the slot lock, the set-up and the input by the reader alone).
    fn put(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.len);
        // SAFETY: in bounds; the range is written by one thread at a time and read only after
        // the router let go.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(off), bytes.len())
        }
    }

    /// The mapping as bytes, for the one owner that reads and writes it (the input buffer).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `&mut self`: the owner alone touches these bytes while the router holds them.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len)
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Frees the memory behind `range` (page-aligned): it reads as zeros from then on.
    pub(crate) fn release(&mut self, range: std::ops::Range<usize>) -> std::io::Result<()> {
        assert!(range.start.is_multiple_of(4096) && range.start <= range.end && range.end <= self.len);
        // SAFETY: a range of this mapping, which `&mut self` keeps anyone else from reading;
        // MADV_REMOVE frees the shared memory behind it.
        #[allow(unsafe_code)]
        unsafe {
            rustix::mm::madvise(
                self.ptr.as_ptr().add(range.start).cast(),
                range.end - range.start,
                rustix::mm::Advice::LinuxRemove,
            )?;
        }
        Ok(())
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        #[allow(unsafe_code)]
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Where the input stands, as recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Position {
    /// The first byte not taken up.
    pub(crate) start: u64,
    /// The end of what was read.
    pub(crate) filled: u64,
    /// How many lines were taken up.
    pub(crate) lines: u64,
    /// An over-long line is being skipped: what follows up to its end is not to be sent on.
    pub(crate) skipping: bool,
}

/// The router's side of the head: the input position and set-up (written by the reader) and the
/// slots (taken by the reader, freed by the writer).
pub(crate) struct Head {
    map: Map,
    slots: std::sync::Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    /// Id -> its slot, and how many requests in flight carry it (a client may reuse an id that
    /// is in flight; the router refuses the second, and the first stays owed).
    by_id: std::collections::HashMap<String, (usize, u32)>,
    /// Slots never used yet start at `fresh`; freed ones are kept here.
    free: Vec<usize>,
    fresh: usize,
}

/// Why a request could not be booked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// Its id is longer than [`ID_MAX`] bytes.
    IdTooLong,
    /// [`SLOT_COUNT`] requests are in flight.
    NoSlot,
}

impl Head {
    /// Maps a head memfd `connect` made.
    pub(crate) fn open(fd: BorrowedFd<'_>) -> std::io::Result<Head> {
        let map = Map::new(fd, HEAD_LEN)?;
        if map.u64_at(0).load(Ordering::Acquire) != MAGIC {
            return Err(std::io::Error::other("the journal is not marked as one this router writes"));
        }
        Ok(Head { map, slots: Default::default() })
    }

    /// The input's position as recorded (by `connect`, before a hand-off that starts with bytes
    /// already in the buffer: a replay, and what the last router had not taken up).
    pub(crate) fn position(&self) -> Position {
        let at = STATE + (self.map.u32_at(STATE_CURRENT).load(Ordering::Acquire).min(1) as usize) * STATE_LEN;
        Position {
            start: self.map.u64_at(at).load(Ordering::Relaxed),
            filled: self.map.u64_at(at + 8).load(Ordering::Relaxed),
            lines: self.map.u64_at(at + 16).load(Ordering::Relaxed),
            skipping: self.map.u64_at(at + 24).load(Ordering::Relaxed) != 0,
        }
    }

    /// Records the input's position: into the spare copy, then made current.
    pub(crate) fn set_position(&self, p: Position) {
        let current = self.map.u32_at(STATE_CURRENT).load(Ordering::Relaxed) as usize;
        let spare = 1 - current.min(1);
        let at = STATE + spare * STATE_LEN;
        self.map.u64_at(at).store(p.start, Ordering::Relaxed);
        self.map.u64_at(at + 8).store(p.filled, Ordering::Relaxed);
        self.map.u64_at(at + 16).store(p.lines, Ordering::Relaxed);
        self.map.u64_at(at + 24).store(p.skipping as u64, Ordering::Relaxed);
        self.map.u32_at(STATE_CURRENT).store(spare as u32, Ordering::Release);
    }

    /// Records the session's set-up: into the spare half, then made current. False when it
    /// does not fit (the journal then keeps the last that did).
    pub(crate) fn set_memory(&self, memory: &Memory) -> bool {
        let json = serde_json::to_vec(memory).expect("the set-up serialises");
        if json.len() > MEMORY_HALF {
            return false;
        }
        let current = self.map.u32_at(MEMORY_CURRENT).load(Ordering::Relaxed);
        let spare = if current == 1 { 2 } else { 1 };
        let half = (spare - 1) as usize;
        self.map.put(MEMORY + half * MEMORY_HALF, &json);
        self.map.u64_at(MEMORY_LEN + half * 8).store(json.len() as u64, Ordering::Relaxed);
        self.map.u32_at(MEMORY_CURRENT).store(spare, Ordering::Release);
        true
    }

    /// Books request `id` of line number `line` (a batch when `batch`) as in flight. An id
    /// already in flight keeps its slot, counted twice: each answer frees one count.
    pub(crate) fn book(&self, id: &str, line: u64, batch: bool) -> Result<(), Full> {
        if id.len() > ID_MAX {
            return Err(Full::IdTooLong);
        }
        let mut slots = self.slots.lock().expect("lock");
        if let Some((_, count)) = slots.by_id.get_mut(id) {
            *count += 1;
            return Ok(());
        }
        let slot = match slots.free.pop() {
            Some(s) => s,
            None if slots.fresh < SLOT_COUNT => {
                slots.fresh += 1;
                slots.fresh - 1
            }
            None => return Err(Full::NoSlot),
        };
        let at = SLOTS + slot * SLOT_LEN;
        self.map.u32_at(at + 4).store(id.len() as u32, Ordering::Relaxed);
        self.map.u64_at(at + 8).store(line, Ordering::Relaxed);
        self.map.put(at + SLOT_ID, id.as_bytes());
        self.map.u32_at(at).store(if batch { 2 } else { 1 }, Ordering::Release);
        slots.by_id.insert(id.to_string(), (slot, 1));
        Ok(())
    }

    /// One request of each of these ids was answered (or cancelled by the client): its slot is
    /// freed when no other request in flight carries the id. How many ids are left.
    pub(crate) fn free(&self, ids: &[String]) -> usize {
        let mut slots = self.slots.lock().expect("lock");
        for id in ids {
            let Some((slot, count)) = slots.by_id.get_mut(id) else { continue };
            *count -= 1;
            if *count == 0 {
                let slot = *slot;
                slots.by_id.remove(id);
                self.map.u32_at(SLOTS + slot * SLOT_LEN).store(0, Ordering::Release);
                slots.free.push(slot);
            }
        }
        slots.by_id.len()
    }

    /// How many requests are booked.
    pub(crate) fn in_flight(&self) -> usize {
        self.slots.lock().expect("lock").by_id.len()
    }
}

/// What `connect` reads from a journal once the router let go of it.
#[derive(Debug, Default, PartialEq)]
pub struct Recovered {
    /// The client's set-up, for replay.
    pub memory: Memory,
    /// The requests the router took up and did not answer (raw ids), batches' included.
    pub open: Vec<String>,
    /// Of those, the ones sent in batches, by batch (each is answered as one array).
    pub batches: Vec<Vec<String>>,
    /// The client's bytes the router read and did not take up, to be sent on first.
    pub pending: Vec<u8>,
    /// The client's input is in the middle of an over-long line the router was skipping: its
    /// rest (up to the next newline) is dropped.
    pub skipping: bool,
    /// How many of the client's lines the router took up.
    pub lines: u64,
}

impl Recovered {
    /// The client's bytes to send on (those the router read and did not take up), and whether
    /// what the client sends next starts with the rest of a line the router was skipping as too
    /// long (to be dropped, as the router would have: it answered that line).
    pub fn unread(&self) -> (&[u8], bool) {
        if !self.skipping {
            return (&self.pending, false);
        }
        match self.pending.iter().position(|&b| b == b'\n') {
            Some(nl) => (&self.pending[nl + 1..], false),
            None => (&[], true),
        }
    }
}

/// Reads the journal in the two memfds (with plain reads: the router is done with them).
pub fn recover(head: impl AsFd, input: impl AsFd) -> std::io::Result<Recovered> {
    let mut bytes = vec![0u8; HEAD_LEN];
    read_exact_at(head.as_fd(), &mut bytes, 0)?;
    let u64_at = |off: usize| u64::from_ne_bytes(bytes[off..off + 8].try_into().expect("8 bytes"));
    let u32_at = |off: usize| u32::from_ne_bytes(bytes[off..off + 4].try_into().expect("4 bytes"));
    if u64_at(0) != MAGIC {
        return Err(std::io::Error::other("the journal is not marked as one switchyard writes"));
    }
    let at = STATE + (u32_at(STATE_CURRENT).min(1) as usize) * STATE_LEN;
    let position =
        Position { start: u64_at(at), filled: u64_at(at + 8), lines: u64_at(at + 16), skipping: u64_at(at + 24) != 0 };
    let mut open = Vec::new();
    let mut batches: std::collections::BTreeMap<u64, Vec<String>> = Default::default();
    for slot in 0..SLOT_COUNT {
        let at = SLOTS + slot * SLOT_LEN;
        let (state, len, line) = (u32_at(at), u32_at(at + 4) as usize, u64_at(at + 8));
        // A slot of a line not yet recorded as taken up: that line is sent on again instead. The
        // line being skipped as too long is the exception: its rest is dropped, never sent on.
        let taken_up = line < position.lines || (position.skipping && line == position.lines);
        if !(state == 1 || state == 2) || !taken_up || len > ID_MAX {
            continue;
        }
        let id = String::from_utf8_lossy(&bytes[at + SLOT_ID..at + SLOT_ID + len]).into_owned();
        if state == 2 {
            batches.entry(line).or_default().push(id.clone());
        }
        open.push(id);
    }
    let batches = batches.into_values().collect();
    let memory = match u32_at(MEMORY_CURRENT) {
        half @ (1 | 2) => {
            let half = (half - 1) as usize;
            let len = (u64_at(MEMORY_LEN + half * 8) as usize).min(MEMORY_HALF);
            let at = MEMORY + half * MEMORY_HALF;
            serde_json::from_slice(&bytes[at..at + len])
                .map_err(|e| std::io::Error::other(format!("the journal's session set-up does not read: {e}")))?
        }
        _ => Memory::default(),
    };
    let mut pending = Vec::new();
    if position.filled > position.start {
        pending = vec![0u8; (position.filled - position.start) as usize];
        read_exact_at(input.as_fd(), &mut pending, position.start)?;
    }
    Ok(Recovered { memory, open, batches, pending, skipping: position.skipping, lines: position.lines })
}

fn read_exact_at(fd: BorrowedFd<'_>, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::pread(fd, &mut *buf, offset) {
            Ok(0) => return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the journal is short")),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
