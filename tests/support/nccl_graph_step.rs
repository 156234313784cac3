//! The graph the NCCL graph tests capture and replay (`test_nccl_graphs`,
//! `test_nccl_graph_ranks`): a step that uploads a pinned input, all-reduces (sum) it
//! into one output and all-gathers it into another, both copied out to pinned buffers;
//! and one replay of it checked against the CPU.

use libtest_mimic::Failed;
use stream_core::nccl::{Communicator, Sum};
use stream_core::{scope, Device, DeviceVec, Error, Graph, LaunchConfig, PinnedBuffer, Stream};

use crate::check_eq;
use crate::graph_kernels::affine_u32;
use crate::nccl_ranks::rank_input;
use crate::TestResult;

/// Elements per rank.
pub const LEN: usize = 4099;

/// The graph of these tests: the input (pinned) uploaded into the graph's memory,
/// all-reduced (sum) into one output and all-gathered into the other, both copied out
/// to pinned buffers.
pub type StepGraph = Graph<(PinnedBuffer<f32>, PinnedBuffer<f32>, PinnedBuffer<f32>)>;

/// Captures the step on `dev` through `comm`, holding its three pinned buffers.
pub fn capture_step(dev: &Device, comm: &Communicator) -> Result<StepGraph, Failed> {
    let held = (
        dev.alloc_pinned::<f32>(LEN)?,
        dev.alloc_pinned::<f32>(LEN)?,
        dev.alloc_pinned::<f32>(LEN * comm.size())?,
    );
    let (graph, ()) = dev.capture(held, |g, (x_host, mut sum_host, mut all_host)| {
        let x = g.upload(&x_host)?;
        let mut sum = g.alloc::<f32>(LEN)?;
        let mut all = g.alloc::<f32>(LEN * comm.size())?;
        g.all_reduce(comm, &x, &mut sum, Sum)?;
        g.all_gather(comm, &x, &mut all)?;
        g.copy_to_host(&sum, &mut sum_host)?;
        g.copy_to_host(&all, &mut all_host)?;
        Ok::<_, Error>(())
    })?;
    Ok(graph)
}

/// Rank `rank`'s input in round `round`: integers, so the sums are exact.
pub fn input(round: u64, rank: usize) -> Vec<f32> {
    rank_input::<f32>(0x6a4e_0000 + round, rank, LEN, false)
}

/// Writes round `round`'s input, poisons the outputs, replays on `stream` and checks
/// both outputs against every rank's input of that round.
pub fn replay_round(
    graph: &mut StepGraph,
    comm: &Communicator,
    stream: &Stream,
    round: u64,
    rank: usize,
    ranks: usize,
) -> TestResult {
    {
        let (x, sum, all) = graph.held_mut();
        x.copy_from_slice(&input(round, rank));
        sum.fill(f32::NAN);
        all.fill(f32::NAN);
    }
    scope(stream, |s| {
        s.replay_with(&mut *graph, &[comm])?.wait().map(drop)
    })?;
    let (_, sum, all) = graph.held();
    check_step(round, ranks, sum, all)
}

/// The step's collectives issued by a scope, not replayed: what a rank of one process
/// does while another replays the graph (the ledger numbers both alike); checked as
/// [`replay_round`] checks a replay.
pub fn eager_round(
    comm: &Communicator,
    stream: &Stream,
    round: u64,
    rank: usize,
    ranks: usize,
) -> TestResult {
    let mine = input(round, rank);
    let mut sum = vec![f32::NAN; LEN];
    let mut all = vec![f32::NAN; LEN * ranks];
    scope(stream, |s| {
        let x = s.upload(&mine)?;
        let mut sum_dev = s.alloc::<f32>(LEN)?;
        let mut all_dev = s.alloc::<f32>(LEN * ranks)?;
        s.all_reduce(comm, &x, &mut sum_dev, Sum)?;
        s.all_gather(comm, &x, &mut all_dev)?;
        let _sum = s.copy_to_host(&sum_dev, &mut sum[..])?; // the scope's end waits
        s.copy_to_host(&all_dev, &mut all[..]).map(drop)
    })?;
    check_step(round, ranks, &sum, &all)
}

/// Checks round `round`'s outputs against every rank's input of that round.
fn check_step(round: u64, ranks: usize, sum: &[f32], all: &[f32]) -> TestResult {
    let inputs: Vec<Vec<f32>> = (0..ranks).map(|r| input(round, r)).collect();
    let want_sum: Vec<f32> = (0..LEN)
        .map(|i| inputs.iter().map(|x| x[i]).sum())
        .collect();
    let want_all: Vec<f32> = inputs.concat();
    check_eq(&format!("round {round}: the all_reduce"), sum, &want_sum)?;
    check_eq(&format!("round {round}: the all_gather"), all, &want_all)?;
    Ok(())
}

/// A second graph of these tests, for back-to-back replays (`replay_again_with`): `acc`
/// all-reduced (sum) in place through `comm`, then made `2 * sum / ranks + 1`
/// (a graph allocation in between): with every rank starting from zero, `n` runs in
/// order leave `2^n - 1` in every element on every rank, and any run that overlapped
/// another, or was skipped, another value.
pub fn capture_doubling<'v>(
    dev: &Device,
    comm: &Communicator,
    acc: &'v mut DeviceVec<u32>,
) -> Result<Graph<&'v mut DeviceVec<u32>>, Failed> {
    let len = acc.len();
    let config = LaunchConfig::for_elements(len, 256);
    // The sum of `ranks` equal values is `ranks` times the value: double it back to 2x.
    let factor = 2 / comm.size() as u32;
    let (graph, ()) = dev.capture(acc, |g, mut acc| {
        g.all_reduce_in_place(comm, &mut acc, Sum)?;
        let mut next = g.alloc::<u32>(len)?;
        affine_u32(g, config, factor, 1, &acc, &mut next)?;
        affine_u32(g, config, 1, 0, &next, &mut acc)
    })?;
    Ok(graph)
}

/// `runs` runs of `graph` on `stream` (`replay_with`, then `replay_again_with`), waited
/// for once.
pub fn replay_chain(
    graph: &mut Graph<&mut DeviceVec<u32>>,
    comm: &Communicator,
    stream: &Stream,
    runs: usize,
) -> TestResult {
    scope(stream, |s| {
        let mut step = s.replay_with(graph, &[comm])?;
        for _ in 1..runs {
            step = s.replay_again_with(step, &[comm])?;
        }
        step.wait().map(drop)
    })?;
    Ok(())
}
