//! Case 1: the host cost of enqueuing a tiny kernel.
//!
//! * **enqueue**: host time of a batch of [`BATCH`] launches, with the synchronisation
//!   that follows it left out of the time (a batch is short enough that the launch queue
//!   never fills, so the host is never throttled by the GPU). With two streams the
//!   launches alternate between them inside one fork (raw: one event each way around the
//!   batch); only the launch loop is timed, fork/join is case 6.
//! * **sustained**: host time of many launches plus the one synchronisation at the end,
//!   per launch: what a launch-bound program sees, fork/join and scope included.
//! * **where the time goes** ([`diagnosis`]): the library's part of a launch alone (an
//!   empty grid, checked in full and not enqueued), and what the driver's part depends on.
//!
//! Every implementation launches the same `tiny_u32` kernel (one block of 32 threads,
//! the thread 0 adds one to a counter), with the same arguments (a pointer and a
//! length). Afterwards each counter is read back and must equal the number of launches.
#![allow(unsafe_code)]

mod diagnosis;
pub(crate) use diagnosis::AttributedTiny;
mod ranks;

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{result, sys, CudaFunction, CudaSlice, CudaStream, PushKernelArg};
use stream_core::trace::Trace;
use stream_core::{scope, Device, DeviceVec, LaunchConfig, Stream};

use crate::cuda::{self, TINY_CONFIG};
use crate::env::Env;
use crate::error::{Context, Error, Result};
use crate::measurement::Measurement;
use crate::raw::{arg, order, RawDeviceMem, RawEvent, RawFunction};
use crate::report::{Better, Report, Row, Source};

/// Launches per enqueue sample.
pub const BATCH: usize = 256;

/// `tiny_u32`'s shape with no blocks: a launch the library checks in full and then
/// leaves out (an empty grid enqueues nothing).
const EMPTY_GRID: LaunchConfig = LaunchConfig::new((0, 1, 1), TINY_CONFIG.block);

/// Runs case 1.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    let cfg = env.cfg;
    let enqueue_samples = cfg.pick(300, 20);
    let sustained_launches = cfg.pick(100_000, 10_000);
    let sustained_samples = cfg.pick(5, 1);

    let mut ours1 = Ours::new(env, 1)?;
    let mut ours2 = Ours::new(env, 2)?;
    let mut raw1 = Raw::new(env, 1)?;
    let mut raw2 = Raw::new(env, 2)?;
    let mut cu1 = Cudarc::new(vec![env.cu1.clone()], &env.cu1_tiny)?;
    let mut cu2 = Cudarc::new(env.cu2[..2].to_vec(), &env.cu2_tiny)?;
    // One of cudarc's own streams: event tracking is on for it, although it is alone.
    let mut cu1_tracked = Cudarc::new(vec![env.cu2[0].clone()], &env.cu2_tiny)?;

    for (what, launches, sync, warmup, reps) in [
        ("enqueue", BATCH, false, 3, enqueue_samples),
        ("sustained", sustained_launches, true, 1, sustained_samples),
    ] {
        let label = if sync {
            format!("{what}: {launches} launches + 1 sync")
        } else {
            format!("{what}: batches of {launches}")
        };
        let plan = cfg.plan(warmup, reps);
        let row = |streams: &str| {
            Row::new(
                "launch",
                format!("{label}, {streams}"),
                "ns/launch",
                Better::Lower,
            )
        };
        let one = Measurement::new()
            .ours("ours, 1 stream", || ours1.sample(launches, sync))
            .raw("raw, 1 stream", || raw1.sample(launches, sync))
            .cudarc1("cudarc, default stream", || cu1.sample(launches, sync))
            .cudarc2("cudarc, own stream", || cu1_tracked.sample(launches, sync))
            .into_row(plan, row("1 stream"))?;
        rep.push(one.check_vs_raw(1.03, Source::Issue));
        if !sync {
            diagnosis::run(env, rep, plan, launches, &row)?;
        }
        let two = Measurement::new()
            .ours("ours, 2 streams", || ours2.sample(launches, sync))
            .raw("raw, 2 streams", || raw2.sample(launches, sync))
            .cudarc2("cudarc, 2 streams", || cu2.sample(launches, sync))
            .into_row(plan, row("2 streams"))?;
        rep.push(two.check_vs_raw(1.03, Source::Issue));
    }
    if std::env::var_os("BENCH_LAUNCH_RANKS").is_some() {
        ranks::run()?;
    }
    ours1.check()?;
    ours2.check()?;
    raw1.check()?;
    raw2.check()?;
    cu1.check()?;
    cu2.check()?;
    cu1_tracked.check()?;
    rep.note(
        "launch, 1 stream: \"cudarc 2s\" is one of cudarc's own streams (event tracking is on as soon as a context object has one)",
    );
    Ok(())
}

