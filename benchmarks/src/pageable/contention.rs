//! The contention diagnosis of the pageable case, with `BENCH_STAGING_CONTENTION` set:
//! printed only. A staged copy runs a host memcpy (pageable <-> pinned blocks) and the
//! DMA engine (pinned blocks <-> device) at the same time, and both go through the
//! host's memory. The case's ceiling row times the memcpy alone; this measures, each
//! way, the memcpy alone, pinned DMA alone, and both at once (on separate pinned
//! buffers, for as long as a batch of 64 MiB DMAs runs), with a staged 64 MiB copy in
//! the same rounds. A staged copy moves at most the slower of the two halves running together
//! (or, done one after the other, `1 / (1/memcpy + 1/DMA)` of the halves alone): that
//! is the host's ceiling for any staged design, and the number the memcpy-alone row
//! overstates when the two halves slow each other down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock};
use std::time::{Duration, Instant};

use cudarc::driver::sys;
use stream_core::DeviceVec;

use super::raw_copy::enqueue;
use crate::env::{Env, MIB};
use crate::error::{Context, Error, Result};
use crate::raw::{RawDeviceMem, RawPinned};
use crate::sampling::{median, spread_text};

/// Rounds, each measuring every copy once per direction.
const ROUNDS: usize = 7;
/// Bytes of the DMA's buffers and of the staged copy.
const BYTES: usize = 64 * MIB;
/// Bytes of the memcpy's buffers: each thread's stripe is far larger than its share of
/// the caches, so that a copy looping over it measures memory, not cache (with 64 MiB
/// buffers, 2 MiB stripes on a 32-core host, it moved 216-262 GB/s, from L2).
const MEMCPY_BYTES: usize = 1024 * MIB;
/// Copies of the DMA batch (`DMA_BATCH * BYTES` bytes, about 10 ms at 50 GB/s).
const DMA_BATCH: usize = 8;
/// The piece a memcpy thread copies between two looks at the stop flag.
const PIECE: usize = MIB / 4;

/// The GB/s of one round, per direction.
#[derive(Default)]
struct Round {
    memcpy_alone: f64,
    dma_alone: f64,
    memcpy_together: f64,
    dma_together: f64,
    staged: f64,
}

pub(super) fn run(env: &Env) -> Result<()> {
    let n = BYTES / 4;
    let parallelism = std::thread::available_parallelism().map_or(1, |p| p.get());
    let mut pageable: Vec<f32> = vec![1.0; MEMCPY_BYTES / 4];
    let mut memcpy_pinned = RawPinned::new(MEMCPY_BYTES / 4)?;
    let mut dma_pinned = RawPinned::new(n)?;
    env.raw_ctx.bind()?;
    let device = RawDeviceMem::new(BYTES)?;
    let stream = env.raw_streams[0].0;
    let mut staged_device: DeviceVec<f32> = env.dev.alloc_vec(n)?;
    let mut staged_host: Vec<f32> = vec![1.0; n];
    let mut staged_back: Vec<f32> = vec![0.0; n];
    let config = super::variables::calibrated_config();
    println!(
        "  staging contention: host memcpy on {parallelism} and on the staging's {} threads over {} MiB, pinned DMA batches of {DMA_BATCH} x 64 MiB, staged 64 MiB with {} threads and {} MiB chunks; {ROUNDS} rounds; GB/s medians (min, max)",
        config.threads,
        MEMCPY_BYTES / MIB,
        config.threads,
        config.chunk_bytes / MIB
    );
    let mut thread_counts = vec![parallelism, config.threads];
    thread_counts.dedup();
    for (threads, up) in thread_counts
        .into_iter()
        .flat_map(|t| [(t, true), (t, false)])
    {
        let mut rounds = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let mut round = Round::default();
            // The DMA: pinned -> device for an upload, device -> pinned for a download.
            let mut dma = || -> Result<f64> {
                env.raw_ctx.bind()?;
                dma_batch(stream, up, &device, dma_pinned.as_mut_slice())
            };
            let dma_seconds = dma()?;
            round.dma_alone = gbs(DMA_BATCH * BYTES, dma_seconds);
            let window = Duration::from_secs_f64(dma_seconds);
            round.memcpy_alone = memcpy_while(
                threads,
                up,
                &mut pageable,
                memcpy_pinned.as_mut_slice(),
                || {
                    std::thread::sleep(window);
                    Ok(())
                },
            )?;
            let mut together = 0.0;
            round.memcpy_together = memcpy_while(
                threads,
                up,
                &mut pageable,
                memcpy_pinned.as_mut_slice(),
                || {
                    together = dma()?;
                    Ok(())
                },
            )?;
            round.dma_together = gbs(DMA_BATCH * BYTES, together);
            let mut copy = super::StagedCopy {
                stream: &env.streams[0],
                device: &mut staged_device,
                src: &staged_host,
                dst: &mut staged_back,
            };
            round.staged = gbs(BYTES, copy.seconds(config, up, None)?);
            rounds.push(round);
        }
        print(threads, up, &rounds);
    }
    // Keep the host buffers' contents meaningful to the optimiser.
    std::hint::black_box((&mut staged_host, &mut pageable));
    Ok(())
}

