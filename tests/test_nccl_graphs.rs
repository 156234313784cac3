//! NCCL collectives recorded into CUDA graphs (`stream-core/src/nccl/captured.rs`,
//! `graph/collectives.rs`): each replay (`Scope::replay_with`) runs them again on new
//! inputs; a replay without the graph's communicators is refused; a graph dropped after
//! its `Communicator` destroys it without a hang; an abort while a graph exists returns
//! at once (NCCL's own abort waits for the graph) and the graph's replays are then
//! refused; a graph with collectives is not updated in place; a capture's collective,
//! and a replay of a graph with collectives, inside `nccl::group` are refused; runs
//! replayed again without a host wait (`replay_again_with`) follow each other; a group
//! opened inside a capture records its sends and receives (and an all_to_all) through
//! the group's methods given the capture, and refuses a communicator's calls through a
//! scope and a capture, or two captures, in one group; an all-reduce on a branch of the
//! device's most urgent priority (`Capture::fork_with_priority`) beside a kernel runs
//! at every replay.
//!
//! A communicator of one rank on GPU 0: collectives are captured on communicators
//! whose peers are in other processes (with `NCCL_GRAPH_REGISTER=0`) or on ones of one
//! rank (see `Capture`'s collectives); ranks in processes of their own, the refusals of
//! other communicators and a peer that never replays: `test_nccl_graph_ranks`.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpu_tests::nccl_graph_step::{capture_doubling, capture_step, replay_chain, replay_round, LEN};
use gpu_tests::nccl_ranks::{error_variant, exclusive};
use gpu_tests::{check_eq, ensure, Failed, TestResult};
use stream_core::nccl::{self, Communicator, Sum};
use stream_core::{scope, Device, Error, Stream};

gpu_tests::test_main! {
    gpu: [
        a_captured_all_reduce_and_all_gather_run_again_at_every_replay,
        a_replay_without_the_graphs_communicators_is_refused,
        a_graph_dropped_after_its_communicator_destroys_it_without_a_hang,
        an_abort_while_a_graph_exists_returns_and_the_graph_then_refuses_to_replay,
        a_graph_with_collectives_is_not_updated,
        a_capture_that_panics_after_a_collective_leaves_the_communicator_usable,
        a_capture_inside_a_group_is_refused_and_records_nothing,
        a_replay_inside_a_group_is_refused,
        runs_replayed_again_with_collectives_follow_each_other,
        a_group_records_paired_sends_and_receives_into_a_capture,
        a_group_refuses_one_communicator_through_two_targets,
        an_all_reduce_on_an_urgent_branch_runs_at_every_replay,
        the_threads_bounded_waits_inside_a_capture_leave_the_capture_alone,
    ],
}

/// One capture, then four replays on new inputs, each compared with the CPU (one rank:
/// the sum and the gathered blocks are the input).
fn a_captured_all_reduce_and_all_gather_run_again_at_every_replay() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    let mut graph = capture_step(&dev, &comm)?;
    for round in 0..4 {
        replay_round(&mut graph, &comm, &stream, round, 0, 1)?;
    }
    Ok(())
}

/// GPU 0, a stream and a communicator of one rank, holding the NCCL tests' lock.
fn one_rank() -> Result<
    (
        std::sync::MutexGuard<'static, ()>,
        Device,
        Stream,
        Communicator,
    ),
    Failed,
> {
    let guard = exclusive();
    let dev = Device::new(0)?;
    let stream = dev.new_stream()?;
    let comm = Communicator::for_devices(std::slice::from_ref(&dev))?.remove(0);
    Ok((guard, dev, stream, comm))
}

