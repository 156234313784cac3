//! Host memcpy on several threads: the host half of a [staged](crate::staging) copy.
//!
//! One thread copies about 9-15 GB/s on current servers, well below what a PCIe 5 or
//! NVLink-C2C DMA engine moves, so a staged copy copies each chunk on a small
//! process-wide set of worker threads plus the calling thread.
//!
//! The chunk is cut into pieces that the threads take in turn from a shared counter,
//! rather than one stripe per thread: a copy split into stripes lasts as long as its
//! slowest thread, and on shared or virtual machines a thread often starts late or runs
//! slow (measured on an H100 host: the last of 16 threads started 0.5 ms after the
//! first, and a one-shot 64 MiB copy moved 67 GB/s in stripes against 110 GB/s in
//! pieces, `bench`'s `BENCH_STAGING_STRAGGLERS`). With pieces, a late thread takes fewer
//! of them, or none. About eight per thread, 64 KiB at least: staged copies moved 8% to
//! 19% more than with 256 KiB pieces, four per thread, on an H100 host.
//!
//! The workers are plain threads started on first use (named `stream-core-copy-<i>`),
//! parked on a channel between jobs; they never call the CUDA driver. A copy's job goes
//! to idle workers first, then to new ones (up to one per core but one), then to the
//! least busy: copies issued at once from several threads (a rank per GPU in one
//! process) then do not queue behind each other on the same few workers. With two ranks
//! in one process on a 2x H100 host (`BENCH_STAGING_RANKS=1 bench --case pageable`), a
//! round trip of 1 or 4 MiB each way on both at once took 7-8% less on average over
//! three alternated runs than when every copy went to the first workers (1 MiB: 181-222
//! us against 197-237; 4 MiB: 501-532 against 502-582), where one rank alone took
//! 163-214 and 489-579. [`copy_bytes`]
//! returns only once every piece has been copied, also if it unwinds (a guard waits),
//! and a worker that comes late finds no piece left, so the raw pointers it hands to
//! workers are never used after the borrows they come from.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::stripe::copy_stripe;

/// A copy has at most one thread per this many bytes: below it, waking a worker costs
/// more than the copy it would do (a wake-up is a few microseconds; 256 KiB is ~25 us on
/// one thread).
pub(crate) const MIN_BYTES_PER_THREAD: usize = 256 << 10;

/// Piece boundaries are multiples of this, so two threads never write one cache line
/// (or one page) of the destination.
const PIECE_ALIGN: usize = 4096;

/// Pieces per thread a copy aims at: enough that the threads that start first can take
/// over a late one's share and that the last piece of a chunk is short, few enough that
/// taking a piece stays cheap.
const PIECES_PER_THREAD: usize = 8;

/// No piece is smaller than this (about 6 us on one thread), but the last of a copy.
const MIN_PIECE: usize = 64 << 10;

/// The most threads one copy uses (the caller and 63 workers).
pub(crate) const MAX_THREADS: usize = 64;

/// How long an idle worker polls for the next job before it sleeps: long enough to
/// bridge the gap between two chunks of one staged copy (a DMA wait and a driver call),
/// short enough not to burn a core when no copy is running.
const SPIN: Duration = Duration::from_micros(50);

/// Copies `src` into `dst` (the first `min` of their lengths) using up to `threads`
/// threads (the caller included), in pieces that the threads take in turn. Returns once
/// every byte has been copied, also if it unwinds (a guard waits for the pieces), so
/// the memory it lends to workers is never used after the borrows it comes from. With
/// `streaming`, the pieces are written with streaming stores (see [`copy_stripe`]).
pub(crate) fn copy_bytes(dst: &mut [u8], src: &[u8], threads: usize, streaming: bool) {
    let len = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..len], &src[..len]);
    let participants = thread_count(len, threads);
    if participants <= 1 {
        copy_stripe(dst, src, streaming);
        return;
    }
    let shared = Arc::new(SharedCopy {
        dst: dst.as_mut_ptr(),
        src: src.as_ptr(),
        len,
        piece: piece_len(len, participants),
        streaming,
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        finished: Mutex::new(()),
        all_done: Condvar::new(),
    });
    // From here on the guard makes this function wait for every piece before it
    // returns or unwinds.
    let guard = WaitOnDrop(&shared);
    dispatch(participants - 1, &shared);
    shared.copy_pieces();
    drop(guard);
}

/// How many threads (the caller included) a copy of `len` bytes on up to `threads`
/// threads uses.
pub(crate) fn thread_count(len: usize, threads: usize) -> usize {
    threads
        .clamp(1, MAX_THREADS)
        .min(len / MIN_BYTES_PER_THREAD)
        .max(1)
}

