//! The host side's ceiling of a staged copy: a memcpy between pageable and pinned memory
//! on several threads, as fast as the host can do it.
//!
//! A staged upload memcpys each chunk from the pageable source into a pinned block (a
//! download the other way) while the DMA engine moves the blocks; it cannot beat the
//! slower of the two. This measures the host half alone: the whole buffer split into
//! one stripe per thread (whole pages, so two threads never write one page), each
//! thread copying its stripe, timed from the first thread's start to the last thread's
//! end. Starting the threads is not timed (they wait at a gate, opened once all exist),
//! so this is an upper bound on what any multi-threaded memcpy of that many threads
//! moves, the library's pooled workers included.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock};
use std::time::Instant;

use crate::error::{Error, Result};

/// Stripes are multiples of this many `f32`s: one 4 KiB page.
const PAGE_ELEMS: usize = 4096 / 4;

/// The thread counts the ceiling is measured with: the machine's parallelism and 8 (the
/// library's default number of staging threads), largest first, each once.
pub fn thread_counts(parallelism: usize) -> Vec<usize> {
    let mut counts = vec![parallelism.max(1), 8];
    counts.sort_unstable_by(|a, b| b.cmp(a));
    counts.dedup();
    counts
}

/// Elements per stripe when `len` elements are split over `threads` threads: whole pages,
/// at least one.
fn stripe_len(len: usize, threads: usize) -> usize {
    len.div_ceil(threads.max(1))
        .next_multiple_of(PAGE_ELEMS)
        .max(PAGE_ELEMS)
}

/// Copies `src` into `dst` on up to `threads` threads; returns the seconds from the
/// first thread's start to the last thread's end.
pub fn parallel_copy(dst: &mut [f32], src: &[f32], threads: usize) -> Result<f64> {
    if dst.len() != src.len() {
        return Err(Error::msg(format!(
            "host memcpy: destination of {} elements for a source of {}",
            dst.len(),
            src.len()
        )));
    }
    if src.is_empty() {
        return Ok(0.0);
    }
    let stripe = stripe_len(src.len(), threads);
    // Held for writing until every thread exists; the threads start copying when they
    // get it for reading, all at once.
    let gate = RwLock::new(());
    let abandon = AtomicBool::new(false);
    let spans = std::thread::scope(|scope| {
        let closed = gate.write().unwrap_or_else(PoisonError::into_inner);
        let mut workers = Vec::new();
        let mut spawned = Ok(());
        for (i, (d, s)) in dst.chunks_mut(stripe).zip(src.chunks(stripe)).enumerate() {
            let (gate, abandon) = (&gate, &abandon);
            let worker = std::thread::Builder::new()
                .name(format!("bench-memcpy-{i}"))
                .spawn_scoped(scope, move || {
                    drop(gate.read().unwrap_or_else(PoisonError::into_inner));
                    if abandon.load(Ordering::Acquire) {
                        return None;
                    }
                    let start = Instant::now();
                    d.copy_from_slice(s);
                    Some((start, Instant::now()))
                });
            match worker {
                Ok(w) => workers.push(w),
                Err(e) => {
                    spawned = Err(Error::msg(format!("host memcpy: starting a thread: {e}")));
                    abandon.store(true, Ordering::Release);
                    break;
                }
            }
        }
        drop(closed);
        let joined = workers
            .into_iter()
            .map(|w| {
                w.join()
                    .map_err(|_| Error::msg("host memcpy: a thread panicked"))
            })
            .collect::<Result<Vec<_>>>();
        spawned.and(joined)
    })?;
    let spans: Vec<(Instant, Instant)> = spans.into_iter().flatten().collect();
    match (
        spans.iter().map(|s| s.0).min(),
        spans.iter().map(|s| s.1).max(),
    ) {
        (Some(first_start), Some(last_end)) => {
            Ok(last_end.duration_since(first_start).as_secs_f64())
        }
        _ => Err(Error::msg("host memcpy: no thread copied")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_are_the_machine_and_eight_largest_first() {
        assert_eq!(thread_counts(16), vec![16, 8]);
        assert_eq!(thread_counts(8), vec![8]);
        assert_eq!(thread_counts(2), vec![8, 2]);
        assert_eq!(thread_counts(0), vec![8, 1]);
    }

    #[test]
    fn stripes_are_whole_pages_and_cover_everything() {
        assert_eq!(stripe_len(16 * PAGE_ELEMS, 16), PAGE_ELEMS);
        assert_eq!(stripe_len(16 * PAGE_ELEMS + 1, 16), 2 * PAGE_ELEMS);
        assert_eq!(stripe_len(10, 4), PAGE_ELEMS);
        assert_eq!(stripe_len(10, 0), PAGE_ELEMS);
    }

    #[test]
    fn parallel_copy_copies_every_element_on_any_thread_count() {
        let src: Vec<f32> = (0..3 * PAGE_ELEMS + 17).map(|i| i as f32 + 0.5).collect();
        for threads in [1, 2, 3, 4, 16] {
            let mut dst = vec![f32::NAN; src.len()];
            let seconds = parallel_copy(&mut dst, &src, threads).unwrap();
            assert!(seconds >= 0.0 && seconds.is_finite());
            assert_eq!(dst, src, "{threads} threads");
        }
    }

    #[test]
    fn parallel_copy_refuses_lengths_that_differ() {
        let mut dst = vec![0.0f32; 4];
        assert!(parallel_copy(&mut dst, &[1.0; 5], 2).is_err());
        assert_eq!(parallel_copy(&mut [], &[], 2).unwrap(), 0.0);
    }
}
