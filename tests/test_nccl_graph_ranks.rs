//! NCCL collectives in CUDA graphs across two GPUs: ranks in processes of their own
//! (this binary started twice, as a launcher would, with `NCCL_GRAPH_REGISTER=0`)
//! replay a captured step and agree with the CPU; a replay whose peer never replays
//! ends at the timeout with an aborted communicator, never a hang; a capture is refused
//! where a peer could reach this rank's buffers during replays (ranks of one process,
//! or processes while NCCL registers captured buffers). One rank's graphs:
//! `test_nccl_graphs`.

use std::time::{Duration, Instant};

use gpu_tests::child::two_gpu_main;
use gpu_tests::nccl_graph_step::{capture_step, replay_round};
use gpu_tests::nccl_ranks::{
    error_variant, exclusive, on_ranks, print_whether_the_device_still_works,
};
use gpu_tests::rank_processes::two_ranks;
use gpu_tests::tests;
use gpu_tests::{ensure, TestResult};
use stream_core::nccl::{Communicator, Sum, World};
use stream_core::{scope, Device, Graph, PinnedBuffer};

/// The environment variable that makes this binary run one child mode.
const CHILD_ENV: &str = "STREAM_CORE_NCCL_GRAPH_RANKS_CHILD";

/// NCCL's registration of captured buffers, off (what captures across processes need).
const NO_GRAPH_REGISTER: (&str, Option<&str>) = ("NCCL_GRAPH_REGISTER", Some("0"));

fn main() {
    two_gpu_main(
        "test_nccl_graph_ranks",
        CHILD_ENV,
        &[
            ("step", step_child),
            ("never_replays", never_replays_child),
            ("registering", registering_child),
        ],
        tests![
            ranks_in_processes_of_their_own_replay_a_captured_step_as_the_cpu_computes_it,
            a_replay_whose_peer_never_replays_times_out_instead_of_hanging,
            captures_are_refused_where_a_peer_could_reach_the_buffers,
        ],
    );
}

/// Two processes, one rank each on GPUs 0 and 1: each captures the step (all_reduce and
/// all_gather) and replays it four times on new inputs, compared with the CPU's sum and
/// concatenation of both ranks' inputs.
fn ranks_in_processes_of_their_own_replay_a_captured_step_as_the_cpu_computes_it() -> TestResult {
    let _one_at_a_time = exclusive();
    let ranks = two_ranks(CHILD_ENV, "step", |_| vec![NO_GRAPH_REGISTER])?;
    for (rank, out) in ranks.iter().enumerate() {
        ensure!(out.status.success(), "rank {rank} failed.\n{out}");
        out.expect("replayed", "4")?;
    }
    Ok(())
}

/// See [`ranks_in_processes_of_their_own_replay_a_captured_step_as_the_cpu_computes_it`].
fn step_child() -> TestResult {
    let world = World::from_env()?;
    let device = world.device()?;
    let comm = world.communicator(&device)?;
    comm.set_timeout(Duration::from_secs(20));
    let stream = device.new_stream()?;
    let mut graph = capture_step(&device, &comm)?;
    for round in 0..4 {
        replay_round(&mut graph, &comm, &stream, round, world.rank(), 2)?;
    }
    println!("replayed = 4");
    Ok(())
}

/// Two processes: both capture a graph with an all_reduce; rank 0 replays it, rank 1
/// never does. Rank 0's replaying scope ends after its 2 s timeout with
/// `CollectiveTimedOut`, the communicator aborted (on a thread of its own, since a graph
/// that captured on it exists); the next replay is `CommunicatorAborted`; dropping the
/// graph returns and the device still works.
fn a_replay_whose_peer_never_replays_times_out_instead_of_hanging() -> TestResult {
    let _one_at_a_time = exclusive();
    let [zero, one] = two_ranks(CHILD_ENV, "never_replays", |_| vec![NO_GRAPH_REGISTER])?;
    ensure!(zero.status.success(), "rank 0 failed.\n{zero}");
    ensure!(one.status.success(), "rank 1 failed.\n{one}");
    zero.expect("replay", "CollectiveTimedOut")?;
    zero.expect("aborted", "true")?;
    zero.expect("later", "CommunicatorAborted")?;
    zero.expect("dropped", "true")?;
    zero.expect("device_still_works", "true")?;
    let waited: f64 = zero.value("waited_s")?.parse()?;
    ensure!(
        (1.9..30.0).contains(&waited),
        "the replaying scope ended after {waited} s; the timeout was 2 s.\n{zero}"
    );
    Ok(())
}

