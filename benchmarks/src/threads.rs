//! Case 5: four threads, each with its own stream, against one thread doing the same
//! work on one stream: host time for a fixed number of requests, as requests per second.
//!
//! A request is what a server thread does per item: upload 1 MiB of pinned memory,
//! run a short kernel, download the result, wait for it (ours: one scope per request,
//! allocation inside it; raw: `cuMemAllocAsync` ... `cuStreamSynchronize`; cudarc:
//! `clone_htod` ... `synchronize`). One thread serialises the waits; four overlap them.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{result, sys, CudaFunction, CudaStream, PinnedHostSlice, PushKernelArg};
use stream_core::{scope, PinnedBuffer, Stream};

use crate::cuda::{self, work_config, work_reference};
use crate::env::Env;
use crate::error::{Context, Error, Result};
use crate::raw::{arg, RawContext, RawFunction, RawPinned};
use crate::report::{Better, Report, Row, Source};
use crate::sampling::{interleaved, Sampler};
use crate::sampling::{per_round_ratio, Rounds};

/// Threads in the threaded variant.
const THREADS: usize = 4;
/// Elements per request (1 MiB of `f32`).
const ELEMS: usize = 1 << 18;
/// Kernel iterations per element: a short kernel.
const ITERS: u32 = 32;

fn input(i: usize) -> f32 {
    (i % 1021) as f32 * 0.5 - 200.0
}

/// Runs case 5.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    let per_thread = env.cfg.pick(500, 40);
    let (warmup, reps) = env.cfg.pick((1, 5), (1, 2));
    let total = per_thread * THREADS;

    // Each implementation's state serves two samplers (1 and 4 threads), taking turns.
    let ours = RefCell::new(Ours::new(env)?);
    let raw = RefCell::new(Raw::new(env)?);
    let cu1 = RefCell::new(Cudarc::new(vec![env.cu1.clone()], &env.cu1_work)?);
    let cu2 = RefCell::new(Cudarc::new(env.cu2[..THREADS].to_vec(), &env.cu2_work)?);

    let stats = {
        let mut samplers: Vec<Sampler<'_>> = vec![
            (
                "ours, 1 thread",
                Box::new(|| ours.borrow_mut().one_thread(total)),
            ),
            (
                "raw, 1 thread",
                Box::new(|| raw.borrow_mut().one_thread(total)),
            ),
            (
                "cudarc, 1 thread, default stream",
                Box::new(|| cu1.borrow_mut().one_thread(total)),
            ),
            (
                "cudarc, 1 thread, own stream",
                Box::new(|| cu2.borrow_mut().one_thread(total)),
            ),
            (
                "ours, 4 threads",
                Box::new(|| ours.borrow_mut().threads(per_thread)),
            ),
            (
                "raw, 4 threads",
                Box::new(|| raw.borrow_mut().threads(per_thread)),
            ),
            (
                "cudarc, 4 threads",
                Box::new(|| cu2.borrow_mut().threads(per_thread)),
            ),
        ];
        interleaved(env.cfg.plan(warmup, reps), &mut samplers)?
    };
    let rps: Vec<Rounds> = stats.iter().map(|s| s.map(|t| total as f64 / t)).collect();
    let [o1, r1, c1, c2, o4, r4, c4]: [Rounds; 7] = rps
        .try_into()
        .map_err(|_| Error::msg("threads: expected seven results"))?;
    // Per round, from that round's figures.
    let speedup = |four: &Rounds, one: &Rounds| {
        per_round_ratio(&four.figures(), &one.figures()).unwrap_or_default()
    };
    for (who, four, one) in [
        ("ours", &o4, &o1),
        ("raw", &r4, &r1),
        ("cudarc (own streams)", &c4, &c2),
    ] {
        rep.figure_per_round(
            "threads",
            format!("{who}: 4 threads / 1 thread"),
            speedup(four, one),
            "x",
        );
    }
    let mut row = Row::new(
        "threads",
        format!("1 thread, 1 stream, {total} requests of 1 MiB"),
        "requests/s",
        Better::Higher,
    );
    (row.ours, row.raw, row.cudarc1, row.cudarc2) = (Some(o1), Some(r1), Some(c1), Some(c2));
    rep.push(row.check_vs_raw(0.98, Source::Goal));
    let mut row = Row::new(
        "threads",
        format!("{THREADS} threads, a stream each, {total} requests of 1 MiB"),
        "requests/s",
        Better::Higher,
    );
    (row.ours, row.raw, row.cudarc2) = (Some(o4), Some(r4), Some(c4));
    rep.push(row.check_vs_raw(0.98, Source::Goal));

    ours.borrow().check()?;
    raw.borrow().check()?;
    cu1.borrow().check()?;
    cu2.borrow().check()?;
    Ok(())
}