/// `replay` of a graph with a collective, and `replay_with` without
/// its communicator or with another one, are `GraphCommunicators`, before anything is
/// launched (the outputs keep their poison); with it, the replay runs.
fn a_replay_without_the_graphs_communicators_is_refused() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    let other = Communicator::for_devices(std::slice::from_ref(&dev))?.remove(0);
    let mut graph = capture_step(&dev, &comm)?;
    graph.held_mut().1.fill(f32::NAN);
    let attempts: [(&str, &[&Communicator]); 3] = [
        ("replay", &[]),
        ("replay_with another communicator", &[&other]),
        ("replay_with no communicator", &[]),
    ];
    for (at, (what, comms)) in attempts.into_iter().enumerate() {
        let refused = scope(&stream, |s| match at {
            0 => s.replay(&mut graph).map(drop),
            _ => s.replay_with(&mut graph, comms).map(drop),
        });
        ensure!(
            matches!(refused, Err(Error::GraphCommunicators { .. })),
            "{what} returned {refused:?}, expected GraphCommunicators"
        );
    }
    ensure!(
        graph.held().1.iter().all(|v| v.is_nan()),
        "a refused replay wrote the output"
    );
    replay_round(&mut graph, &comm, &stream, 0, 0, 1)
}

/// The `Communicator` is dropped after a replay, while the graph (which keeps the
/// communicator) lives; the graph can no longer be replayed (no communicator to pass),
/// and dropping it destroys the communicator within seconds (NCCL's destruction waits
/// for the graph's captured operations, released with it).
fn a_graph_dropped_after_its_communicator_destroys_it_without_a_hang() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    let mut graph = capture_step(&dev, &comm)?;
    replay_round(&mut graph, &comm, &stream, 0, 0, 1)?;
    drop(comm);
    let refused = scope(&stream, |s| s.replay(&mut graph).map(drop));
    ensure!(
        matches!(refused, Err(Error::GraphCommunicators { .. })),
        "a replay after the communicator was dropped returned {refused:?}"
    );
    returns_within("dropping the graph", move || drop(graph))
}

/// Runs `f` on a thread of its own and waits up to 20 s for it: a hang fails the test
/// instead of stopping the binary (the thread is left behind then).
fn returns_within<R: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, Failed> {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    finished
        .recv_timeout(Duration::from_secs(20))
        .map_err(|_| Failed::from(format!("{what} did not return within 20 s")))
}

/// a graph with an all_reduce replays; `Communicator::abort` while
/// the graph exists returns within seconds (NCCL's abort itself waits until the graph
/// is destroyed, so it runs on a thread of its own); the graph's next replay is
/// `CommunicatorAborted`, before anything is launched; dropping the graph then lets the
/// abort finish. The abort runs on a helper thread here, so that a hang fails the test
/// instead of stopping the binary.
fn an_abort_while_a_graph_exists_returns_and_the_graph_then_refuses_to_replay() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    let mut graph = capture_step(&dev, &comm)?;
    replay_round(&mut graph, &comm, &stream, 0, 0, 1)?;
    let comm = returns_within(
        "Communicator::abort while a graph that captured on it exists",
        move || {
            comm.abort();
            comm
        },
    )?;
    ensure!(
        comm.is_aborted(),
        "the communicator is not aborted after abort()"
    );
    let refused = scope(&stream, |s| s.replay_with(&mut graph, &[&comm]).map(drop));
    ensure!(
        matches!(refused, Err(Error::CommunicatorAborted { .. })),
        "a replay after the abort returned {:?}, expected CommunicatorAborted",
        refused.as_ref().err().map(error_variant)
    );
    // The stream still works, and dropping the graph (which lets the abort finish) and
    // the communicator returns.
    replay_free_round_trip(&stream)?;
    returns_within("dropping the graph after the abort", move || drop(graph))?;
    drop(comm);
    Ok(())
}

/// A copy round trip on `stream`: the device is usable.
fn replay_free_round_trip(stream: &Stream) -> TestResult {
    let mut back = [0u32; 64];
    scope(stream, |s| {
        let x = s.upload(&[9u32; 64])?;
        s.copy_to_host(&x, &mut back)?.wait().map(drop)
    })?;
    check_eq("the round trip after the abort", &back[..], &[9u32; 64][..])
}

