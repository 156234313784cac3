//! The overlap row of case 11 replayed as CUDA graphs: the step of `overlap.rs` with its
//! all-reduce on a branch of the device's most urgent priority, captured once and
//! replayed. Ours: a capture per device (one inside the other on two GPUs), the branch
//! a `Capture::fork_with_priority`, both ranks' all-reduces in one `nccl::group` given
//! the branches, replayed `iters` times in a scope per device (`replay_again_with`).
//! Raw: every rank's stream captured at once, the branch a second stream of that
//! priority joined by events, the all-reduces in one `ncclGroupStart`/`ncclGroupEnd`,
//! instantiated with `USE_NODE_PRIORITY`; `iters` launches per device, then each
//! stream synchronised. Without that flag a graph's nodes run at the replay stream's
//! priority and the overlap is lost: measured raw on two H200s at 64 MiB, 830 us per
//! step either way without it (the serial step's time), 598 us with it.
//!
//! Two GPUs of one thread need `NCCL_GRAPH_REGISTER=0` (see `sibling_graphs.rs`):
//! without it the row is skipped with a line saying so.

use std::time::Instant;

use cudarc::driver::{result, sys};
use stream_core::nccl::{self, Communicator, Sum};
use stream_core::{scope, scope_all, Device, DeviceVec, Error as CoreError, Graph, Stream};

use super::overlap::{work, OursStep, RawStep};
use super::raw_ranks::RawRanks;
use crate::env::size_name;
use crate::error::{Context, Result};
use crate::measurement::Measurement;
use crate::raw::{begin_capture, order, RawCapturedGraph};
use crate::report::{Better, Report, Row, Source};
use crate::sampling::Plan;

/// What a step's graph holds: the input, the gradient, the next layer's output.
type StepGraph<'v> = Graph<(
    &'v DeviceVec<f32>,
    &'v mut DeviceVec<f32>,
    &'v mut DeviceVec<f32>,
)>;

/// What `overlap.rs` measured the eager step with, for the same figures here: the
/// kernel's calibrated iterations, steps per sample, and the sampling plan.
pub(super) struct Step {
    pub(super) work_iters: u32,
    pub(super) iters: usize,
    pub(super) plan: Plan,
}

/// Pushes the row: `ours`'s buffers captured into graphs, `theirs` captured raw (the
/// eager rows' own buffers, streams and communicators, so nothing is made again).
pub(super) fn rows(
    step: Step,
    ours: &mut OursStep<'_>,
    theirs: &RawStep,
    raw: &RawRanks,
    rep: &mut Report,
) -> Result<()> {
    let Step {
        work_iters,
        iters,
        plan,
    } = step;
    let OursStep {
        comms,
        streams,
        x,
        grad,
        next,
        ..
    } = ours;
    let (comms, streams) = (*comms, *streams);
    let ranks = comms.len();
    if ranks > 1 && !super::graph_register_off("the data-parallel step") {
        return Ok(());
    }
    let bytes = x[0].len() * 4;
    let mut graphs = capture(comms, x, grad, next, work_iters)?;
    let raw_graphs = RawStepGraphs::capture(raw, theirs, work_iters)?;
    let row = Measurement::new()
        .ours("ours, fork_with_priority", || {
            replay(&mut graphs, streams, comms, iters)
        })
        .raw("raw, USE_NODE_PRIORITY", || raw_graphs.replay(raw, theirs, iters))
        .into_row(
            plan,
            Row::new(
                "nccl",
                format!(
                    "data-parallel step, {} gradient all_reduce on an urgent branch, replayed as graphs, {ranks} GPU(s)",
                    size_name(bytes)
                ),
                "us/step",
                Better::Lower,
            ),
        )?
        .in_unit(|t| t * 1e6);
    rep.push(row.check_vs_raw(1.02, Source::Goal));
    drop(graphs);
    raw_graphs.free(raw)
}

/// Each communicator's device's step as a graph: the gradient's kernel, then its
/// all-reduce on an urgent branch beside the next kernel.
fn capture<'v>(
    comms: &[Communicator],
    x: &'v [DeviceVec<f32>],
    grad: &'v mut [DeviceVec<f32>],
    next: &'v mut [DeviceVec<f32>],
    work_iters: u32,
) -> Result<Vec<StepGraph<'v>>> {
    let urgent = |d: &Device| -> stream_core::Result<i32> { Ok(*d.stream_priorities()?.start()) };
    let (grad0, grad_rest) = grad.split_at_mut(1);
    let (next0, next_rest) = next.split_at_mut(1);
    let held0 = (&x[0], &mut grad0[0], &mut next0[0]);
    let device0 = comms[0].device();
    if comms.len() == 1 {
        let u0 = urgent(device0)?;
        let (graph, ()) = device0.capture(held0, |g, (x, mut grad, mut next)| {
            work(g, work_iters, &x, &mut grad)?;
            g.fork_with_priority(u0, &mut grad, |c, mut grad| {
                c.all_reduce_in_place(&comms[0], &mut grad, Sum)?;
                work(g, work_iters, &x, &mut next)
            })
        })?;
        return Ok(vec![graph]);
    }
    let device1 = comms[1].device();
    let (u0, u1) = (urgent(device0)?, urgent(device1)?);
    let held1 = (&x[1], &mut grad_rest[0], &mut next_rest[0]);
    let (graph0, (graph1, ())) = device0.capture(held0, |g0, (x0, mut grad0, mut next0)| {
        device1.capture(held1, |g1, (x1, mut grad1, mut next1)| {
            work(g0, work_iters, &x0, &mut grad0)?;
            work(g1, work_iters, &x1, &mut grad1)?;
            g0.fork_with_priority(u0, &mut grad0, |c0, mut grad0| {
                g1.fork_with_priority(u1, &mut grad1, |c1, mut grad1| {
                    nccl::group(|grp| {
                        grp.all_reduce_in_place(c0, &comms[0], &mut grad0, Sum)?;
                        grp.all_reduce_in_place(c1, &comms[1], &mut grad1, Sum)
                    })?;
                    work(g0, work_iters, &x0, &mut next0)?;
                    work(g1, work_iters, &x1, &mut next1)
                })
            })
        })
    })?;
    Ok(vec![graph0, graph1])
}