/// Checks every 997th element and the last of one worker's output.
fn check_output(who: &str, out: &[f32]) -> Result<()> {
    for j in (0..out.len()).step_by(997).chain([out.len() - 1]) {
        let want = work_reference(input(j), ITERS);
        if out[j].to_bits() != want.to_bits() {
            return Err(Error::msg(format!(
                "{who}: request output element {j} is {} but the CPU computes {want}",
                out[j]
            )));
        }
    }
    Ok(())
}

/// Joins a worker, turning a panic into an error.
fn join(h: std::thread::ScopedJoinHandle<'_, Result<()>>) -> Result<()> {
    h.join()
        .unwrap_or_else(|_| Err(Error::msg("a worker thread panicked")))
}

/// This library: a scope per request.
struct Ours<'e> {
    streams: &'e [Stream],
    inputs: Vec<PinnedBuffer<f32>>,
    outputs: Vec<PinnedBuffer<f32>>,
}

impl<'e> Ours<'e> {
    fn new(env: &'e Env) -> Result<Self> {
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for _ in 0..THREADS {
            let mut i = env.dev.alloc_pinned::<f32>(ELEMS)?;
            i.iter_mut().enumerate().for_each(|(j, v)| *v = input(j));
            let mut o = env.dev.alloc_pinned::<f32>(ELEMS)?;
            o.fill(f32::NAN);
            inputs.push(i);
            outputs.push(o);
        }
        Ok(Ours {
            streams: &env.streams[..THREADS],
            inputs,
            outputs,
        })
    }

    fn request(stream: &Stream, input: &[f32], output: &mut [f32]) -> Result<()> {
        scope(stream, |s| {
            let x = s.upload(input)?;
            let mut y = s.alloc::<f32>(input.len())?;
            cuda::work_f32(s, work_config(input.len()), ITERS, &x, &mut y)?;
            let _download = s.copy_to_host(&y, output)?;
            Ok(())
        })
    }

    fn one_thread(&mut self, requests: usize) -> Result<f64> {
        let t = Instant::now();
        for _ in 0..requests {
            Self::request(&self.streams[0], &self.inputs[0], &mut self.outputs[0])?;
        }
        Ok(t.elapsed().as_secs_f64())
    }