/// `Graph::update` of a graph with a collective is `GraphUpdate`,
/// refused before capturing (the closure never runs), and the graph still replays; so
/// is the update of a graph without one by a capture that records one (that capture is
/// discarded, and the graph still replays as before).
fn a_graph_with_collectives_is_not_updated() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    let mut graph = capture_step(&dev, &comm)?;
    let mut ran = false;
    let updated = graph.update(|_, _| {
        ran = true;
        Ok::<_, Error>(())
    });
    refused_for_collectives("a graph with collectives", updated)?;
    ensure!(!ran, "the update's closure ran before the refusal");
    replay_round(&mut graph, &comm, &stream, 1, 0, 1)?;

    let mut values = dev.alloc_vec::<u32>(1024)?;
    let (mut plain, ()) = dev.capture(&mut values, |g, mut v| g.fill(&mut v, 5u32))?;
    let updated = plain.update(|g, mut v| g.all_reduce_in_place(&comm, &mut v, Sum));
    refused_for_collectives("an update that records a collective", updated)?;
    scope(&stream, |s| s.replay(&mut plain).map(drop))?;
    let held: &stream_core::DeviceVec<u32> = plain.held();
    check_eq(
        "the graph after the refused update",
        &held.to_host_vec()?,
        &vec![5u32; 1024],
    )
}

/// `updated` is `GraphUpdate` naming NCCL.
fn refused_for_collectives(what: &str, updated: stream_core::Result<()>) -> TestResult {
    match updated {
        Err(Error::GraphUpdate(refusal)) => {
            ensure!(
                refusal.to_string().contains("NCCL"),
                "{what}: the refusal does not say why: {refusal}"
            );
            Ok(())
        }
        other => Err(format!("{what}: expected GraphUpdate, got {other:?}").into()),
    }
}

/// a capture that panics after recording an all_reduce (caught) makes
/// no graph and keeps nothing: the communicator then runs a scope's all_reduce, and its
/// abort returns (it would wait for a graph that kept it).
fn a_capture_that_panics_after_a_collective_leaves_the_communicator_usable() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    let mut values = dev.upload_vec(&[2.0f32; 1024])?;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = dev.capture(&mut values, |g, mut v| {
            g.all_reduce_in_place(&comm, &mut v, Sum)?;
            panic!("a panic inside the capture, after its collective");
            #[allow(unreachable_code)]
            Ok::<_, Error>(())
        });
    }));
    ensure!(caught.is_err(), "the capture's panic was not propagated");
    let mut back = vec![0f32; 1024];
    scope(&stream, |s| {
        let mut v = s.upload(&[3.0f32; 1024])?;
        s.all_reduce_in_place(&comm, &mut v, Sum)?;
        s.copy_to_host(&v, &mut back)?.wait().map(drop)
    })?;
    check_eq(
        "a scope's all_reduce after the panicked capture",
        &back,
        &vec![3.0f32; 1024],
    )?;
    let comm = returns_within("Communicator::abort with no graph left", move || {
        comm.abort();
        comm
    })?;
    ensure!(
        comm.is_aborted(),
        "the communicator is not aborted after abort()"
    );
    Ok(())
}

/// A capture inside `nccl::group` whose collective would be issued only at the group's
/// end: `NcclGroup` naming the capture, and nothing recorded (the capture fails with
/// it); the communicator then captures and replays the step as usual.
fn a_capture_inside_a_group_is_refused_and_records_nothing() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    let refused = stream_core::nccl::group(|_group| {
        let held = dev.alloc_pinned::<f32>(16)?;
        dev.capture(held, |c, x| {
            let mut y = c.upload(&x)?;
            c.all_reduce_in_place(&comm, &mut y, Sum)
        })
        .map(drop)
    });
    ensure!(
        matches!(&refused, Err(e @ Error::NcclGroup { .. })
            if e.to_string().contains("capture")),
        "a capture's collective inside a group returned {refused:?}"
    );
    let mut graph = capture_step(&dev, &comm)?;
    replay_round(&mut graph, &comm, &stream, 0, 0, 1)
}

