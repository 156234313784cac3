//! Case 6: the host cost of the library's structure, per operation, in batches.
//!
//! * **scope enter/exit** on an idle stream vs a bare `cuStreamSynchronize` (and cudarc's
//!   `synchronize`): what a scope adds to the synchronisation it always does.
//! * **fork + join** of a second stream with nothing in it vs raw event record/wait each
//!   way (raw reuses two events; the library makes its own) and cudarc's `join` twice.
//! * **allocation + free** of 1 MiB inside a scope vs `cuMemAllocAsync`/`cuMemFreeAsync`
//!   (the same stream-ordered calls, the fair baseline), vs `cuMemAlloc`/`cuMemFree`
//!   (what code without stream-ordered allocation does), and vs cudarc's `alloc` + drop.
//!
//! The synchronisation that ends a batch is not timed except in the scope row, where it
//! is the point.
//!
//! Targets (issue 13): scope enter+exit and fork+join at most 1.03x their raw
//! counterparts, in the median over the rounds and in the worst round; allocation+free
//! is held to the same ratio as the design's goal.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{result, CudaStream};
use stream_core::scope;

use crate::error::{Context, Error, Result};
use crate::measure::{interleaved, Plan, Sampler};
use crate::raw::{order as raw_order, RawEvent};
use crate::report::{Better, Report, Row, Source};
use crate::rounds::Rounds;
use crate::Env;

/// Operations per sample.
const OPS: usize = 1000;
/// `cuMemAlloc`/`cuMemFree` pairs per sample (each is slow).
const SYNC_ALLOC_OPS: usize = 100;
/// Bytes per allocation.
const ALLOC_BYTES: usize = 1 << 20;

fn per_op(t: Instant, ops: usize) -> f64 {
    t.elapsed().as_nanos() as f64 / ops as f64
}

/// Runs case 6.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    let (warmup, reps) = env.cfg.pick((2, 30), (1, 5));
    let plan = env.cfg.plan(warmup, reps);
    scopes(env, rep, plan)?;
    forks(env, rep, plan)?;
    allocations(env, rep, plan)?;
    Ok(())
}

fn scopes(env: &Env, rep: &mut Report, plan: Plan) -> Result<()> {
    let ours = &env.streams[0];
    let raw = env.raw_streams[0].0;
    let cu_sync = |stream: &Arc<CudaStream>| -> Result<f64> {
        let t = Instant::now();
        for _ in 0..OPS {
            stream.synchronize().context("cudarc: synchronize")?;
        }
        Ok(per_op(t, OPS))
    };
    let mut samplers: Vec<Sampler<'_>> = vec![
        (
            "ours",
            Box::new(|| {
                let t = Instant::now();
                for _ in 0..OPS {
                    scope(ours, |_| Ok::<_, Error>(()))?;
                }
                Ok(per_op(t, OPS))
            }),
        ),
        (
            "raw",
            Box::new(|| {
                let t = Instant::now();
                for _ in 0..OPS {
                    // SAFETY: the stream is alive (owned by `Env`).
                    unsafe { result::stream::synchronize(raw) }.context("cuStreamSynchronize")?;
                }
                Ok(per_op(t, OPS))
            }),
        ),
        ("cudarc, default stream", Box::new(|| cu_sync(&env.cu1))),
        ("cudarc, own stream", Box::new(|| cu_sync(&env.cu2[0]))),
    ];
    let stats = interleaved(plan, &mut samplers)?;
    drop(samplers);
    let [o, r, c1, c2]: [Rounds; 4] = stats
        .try_into()
        .map_err(|_| Error::msg("scope: expected four results"))?;
    let mut row = Row::new(
        "scope",
        "enter + exit on an idle stream (raw: cuStreamSynchronize)",
        "ns",
        Better::Lower,
    );
    (row.ours, row.raw, row.cudarc1, row.cudarc2) = (Some(o), Some(r), Some(c1), Some(c2));
    rep.push(row.check_vs_raw(1.03, Source::Issue));
    Ok(())
}