/// Host nanoseconds per launch of `launches` launches, from `start`.
fn per_launch(start: Instant, launches: usize) -> f64 {
    start.elapsed().as_nanos() as f64 / launches as f64
}

/// This library: a scope per sample, counters in `DeviceVec`s attached to it; with two
/// streams the launches alternate between the scope and a fork. Traced (case 14), each
/// sample's scope records into a fresh [`Trace`].
pub(crate) struct Ours<'e> {
    streams: &'e [Stream],
    counters: Vec<DeviceVec<u32>>,
    launched: u64,
    traced: bool,
}

impl<'e> Ours<'e> {
    pub(crate) fn new(env: &'e Env, streams: usize) -> Result<Self> {
        Self::on(&env.dev, &env.streams[..streams])
    }

    /// The same loop on `streams`, all of `dev`, with counters allocated on `dev`.
    pub(crate) fn on(dev: &Device, streams: &'e [Stream]) -> Result<Self> {
        Ok(Ours {
            streams,
            counters: (0..streams.len())
                .map(|_| dev.alloc_vec::<u32>(1))
                .collect::<stream_core::Result<_>>()?,
            launched: 0,
            traced: false,
        })
    }

    /// The same, each sample's scope recording into a trace of its own.
    pub(crate) fn traced(self) -> Self {
        Ours {
            traced: true,
            ..self
        }
    }

    pub(crate) fn sample(&mut self, launches: usize, timed_sync: bool) -> Result<f64> {
        self.sample_with(TINY_CONFIG, launches, timed_sync)
    }

    /// Launches with an empty grid ([`EMPTY_GRID`]) on its streams: every check of the
    /// library's launch path and the argument array, then no driver call.
    pub(super) fn sample_empty(&mut self, launches: usize) -> Result<f64> {
        self.sample_with(EMPTY_GRID, launches, false)
    }

    fn sample_with(
        &mut self,
        config: LaunchConfig,
        launches: usize,
        timed_sync: bool,
    ) -> Result<f64> {
        let trace = Trace::new();
        let traced = self.traced.then_some(&trace);
        let start = Instant::now();
        let mut ns = 0.0;
        let [a, rest @ ..] = self.counters.as_mut_slice() else {
            return Err(Error::msg("no counter"));
        };
        match (self.streams, rest) {
            ([s0], []) => scope(s0, |s| {
                if let Some(trace) = traced {
                    s.trace_into(trace)?;
                }
                let mut y = s.attach(a)?;
                let t = Instant::now();
                for _ in 0..launches {
                    cuda::tiny_u32(s, config, &mut y)?;
                }
                ns = per_launch(t, launches);
                Ok::<_, Error>(())
            })?,
            ([s0, s1], [b]) => scope(s0, |s| {
                if let Some(trace) = traced {
                    s.trace_into(trace)?;
                }
                let mut ya = s.attach(a)?;
                let mut yb = s.attach(b)?;
                s.fork(s1, &mut yb, |c, mut yb| {
                    let t = Instant::now();
                    for _ in 0..launches / 2 {
                        cuda::tiny_u32(s, config, &mut ya)?;
                        cuda::tiny_u32(c, config, &mut yb)?;
                    }
                    ns = per_launch(t, launches / 2 * 2);
                    Ok::<_, Error>(())
                })
            })?,
            _ => return Err(Error::msg("ours: one or two streams")),
        }
        let (gx, gy, gz) = config.grid;
        if gx > 0 && gy > 0 && gz > 0 {
            self.launched += (launches / self.streams.len()) as u64;
        }
        Ok(if timed_sync {
            per_launch(start, launches)
        } else {
            ns
        })
    }

    pub(crate) fn check(&self) -> Result<()> {
        for c in &self.counters {
            let got = c.to_host_vec()?;
            check_count("ours", got.first().copied(), self.launched)?;
        }
        Ok(())
    }
}