/// `replay_with` inside `nccl::group` (the group's collectives would run after the
/// replay's, in another order than they were called): `NcclGroup`, nothing launched
/// (the output keeps its poison); outside the group the graph replays.
fn a_replay_inside_a_group_is_refused() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    let mut graph = capture_step(&dev, &comm)?;
    graph.held_mut().1.fill(f32::NAN);
    let refused = stream_core::nccl::group(|_group| {
        scope(&stream, |s| s.replay_with(&mut graph, &[&comm]).map(drop))
    });
    ensure!(
        matches!(&refused, Err(e @ Error::NcclGroup { .. })
            if e.to_string().contains("replayed inside nccl::group")),
        "a replay inside a group returned {refused:?}"
    );
    ensure!(
        graph.held().1.iter().all(|v| v.is_nan()),
        "the refused replay wrote the output"
    );
    replay_round(&mut graph, &comm, &stream, 0, 0, 1)
}

/// `replay_again_with` runs a graph with a collective 24 times back to back, waited for
/// once: each run reads what the one before wrote (`2^24 - 1`). In a scope of its own
/// each, `replay_again` of it and `replay_again_with` without its communicator are
/// `GraphCommunicators` after one more run each (their first replay), and nothing more
/// runs: `2^26 - 1` at the end.
fn runs_replayed_again_with_collectives_follow_each_other() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    let mut acc = dev.upload_vec(&vec![0u32; 4099])?;
    {
        let mut graph = capture_doubling(&dev, &comm, &mut acc)?;
        replay_chain(&mut graph, &comm, &stream, 24)?;
        let refused = scope(&stream, |s| {
            let step = s.replay_with(&mut graph, &[&comm])?;
            s.replay_again(step).map(drop)
        });
        ensure!(
            matches!(refused, Err(Error::GraphCommunicators { .. })),
            "replay_again of a graph with a collective returned {refused:?}"
        );
        let refused = scope(&stream, |s| {
            let step = s.replay_with(&mut graph, &[&comm])?;
            s.replay_again_with(step, &[]).map(drop)
        });
        ensure!(
            matches!(refused, Err(Error::GraphCommunicators { .. })),
            "replay_again_with no communicator returned {refused:?}"
        );
    }
    let want = (1u32 << 26) - 1;
    let got = acc.to_host_vec()?;
    ensure!(
        got.iter().all(|&v| v == want),
        "after 26 runs: {:?}, expected {want} everywhere",
        &got[..4]
    );
    Ok(())
}

/// A group opened inside a capture, its methods given the capture: a send to this rank
/// and its receive (paired only inside a group), and an all_to_all, are recorded; three
/// replays on new inputs copy the input through both. The capture's own collective in
/// the same group is `NcclGroup` pointing at the group's methods.
fn a_group_records_paired_sends_and_receives_into_a_capture() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    let held = (
        dev.alloc_pinned::<u32>(LEN)?,
        dev.alloc_pinned::<u32>(LEN)?,
        dev.alloc_pinned::<u32>(LEN)?,
    );
    let (mut graph, ()) = dev.capture(held, |g, (x_host, mut sent_host, mut routed_host)| {
        let x = g.upload(&x_host)?;
        let mut sent = g.alloc::<u32>(LEN)?;
        let mut routed = g.alloc::<u32>(LEN)?;
        nccl::group(|grp| {
            let own = g.all_reduce_in_place(&comm, &mut routed, Sum);
            ensure_group_error(own, "give the capture to the group's method")?;
            grp.send(g, &comm, &x, 0)?;
            grp.recv(g, &comm, &mut sent, 0)?;
            grp.all_to_all(g, &comm, &x, &mut routed)?;
            Ok::<_, Failed>(())
        })?;
        g.copy_to_host(&sent, &mut sent_host)?;
        g.copy_to_host(&routed, &mut routed_host)?;
        Ok::<_, Failed>(())
    })?;
    for round in 0..3u32 {
        let input: Vec<u32> = (0..LEN as u32).map(|i| i ^ (round << 20)).collect();
        {
            let (x, sent, routed) = graph.held_mut();
            x.copy_from_slice(&input);
            sent.fill(u32::MAX);
            routed.fill(u32::MAX);
        }
        scope(&stream, |s| {
            s.replay_with(&mut graph, &[&comm])?.wait().map(drop)
        })?;
        let (_, sent, routed) = graph.held();
        check_eq(&format!("round {round}: the send to itself"), sent, &input)?;
        check_eq(&format!("round {round}: the all_to_all"), routed, &input)?;
    }
    Ok(())
}

