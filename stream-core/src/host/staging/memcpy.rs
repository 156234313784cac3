//! Host memcpy on several threads: the host half of a [staged](crate::staging) copy.
//!
//! One thread copies about 9-15 GB/s on current servers, well below what a PCIe 5 or
//! NVLink-C2C DMA engine moves, so a staged copy splits each chunk into stripes and
//! copies them on a small process-wide set of worker threads plus the calling thread.
//!
//! The workers are plain threads started on first use (named `stream-core-copy-<i>`),
//! parked on a channel between jobs; they never call the CUDA driver. [`copy_bytes`]
//! returns only once every stripe has been copied, also if it unwinds (a guard waits),
//! so the raw pointers it hands to workers never outlive the borrows they come from.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::stripe::copy_stripe;

/// No stripe is smaller than this: below it, waking a worker costs more than the copy
/// it would do (a wake-up is a few microseconds; 256 KiB is ~25 us on one thread).
pub(crate) const MIN_STRIPE: usize = 256 << 10;

/// Stripe boundaries are multiples of this, so two threads never write one cache line
/// (or one page) of the destination.
const STRIPE_ALIGN: usize = 4096;

/// The most threads one copy uses (the caller and 63 workers).
pub(crate) const MAX_THREADS: usize = 64;

/// How long an idle worker polls for the next job before it sleeps: long enough to
/// bridge the gap between two chunks of one staged copy (a DMA wait and a driver call),
/// short enough not to burn a core when no copy is running.
const SPIN: Duration = Duration::from_micros(50);

/// Copies `src` into `dst` (the first `min` of their lengths) using up to `threads`
/// threads (the caller included), in stripes of at least [`MIN_STRIPE`] bytes. Returns
/// once every byte has been copied, also if it unwinds (a guard waits for the workers),
/// so the stripes it lends to workers never outlive the borrows they come from. With
/// `streaming`, the stripes are written with streaming stores (see [`copy_stripe`]).
pub(crate) fn copy_bytes(dst: &mut [u8], src: &[u8], threads: usize, streaming: bool) {
    let len = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..len], &src[..len]);
    let stripes = stripe_count(len, threads);
    if stripes <= 1 {
        copy_stripe(dst, src, streaming);
        return;
    }
    let per = stripe_len(len, stripes);
    // Stripe 0 stays with the caller; the others go to workers.
    let (first_dst, rest_dst) = dst.split_at_mut(per.min(len));
    let (first_src, rest_src) = src.split_at(per.min(len));
    let jobs: Vec<Job> = rest_dst
        .chunks_mut(per)
        .zip(rest_src.chunks(per))
        .map(|(d, s)| Job {
            dst: d.as_mut_ptr(),
            src: s.as_ptr(),
            len: d.len(),
            streaming,
            latch: None,
        })
        .collect();
    let latch = Arc::new(Latch::new(jobs.len()));
    // From here on the guard makes this function wait for every dispatched stripe
    // before it returns or unwinds.
    let guard = WaitOnDrop(&latch);
    dispatch(jobs.into_iter().map(|mut job| {
        job.latch = Some(Arc::clone(&latch));
        job
    }));
    copy_stripe(first_dst, first_src, streaming);
    drop(guard);
}

/// How many stripes a copy of `len` bytes on up to `threads` threads uses.
pub(crate) fn stripe_count(len: usize, threads: usize) -> usize {
    threads.clamp(1, MAX_THREADS).min(len / MIN_STRIPE).max(1)
}

/// The length of every stripe but the last: `len / stripes` rounded up to
/// [`STRIPE_ALIGN`].
pub(crate) fn stripe_len(len: usize, stripes: usize) -> usize {
    len.div_ceil(stripes.max(1))
        .next_multiple_of(STRIPE_ALIGN)
        .max(STRIPE_ALIGN)
}

/// A stripe for a worker: copy `len` bytes from `src` to `dst`, then count down.
struct Job {
    dst: *mut u8,
    src: *const u8,
    len: usize,
    /// Whether to write with streaming stores.
    streaming: bool,
    /// `Some` until the job has run; taken by `run`.
    latch: Option<Arc<Latch>>,
}

// SAFETY: a `Job` is the exclusive right to read `src` and write `dst` for `len` bytes
// (disjoint chunks of the two slices `copy_bytes` borrows, one job per chunk), lent by
// `copy_bytes`, which does not return (nor unwind) before the job's latch has been
// counted down, and the job counts it down only after its copy (see `run` and `Drop`).
// So the pointers are valid on whichever thread runs the job.
unsafe impl Send for Job {}