/// Seconds per step over `iters` replays of every device's graph, the scopes' ends
/// included.
fn replay(
    graphs: &mut [StepGraph<'_>],
    streams: &[Stream],
    comms: &[Communicator],
    iters: usize,
) -> Result<f64> {
    let start = Instant::now();
    match graphs {
        [graph] => scope(&streams[0], |a| {
            let mut r = a.replay_with(graph, &[&comms[0]])?;
            for _ in 1..iters {
                r = a.replay_again_with(r, &[&comms[0]])?;
            }
            Ok::<_, CoreError>(())
        })?,
        [graph0, graph1] => scope_all!([&streams[0], &streams[1]], |a, b| {
            let mut r0 = a.replay_with(graph0, &[&comms[0]])?;
            let mut r1 = b.replay_with(graph1, &[&comms[1]])?;
            for _ in 1..iters {
                r0 = a.replay_again_with(r0, &[&comms[0]])?;
                r1 = b.replay_again_with(r1, &[&comms[1]])?;
            }
            Ok::<_, CoreError>(())
        })?,
        _ => unreachable!("one graph per rank, one or two ranks"),
    }
    Ok(start.elapsed().as_secs_f64() / iters as f64)
}

/// The raw step's graphs: one per rank, captured together, instantiated with each
/// node's priority.
struct RawStepGraphs {
    graphs: Vec<(sys::CUgraphExec, RawCapturedGraph)>,
}

impl RawStepGraphs {
    fn capture(raw: &RawRanks, step: &RawStep, work_iters: u32) -> Result<Self> {
        let n = raw.comms.len();
        let urgent = |rank: usize| step.side[rank][1].0;
        for rank in 0..n {
            raw.bind(rank)?;
            begin_capture(&raw.streams[rank])?;
        }
        // Every capture is ended below, also after a failure, before it is returned.
        let mut recorded = Ok(());
        for rank in 0..n {
            raw.bind(rank)?;
            let main = raw.streams[rank].0;
            recorded = recorded
                .and_then(|()| step.launch(rank, step.grad[rank].ptr, work_iters, main))
                .and_then(|()| order(step.fork[rank].0, main, urgent(rank)));
        }
        recorded = recorded.and_then(|()| step.all_reduce(raw, urgent));
        for rank in 0..n {
            raw.bind(rank)?;
            let main = raw.streams[rank].0;
            recorded = recorded
                .and_then(|()| step.launch(rank, step.next[rank].ptr, work_iters, main))
                .and_then(|()| order(step.join[rank].0, urgent(rank), main));
        }
        let mut graphs = RawStepGraphs { graphs: Vec::new() };
        use sys::CUgraphInstantiate_flags as Flags;
        let flags = Flags(
            Flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0
                | Flags::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY.0,
        );
        let mut ended = Vec::new();
        for rank in 0..n {
            raw.bind(rank)?;
            ended.push(RawCapturedGraph::end_capture(&raw.streams[rank]));
        }
        recorded?;
        for (rank, graph) in ended.into_iter().enumerate() {
            let graph = graph?;
            raw.bind(rank)?;
            // SAFETY: the live graph the capture ended with, of the bound context.
            let exec = unsafe { result::graph::instantiate(graph.0, flags) }
                .context("cuGraphInstantiateWithFlags")?;
            graphs.graphs.push((exec, graph));
        }
        raw.bind(0)?;
        Ok(graphs)
    }

    /// Seconds per step over `iters` launches of every rank's graph, each rank's
    /// streams synchronised at the end.
    fn replay(&self, raw: &RawRanks, step: &RawStep, iters: usize) -> Result<f64> {
        let start = Instant::now();
        for _ in 0..iters {
            for (rank, (exec, _)) in self.graphs.iter().enumerate() {
                raw.bind(rank)?;
                // SAFETY: a live instance of this rank's context; the memory it uses
                // (`step`'s) outlives the synchronisation below.
                unsafe { result::graph::launch(*exec, raw.streams[rank].0) }
                    .context("cuGraphLaunch")?;
            }
        }
        step.sync(raw)?;
        Ok(start.elapsed().as_secs_f64() / iters as f64)
    }

    /// Destroys every instance and graph in its own context.
    fn free(self, raw: &RawRanks) -> Result<()> {
        for (rank, (exec, graph)) in self.graphs.into_iter().enumerate() {
            raw.bind(rank)?;
            // SAFETY: made in `capture`, destroyed once; every launch was synchronised
            // (`replay` ends with it).
            let _ = unsafe { result::graph::exec_destroy(exec) };
            drop(graph);
        }
        raw.bind(0)
    }
}