/// The length of every piece but the last of a copy of `len` bytes on `participants`
/// threads: about [`PIECES_PER_THREAD`] each, at least [`MIN_PIECE`] (or all of `len`),
/// a multiple of [`PIECE_ALIGN`].
pub(crate) fn piece_len(len: usize, participants: usize) -> usize {
    len.div_ceil(participants.max(1) * PIECES_PER_THREAD)
        .max(MIN_PIECE.min(len))
        .next_multiple_of(PIECE_ALIGN)
        .max(PIECE_ALIGN)
}

/// One copy that several threads work on: the two ranges, cut into pieces of `piece`
/// bytes (the last one shorter), the next piece to take and how many are done.
struct SharedCopy {
    dst: *mut u8,
    src: *const u8,
    len: usize,
    piece: usize,
    /// Whether to write with streaming stores.
    streaming: bool,
    /// The index of the next piece to take: each index is taken once (`fetch_add`).
    next: AtomicUsize,
    /// Pieces copied (or abandoned by an unwinding thread); `copy_bytes` returns when all
    /// are.
    done: AtomicUsize,
    /// Taken by the last piece's thread to wake the caller, and by the caller to sleep.
    finished: Mutex<()>,
    all_done: Condvar,
}

// SAFETY: `dst` and `src` are `len` bytes that `copy_bytes` borrows (mutably and
// shared) for as long as it runs, and it returns (or unwinds) only after every piece has
// been counted done, after its copy. A piece is read and written only by the one thread
// that took its index, and once every piece is done every index has been taken, so a
// thread that takes one later gets none and touches no memory. So the pointers are
// valid whenever a thread uses them, on whichever thread that is, and no two threads
// write the same bytes.
unsafe impl Send for SharedCopy {}
// SAFETY: as `Send`: every access through `&SharedCopy` is to a piece the accessing
// thread took alone, or to the atomic counters, the mutex and the condition variable.
unsafe impl Sync for SharedCopy {}

impl SharedCopy {
    fn pieces(&self) -> usize {
        self.len.div_ceil(self.piece)
    }