impl Job {
    fn run(mut self) {
        self.copy();
    }

    /// Copies, then counts down; does nothing the second time.
    fn copy(&mut self) {
        if let Some(latch) = self.latch.take() {
            // SAFETY: see `unsafe impl Send for Job`: `dst` is `len` bytes lent to this
            // job (for writes only by it) until the count-down below, disjoint from
            // `src` and from every other stripe.
            let dst = unsafe { std::slice::from_raw_parts_mut(self.dst, self.len) };
            // SAFETY: as above; `src` is `len` bytes nothing writes until the count-down.
            let src = unsafe { std::slice::from_raw_parts(self.src, self.len) };
            copy_stripe(dst, src, self.streaming);
            latch.count_down();
        }
    }
}

impl Drop for Job {
    /// A job dropped before it ran (its worker is gone) still copies: the caller waits
    /// for the count-down, and the copy is what it waits for.
    fn drop(&mut self) {
        self.copy();
    }
}

/// Counts finished stripes; [`copy_bytes`] waits until all have finished.
struct Latch {
    remaining: Mutex<usize>,
    done: Condvar,
}

impl Latch {
    fn new(count: usize) -> Self {
        Latch {
            remaining: Mutex::new(count),
            done: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.remaining
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn count_down(&self) {
        let mut remaining = self.lock();
        *remaining = remaining.saturating_sub(1);
        if *remaining == 0 {
            self.done.notify_all();
        }
    }

    fn wait(&self) {
        let mut remaining = self.lock();
        while *remaining > 0 {
            remaining = self
                .done
                .wait(remaining)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Waits for the latch when dropped, on return and on unwind alike.
struct WaitOnDrop<'a>(&'a Latch);

impl Drop for WaitOnDrop<'_> {
    fn drop(&mut self) {
        self.0.wait();
    }
}

/// The process-wide workers: one job channel each.
static WORKERS: Mutex<Vec<Sender<Job>>> = Mutex::new(Vec::new());

/// Sends each job to a worker, starting workers up to `wanted`; a job no worker takes
/// runs on the calling thread.
fn dispatch(jobs: impl ExactSizeIterator<Item = Job>) {
    let wanted = jobs.len();
    let mut workers = WORKERS.lock().unwrap_or_else(PoisonError::into_inner);
    while workers.len() < wanted.min(MAX_THREADS - 1) {
        match spawn_worker(workers.len()) {
            Some(sender) => workers.push(sender),
            None => break,
        }
    }
    let mut inline = Vec::new();
    for (i, job) in jobs.enumerate() {
        match workers.get(i) {
            Some(sender) => {
                if let Err(returned) = sender.send(job) {
                    inline.push(returned.0);
                }
            }
            None => inline.push(job),
        }
    }
    drop(workers);
    // Jobs without a worker run here (running one counts it down).
    inline.into_iter().for_each(Job::run);
}

/// Starts worker `index`, or `None` if the OS refuses a thread.
fn spawn_worker(index: usize) -> Option<Sender<Job>> {
    let (sender, receiver) = channel::<Job>();
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
            match job {
                Some(job) => job.run(),
                None => match receiver.recv() {
                    Ok(job) => job.run(),
                    Err(_) => return,
                },
            }
        });
    spawned.ok().map(|_| sender)
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
                    let len = (base * MIN_STRIPE) as isize + delta;
                    if len >= 0 {
                        check(len as usize, threads);
                    }
                }
            }
        }
        check(10 * MIN_STRIPE + 12345, 4);
    }

    #[test]
    fn stripes_cover_the_range_and_are_aligned() {
        for len in [
            0,
            1,
            MIN_STRIPE,
            2 * MIN_STRIPE + 1,
            64 << 20,
            (64 << 20) + 3,
        ] {
            for threads in [0, 1, 2, 4, 5, 64, 1000] {
                let n = stripe_count(len, threads);
                assert!((1..=MAX_THREADS).contains(&n));
                assert!(n <= threads.max(1));
                let per = stripe_len(len, n);
                assert_eq!(per % STRIPE_ALIGN, 0);
                assert!(per * n >= len, "{n} stripes of {per} do not cover {len}");
            }
        }
    }

    #[test]
    fn concurrent_copies_from_several_threads_are_exact() {
        std::thread::scope(|t| {
            for i in 0..4 {
                t.spawn(move || {
                    for k in 0..8 {
                        check((3 + i) * MIN_STRIPE + k * 4099, 4);
                    }
                });
            }
        });
    }
}