    fn threads(&mut self, per_thread: usize) -> Result<f64> {
        let t = Instant::now();
        std::thread::scope(|scope| {
            let workers: Vec<_> = self
                .streams
                .iter()
                .zip(&self.inputs)
                .zip(&mut self.outputs)
                .map(|((stream, input), output)| {
                    scope.spawn(move || {
                        for _ in 0..per_thread {
                            Self::request(stream, input, output)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            workers.into_iter().try_for_each(join)
        })?;
        Ok(t.elapsed().as_secs_f64())
    }

    fn check(&self) -> Result<()> {
        self.outputs
            .iter()
            .try_for_each(|o| check_output("ours", o))
    }
}

/// Raw driver calls, the context bound on each worker thread.
struct Raw {
    ctx: RawContext,
    streams: Vec<RawStreamHandle>,
    function: RawFunction,
    inputs: Vec<RawPinned>,
    outputs: Vec<RawPinned>,
}

/// A stream handle that may be moved to a worker thread.
#[derive(Clone, Copy)]
struct RawStreamHandle(sys::CUstream);
// SAFETY: an opaque handle the driver accepts from any thread on which its context is
// current; workers bind the context first.
unsafe impl Send for RawStreamHandle {}

impl Raw {
    fn new(env: &Env) -> Result<Self> {
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for _ in 0..THREADS {
            let mut i = RawPinned::new(ELEMS)?;
            i.as_mut_slice()
                .iter_mut()
                .enumerate()
                .for_each(|(j, v)| *v = input(j));
            let mut o = RawPinned::new(ELEMS)?;
            o.as_mut_slice().fill(f32::NAN);
            inputs.push(i);
            outputs.push(o);
        }
        Ok(Raw {
            ctx: env.raw_ctx,
            streams: env.raw_streams[..THREADS]
                .iter()
                .map(|s| RawStreamHandle(s.0))
                .collect(),
            function: env.raw_work,
            inputs,
            outputs,
        })
    }

    fn request(
        f: RawFunction,
        stream: RawStreamHandle,
        input: &[f32],
        output: &mut [f32],
    ) -> Result<()> {
        let st = stream.0;
        let enqueued = (|| -> Result<()> {
            let bytes = input.len() * 4;
            // SAFETY: `st` is a live stream of the context current on this thread.
            let dx = unsafe { result::malloc_async(st, bytes) }.context("cuMemAllocAsync")?;
            // SAFETY: as above.
            let dy = unsafe { result::malloc_async(st, bytes) }.context("cuMemAllocAsync")?;
            // SAFETY: `dx` holds `bytes`, as many as `input`, which outlives the copy (the
            // stream is synchronised before this function returns).
            unsafe { result::memcpy_htod_async(dx, input, st) }.context("cuMemcpyHtoDAsync")?;
            let cfg = work_config(input.len());
            let (iters, len) = (ITERS, input.len());
            let mut args = [arg(&iters), arg(&dx), arg(&len), arg(&dy), arg(&len)];
            // SAFETY: `work_f32(unsigned, const float*, size_t, float*, size_t)` gets two
            // buffers of `len` floats, alive until their stream-ordered free below.
            unsafe { result::launch_kernel(f.0, cfg.grid, cfg.block, 0, st, &mut args) }
                .context("cuLaunchKernel")?;
            // SAFETY: `output` has `bytes`; it is not read before the synchronisation.
            unsafe { result::memcpy_dtoh_async(output, dy, st) }.context("cuMemcpyDtoHAsync")?;
            // SAFETY: allocated above on `st`, every use enqueued on `st` before.
            unsafe { result::free_async(dx, st) }.context("cuMemFreeAsync")?;
            // SAFETY: as above.
            unsafe { result::free_async(dy, st) }.context("cuMemFreeAsync")
        })();
        // SAFETY: the stream is alive (owned by `Env`).
        unsafe { result::stream::synchronize(st) }.context("cuStreamSynchronize")?;
        enqueued
    }

    fn one_thread(&mut self, requests: usize) -> Result<f64> {
        let t = Instant::now();
        for _ in 0..requests {
            Self::request(
                self.function,
                self.streams[0],
                self.inputs[0].as_slice(),
                self.outputs[0].as_mut_slice(),
            )?;
        }
        Ok(t.elapsed().as_secs_f64())
    }

    fn threads(&mut self, per_thread: usize) -> Result<f64> {
        let (ctx, f) = (self.ctx, self.function);
        let t = Instant::now();
        std::thread::scope(|scope| {
            let workers: Vec<_> = self
                .streams
                .iter()
                .zip(&self.inputs)
                .zip(&mut self.outputs)
                .map(|((&stream, input), output)| {
                    scope.spawn(move || {
                        ctx.bind()?;
                        for _ in 0..per_thread {
                            Self::request(f, stream, input.as_slice(), output.as_mut_slice())?;
                        }
                        Ok(())
                    })
                })
                .collect();
            workers.into_iter().try_for_each(join)
        })?;
        Ok(t.elapsed().as_secs_f64())
    }

    fn check(&self) -> Result<()> {
        self.outputs
            .iter()
            .try_for_each(|o| check_output("raw", o.as_slice()))
    }
}

/// cudarc's safe API: `clone_htod`, `alloc`, `launch_builder`, `memcpy_dtoh`,
/// `synchronize` per request.
struct Cudarc<'e> {
    streams: Vec<Arc<CudaStream>>,
    function: &'e CudaFunction,
    inputs: Vec<PinnedHostSlice<f32>>,
    outputs: Vec<PinnedHostSlice<f32>>,
}

impl<'e> Cudarc<'e> {
    fn new(streams: Vec<Arc<CudaStream>>, function: &'e CudaFunction) -> Result<Self> {
        let ctx = streams
            .first()
            .ok_or_else(|| Error::msg("cudarc: no stream"))?
            .context()
            .clone();
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for _ in 0..streams.len() {
            // SAFETY: written in full just below, before any use.
            let mut i =
                unsafe { ctx.alloc_pinned_with_flags::<f32>(ELEMS, sys::CU_MEMHOSTALLOC_PORTABLE) }
                    .context("cudarc: alloc_pinned_with_flags")?;
            i.as_mut_slice()
                .context("cudarc: as_mut_slice")?
                .iter_mut()
                .enumerate()
                .for_each(|(j, v)| *v = input(j));
            // SAFETY: as above.
            let mut o =
                unsafe { ctx.alloc_pinned_with_flags::<f32>(ELEMS, sys::CU_MEMHOSTALLOC_PORTABLE) }
                    .context("cudarc: alloc_pinned_with_flags")?;
            o.as_mut_slice()
                .context("cudarc: as_mut_slice")?
                .fill(f32::NAN);
            inputs.push(i);
            outputs.push(o);
        }
        Ok(Cudarc {
            streams,
            function,
            inputs,
            outputs,
        })
    }

    fn request(
        stream: &Arc<CudaStream>,
        f: &CudaFunction,
        input: &PinnedHostSlice<f32>,
        output: &mut PinnedHostSlice<f32>,
    ) -> Result<()> {
        let x = stream.clone_htod(input).context("cudarc: clone_htod")?;
        // SAFETY: the kernel writes every element before the download reads it.
        let mut y = unsafe { stream.alloc::<f32>(ELEMS) }.context("cudarc: alloc")?;
        let mut l = stream.launch_builder(f);
        l.arg(&ITERS).arg(&x).arg(&ELEMS).arg(&mut y).arg(&ELEMS);
        // SAFETY: `work_f32(unsigned, const float*, size_t, float*, size_t)` gets two
        // buffers of `ELEMS` floats and their lengths.
        unsafe { l.launch(cuda::to_cudarc(work_config(ELEMS))) }.context("cudarc: launch")?;
        stream
            .memcpy_dtoh(&y, output)
            .context("cudarc: memcpy_dtoh")?;
        stream.synchronize().context("cudarc: synchronize")
    }

    fn one_thread(&mut self, requests: usize) -> Result<f64> {
        let t = Instant::now();
        for _ in 0..requests {
            Self::request(
                &self.streams[0],
                self.function,
                &self.inputs[0],
                &mut self.outputs[0],
            )?;
        }
        Ok(t.elapsed().as_secs_f64())
    }

    fn threads(&mut self, per_thread: usize) -> Result<f64> {
        let f = self.function;
        let t = Instant::now();
        std::thread::scope(|scope| {
            let workers: Vec<_> = self
                .streams
                .iter()
                .zip(&self.inputs)
                .zip(&mut self.outputs)
                .map(|((stream, input), output)| {
                    scope.spawn(move || {
                        for _ in 0..per_thread {
                            Self::request(stream, f, input, output)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            workers.into_iter().try_for_each(join)
        })?;
        Ok(t.elapsed().as_secs_f64())
    }

    fn check(&self) -> Result<()> {
        self.outputs
            .iter()
            .try_for_each(|o| check_output("cudarc", o.as_slice().context("cudarc: as_slice")?))
    }
}
