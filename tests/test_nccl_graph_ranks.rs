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
use gpu_tests::graph_kernels::affine_u32;
use gpu_tests::nccl_graph_step::{
    capture_doubling, capture_step, eager_round, replay_chain, replay_round,
};
use gpu_tests::nccl_ranks::{
    exclusive, on_ranks, print_whether_the_device_still_works, streams_of, variant_or_ok,
};
use gpu_tests::rank_processes::two_ranks;
use gpu_tests::tests;
use gpu_tests::{ensure, TestResult};
use stream_core::nccl::{self, Communicator, Sum, World};
use stream_core::{scope, scope_all, Device, DeviceMemoryMut, Graph, LaunchConfig, PinnedBuffer};

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
            ("siblings", siblings_child),
            ("registering_set_late", registering_set_late_child),
        ],
        tests![
            ranks_in_processes_of_their_own_replay_a_captured_step_as_the_cpu_computes_it,
            ranks_of_one_process_replay_a_captured_step_compared_call_by_call,
            ranks_of_one_process_whose_graphs_disagree_end_with_an_err_not_a_hang,
            a_replay_whose_peer_never_replays_times_out_instead_of_hanging,
            captures_are_refused_where_a_peer_could_reach_the_buffers,
            communicators_one_thread_drives_are_captured_in_one_group,
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
    println!("replay = {}", variant_or_ok(&ended));
    println!("aborted = {}", comm.is_aborted());
    let later = scope(&stream, |s| s.replay_with(&mut graph, &[&comm]).map(drop));
    println!("later = {}", variant_or_ok(&later));
    drop(graph); // lets NCCL's abort finish
    println!("dropped = true");
    print_whether_the_device_still_works(&stream)
}

/// A capture's collective is `GraphCommunicators`, before NCCL sees it, while
/// `NCCL_GRAPH_REGISTER` is not `0`: on a communicator of two ranks of one process (two
/// threads), and in two processes; and when the variable was set to `0` only after the
/// process's first captured collective (NCCL read it there, and keeps registering).
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
    let late = run_self(
        "two threads capturing after the variable was set late",
        &[
            (CHILD_ENV, Some("registering_set_late")),
            ("NCCL_GRAPH_REGISTER", None),
        ],
        Duration::from_secs(90),
    )?;
    ensure!(late.status.success(), "the child failed.\n{late}");
    late.expect("late", "2")?;
    Ok(())
}

/// See [`captures_are_refused_where_a_peer_could_reach_the_buffers`]: a collective
/// captured on a communicator of one rank while the variable is unset (the process's
/// first: NCCL reads it there), then `NCCL_GRAPH_REGISTER=0` set, then two threads'
/// captures refused all the same.
fn registering_set_late_child() -> TestResult {
    {
        let device = Device::new(0)?;
        let alone = Communicator::for_devices(std::slice::from_ref(&device))?.remove(0);
        drop(capture_all_reduce(&device, &alone)?);
    }
    // Safe in this edition; the communicator above is destroyed (with NCCL's threads of
    // it), and the rank threads start below.
    std::env::set_var("NCCL_GRAPH_REGISTER", "0");
    let refused = std::sync::atomic::AtomicUsize::new(0);
    on_ranks(2, |_, comm, stream| {
        let captured = capture_step(stream.device(), comm);
        ensure!(
            matches!(&captured, Err(e) if e.message().is_some_and(|m| m.contains("first captured collective"))),
            "a capture after the variable was set late returned {:?}",
            captured.as_ref().err().map(|e| e.message())
        );
        refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    })?;
    println!("late = {}", refused.into_inner());
    Ok(())
}

/// Communicators of `for_devices` over both GPUs, driven by one thread (a child with
/// `NCCL_GRAPH_REGISTER=0`): a capture's own collective on one is `GraphCommunicators`
/// pointing at the group, before NCCL sees it; a capture per device, the second inside
/// the first and one `nccl::group` inside both, records each device's all_reduce and
/// all_to_all (the group's methods given the captures) and each device's kernels; the
/// two graphs, replayed 20 times back to back from the one thread (`scope_all!`,
/// `replay_again_with`), leave `2^20 - 1` on both devices and the blocks exchanged; a
/// group that records one device's call and issues the other's through a scope is
/// `NcclGroup` for the second; the communicators then all-reduce in a group.
fn communicators_one_thread_drives_are_captured_in_one_group() -> TestResult {
    let _one_at_a_time = exclusive();
    let out = run_self(
        "one thread capturing for_devices communicators",
        &[(CHILD_ENV, Some("siblings")), NO_GRAPH_REGISTER],
        Duration::from_secs(90),
    )?;
    ensure!(out.status.success(), "the child failed.\n{out}");
    out.expect("siblings", "2")?;
    Ok(())
}

/// Runs of the sibling graphs in [`siblings_child`].
const SIBLING_RUNS: usize = 20;