/// Raw driver calls: `cuLaunchKernel` in a loop; with two streams, one event records
/// the first stream for the second to wait on, another joins them back.
pub(crate) struct Raw {
    streams: Vec<sys::CUstream>,
    function: RawFunction,
    counters: Vec<RawDeviceMem>,
    fork: RawEvent,
    join: RawEvent,
    launched: u64,
}

impl Raw {
    pub(crate) fn new(env: &Env, streams: usize) -> Result<Self> {
        let counters = (0..streams)
            .map(|_| {
                let m = RawDeviceMem::new(4)?;
                // SAFETY: `m` is 4 bytes of device memory just allocated.
                unsafe { result::memset_d8_sync(m.ptr, 0, 4) }.context("cuMemsetD8")?;
                Ok(m)
            })
            .collect::<Result<_>>()?;
        Ok(Raw {
            streams: env.raw_streams[..streams].iter().map(|s| s.0).collect(),
            function: env.raw_tiny,
            counters,
            fork: RawEvent::new()?,
            join: RawEvent::new()?,
            launched: 0,
        })
    }

    /// The same loop launching `function` (another load of `tiny_u32`).
    pub(super) fn with_function(self, function: RawFunction) -> Self {
        Raw { function, ..self }
    }

    /// The loop on `streams` (as many as this baseline's own) instead of its own; they
    /// are synchronised before this returns.
    pub(super) fn sample_on(&mut self, streams: &[sys::CUstream], launches: usize) -> Result<f64> {
        let own = std::mem::replace(&mut self.streams, streams.to_vec());
        let enqueued = self.enqueue(launches);
        self.streams = own;
        for &stream in streams {
            // SAFETY: the streams are alive (the caller's scopes hold them).
            unsafe { result::stream::synchronize(stream) }.context("cuStreamSynchronize")?;
        }
        let ns = enqueued?;
        self.launched += (launches / streams.len()) as u64;
        Ok(ns)
    }

    pub(crate) fn sample(&mut self, launches: usize, timed_sync: bool) -> Result<f64> {
        let start = Instant::now();
        let enqueued = self.enqueue(launches);
        // Synchronise even after an error, so no launch is left running on the counters.
        for &s in &self.streams {
            // SAFETY: the streams are alive (owned by `Env`).
            unsafe { result::stream::synchronize(s) }.context("cuStreamSynchronize")?;
        }
        let ns = enqueued?;
        self.launched += (launches / self.streams.len()) as u64;
        Ok(if timed_sync {
            per_launch(start, launches)
        } else {
            ns
        })
    }

    /// Enqueues the launches; returns the loop's nanoseconds per launch.
    fn enqueue(&self, launches: usize) -> Result<f64> {
        let len: usize = 1;
        let f = self.function.0;
        let (g, b) = (TINY_CONFIG.grid, TINY_CONFIG.block);
        match (self.streams.as_slice(), self.counters.as_slice()) {
            ([s0], [y]) => {
                let mut args = [arg(&y.ptr), arg(&len)];
                let t = Instant::now();
                for _ in 0..launches {
                    // SAFETY: `tiny_u32(unsigned*, size_t)` gets a pointer to 4 bytes of
                    // device memory and the length 1; the memory outlives the launch
                    // (synchronised before it is freed).
                    unsafe { result::launch_kernel(f, g, b, 0, *s0, &mut args) }
                        .context("cuLaunchKernel")?;
                }
                Ok(per_launch(t, launches))
            }
            ([s0, s1], [ya, yb]) => {
                // `s1` after the work on `s0` so far (the event and the streams are this
                // sampler's, alive).
                order(self.fork.0, *s0, *s1)?;
                let mut args_a = [arg(&ya.ptr), arg(&len)];
                let mut args_b = [arg(&yb.ptr), arg(&len)];
                let t = Instant::now();
                for _ in 0..launches / 2 {
                    // SAFETY: as for one stream; each stream has its own counter.
                    unsafe { result::launch_kernel(f, g, b, 0, *s0, &mut args_a) }
                        .context("cuLaunchKernel")?;
                    // SAFETY: as above.
                    unsafe { result::launch_kernel(f, g, b, 0, *s1, &mut args_b) }
                        .context("cuLaunchKernel")?;
                }
                let ns = per_launch(t, launches / 2 * 2);
                // As for the fork, the other way round.
                order(self.join.0, *s1, *s0)?;
                Ok(ns)
            }
            _ => Err(Error::msg("raw: one or two streams")),
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        for c in &self.counters {
            let mut got = [0u32];
            // SAFETY: `c` is 4 bytes of device memory; every stream that wrote it was
            // synchronised at the end of its sample.
            unsafe { result::memcpy_dtoh_sync(&mut got, c.ptr) }.context("cuMemcpyDtoH")?;
            check_count("raw", Some(got[0]), self.launched)?;
        }
        Ok(())
    }
}

/// cudarc's safe API: `launch_builder` with a `CudaSlice` counter per stream; with two
/// streams `join` orders them around the batch, as the others do.
struct Cudarc<'e> {
    streams: Vec<Arc<CudaStream>>,
    function: &'e CudaFunction,
    counters: Vec<CudaSlice<u32>>,
    launched: u64,
}