fn forks(env: &Env, rep: &mut Report, plan: Plan) -> Result<()> {
    let (a, b) = (&env.streams[0], &env.streams[1]);
    let (ra, rb) = (env.raw_streams[0].0, env.raw_streams[1].0);
    let (fork_ev, join_ev) = (RawEvent::new()?, RawEvent::new()?);
    let (ca, cb) = (&env.cu2[0], &env.cu2[1]);
    let mut samplers: Vec<Sampler<'_>> = vec![
        (
            "ours",
            Box::new(|| {
                let mut ns = 0.0;
                scope(a, |s| {
                    let t = Instant::now();
                    for _ in 0..OPS {
                        s.fork(b, (), |_, ()| Ok::<_, Error>(()))?;
                    }
                    ns = per_op(t, OPS);
                    Ok::<_, Error>(())
                })?;
                Ok(ns)
            }),
        ),
        (
            "raw",
            Box::new(|| {
                let t = Instant::now();
                let enqueued = (0..OPS).try_for_each(|_| {
                    raw_order(fork_ev.0, ra, rb)?;
                    raw_order(join_ev.0, rb, ra)
                });
                let ns = per_op(t, OPS);
                for s in [ra, rb] {
                    // SAFETY: the streams are alive (owned by `Env`).
                    unsafe { result::stream::synchronize(s) }.context("cuStreamSynchronize")?;
                }
                enqueued.map(|()| ns)
            }),
        ),
        (
            "cudarc, own streams",
            Box::new(|| {
                let t = Instant::now();
                let enqueued = (0..OPS).try_for_each(|_| {
                    cb.join(ca).context("cudarc: join")?;
                    ca.join(cb).context("cudarc: join")
                });
                let ns = per_op(t, OPS);
                ca.synchronize().context("cudarc: synchronize")?;
                cb.synchronize().context("cudarc: synchronize")?;
                enqueued.map(|()| ns)
            }),
        ),
    ];
    let stats = interleaved(plan, &mut samplers)?;
    drop(samplers);
    let [o, r, c2]: [Rounds; 3] = stats
        .try_into()
        .map_err(|_| Error::msg("fork: expected three results"))?;
    let mut row = Row::new(
        "scope",
        "fork + join of an empty child (raw: event record/wait each way)",
        "ns",
        Better::Lower,
    );
    (row.ours, row.raw, row.cudarc2) = (Some(o), Some(r), Some(c2));
    rep.push(row.check_vs_raw(1.03, Source::Issue));
    Ok(())
}

fn allocations(env: &Env, rep: &mut Report, plan: Plan) -> Result<()> {
    let ours = &env.streams[0];
    let raw = env.raw_streams[0].0;
    let n = ALLOC_BYTES / 4;
    let cu_alloc = |stream: &Arc<CudaStream>| -> Result<f64> {
        let t = Instant::now();
        let allocated = (0..OPS).try_for_each(|_| {
            // SAFETY: the memory is never read (allocated and dropped).
            let buf = unsafe { stream.alloc::<f32>(n) }.context("cudarc: alloc")?;
            drop(buf);
            Ok::<_, Error>(())
        });
        let ns = per_op(t, OPS);
        stream.synchronize().context("cudarc: synchronize")?;
        allocated.map(|()| ns)
    };
    let mut samplers: Vec<Sampler<'_>> = vec![
        (
            "ours",
            Box::new(|| {
                let mut ns = 0.0;
                scope(ours, |s| {
                    let t = Instant::now();
                    for _ in 0..OPS {
                        let buf = s.alloc::<f32>(n)?;
                        drop(buf);
                    }
                    ns = per_op(t, OPS);
                    Ok::<_, Error>(())
                })?;
                Ok(ns)
            }),
        ),
        (
            "raw, stream-ordered",
            Box::new(|| {
                let t = Instant::now();
                let allocated = (0..OPS).try_for_each(|_| {
                    // SAFETY: plain stream-ordered allocation on a live stream of the
                    // current context.
                    let p = unsafe { result::malloc_async(raw, ALLOC_BYTES) }
                        .context("cuMemAllocAsync")?;
                    // SAFETY: allocated just above on `raw`, never used, freed once.
                    unsafe { result::free_async(p, raw) }.context("cuMemFreeAsync")
                });
                let ns = per_op(t, OPS);
                // SAFETY: the stream is alive (owned by `Env`).
                unsafe { result::stream::synchronize(raw) }.context("cuStreamSynchronize")?;
                allocated.map(|()| ns)
            }),
        ),
        ("cudarc, default stream", Box::new(|| cu_alloc(&env.cu1))),
        ("cudarc, own stream", Box::new(|| cu_alloc(&env.cu2[0]))),
        (
            "raw, cuMemAlloc/cuMemFree",
            Box::new(|| {
                let t = Instant::now();
                for _ in 0..SYNC_ALLOC_OPS {
                    // SAFETY: plain allocation in the current context.
                    let p = unsafe { result::malloc_sync(ALLOC_BYTES) }.context("cuMemAlloc")?;
                    // SAFETY: allocated just above, never used, freed once.
                    unsafe { result::free_sync(p) }.context("cuMemFree")?;
                }
                Ok(per_op(t, SYNC_ALLOC_OPS))
            }),
        ),
    ];
    let stats = interleaved(plan, &mut samplers)?;
    drop(samplers);
    let [o, r, c1, c2, sync]: [Rounds; 5] = stats
        .try_into()
        .map_err(|_| Error::msg("alloc: expected five results"))?;
    let mut row = Row::new(
        "scope",
        "alloc + free 1 MiB in a scope (raw: cuMemAllocAsync/cuMemFreeAsync)",
        "ns",
        Better::Lower,
    );
    (row.ours, row.raw, row.cudarc1, row.cudarc2) = (Some(o.clone()), Some(r), Some(c1), Some(c2));
    rep.push(row.check_vs_raw(1.03, Source::Goal));
    let mut row = Row::new(
        "scope",
        "alloc + free 1 MiB in a scope (raw: cuMemAlloc/cuMemFree)",
        "ns",
        Better::Lower,
    );
    (row.ours, row.raw) = (Some(o), Some(sync));
    rep.push(row);
    rep.note(
        "scope: ours, raw cuMemAllocAsync and cudarc all allocate from the device's default memory pool, which stream_core::Device::new configures (release threshold u64::MAX, no internal cross-stream dependencies) for all of them",
    );
    Ok(())
}
