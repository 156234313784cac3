//! Case 10, second part: a loop of replays of a short graph, end to end, as a decoding
//! or training loop that reads nothing between steps runs it. [`REPLAYS`] replays of a
//! graph of [`STEP_KERNELS`] tiny kernels, host time from the first replay to the end of
//! the last, per replay:
//!
//! * **chained**: ours `replay` then `replay_again` each step and one `wait` at the end;
//!   raw: `cuGraphLaunch` each step, one event record and `cuEventSynchronize` at the
//!   end. Target 1.03x.
//! * **waited each step**: ours `replay(...)?.wait()?` each step (what a loop had to do
//!   before `replay_again`); raw as above. Printed only: the cost of a host round trip
//!   per step.
//!
//! Both graphs increment a counter; the counts are checked at the end.
#![allow(unsafe_code)]

use std::time::Instant;

use cudarc::driver::{result, sys};
use stream_core::{scope, DeviceVec, Graph, Stream};

use crate::cuda::{self, TINY_CONFIG};
use crate::env::Env;
use crate::error::{Context, Result};
use crate::graphs::raw_tiny_graph;
use crate::launch::check_count;
use crate::measurement::Measurement;
use crate::raw::{RawDeviceMem, RawEvent, RawGraph};
use crate::report::{Better, Report, Row, Source};

/// Kernels per step: a short step, where the host's share shows.
const STEP_KERNELS: usize = 4;
/// Steps per sample.
const REPLAYS: usize = 50;

/// The two rows.
pub fn rows(env: &Env, rep: &mut Report) -> Result<()> {
    let plan = env.cfg.plan(3, env.cfg.pick(60, 10));
    let stream = &env.streams[0];
    let mut counter = env.dev.alloc_vec::<u32>(1)?;
    let (mut graph, ()) = env.dev.capture(&mut counter, |g, mut counter| {
        for _ in 0..STEP_KERNELS {
            cuda::tiny_u32(g, TINY_CONFIG, &mut counter)?;
        }
        Ok::<_, stream_core::Error>(())
    })?;
    let raw = RawLoop::new(env)?;
    let mut ours_runs = 0u64;
    for (what, chained) in [
        ("chained (replay_again), one wait", true),
        ("waited each step", false),
    ] {
        let row = Measurement::new()
            .ours("ours", || {
                ours_runs += REPLAYS as u64;
                ours_loop(stream, &mut graph, chained)
            })
            .raw("raw cuGraphLaunch loop, one sync", || raw.run())
            .into_row(
                plan,
                Row::new(
                    "graphs",
                    format!("a loop of {REPLAYS} replays of {STEP_KERNELS} kernels, {what}"),
                    "us/replay",
                    Better::Lower,
                ),
            )?
            .in_unit(|t| t * 1e6);
        rep.push(if chained {
            row.check_vs_raw(1.03, Source::Goal)
        } else {
            row
        });
    }
    let count = graph.held().to_host_vec()?;
    check_count(
        "ours, replay loops",
        count.first().copied(),
        ours_runs * STEP_KERNELS as u64,
    )?;
    raw.check()
}

/// [`REPLAYS`] replays of `graph` in one scope, chained or each waited for; host seconds
/// per replay, up to the last one's completion.
fn ours_loop(
    stream: &Stream,
    graph: &mut Graph<&mut DeviceVec<u32>>,
    chained: bool,
) -> Result<f64> {
    let t = Instant::now();
    scope(stream, |s| {
        if chained {
            let mut step = s.replay(graph)?;
            for _ in 1..REPLAYS {
                step = s.replay_again(step)?;
            }
            step.wait()?;
        } else {
            let mut graph = graph;
            for _ in 0..REPLAYS {
                graph = s.replay(graph)?.wait()?;
            }
        }
        Ok::<_, stream_core::Error>(())
    })?;
    Ok(t.elapsed().as_secs_f64() / REPLAYS as f64)
}

/// The raw loop: a graph of [`STEP_KERNELS`] launches on a counter of its own, captured
/// with `result` calls, launched [`REPLAYS`] times and synchronised once.
struct RawLoop {
    stream: sys::CUstream,
    counter: RawDeviceMem,
    graph: RawGraph,
    done: RawEvent,
    runs: std::cell::Cell<u64>,
}

impl RawLoop {
    fn new(env: &Env) -> Result<Self> {
        let counter = RawDeviceMem::new(4)?;
        // SAFETY: `counter` is 4 bytes of device memory just allocated.
        unsafe { result::memset_d8_sync(counter.ptr, 0, 4) }.context("cuMemsetD8")?;
        // SAFETY: the counter is a field of the loop beside the graph, freed only when the
        // loop is dropped, after its last launch.
        let graph = unsafe { raw_tiny_graph(env, &counter, STEP_KERNELS) }?;
        Ok(RawLoop {
            stream: env.raw_streams[0].0,
            counter,
            graph,
            done: RawEvent::new()?,
            runs: std::cell::Cell::new(0),
        })
    }

    /// [`REPLAYS`] launches, one event record, one synchronisation; host seconds per
    /// replay.
    fn run(&self) -> Result<f64> {
        let t = Instant::now();
        for _ in 0..REPLAYS {
            // SAFETY: the instance and the stream are alive; the graph's only memory is
            // the counter, alive until the end of the run.
            unsafe { result::graph::launch(self.graph.exec, self.stream) }
                .context("cuGraphLaunch")?;
        }
        // SAFETY: a live event and stream of the current context.
        unsafe { result::event::record(self.done.0, self.stream) }.context("cuEventRecord")?;
        // SAFETY: the event is alive; waiting on it covers every launch before it.
        unsafe { result::event::synchronize(self.done.0) }.context("cuEventSynchronize")?;
        self.runs.set(self.runs.get() + REPLAYS as u64);
        Ok(t.elapsed().as_secs_f64() / REPLAYS as f64)
    }

    fn check(&self) -> Result<()> {
        let mut got = [0u32];
        // SAFETY: 4 bytes of device memory; the stream that wrote it was synchronised at
        // the end of each sample.
        unsafe { result::memcpy_dtoh_sync(&mut got, self.counter.ptr) }.context("cuMemcpyDtoH")?;
        check_count(
            "raw, replay loops",
            got.first().copied(),
            self.runs.get() * STEP_KERNELS as u64,
        )
    }
}