/// See [`communicators_one_thread_drives_are_captured_in_one_group`].
fn siblings_child() -> TestResult {
    let devices = [Device::new(0)?, Device::new(1)?];
    let comms = Communicator::for_devices(&devices)?;
    let refused = capture_all_reduce(&devices[0], &comms[0]);
    ensure!(
        matches!(&refused, Err(e @ stream_core::Error::GraphCommunicators { .. })
            if e.to_string().contains("for_devices") && e.to_string().contains("group")),
        "a capture's own collective on a communicator of for_devices returned {:?}",
        refused.as_ref().err()
    );
    let len = 4099;
    let block = 3;
    // Rank r's all_to_all input: block p is 100 r + p, so rank p receives 100 r + p from r.
    let sends: Vec<Vec<u32>> = (0..2)
        .map(|r| {
            (0..2 * block)
                .map(|i| 100 * r + (i / block) as u32)
                .collect()
        })
        .collect();
    let mut accs = [
        devices[0].upload_vec(&vec![0u32; len])?,
        devices[1].upload_vec(&vec![0u32; len])?,
    ];
    let send = [
        devices[0].upload_vec(&sends[0])?,
        devices[1].upload_vec(&sends[1])?,
    ];
    let mut recv = [
        devices[0].upload_vec(&vec![u32::MAX; 2 * block])?,
        devices[1].upload_vec(&vec![u32::MAX; 2 * block])?,
    ];
    {
        let [acc0, acc1] = &mut accs;
        let [recv0, recv1] = &mut recv;
        let config = LaunchConfig::for_elements(len, 256);
        let (mut graph0, (mut graph1, ())) =
            devices[0].capture((acc0, &send[0], recv0), |g0, (mut a0, s0, mut r0)| {
                let graphs =
                    devices[1].capture((acc1, &send[1], recv1), |g1, (mut a1, s1, mut r1)| {
                        nccl::group(|grp| {
                            grp.all_reduce_in_place(g0, &comms[0], &mut a0, Sum)?;
                            grp.all_reduce_in_place(g1, &comms[1], &mut a1, Sum)?;
                            grp.all_to_all(g0, &comms[0], &s0, &mut r0)?;
                            grp.all_to_all(g1, &comms[1], &s1, &mut r1)
                        })?;
                        // Device 1's context is current inside its capture: its kernels here.
                        add_one(g1, config, &mut a1)
                    })?;
                add_one(g0, config, &mut a0)?;
                Ok::<_, stream_core::Error>(graphs)
            })?;
        let streams = streams_of(&devices)?;
        scope_all!([&streams[0], &streams[1]], |a, b| {
            let mut run0 = a.replay_with(&mut graph0, &[&comms[0]])?;
            let mut run1 = b.replay_with(&mut graph1, &[&comms[1]])?;
            for _ in 1..SIBLING_RUNS {
                run0 = a.replay_again_with(run0, &[&comms[0]])?;
                run1 = b.replay_again_with(run1, &[&comms[1]])?;
            }
            run1.wait()?;
            run0.wait().map(drop)
        })?;
    }
    let mut done = 0;
    for rank in 0..2 {
        let got = accs[rank].to_host_vec()?;
        ensure!(
            got.iter().all(|&v| v == (1 << SIBLING_RUNS) - 1),
            "device {rank} after {SIBLING_RUNS} runs: {:?}",
            &got[..4]
        );
        let want: Vec<u32> = (0..2)
            .flat_map(|r| vec![100 * r + rank as u32; block])
            .collect();
        ensure!(
            recv[rank].to_host_vec()? == want,
            "device {rank}'s all_to_all: {:?}, not {want:?}",
            recv[rank].to_host_vec()?
        );
        done += 1;
    }
    a_clique_is_captured_whole_or_not_at_all(&devices, &comms)?;
    one_grouped_all_reduce(&devices, &comms)?;
    println!("siblings = {done}");
    Ok(())
}

/// `acc[i] += 1`, through a graph allocation (`next = acc + 1; acc = next`): after an
/// all_reduce of two equal values, one run of the sibling graphs is `2 acc + 1`.
fn add_one<'g>(
    g: &'g stream_core::Capture<'g>,
    config: LaunchConfig,
    acc: &mut impl DeviceMemoryMut<'g, u32>,
) -> stream_core::Result<()> {
    let mut next = g.alloc::<u32>(acc.len())?;
    affine_u32(g, config, 1, 1, acc, &mut next)?;
    affine_u32(g, config, 1, 0, &next, acc)
}

/// NCCL fails a group's end that captures some communicators of one clique and not the
/// others ("Either none or all communicators in a ncclGroup() can be CUDA graph
/// captured", its `group.cc`): in one group, device 1's all_reduce recorded into a
/// capture and then device 0's through a scope is `NcclGroup` for the second, before NCCL
/// sees it; the group then records device 1's alone (its graph is dropped unreplayed),
/// and the communicators still work (the grouped all_reduce after this).
fn a_clique_is_captured_whole_or_not_at_all(
    devices: &[Device],
    comms: &[Communicator],
) -> TestResult {
    let streams = streams_of(devices)?;
    let mut x1 = devices[1].upload_vec(&[1.0f32; 8])?;
    let (graph, ()) = devices[1].capture(&mut x1, |g1, mut x1| {
        scope(&streams[0], |s0| {
            let mut x0 = s0.upload(&[1.0f32; 8])?;
            nccl::group(|grp| {
                grp.all_reduce_in_place(g1, &comms[1], &mut x1, Sum)?;
                let second = grp.all_reduce_in_place(s0, &comms[0], &mut x0, Sum);
                ensure!(
                    matches!(&second, Err(stream_core::Error::NcclGroup { reason })
                        if reason.contains("some of a clique's communicators")),
                    "a scope's all_reduce after a capture's on its sibling returned {second:?}"
                );
                Ok(())
            })
        })
    })?;
    drop(graph);
    Ok(())
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
                    Ok((variant_or_ok(&ended).to_owned(), took))
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
    println!("capture = {}", variant_or_ok(&captured));
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