/// `result` is `NcclGroup` whose message contains `says`.
fn ensure_group_error(result: stream_core::Result<()>, says: &str) -> TestResult {
    ensure!(
        matches!(&result, Err(Error::NcclGroup { reason }) if reason.contains(says)),
        "expected NcclGroup saying {says:?}, got {result:?}"
    );
    Ok(())
}

/// NCCL takes a communicator's calls of one group all into one graph or none: in one
/// group, an all_reduce through a scope and then one through a capture on the same
/// communicator, and two captures' (nested) on it, are `NcclGroup` for the second call,
/// before NCCL sees it; the scope's call still runs, and a group of the first capture's
/// calls alone replays.
fn a_group_refuses_one_communicator_through_two_targets() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    let mut summed = [0.0f32; 16];
    let held = dev.alloc_pinned::<f32>(16)?;
    let (mut graph, ()) = dev.capture(held, |g, mut out| {
        let mut y = g.alloc_zeroed::<f32>(16)?;
        scope(&stream, |s| {
            let mut z = s.upload(&[1.0f32; 16])?;
            nccl::group(|grp| {
                grp.all_reduce_in_place(s, &comm, &mut z, Sum)?;
                let second = grp.all_reduce_in_place(g, &comm, &mut y, Sum);
                ensure_group_error(second, "through a scope and a capture")
            })?;
            s.copy_to_host(&z, &mut summed[..])?.wait()?;
            Ok::<_, Failed>(())
        })?;
        let inner = dev.alloc_pinned::<f32>(16)?;
        let nested = dev.capture(inner, |h, _| {
            let mut w = h.alloc_zeroed::<f32>(16)?;
            nccl::group(|grp| {
                grp.all_reduce_in_place(g, &comm, &mut y, Sum)?;
                let second = grp.all_reduce_in_place(h, &comm, &mut w, Sum);
                ensure_group_error(second, "two captures")
            })
        });
        drop(nested?);
        g.fill(&mut y, 2.0)?;
        nccl::group(|grp| grp.all_reduce_in_place(g, &comm, &mut y, Sum))?;
        g.copy_to_host(&y, &mut out)?;
        Ok::<_, Failed>(())
    })?;
    check_eq(
        "the scope's all_reduce in the refused group",
        &summed[..],
        &[1.0f32; 16][..],
    )?;
    graph.held_mut().fill(f32::NAN);
    scope(&stream, |s| {
        s.replay_with(&mut graph, &[&comm])?.wait().map(drop)
    })?;
    check_eq("the replayed group", graph.held(), &[2.0f32; 16][..])
}

