//! The step of `graph_step.rs` (32 all-reduces of 64 KiB) on two GPUs driven by one
//! thread, replayed as CUDA graphs: ours a capture per device, one inside the other,
//! with one `nccl::group` inside both given the captures, replayed in `scope_all!` (two
//! scopes that open, replay and end); raw both streams captured at once, each pair of
//! `ncclAllReduce`s in a `ncclGroupStart`/`ncclGroupEnd` (as nccl-tests captures
//! several GPUs of one thread), then a `cuGraphLaunch` per device and a
//! `cuStreamSynchronize` of each. A sample is one step's host time, synchronisation
//! included.
//!
//! Captures on communicators of several ranks need `NCCL_GRAPH_REGISTER=0` (the library
//! refuses them otherwise, see `Capture`'s collectives); without it the row is skipped
//! with a line saying so, and both sides run unregistered when it is set.
#![allow(unsafe_code)]

use std::time::Instant;

use cudarc::driver::result;
use cudarc::nccl::{result as nccl_result, sys as nccl_sys};
use stream_core::nccl::{self, Communicator, Sum};
use stream_core::{scope_all, Device, DeviceVec, Graph, Stream};

use super::graph_step::{check_output, COUNT, REDUCES};
use super::raw_ranks::{RawBuffers, RawRanks};
use crate::env::Env;
use crate::error::{Context, Error, Result};
use crate::measurement::Measurement;
use crate::raw::{begin_capture, RawCapturedGraph, RawGraph, RawStream};
use crate::report::{Better, Report, Row, Source};

/// The row (see the module docs), on the first two of `devices` when there are two.
pub(super) fn rows(
    env: &Env,
    devices: &[Device],
    comms: &[Communicator],
    streams: &[Stream],
    raw: &RawRanks,
    rep: &mut Report,
) -> Result<()> {
    if comms.len() < 2 {
        return Ok(());
    }
    if !super::graph_register_off("the step") {
        return Ok(());
    }
    let inputs = [upload(&devices[0])?, upload(&devices[1])?];
    let mut outputs = [devices[0].alloc_vec(COUNT)?, devices[1].alloc_vec(COUNT)?];
    let [out0, out1] = &mut outputs;
    let (mut ours0, (mut ours1, ())) =
        devices[0].capture((&inputs[0], out0), |g0, (x0, mut y0)| {
            devices[1].capture((&inputs[1], out1), |g1, (x1, mut y1)| {
                for _ in 0..REDUCES {
                    nccl::group(|grp| {
                        grp.all_reduce(g0, &comms[0], &x0, &mut y0, Sum)?;
                        grp.all_reduce(g1, &comms[1], &x1, &mut y1, Sum)
                    })?;
                }
                Ok::<_, stream_core::Error>(())
            })
        })?;
    let theirs = raw.buffers(COUNT, true)?;
    let raw_graphs = RawSiblingGraphs::capture(raw, &theirs)?;
    let row = Measurement::new()
        .ours("ours", || {
            replay_both(streams, comms, [&mut ours0, &mut ours1])
        })
        .raw("raw NCCL graphs", || raw_graphs.replay(raw))
        .into_row(
            env.cfg.plan(3, 21),
            Row::new(
                "nccl",
                format!(
                    "step of {REDUCES} all_reduces of 64 KiB, 2 GPUs of one thread, replayed as \
                     graphs (raw: ncclAllReduce pairs captured in groups)"
                ),
                "us/step",
                Better::Lower,
            ),
        )?
        .in_unit(|t| t * 1e6);
    rep.push(row.check_vs_raw(1.03, Source::Goal));
    drop((ours0, ours1));
    for output in &outputs {
        // Every element is the two ranks' sum.
        check_output("nccl sibling graphs", output, 3.0)?;
    }
    drop(raw_graphs);
    raw.free(theirs)
}

/// Each device's input: every element 1.5, so the sum over two ranks is 3.
fn upload(device: &Device) -> Result<DeviceVec<f32>> {
    Ok(device.upload_vec(&vec![1.5f32; COUNT])?)
}

type StepGraph<'v> = Graph<(&'v DeviceVec<f32>, &'v mut DeviceVec<f32>)>;