/// See [`a_replay_whose_peer_never_replays_times_out_instead_of_hanging`].
fn never_replays_child() -> TestResult {
    let world = World::from_env()?;
    let device = world.device()?;
    let comm = world.communicator(&device)?;
    let stream = device.new_stream()?;
    let mut graph = capture_all_reduce(&device, &comm)?;
    if world.rank() == 1 {
        // Alive, with its graph, while rank 0 waits for it; then gone.
        std::thread::sleep(Duration::from_secs(10));
        comm.abort();
        drop(graph);
        return Ok(());
    }
    comm.set_timeout(Duration::from_secs(2));
    let start = Instant::now();
    let ended = scope(&stream, |s| s.replay_with(&mut graph, &[&comm]).map(drop));
    println!("waited_s = {:.3}", start.elapsed().as_secs_f64());
    println!(
        "replay = {}",
        ended.as_ref().err().map_or("ok", error_variant)
    );
    println!("aborted = {}", comm.is_aborted());
    let later = scope(&stream, |s| s.replay_with(&mut graph, &[&comm]).map(drop));
    println!(
        "later = {}",
        later.as_ref().err().map_or("ok", error_variant)
    );
    drop(graph); // lets NCCL's abort finish
    println!("dropped = true");
    print_whether_the_device_still_works(&stream)
}

/// A capture's collective is `GraphCommunicators`, before NCCL sees it, on a
/// communicator of two ranks of this process (two threads), and in two processes
/// started without `NCCL_GRAPH_REGISTER=0`.
fn captures_are_refused_where_a_peer_could_reach_the_buffers() -> TestResult {
    on_ranks(2, |_, comm, stream| {
        let refused = capture_step(stream.device(), comm);
        ensure!(
            matches!(&refused, Err(e) if e.message().is_some_and(|m| m.contains("this process"))),
            "a capture on a communicator of two ranks of this process returned {:?}",
            refused.as_ref().err().map(|e| e.message())
        );
        Ok(())
    })?;
    let _one_at_a_time = exclusive();
    let ranks = two_ranks(CHILD_ENV, "registering", |_| {
        vec![("NCCL_GRAPH_REGISTER", None)]
    })?;
    for (rank, out) in ranks.iter().enumerate() {
        ensure!(out.status.success(), "rank {rank} failed.\n{out}");
        out.expect("capture", "GraphCommunicators")?;
    }
    Ok(())
}

/// See [`captures_are_refused_where_a_peer_could_reach_the_buffers`].
fn registering_child() -> TestResult {
    let world = World::from_env()?;
    let device = world.device()?;
    let comm = world.communicator(&device)?;
    let captured = capture_all_reduce(&device, &comm);
    println!(
        "capture = {}",
        captured.as_ref().err().map_or("ok", error_variant)
    );
    Ok(())
}

/// A graph that uploads 1024 pinned `u32`s and all-reduces them in place through `comm`.
fn capture_all_reduce(
    device: &Device,
    comm: &Communicator,
) -> stream_core::Result<Graph<PinnedBuffer<u32>>> {
    let held = device.alloc_pinned::<u32>(1024)?;
    let (graph, ()) = device.capture(held, |g, x| {
        let mut y = g.upload(&x)?;
        g.all_reduce_in_place(comm, &mut y, Sum)
    })?;
    Ok(graph)
}