/// Prints one direction's medians and the ceilings they imply.
fn print(threads: usize, up: bool, rounds: &[Round]) {
    let values = |of: &dyn Fn(&Round) -> f64| rounds.iter().map(of).collect::<Vec<f64>>();
    let cell =
        |name: &str, of: &dyn Fn(&Round) -> f64| format!("{name} {}", spread_text(&values(of), 1));
    let median = |of: &dyn Fn(&Round) -> f64| median(&values(of));
    let bound = |r: &Round| {
        let overlapped = r.memcpy_together.min(r.dma_together);
        let serial = 1.0 / (1.0 / r.memcpy_alone + 1.0 / r.dma_alone);
        overlapped.max(serial)
    };
    let (staged, alone, ceiling) = (
        median(&|r| r.staged),
        median(&|r| r.memcpy_alone),
        median(&bound),
    );
    println!(
        "  staging contention, {}, memcpy on {threads} threads: {}; {}; at once: {}, {}; staged {}; staged / memcpy alone {:.3}x, staged / both-at-once ceiling {:.3}x",
        if up { "up" } else { "down" },
        cell("memcpy alone", &|r| r.memcpy_alone),
        cell("DMA alone", &|r| r.dma_alone),
        cell("memcpy", &|r| r.memcpy_together),
        cell("DMA", &|r| r.dma_together),
        spread_text(&values(&|r| r.staged), 1),
        staged / alone,
        staged / ceiling,
    );
}

/// GB/s of `bytes` in `seconds`.
fn gbs(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds / 1e9
}

/// Host seconds of `DMA_BATCH` copies between `pinned` and `device` on `stream`
/// (pinned to device when `up`) and the synchronisation after them.
fn dma_batch(
    stream: sys::CUstream,
    up: bool,
    device: &RawDeviceMem,
    pinned: &mut [f32],
) -> Result<f64> {
    let t = Instant::now();
    let mut enqueued = Ok(());
    for _ in 0..DMA_BATCH {
        let copied = enqueue(stream, up, device, pinned);
        if copied.is_err() {
            enqueued = copied;
            break;
        }
    }
    // Waited for by queries 20 µs apart rather than `cuStreamSynchronize`, which spins
    // on a core that the memcpy threads would otherwise have.
    loop {
        // SAFETY: the stream is alive (owned by `Env`).
        match unsafe { sys::cuStreamQuery(stream) } {
            sys::CUresult::CUDA_ERROR_NOT_READY => std::thread::sleep(Duration::from_micros(20)),
            done => {
                done.result().context("cuStreamQuery")?;
                break;
            }
        }
    }
    enqueued?;
    Ok(t.elapsed().as_secs_f64())
}

/// GB/s of a memcpy on `threads` threads between `pageable` and `pinned` (into
/// `pinned` when `up`), each thread copying its stripe a piece at a time, over and over,
/// from a common start until `meanwhile` (run on this thread) has returned.
fn memcpy_while(
    threads: usize,
    up: bool,
    pageable: &mut [f32],
    pinned: &mut [f32],
    meanwhile: impl FnOnce() -> Result<()>,
) -> Result<f64> {
    let stripe = pageable
        .len()
        .div_ceil(threads.max(1))
        .next_multiple_of(PIECE / 4);
    let gate = RwLock::new(());
    let stop = AtomicBool::new(false);
    let (spans, outcome) = std::thread::scope(|scope| {
        let closed = gate.write().unwrap_or_else(PoisonError::into_inner);
        let mut workers = Vec::new();
        for (p, q) in pageable.chunks_mut(stripe).zip(pinned.chunks_mut(stripe)) {
            let (gate, stop) = (&gate, &stop);
            workers.push(scope.spawn(move || {
                drop(gate.read().unwrap_or_else(PoisonError::into_inner));
                let start = Instant::now();
                let mut bytes = 0usize;
                'copy: loop {
                    for (p, q) in p.chunks_mut(PIECE / 4).zip(q.chunks_mut(PIECE / 4)) {
                        if stop.load(Ordering::Relaxed) {
                            break 'copy;
                        }
                        match up {
                            true => q.copy_from_slice(p),
                            false => p.copy_from_slice(q),
                        }
                        bytes += std::mem::size_of_val(p);
                    }
                }
                (start, Instant::now(), bytes)
            }));
        }
        drop(closed);
        let outcome = meanwhile();
        stop.store(true, Ordering::Relaxed);
        let spans: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        (spans, outcome)
    });
    outcome?;
    let spans = spans
        .into_iter()
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|_| Error::msg("contention: a memcpy thread panicked"))?;
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    let bytes: usize = spans.iter().map(|s| s.2).sum();
    match (first, last) {
        (Some(first), Some(last)) if bytes > 0 => {
            Ok(gbs(bytes, last.duration_since(first).as_secs_f64()))
        }
        _ => Err(Error::msg("contention: no memcpy thread copied")),
    }
}