/// One replay of both graphs, each on its device's stream, then both scopes' ends;
/// seconds.
fn replay_both(
    streams: &[Stream],
    comms: &[Communicator],
    graphs: [&mut StepGraph<'_>; 2],
) -> Result<f64> {
    let [graph0, graph1] = graphs;
    let start = Instant::now();
    scope_all!([&streams[0], &streams[1]], |a, b| {
        a.replay_with(graph0, &[&comms[0]]).map(drop)?;
        b.replay_with(graph1, &[&comms[1]]).map(drop)
    })?;
    Ok(start.elapsed().as_secs_f64())
}

/// The raw step: a graph per device, captured together.
struct RawSiblingGraphs {
    graphs: Vec<RawGraph>,
}

impl RawSiblingGraphs {
    /// Begins a capture on a new stream of each device, issues [`REDUCES`] out-of-place
    /// `ncclAllReduce`s per device (see [`record`]), ends the captures and instantiates
    /// each graph in its device's context.
    fn capture(raw: &RawRanks, buffers: &RawBuffers) -> Result<Self> {
        let ranks = raw.comms.len();
        let mut capturing = Vec::with_capacity(ranks);
        for rank in 0..ranks {
            raw.bind(rank)?;
            let stream = RawStream::new()?;
            begin_capture(&stream)?;
            capturing.push(stream);
        }
        let recorded = record(raw, buffers, &capturing);
        let mut captured = Vec::with_capacity(ranks);
        for (rank, stream) in capturing.iter().enumerate() {
            raw.bind(rank)?;
            captured.push(RawCapturedGraph::end_capture(stream)?);
        }
        recorded?;
        let mut graphs = Vec::with_capacity(ranks);
        for (rank, graph) in captured.into_iter().enumerate() {
            raw.bind(rank)?;
            graphs.push(graph.instantiate()?);
        }
        raw.bind(0)?;
        Ok(RawSiblingGraphs { graphs })
    }

    /// One launch per device on its stream, then both synchronised; seconds.
    fn replay(&self, raw: &RawRanks) -> Result<f64> {
        let start = Instant::now();
        for (graph, stream) in self.graphs.iter().zip(&raw.streams) {
            // SAFETY: the instance and the stream are alive; the graph's buffers outlive
            // it (freed after it is destroyed).
            unsafe { result::graph::launch(graph.exec, stream.0) }.context("cuGraphLaunch")?;
        }
        for stream in &raw.streams {
            stream.sync()?;
        }
        Ok(start.elapsed().as_secs_f64())
    }
}

/// The all-reduces of every rank on its capturing stream, a group per all-reduce (as
/// ours: a group's receive buffers are borrowed until its end, so one buffer takes one
/// all-reduce per group).
fn record(raw: &RawRanks, buffers: &RawBuffers, capturing: &[RawStream]) -> Result<()> {
    for _ in 0..REDUCES {
        nccl_result::group_start().map_err(|e| Error::msg(format!("ncclGroupStart: {e:?}")))?;
        let mut issued = Ok(());
        for (rank, stream) in capturing.iter().enumerate() {
            // SAFETY: recorded, not run: both buffers hold `COUNT` f32s of rank `rank`'s
            // device and outlive the graphs (freed after they are destroyed); the
            // communicator and the stream are of that device.
            let call = unsafe {
                nccl_result::all_reduce(
                    buffers.send[rank].ptr() as *const _,
                    buffers.recv[rank].ptr() as *mut _,
                    COUNT,
                    nccl_sys::ncclDataType_t::ncclFloat32,
                    nccl_sys::ncclRedOp_t::ncclSum,
                    raw.comms[rank],
                    stream.0 as nccl_sys::cudaStream_t,
                )
            };
            if let Err(e) = call {
                issued = Err(Error::msg(format!("ncclAllReduce (captured): {e:?}")));
                break;
            }
        }
        let ended = nccl_result::group_end()
            .map(drop)
            .map_err(|e| Error::msg(format!("ncclGroupEnd: {e:?}")));
        issued.and(ended)?;
    }
    Ok(())
}