/// A collective on a branch of the device's most urgent priority
/// (`Capture::fork_with_priority`), beside a kernel recorded on the capture's own
/// stream meanwhile: every replay sums its new input (one rank: the input itself), and
/// the kernel's output, downloaded after the join, is right too.
fn an_all_reduce_on_an_urgent_branch_runs_at_every_replay() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    let urgent = *dev.stream_priorities()?.start();
    let n = 4096;
    let held = (
        dev.alloc_pinned::<f32>(n)?,
        dev.alloc_pinned::<f32>(n)?,
        dev.alloc_pinned::<f32>(n)?,
    );
    let (mut graph, ()) = dev.capture(held, |g, (x_host, mut sum_host, mut doubled_host)| {
        let mut grad = g.upload(&x_host)?;
        let x = g.upload(&x_host)?;
        let mut doubled = g.alloc::<f32>(n)?;
        g.fork_with_priority(urgent, &mut grad, |c, mut grad| {
            c.all_reduce_in_place(&comm, &mut grad, Sum)?;
            kernels::scale(g, 2.0, &x, &mut doubled)
        })?;
        g.copy_to_host(&grad, &mut sum_host)?;
        g.copy_to_host(&doubled, &mut doubled_host)?;
        Ok::<_, Error>(())
    })?;
    for round in 0..4 {
        let inputs: Vec<f32> = (0..n).map(|i| (i + 7 * round) as f32).collect();
        {
            let (x, sum, doubled) = graph.held_mut();
            x.copy_from_slice(&inputs);
            sum.fill(f32::NAN);
            doubled.fill(f32::NAN);
        }
        scope(&stream, |s| s.replay_with(&mut graph, &[&comm]).map(drop))?;
        let (_, sum, doubled) = graph.held();
        check_eq(&format!("replay {round}: the sum"), &inputs, sum)?;
        let twice: Vec<f32> = inputs.iter().map(|v| 2.0 * v).collect();
        check_eq(
            &format!("replay {round}: the kernel beside it"),
            &twice,
            doubled,
        )?;
    }
    Ok(())
}

/// Inside a capture that allocated and recorded a collective, the thread's waits that are
/// no scope's own leave the capture's stream alone (nothing of it runs before a replay,
/// and a query of it would end the capture): a `ManagedVec`'s drop and
/// `trim_pinned_memory` (which wait for the whole device) and an outer scope's allocation
/// that runs out of memory return at once, the communicator is not aborted, and the
/// graph replays. Before captures were kept off the thread's list, the first wait's
/// query of the capturing stream ended the capture (`GraphCaptureInvalidated`, measured
/// on an H200).
fn the_threads_bounded_waits_inside_a_capture_leave_the_capture_alone() -> TestResult {
    let (_one_at_a_time, dev, stream, comm) = one_rank()?;
    comm.set_timeout(Duration::from_secs(2));
    let managed = dev.alloc_managed::<u32>(1024)?;
    // The whole card: out of memory after the retry (larger is refused without one).
    let too_big = dev.total_memory()?;
    let held = (dev.alloc_pinned::<f32>(64)?, dev.alloc_pinned::<f32>(64)?);
    let outer = dev.new_stream()?;
    let mut waits = None;
    let mut graph = scope(&outer, |s| {
        let (graph, ()) = dev.capture(held, |g, (x_host, mut y_host)| {
            let mut y = g.upload(&x_host)?;
            let _scratch = g.alloc::<u32>(64)?;
            g.all_reduce_in_place(&comm, &mut y, Sum)?;
            let start = Instant::now();
            drop(managed);
            let trimmed = dev.trim_pinned_memory(0).map(drop);
            let allocated = s.alloc::<u8>(too_big).map(drop);
            waits = Some((start.elapsed(), trimmed, allocated));
            g.copy_to_host(&y, &mut y_host)?;
            Ok::<_, Error>(())
        })?;
        Ok::<_, Error>(graph)
    })?;
    let (took, trimmed, allocated) = waits.ok_or("the capture did not run its closure")?;
    ensure!(took < Duration::from_secs(1), "the waits took {took:?}");
    ensure!(trimmed.is_ok(), "trim_pinned_memory returned {trimmed:?}");
    ensure!(
        matches!(allocated, Err(Error::OutOfMemory(_))),
        "the outer scope's allocation of twice the card returned {allocated:?}"
    );
    ensure!(!comm.is_aborted(), "the communicator was aborted");
    graph.held_mut().0.fill(2.5);
    graph.held_mut().1.fill(f32::NAN);
    scope(&stream, |s| {
        s.replay_with(&mut graph, &[&comm])?.wait().map(drop)
    })?;
    check_eq("the replayed all_reduce", graph.held().1, &vec![2.5f32; 64])
}
