//! NCCL collectives in CUDA graphs across two GPUs, with `NCCL_GRAPH_REGISTER=0`: ranks
//! in processes of their own (this binary started twice, as a launcher would) and ranks
//! of one process (two threads) replay a captured step and agree with the CPU; ranks of
//! one process whose graphs disagree end with `RanksDisagree` within seconds; a replay
//! whose peer never replays ends at the timeout with an aborted communicator, never a
//! hang; a capture is refused while NCCL registers captured buffers. Every scenario runs
//! in child processes, whose environment the test sets. One rank's graphs:
//! `test_nccl_graphs`.

use std::time::{Duration, Instant};

use gpu_tests::child::{run_self, two_gpu_main};
use gpu_tests::nccl_graph_step::{
    capture_doubling, capture_step, eager_round, replay_chain, replay_round,
};
use gpu_tests::nccl_ranks::{
    error_variant, exclusive, on_ranks, print_whether_the_device_still_works, streams_of,
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
            ("threads", threads_child),
            ("threads_disagree", threads_disagree_child),
            ("threads_registering", threads_registering_child),
            ("threads_again", threads_again_child),
        ],
        tests![
            ranks_in_processes_of_their_own_replay_a_captured_step_as_the_cpu_computes_it,
            ranks_of_one_process_replay_a_captured_step_compared_call_by_call,
            ranks_of_one_process_whose_graphs_disagree_end_with_an_err_not_a_hang,
            a_replay_whose_peer_never_replays_times_out_instead_of_hanging,
            captures_are_refused_where_a_peer_could_reach_the_buffers,
            communicators_one_thread_drives_are_not_captured,
            ranks_of_one_process_replay_again_back_to_back,
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

/// A capture's collective is `GraphCommunicators`, before NCCL sees it, while
/// `NCCL_GRAPH_REGISTER` is not `0`: on a communicator of two ranks of one process (two
/// threads), and in two processes.
fn captures_are_refused_where_a_peer_could_reach_the_buffers() -> TestResult {
    let _one_at_a_time = exclusive();
    let threads = run_self(
        "two threads capturing while NCCL registers",
        &[
            (CHILD_ENV, Some("threads_registering")),
            ("NCCL_GRAPH_REGISTER", None),
        ],
        Duration::from_secs(90),
    )?;
    ensure!(threads.status.success(), "the child failed.\n{threads}");
    threads.expect("refused", "2")?;
    let ranks = two_ranks(CHILD_ENV, "registering", |_| {
        vec![("NCCL_GRAPH_REGISTER", None)]
    })?;
    for (rank, out) in ranks.iter().enumerate() {
        ensure!(out.status.success(), "rank {rank} failed.\n{out}");
        out.expect("capture", "GraphCommunicators")?;
    }
    Ok(())
}

/// Communicators of `for_devices` over both GPUs (one thread drives them, inside
/// `nccl::group`): a capture's collective on one is `GraphCommunicators` naming
/// `for_devices`, before NCCL sees it; the communicators then all-reduce in a group.
fn communicators_one_thread_drives_are_not_captured() -> TestResult {
    let _one_at_a_time = exclusive();
    let devices = [Device::new(0)?, Device::new(1)?];
    let comms = Communicator::for_devices(&devices)?;
    let refused = capture_all_reduce(&devices[0], &comms[0]);
    ensure!(
        matches!(&refused, Err(e @ stream_core::Error::GraphCommunicators { .. })
            if e.to_string().contains("for_devices")),
        "a capture on a communicator of for_devices returned {:?}",
        refused.as_ref().err()
    );
    one_grouped_all_reduce(&devices, &comms)
}

/// One all_reduce of ones per device, in one group: each device's sum is the rank count.
fn one_grouped_all_reduce(devices: &[Device], comms: &[Communicator]) -> TestResult {
    let streams = streams_of(devices)?;
    let (mut sum0, mut sum1) = (vec![0.0f32; 8], vec![0.0f32; 8]);
    scope(&streams[0], |a| {
        scope(&streams[1], |b| {
            let mut x0 = a.upload(&[1.0f32; 8])?;
            let mut x1 = b.upload(&[1.0f32; 8])?;
            stream_core::nccl::group(|g| {
                g.all_reduce_in_place(a, &comms[0], &mut x0, Sum)?;
                g.all_reduce_in_place(b, &comms[1], &mut x1, Sum)
            })?;
            a.copy_to_host(&x0, &mut sum0[..])?.wait()?;
            b.copy_to_host(&x1, &mut sum1[..])?.wait().map(drop)
        })
    })?;
    ensure!(
        sum0.iter().chain(&sum1).all(|&v| v == 2.0),
        "the grouped all_reduce gave {sum0:?} and {sum1:?}"
    );
    Ok(())
}

/// Two threads of one process (`NCCL_GRAPH_REGISTER=0`): each captures the doubling
/// step on its rank and runs it 20 times back to back (`replay_again_with`, each run's
/// calls agreed by the ledger first), waited for once: `2^20 - 1` on both ranks.
fn ranks_of_one_process_replay_again_back_to_back() -> TestResult {
    let _one_at_a_time = exclusive();
    let out = run_self(
        "two threads replaying again",
        &[(CHILD_ENV, Some("threads_again")), NO_GRAPH_REGISTER],
        Duration::from_secs(90),
    )?;
    ensure!(out.status.success(), "the child failed.\n{out}");
    out.expect("again", "2")?;
    Ok(())
}

/// See [`ranks_of_one_process_replay_again_back_to_back`].
fn threads_again_child() -> TestResult {
    let done = std::sync::atomic::AtomicUsize::new(0);
    on_ranks(2, |rank, comm, stream| {
        let dev = stream.device();
        let mut acc = dev.upload_vec(&vec![0u32; 4099])?;
        {
            let mut graph = capture_doubling(dev, comm, &mut acc)?;
            replay_chain(&mut graph, comm, stream, 20)?;
        }
        let got = acc.to_host_vec()?;
        ensure!(
            got.iter().all(|&v| v == (1 << 20) - 1),
            "rank {rank} after 20 runs: {:?}",
            &got[..4]
        );
        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    })?;
    println!("again = {}", done.into_inner());
    Ok(())
}

/// See [`captures_are_refused_where_a_peer_could_reach_the_buffers`].
fn threads_registering_child() -> TestResult {
    let refused = std::sync::atomic::AtomicUsize::new(0);
    on_ranks(2, |_, comm, stream| {
        let captured = capture_step(stream.device(), comm);
        ensure!(
            matches!(&captured, Err(e) if e.message().is_some_and(|m| m.contains("NCCL_GRAPH_REGISTER"))),
            "a capture on two ranks of this process returned {:?}",
            captured.as_ref().err().map(|e| e.message())
        );
        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    })?;
    println!("refused = {}", refused.into_inner());
    Ok(())
}

/// Two threads of one process (a child with `NCCL_GRAPH_REGISTER=0`), ranks 0 and 1 on
/// GPUs 0 and 1: each captures the step and replays it four times on new inputs, each
/// replay's calls compared by the ledger first, and agrees with the CPU; then, twice,
/// one rank replays the step while the other issues the same collectives from a scope
/// (the ledger numbers replayed and issued calls alike), and both agree with the CPU.
fn ranks_of_one_process_replay_a_captured_step_compared_call_by_call() -> TestResult {
    let _one_at_a_time = exclusive();
    let out = run_self(
        "two threads replaying the step",
        &[(CHILD_ENV, Some("threads")), NO_GRAPH_REGISTER],
        Duration::from_secs(90),
    )?;
    ensure!(out.status.success(), "the child failed.\n{out}");
    out.expect("replayed", "8")?;
    out.expect("mixed", "4")?;
    Ok(())
}

/// See [`ranks_of_one_process_replay_a_captured_step_compared_call_by_call`].
fn threads_child() -> TestResult {
    let replayed = std::sync::atomic::AtomicUsize::new(0);
    let mixed = std::sync::atomic::AtomicUsize::new(0);
    on_ranks(2, |rank, comm, stream| {
        let mut graph = capture_step(stream.device(), comm)?;
        for round in 0..4 {
            replay_round(&mut graph, comm, stream, round, rank, 2)?;
            replayed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        for round in 4..6 {
            if round % 2 == rank as u64 {
                replay_round(&mut graph, comm, stream, round, rank, 2)?;
            } else {
                eager_round(comm, stream, round, rank, 2)?;
            }
            mixed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    })?;
    println!("replayed = {}", replayed.into_inner());
    println!("mixed = {}", mixed.into_inner());
    Ok(())
}

/// Two threads of one process (`NCCL_GRAPH_REGISTER=0`): rank 0 captures an all_reduce
/// of 1024 elements, rank 1 one of 2048; both replay. The later `replay_with` is
/// `RanksDisagree` before it launches anything, and the earlier replay, which waits for
/// it on the GPU, ends with the same error once its scope sees the ledger stranded:
/// both within seconds, far below the 60 s timeout.
fn ranks_of_one_process_whose_graphs_disagree_end_with_an_err_not_a_hang() -> TestResult {
    let _one_at_a_time = exclusive();
    let out = run_self(
        "two threads whose graphs disagree",
        &[(CHILD_ENV, Some("threads_disagree")), NO_GRAPH_REGISTER],
        Duration::from_secs(120),
    )?;
    ensure!(out.status.success(), "the child failed.\n{out}");
    for rank in 0..2 {
        out.expect(&format!("rank{rank}"), "RanksDisagree")?;
        let took: f64 = out.value(&format!("rank{rank}_s"))?.parse()?;
        ensure!(
            took < 30.0,
            "rank {rank}'s replay ended after {took} s; the timeout was 60 s.\n{out}"
        );
    }
    Ok(())
}

/// See [`ranks_of_one_process_whose_graphs_disagree_end_with_an_err_not_a_hang`].
fn threads_disagree_child() -> TestResult {
    let id = stream_core::nccl::UniqueId::new()?;
    let outcomes = std::thread::scope(|threads| {
        let handles: Vec<_> = (0..2usize)
            .map(|rank| {
                let id = &id;
                threads.spawn(move || -> Result<(String, f64), gpu_tests::Failed> {
                    let device = stream_core::Device::new(rank)?;
                    let comm = stream_core::nccl::Communicator::join(&device, id, rank, 2)?;
                    comm.set_timeout(Duration::from_secs(60));
                    let stream = device.new_stream()?;
                    let held = device.alloc_pinned::<u32>(1024 * (rank + 1))?;
                    let (mut graph, ()) = device.capture(held, |g, x| {
                        let mut y = g.upload(&x)?;
                        g.all_reduce_in_place(&comm, &mut y, Sum)
                    })?;
                    let start = Instant::now();
                    let ended = scope(&stream, |s| s.replay_with(&mut graph, &[&comm]).map(drop));
                    let took = start.elapsed().as_secs_f64();
                    drop(graph);
                    Ok((
                        ended.as_ref().err().map_or("ok", error_variant).to_owned(),
                        took,
                    ))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect::<Vec<_>>()
    });
    for (rank, outcome) in outcomes.into_iter().enumerate() {
        let (variant, took) = outcome.map_err(|_| format!("rank {rank} panicked"))??;
        println!("rank{rank} = {variant}");
        println!("rank{rank}_s = {took:.3}");
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
