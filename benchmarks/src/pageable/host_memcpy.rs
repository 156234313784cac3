//! The host side's ceiling of a staged copy: a memcpy between pageable and pinned memory
//! on several threads, as fast as the host can do it.
//!
//! A staged upload memcpys each chunk from the pageable source into a pinned block (a
//! download the other way) while the DMA engine moves the blocks; it cannot beat the
//! slower of the two. This measures the host half alone: the whole buffer cut into
//! 256 KiB pieces (whole pages, so two threads never write one page) that the threads
//! take in turn from a shared counter, timed from the first thread's start to the last
//! thread's end. Starting the threads is not timed (they wait at a gate, opened once all
//! exist), so this is an upper bound on what any multi-threaded memcpy of that many
//! threads moves, the library's pooled workers included.
//!
//! Pieces rather than one stripe per thread, because a copy in stripes lasts as long as
//! its slowest thread: on an H100 host the last of 16 threads started 0.5 ms after the
//! first, and a one-shot 64 MiB copy moved 67 GB/s in stripes against 110 in pieces
//! (`BENCH_STAGING_STRAGGLERS`, which times both splits with [`timed_copy`]). The
//! library's staged copies take pieces the same way.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::Instant;

use crate::error::{Error, Result};

/// Stripes and pieces are multiples of this many `f32`s: one 4 KiB page.
const PAGE_ELEMS: usize = 4096 / 4;

/// The `f32`s of a piece: 256 KiB.
pub const PIECE_ELEMS: usize = (256 << 10) / 4;

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

/// How a copy is divided among its threads.
#[derive(Clone, Copy, Debug)]
pub enum Split {
    /// One stripe per thread.
    Stripes,
    /// [`PIECE_ELEMS`]-long pieces, each taken by the next thread free.
    Pieces,
}

/// One thread's part of a copy: when it started and ended.
pub type Span = (Instant, Instant);

/// Copies `src` into `dst` on up to `threads` threads; returns the seconds from the
/// first thread's start to the last thread's end.
pub fn parallel_copy(dst: &mut [f32], src: &[f32], threads: usize) -> Result<f64> {
    if src.is_empty() && dst.is_empty() {
        return Ok(0.0);
    }
    let (_, spans) = timed_copy(dst, src, threads, Split::Pieces)?;
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    match (first, last) {
        (Some(first), Some(last)) => Ok(last.duration_since(first).as_secs_f64()),
        _ => Err(Error::msg("host memcpy: no thread copied")),
    }
}

/// Copies `src` into `dst` on `threads` threads split as `split` (with [`Split::Stripes`],
/// as many threads as stripes), all released at once once they exist; returns when they
/// were released and every thread's span.
pub fn timed_copy(
    dst: &mut [f32],
    src: &[f32],
    threads: usize,
    split: Split,
) -> Result<(Instant, Vec<Span>)> {
    if dst.len() != src.len() {
        return Err(Error::msg(format!(
            "host memcpy: destination of {} elements for a source of {}",
            dst.len(),
            src.len()
        )));
    }
    let size = match split {
        Split::Stripes => stripe_len(src.len(), threads),
        Split::Pieces => PIECE_ELEMS,
    };
    type Part<'a> = Mutex<(&'a mut [f32], &'a [f32])>;
    let parts: Vec<Part<'_>> = dst
        .chunks_mut(size)
        .zip(src.chunks(size))
        .map(Mutex::new)
        .collect();
    let workers = match split {
        Split::Stripes => parts.len(),
        Split::Pieces => threads.max(1),
    };
    let next = AtomicUsize::new(0);
    // Held for writing until every thread exists; the threads start copying when they
    // get it for reading, all at once.
    let gate = RwLock::new(());
    let abandon = AtomicBool::new(false);
    let mut opened = Instant::now();
    let (spans, spawned) = std::thread::scope(|scope| {
        let closed = gate.write().unwrap_or_else(PoisonError::into_inner);
        let mut handles = Vec::with_capacity(workers);
        let mut spawned = Ok(());
        for w in 0..workers {
            let (gate, next, parts, abandon) = (&gate, &next, &parts, &abandon);
            let worker = std::thread::Builder::new()
                .name(format!("bench-memcpy-{w}"))
                .spawn_scoped(scope, move || {
                    drop(gate.read().unwrap_or_else(PoisonError::into_inner));
                    if abandon.load(Ordering::Acquire) {
                        return None;
                    }
                    let start = Instant::now();
                    let copy_part = |part: &Part<'_>| {
                        let mut part = part.lock().unwrap_or_else(PoisonError::into_inner);
                        let (d, s) = &mut *part;
                        d.copy_from_slice(s);
                    };
                    match split {
                        Split::Stripes => copy_part(&parts[w]),
                        Split::Pieces => {
                            while let Some(part) = parts.get(next.fetch_add(1, Ordering::Relaxed)) {
                                copy_part(part);
                            }
                        }
                    }
                    Some((start, Instant::now()))
                });
            match worker {
                Ok(handle) => handles.push(handle),
                Err(e) => {
                    spawned = Err(Error::msg(format!("host memcpy: starting a thread: {e}")));
                    abandon.store(true, Ordering::Release);
                    break;
                }
            }
        }
        opened = Instant::now();
        drop(closed);
        let joined = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| Error::msg("host memcpy: a thread panicked"))
            })
            .collect::<Result<Vec<_>>>();
        (joined, spawned)
    });
    spawned?;
    Ok((opened, spans?.into_iter().flatten().collect()))
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
        assert_eq!(PIECE_ELEMS % PAGE_ELEMS, 0);
    }

    #[test]
    fn both_splits_copy_every_element_on_any_thread_count() {
        let src: Vec<f32> = (0..3 * PIECE_ELEMS + 17).map(|i| i as f32 + 0.5).collect();
        for split in [Split::Stripes, Split::Pieces] {
            for threads in [1, 2, 3, 4, 16] {
                let mut dst = vec![f32::NAN; src.len()];
                let (_, spans) = timed_copy(&mut dst, &src, threads, split).unwrap();
                assert!(!spans.is_empty());
                assert_eq!(dst, src, "{threads} threads, {split:?}");
            }
        }
        let mut dst = vec![f32::NAN; src.len()];
        let seconds = parallel_copy(&mut dst, &src, 4).unwrap();
        assert!(seconds >= 0.0 && seconds.is_finite());
        assert_eq!(dst, src);
    }

    #[test]
    fn parallel_copy_refuses_lengths_that_differ() {
        let mut dst = vec![0.0f32; 4];
        assert!(parallel_copy(&mut dst, &[1.0; 5], 2).is_err());
        assert_eq!(parallel_copy(&mut [], &[], 2).unwrap(), 0.0);
    }
}