    /// Takes pieces and copies them until none is left.
    fn copy_pieces(&self) {
        let pieces = self.pieces();
        loop {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            if index >= pieces {
                return;
            }
            // Counted done after the copy, or while unwinding out of it.
            let _done = CountDone(self);
            let start = index * self.piece;
            let len = self.piece.min(self.len - start);
            // SAFETY: see `unsafe impl Send for SharedCopy`: piece `index` (`start..start
            // + len`, inside `len`) was taken by this thread alone, and `copy_bytes` has
            // not returned, since this piece is not done yet; `dst` and `src` are
            // different borrows, so they do not overlap.
            let dst = unsafe { std::slice::from_raw_parts_mut(self.dst.wrapping_add(start), len) };
            // SAFETY: as above; nothing writes `src` while `copy_bytes` borrows it.
            let src = unsafe { std::slice::from_raw_parts(self.src.wrapping_add(start), len) };
            copy_stripe(dst, src, self.streaming);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.finished.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pieces done so far; `Acquire`: the bytes they wrote are visible after it.
    fn done(&self) -> usize {
        self.done.load(Ordering::Acquire)
    }

    /// Waits until every piece is done.
    fn wait(&self) {
        let pieces = self.pieces();
        if self.done() >= pieces {
            return;
        }
        let mut finished = self.lock();
        // Checked under the lock that the last piece's thread takes before it notifies,
        // so the notification cannot fall between the check and the wait.
        while self.done() < pieces {
            finished = self
                .all_done
                .wait(finished)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Counts one piece done when dropped (after its copy, or while unwinding out of it).
struct CountDone<'a>(&'a SharedCopy);

impl Drop for CountDone<'_> {
    fn drop(&mut self) {
        // `Release`: this piece's bytes are visible to whoever sees the count.
        if self.0.done.fetch_add(1, Ordering::AcqRel) + 1 >= self.0.pieces() {
            let _finished = self.0.lock();
            self.0.all_done.notify_all();
        }
    }
}

/// Waits for every piece of the copy when dropped, on return and on unwind alike.
struct WaitOnDrop<'a>(&'a SharedCopy);

impl Drop for WaitOnDrop<'_> {
    fn drop(&mut self) {
        // The pieces no thread took yet are this thread's: a worker that never runs
        // leaves its share here rather than making the wait below endless.
        self.0.copy_pieces();
        self.0.wait();
    }
}

/// A worker's part in a copy: taking pieces until none is left.
struct Job(Arc<SharedCopy>);

/// One process-wide worker: its job channel, and how many jobs it was sent and has not
/// finished (0: idle).
struct Worker {
    jobs: Sender<Job>,
    unfinished: Arc<AtomicUsize>,
}

/// The process-wide workers.
static WORKERS: Mutex<Vec<Worker>> = Mutex::new(Vec::new());

/// Asks `helpers` workers to take pieces of `copy`: idle ones first, then new ones (up to
/// [`worker_limit`]), then the least busy, so that copies issued at once by several
/// threads (a rank per GPU in one process) are not queued behind each other on the same
/// workers. A worker that cannot be started or reached leaves its share to the others
/// and the caller.
fn dispatch(helpers: usize, copy: &Arc<SharedCopy>) {
    let mut workers = WORKERS.lock().unwrap_or_else(PoisonError::into_inner);
    let helpers = helpers.min(MAX_THREADS - 1);
    let loads: Vec<usize> = workers
        .iter()
        .map(|w| w.unfinished.load(Ordering::Acquire))
        .collect();
    let room = worker_limit().max(helpers).saturating_sub(workers.len());
    for pick in pick_workers(&loads, helpers, room) {
        let index = match pick {
            Pick::Existing(index) => index,
            Pick::New => match spawn_worker(workers.len()) {
                Some(worker) => {
                    workers.push(worker);
                    workers.len() - 1
                }
                // The OS refused a thread: its share is the caller's.
                None => continue,
            },
        };
        let worker = &workers[index];
        worker.unfinished.fetch_add(1, Ordering::AcqRel);
        // A worker gone (its thread ended) takes nothing; the others share its pieces.
        if worker.jobs.send(Job(Arc::clone(copy))).is_err() {
            worker.unfinished.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A worker [`pick_workers`] chose: one already started, by index, or a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pick {
    Existing(usize),
    New,
}

/// Which workers a copy that wants `helpers` of them gets, given the unfinished jobs of
/// each started worker (`loads`) and how many more may be started (`room`): the idle
/// ones first, then new ones, then the least busy.
fn pick_workers(loads: &[usize], helpers: usize, room: usize) -> Vec<Pick> {
    let idle = (0..loads.len()).filter(|&i| loads[i] == 0);
    let mut busy: Vec<usize> = (0..loads.len()).filter(|&i| loads[i] > 0).collect();
    busy.sort_by_key(|&i| loads[i]);
    idle.map(Pick::Existing)
        .chain(std::iter::repeat_n(Pick::New, room))
        .chain(busy.into_iter().map(Pick::Existing))
        .take(helpers)
        .collect()
}

/// How many workers the process starts at most: one per core but one (the callers
/// copy too), at least one, at most [`MAX_THREADS`] - 1. A single copy may still ask for
/// more (its configured thread count) and gets them.
fn worker_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .saturating_sub(1)
            .clamp(1, MAX_THREADS - 1)
    })
}

/// Starts worker `index`, or `None` if the OS refuses a thread.
fn spawn_worker(index: usize) -> Option<Worker> {
    let (sender, receiver) = channel::<Job>();
    let unfinished = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&unfinished);
    let spawned = std::thread::Builder::new()
        .name(format!("stream-core-copy-{index}"))
        .spawn(move || loop {
            // Poll briefly (the next chunk of a staged copy usually follows at once),
            // then sleep until a job arrives; exit when the sender is gone.
            let deadline = Instant::now() + SPIN;
            let job = loop {
                match receiver.try_recv() {
                    Ok(job) => break Some(job),
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
                    Err(std::sync::mpsc::TryRecvError::Empty) if Instant::now() < deadline => {
                        std::hint::spin_loop();
                    }
                    Err(std::sync::mpsc::TryRecvError::Empty) => break None,
                }
            };
            match job.map_or_else(|| receiver.recv().ok(), Some) {
                Some(Job(copy)) => {
                    copy.copy_pieces();
                    // Idle again once every job it was sent is done.
                    count.fetch_sub(1, Ordering::AcqRel);
                }
                None => return,
            }
        });
    spawned.ok().map(|_| Worker {
        jobs: sender,
        unfinished,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills `len` bytes with a pattern that differs at every offset of a stripe.
    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn check(len: usize, threads: usize) {
        let src = pattern(len + 2, len as u64 ^ 0x9E37_79B9);
        let mut dst = vec![0xA5u8; len + 2];
        // Copy into the middle so that writes past either end would show.
        copy_bytes(
            &mut dst[1..=len],
            &src[1..=len],
            threads,
            len.is_multiple_of(2),
        );
        assert_eq!(dst[0], 0xA5, "byte before the range written (len {len})");
        assert_eq!(
            dst[len + 1],
            0xA5,
            "byte after the range written (len {len})"
        );
        assert!(
            dst[1..=len] == src[1..=len],
            "copy of {len} bytes on {threads} threads differs"
        );
    }

    #[test]
    fn copies_are_byte_exact_around_stripe_boundaries() {
        for threads in [1, 2, 3, 4, 7] {
            for base in [0, 1, 2, 3, 4, 8] {
                for delta in [-4097isize, -1, 0, 1, 4097] {
                    let len = (base * MIN_BYTES_PER_THREAD) as isize + delta;
                    if len >= 0 {
                        check(len as usize, threads);
                    }
                }
            }
        }
        check(10 * MIN_BYTES_PER_THREAD + 12345, 4);
    }

    #[test]
    fn pieces_cover_the_range_and_are_aligned() {
        for len in [
            0,
            1,
            MIN_BYTES_PER_THREAD,
            2 * MIN_BYTES_PER_THREAD + 1,
            64 << 20,
            (64 << 20) + 3,
        ] {
            for threads in [0, 1, 2, 4, 5, 64, 1000] {
                let n = thread_count(len, threads);
                assert!((1..=MAX_THREADS).contains(&n));
                assert!(n <= threads.max(1));
                let piece = piece_len(len, n);
                assert_eq!(piece % PIECE_ALIGN, 0);
                assert!(piece >= MIN_PIECE.min(len), "{piece}-byte pieces of {len}");
                let pieces = len.div_ceil(piece);
                assert!(len == 0 || pieces >= 1);
                if n > 1 {
                    assert!(pieces >= n, "{pieces} pieces for {n} threads of {len}");
                }
            }
        }
    }

    /// A copy of `src` into `dst` in 8 pieces, shared but not yet dispatched.
    fn shared_copy(dst: &mut [u8], src: &[u8]) -> Arc<SharedCopy> {
        Arc::new(SharedCopy {
            dst: dst.as_mut_ptr(),
            src: src.as_ptr(),
            len: dst.len(),
            piece: dst.len() / 8,
            streaming: false,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            finished: Mutex::new(()),
            all_done: Condvar::new(),
        })
    }

    #[test]
    fn the_caller_copies_every_piece_no_worker_took_and_a_late_worker_takes_none() {
        let len = 8 * MIN_BYTES_PER_THREAD;
        let src = pattern(len, 7);
        let mut dst = vec![0u8; len];
        let shared = shared_copy(&mut dst, &src);
        // No worker was asked: waiting takes the pieces itself instead of waiting forever.
        drop(WaitOnDrop(&shared));
        assert!(dst == src, "the caller alone did not copy every piece");
        // A worker whose job arrives after the copy ended finds no piece left.
        dst.fill(0xEE);
        let late = Arc::clone(&shared);
        std::thread::spawn(move || late.copy_pieces())
            .join()
            .expect("the late worker panicked");
        assert!(dst.iter().all(|&b| b == 0xEE), "a late worker wrote");
        assert_eq!(shared.done(), 8);
    }

    #[test]
    fn a_copy_takes_idle_workers_then_new_ones_then_the_least_busy() {
        use Pick::{Existing, New};
        let loads = [0, 2, 0, 1];
        assert_eq!(pick_workers(&loads, 2, 5), vec![Existing(0), Existing(2)]);
        assert_eq!(
            pick_workers(&loads, 3, 0),
            vec![Existing(0), Existing(2), Existing(3)]
        );
        assert_eq!(
            pick_workers(&loads, 3, 1),
            vec![Existing(0), Existing(2), New]
        );
        assert_eq!(
            pick_workers(&loads, 9, 1),
            vec![Existing(0), Existing(2), New, Existing(3), Existing(1)]
        );
        assert_eq!(pick_workers(&[], 2, 8), vec![New, New]);
        assert_eq!(pick_workers(&[3], 2, 0), vec![Existing(0)]);
        assert!(pick_workers(&loads, 0, 4).is_empty());
    }

    #[test]
    fn workers_are_idle_again_after_copies_issued_at_once() {
        std::thread::scope(|t| {
            for i in 0..4 {
                t.spawn(move || check((5 + i) * MIN_BYTES_PER_THREAD, 4));
            }
        });
        // A worker counts its job finished just after its last piece, which the copy may
        // already have seen done: give the counts a moment.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let busy = WORKERS
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .filter(|w| w.unfinished.load(Ordering::Acquire) > 0)
                .count();
            if busy == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{busy} worker(s) still busy after every copy ended"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn concurrent_copies_from_several_threads_are_exact() {
        std::thread::scope(|t| {
            for i in 0..4 {
                t.spawn(move || {
                    for k in 0..8 {
                        check((3 + i) * MIN_BYTES_PER_THREAD + k * 4099, 4);
                    }
                });
            }
        });
    }
}
