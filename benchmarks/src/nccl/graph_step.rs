//! A step of many small all-reduces (a tensor-parallel decoding step's shape) on a
//! communicator of one rank, replayed as a CUDA graph: ours a capture's collectives and
//! `Scope::replay_with` (a scope that opens, replays and ends), raw `ncclAllReduce`
//! captured with `cuStreamBeginCapture`, then `cuGraphLaunch` and `cuStreamSynchronize`;
//! and the same step issued call by call with raw `ncclAllReduce`, what a step costs
//! without graphs. A sample is one step's host time, synchronisation included.
//!
//! One rank, so that both sides run on one GPU in one process (the same step on two GPUs
//! driven by one thread, captured inside groups: `sibling_graphs.rs`). An out-of-place
//! all-reduce of one rank is NCCL's copy of the buffer on the GPU, so the step is
//! launch-bound, as a decoding step's are.
#![allow(unsafe_code)]

use std::time::Instant;

use cudarc::driver::result;
use cudarc::nccl::{result as nccl_result, sys as nccl_sys};
use stream_core::nccl::{Communicator, Sum, UniqueId};
use stream_core::{scope, Device};

use super::raw_ranks::{RawBuffers, RawRanks};
use crate::env::Env;
use crate::error::{Context, Error, Result};
use crate::measurement::Measurement;
use crate::raw::{RawGraph, RawStream};
use crate::report::{Better, Report, Row, Source};

/// All-reduces per step (and per device, in `sibling_graphs.rs`).
pub(super) const REDUCES: usize = 32;
/// Elements (`f32`) per all-reduce: 64 KiB, a hidden size of 4096 in `f16` for a batch of 8.
pub(super) const COUNT: usize = 16 << 10;

/// The rows of the step (see the module docs).
pub(super) fn rows(env: &Env, device: &Device, rep: &mut Report) -> Result<()> {
    let comm = Communicator::join(device, &UniqueId::new()?, 0, 1)?;
    let stream = device.new_stream()?;
    let input = device.upload_vec(&vec![1.5f32; COUNT])?;
    let mut output = device.alloc_vec::<f32>(COUNT)?;
    let (mut ours, ()) = device.capture((&input, &mut output), |g, (x, mut y)| {
        for _ in 0..REDUCES {
            g.all_reduce(&comm, &x, &mut y, Sum)?;
        }
        Ok::<_, stream_core::Error>(())
    })?;
    let raw = RawRanks::new(std::slice::from_ref(device))?;
    let theirs = raw.buffers(COUNT, true)?;
    let raw_graph = RawStepGraph::capture(&raw, &theirs)?;
    let name = format!("step of {REDUCES} all_reduces of 64 KiB, 1 rank");
    let row = Measurement::new()
        .ours("ours", || {
            let start = Instant::now();
            scope(&stream, |s| s.replay_with(&mut ours, &[&comm]).map(drop))?;
            Ok(start.elapsed().as_secs_f64())
        })
        .raw("raw NCCL graph", || raw_graph.replay(&raw))
        .into_row(
            env.cfg.plan(3, 21),
            Row::new(
                "nccl",
                format!("{name}, replayed as a graph (raw: ncclAllReduce captured)"),
                "us/step",
                Better::Lower,
            ),
        )?
        .in_unit(|t| t * 1e6);
    rep.push(row.check_vs_raw(1.03, Source::Goal));
    let mut eager = theirs;
    let row = Measurement::new()
        .ours("ours", || {
            let start = Instant::now();
            scope(&stream, |s| s.replay_with(&mut ours, &[&comm]).map(drop))?;
            Ok(start.elapsed().as_secs_f64())
        })
        .raw("raw ncclAllReduce calls", || {
            Ok(raw.all_reduce(&mut eager, REDUCES)? * REDUCES as f64)
        })
        .into_row(
            env.cfg.plan(3, 21),
            Row::new(
                "nccl",
                format!("{name}, replayed as a graph (raw: ncclAllReduce call by call)"),
                "us/step",
                Better::Lower,
            ),
        )?
        .in_unit(|t| t * 1e6);
    rep.push(row);
    // One rank: the sum is the input.
    check_output("nccl graph step", &output, 1.5)?;
    drop(raw_graph);
    raw.free(eager)
}

/// Every element of a step's `output` is `expected` (`what` names the step).
pub(super) fn check_output(
    what: &str,
    output: &stream_core::DeviceVec<f32>,
    expected: f32,
) -> Result<()> {
    let got = output.to_host_vec()?;
    match got.iter().position(|&v| v != expected) {
        None => Ok(()),
        Some(i) => Err(Error::msg(format!(
            "{what}: element {i} is {}, expected {expected}",
            got[i]
        ))),
    }
}

/// The raw step: [`REDUCES`] out-of-place `ncclAllReduce`s of the raw buffers, captured
/// on a stream of its own and instantiated.
struct RawStepGraph(RawGraph);

impl RawStepGraph {
    fn capture(raw: &RawRanks, buffers: &RawBuffers) -> Result<Self> {
        let capturing = RawStream::new()?;
        let graph = RawGraph::capture(&capturing, |stream| {
            for _ in 0..REDUCES {
                // SAFETY: recorded, not run: both buffers hold `COUNT` f32s of the device
                // and outlive the graph (freed after it is destroyed); the communicator is
                // of that device.
                unsafe {
                    nccl_result::all_reduce(
                        buffers.send[0].ptr() as *const _,
                        buffers.recv[0].ptr() as *mut _,
                        COUNT,
                        nccl_sys::ncclDataType_t::ncclFloat32,
                        nccl_sys::ncclRedOp_t::ncclSum,
                        raw.comms[0],
                        stream as nccl_sys::cudaStream_t,
                    )
                }
                .map_err(|e| Error::msg(format!("ncclAllReduce (captured): {e:?}")))?;
            }
            Ok(())
        })?;
        Ok(RawStepGraph(graph))
    }

    /// One replay on rank 0's stream and its synchronisation; seconds.
    fn replay(&self, raw: &RawRanks) -> Result<f64> {
        let stream = &raw.streams[0];
        let start = Instant::now();
        // SAFETY: the instance and the stream are alive; the graph's buffers outlive it.
        unsafe { result::graph::launch(self.0.exec, stream.0) }.context("cuGraphLaunch")?;
        stream.sync()?;
        Ok(start.elapsed().as_secs_f64())
    }
}