impl<'e> Cudarc<'e> {
    fn new(streams: Vec<Arc<CudaStream>>, function: &'e CudaFunction) -> Result<Self> {
        let counters = streams
            .iter()
            .map(|s| s.alloc_zeros::<u32>(1))
            .collect::<std::result::Result<_, _>>()
            .context("cudarc: alloc_zeros")?;
        for s in &streams {
            s.synchronize().context("cudarc: synchronize")?;
        }
        Ok(Cudarc {
            streams,
            function,
            counters,
            launched: 0,
        })
    }

    fn sample(&mut self, launches: usize, timed_sync: bool) -> Result<f64> {
        let start = Instant::now();
        let enqueued = self.enqueue(launches);
        for s in &self.streams {
            s.synchronize().context("cudarc: synchronize")?;
        }
        let t = enqueued?;
        self.launched += (launches / self.streams.len()) as u64;
        Ok(if timed_sync {
            per_launch(start, launches)
        } else {
            t
        })
    }

    /// Enqueues the launches; returns the loop's nanoseconds per launch.
    fn enqueue(&mut self, launches: usize) -> Result<f64> {
        let len: usize = 1;
        let cfg = cuda::to_cudarc(TINY_CONFIG);
        let f = self.function;
        match (self.streams.as_slice(), self.counters.as_mut_slice()) {
            ([s0], [y]) => {
                let t = Instant::now();
                for _ in 0..launches {
                    let mut l = s0.launch_builder(f);
                    l.arg(&mut *y).arg(&len);
                    // SAFETY: `tiny_u32(unsigned*, size_t)` gets the counter (one u32) and
                    // its length.
                    unsafe { l.launch(cfg) }.context("cudarc: launch")?;
                }
                Ok(per_launch(t, launches))
            }
            ([s0, s1], [ya, yb]) => {
                s1.join(s0).context("cudarc: join")?;
                let t = Instant::now();
                for _ in 0..launches / 2 {
                    let mut l = s0.launch_builder(f);
                    l.arg(&mut *ya).arg(&len);
                    // SAFETY: as for one stream.
                    unsafe { l.launch(cfg) }.context("cudarc: launch")?;
                    let mut l = s1.launch_builder(f);
                    l.arg(&mut *yb).arg(&len);
                    // SAFETY: as for one stream.
                    unsafe { l.launch(cfg) }.context("cudarc: launch")?;
                }
                let ns = per_launch(t, launches / 2 * 2);
                s0.join(s1).context("cudarc: join")?;
                Ok(ns)
            }
            _ => Err(Error::msg("cudarc: one or two streams")),
        }
    }

    fn check(&self) -> Result<()> {
        for (s, c) in self.streams.iter().zip(&self.counters) {
            let got = s.clone_dtoh(c).context("cudarc: clone_dtoh")?;
            s.synchronize().context("cudarc: synchronize")?;
            check_count("cudarc", got.first().copied(), self.launched)?;
        }
        Ok(())
    }
}

/// The counter must have counted every launch (mod 2^32).
pub(crate) fn check_count(who: &str, got: Option<u32>, launched: u64) -> Result<()> {
    let want = launched as u32;
    match got {
        Some(g) if g == want => Ok(()),
        other => Err(Error::msg(format!(
            "{who}: the tiny kernel ran {other:?} times, expected {want}: launches were lost"
        ))),
    }
}
