//! NCCL collectives issued in an `nccl::group` by one thread driving every device
//! (`Communicator::for_devices`, up to two here): each grouped collective, out of place
//! and in place, compared with a CPU reference (the scope's own methods, for every
//! element type and size, are in `test_nccl`; send/recv in a group there too).
//!
//! On one GPU the communicator has one rank; on two, both devices' operations are issued
//! in one group from the scopes of `scope_all!`. Without a CUDA device these tests are
//! reported as ignored; without NCCL they fail, naming it. The data-parallel overlap of
//! one thread: each device's gradient summed on a fork of an urgent stream, both forks'
//! all-reduces in one group, while the parents' kernels run beside them.

use gpu_tests::nccl_ranks::{devices_of, exclusive, rank_count, rank_input, streams_of};
use gpu_tests::{check_eq, ensure, poisoned, Rng, TestResult};
use stream_core::nccl::{self, Communicator, Group, Sum, UniqueId};
use stream_core::{scope, scope_all, Device, DeviceBuffer, Error, Scope};

gpu_tests::test_main! {
    gpu: [
        one_thread_drives_every_device_through_a_group,
        every_grouped_collective_matches_the_cpu,
        a_group_that_fails_or_panics_still_enqueues_what_it_issued,
        a_communicator_dropped_inside_a_group_leaves_the_group_working,
        forks_of_every_device_sum_in_one_group_beside_their_parents,
    ],
}

/// Every rank's input of `len` elements (small whole numbers: sums are exact).
fn inputs_of(seed: u64, ranks: usize, len: usize) -> Vec<Vec<f32>> {
    (0..ranks)
        .map(|r| rank_input(seed, r, len, false))
        .collect()
}

/// The element-wise sum of `inputs`, in rank order.
fn sum_of(inputs: &[Vec<f32>]) -> Vec<f32> {
    (0..inputs[0].len())
        .map(|i| inputs.iter().map(|x| x[i]).sum())
        .collect()
}

/// `Communicator::for_devices` over every visible GPU (up to two here), one thread, the
/// all_reduce of each device issued inside one `nccl::group` from nested scopes.
fn one_thread_drives_every_device_through_a_group() -> TestResult {
    let _one_at_a_time = exclusive();
    let ranks = rank_count()?.min(2);
    let devices = devices_of(ranks)?;
    let comms = Communicator::for_devices(&devices)?;
    ensure!(
        comms.len() == ranks,
        "{} communicators for {ranks} devices",
        comms.len()
    );
    for (r, comm) in comms.iter().enumerate() {
        ensure!(
            comm.rank() == r && comm.size() == ranks && comm.device().ordinal() == r,
            "{comm:?}"
        );
    }
    let seed = Rng::new().next_u64();
    let count = 4099;
    let inputs = inputs_of(seed, ranks, count);
    let expected = sum_of(&inputs);
    let streams = streams_of(&devices)?;
    let mut results = vec![poisoned::<f32>(count); ranks];
    let (first, rest) = results.split_at_mut(1);
    scope(&streams[0], |a| {
        let mut x = a.upload(&inputs[0])?;
        if ranks == 1 {
            nccl::group(|g| g.all_reduce_in_place(a, &comms[0], &mut x, Sum))?;
        } else {
            scope(&streams[1], |b| {
                let mut y = b.upload(&inputs[1])?;
                nccl::group(|g| {
                    g.all_reduce_in_place(a, &comms[0], &mut x, Sum)?;
                    g.all_reduce_in_place(b, &comms[1], &mut y, Sum)
                })?;
                b.copy_to_host(&y, &mut rest[0])?.wait()?;
                Ok::<_, Error>(())
            })?;
        }
        a.copy_to_host(&x, &mut first[0])?.wait()?;
        Ok::<_, Error>(())
    })?;
    for (r, got) in results.iter().enumerate() {
        check_eq(&format!("grouped all_reduce, device {r}"), &expected, got)?;
    }
    // Outside a group, siblings of one thread are refused (it would deadlock).
    if ranks > 1 {
        scope(&streams[0], |a| {
            let mut x = a.alloc_zeroed::<f32>(4)?;
            let err = a.all_reduce_in_place(&comms[0], &mut x, Sum).unwrap_err();
            ensure!(
                matches!(err, Error::NcclGroup { .. }),
                "ungrouped sibling: {err}"
            );
            TestResult::Ok(())
        })?;
    }
    Ok(())
}

/// The grouped collectives this file checks (send/recv: `test_nccl`'s ring).
#[derive(Debug, Clone, Copy)]
enum Op {
    AllReduce,
    AllReduceInPlace,
    Broadcast,
    BroadcastInPlace,
    Reduce,
    ReduceInPlace,
    AllGather,
    AllGatherInPlace,
    ReduceScatter,
    ReduceScatterInPlace,
}

impl Op {
    const ALL: [Op; 10] = [
        Op::AllReduce,
        Op::AllReduceInPlace,
        Op::Broadcast,
        Op::BroadcastInPlace,
        Op::Reduce,
        Op::ReduceInPlace,
        Op::AllGather,
        Op::AllGatherInPlace,
        Op::ReduceScatter,
        Op::ReduceScatterInPlace,
    ];
}

/// One rank's buffers for `op`, on the host: what the send buffer holds (empty in
/// place), what the receive (or in-place) buffer holds before, and the part of it that
/// must come back with the given contents (`None`: nothing is required on this rank).
struct Plan {
    send: Vec<f32>,
    recv: Vec<f32>,
    expected: Option<(std::ops::Range<usize>, Vec<f32>)>,
}

/// Broadcasts come from the last rank, reductions go to rank 0.
fn plan(op: Op, rank: usize, inputs: &[Vec<f32>], wide: &[Vec<f32>]) -> Plan {
    let (n, count) = (inputs.len(), inputs[0].len());
    let mine = inputs[rank].clone();
    let whole = 0..count;
    let gathered: Vec<f32> = inputs.concat();
    let block = rank * count..(rank + 1) * count;
    let scattered = sum_of(wide)[block.clone()].to_vec();
    let root_sum = (rank == 0).then(|| (whole.clone(), sum_of(inputs)));
    let (send, recv, expected) = match op {
        Op::AllReduce => (mine, poisoned(count), Some((whole, sum_of(inputs)))),
        Op::AllReduceInPlace => (vec![], mine, Some((whole, sum_of(inputs)))),
        Op::Broadcast => (mine, poisoned(count), Some((whole, inputs[n - 1].clone()))),
        Op::BroadcastInPlace => (vec![], mine, Some((whole, inputs[n - 1].clone()))),
        Op::Reduce => (mine, poisoned(count), root_sum),
        Op::ReduceInPlace => (vec![], mine, root_sum),
        Op::AllGather => (mine, poisoned(count * n), Some((0..count * n, gathered))),
        Op::AllGatherInPlace => {
            let mut buf = poisoned(count * n);
            buf[block].copy_from_slice(&mine);
            (vec![], buf, Some((0..count * n, gathered)))
        }
        Op::ReduceScatter => (
            wide[rank].clone(),
            poisoned(count),
            Some((whole, scattered)),
        ),
        Op::ReduceScatterInPlace => (vec![], wide[rank].clone(), Some((block, scattered))),
    };
    Plan {
        send,
        recv,
        expected,
    }
}

/// Issues `op` for one rank in the open group `g`, on scope `s`.
fn issue<'g, 's>(
    g: &'g Group<'g, '_>,
    s: &'s Scope<'s, '_>,
    comm: &'s Communicator,
    op: Op,
    send: &'g DeviceBuffer<'s, f32>,
    recv: &'g mut DeviceBuffer<'s, f32>,
) -> stream_core::Result<()> {
    let (root, last) = (0, comm.size() - 1);
    match op {
        Op::AllReduce => g.all_reduce(s, comm, send, recv, Sum),
        Op::AllReduceInPlace => g.all_reduce_in_place(s, comm, recv, Sum),
        Op::Broadcast => g.broadcast(s, comm, send, recv, last),
        Op::BroadcastInPlace => g.broadcast_in_place(s, comm, recv, last),
        Op::Reduce => g.reduce(s, comm, send, recv, Sum, root),
        Op::ReduceInPlace => g.reduce_in_place(s, comm, recv, Sum, root),
        Op::AllGather => g.all_gather(s, comm, send, recv),
        Op::AllGatherInPlace => g.all_gather_in_place(s, comm, recv),
        Op::ReduceScatter => g.reduce_scatter(s, comm, send, recv, Sum),
        Op::ReduceScatterInPlace => g.reduce_scatter_in_place(s, comm, recv, Sum),
    }
}

/// Each grouped collective, out of place and in place, with 0, 1 and 1001 elements per
/// rank, every device's part issued in one group from one thread, compared with the
/// CPU: the receive buffer of each rank, or the part of it the operation defines.
fn every_grouped_collective_matches_the_cpu() -> TestResult {
    let _one_at_a_time = exclusive();
    let ranks = rank_count()?.min(2);
    let devices = devices_of(ranks)?;
    let comms = Communicator::for_devices(&devices)?;
    let streams = streams_of(&devices)?;
    let seed = Rng::new().next_u64();
    for count in [0, 1, 1001] {
        let inputs = inputs_of(seed, ranks, count);
        // reduce_scatter's inputs: `ranks` blocks of `count` per rank.
        let wide = inputs_of(seed ^ 0x5CA7, ranks, count * ranks);
        for op in Op::ALL {
            let plans: Vec<Plan> = (0..ranks).map(|r| plan(op, r, &inputs, &wide)).collect();
            let mut got: Vec<Vec<f32>> = plans.iter().map(|p| poisoned(p.recv.len())).collect();
            if ranks == 1 {
                scope(&streams[0], |a| {
                    let x = a.upload(&plans[0].send)?;
                    let mut y = a.upload(&plans[0].recv)?;
                    nccl::group(|g| issue(g, a, &comms[0], op, &x, &mut y))?;
                    a.copy_to_host(&y, &mut got[0])?.wait()?;
                    Ok::<_, Error>(())
                })?;
            } else {
                let (first, rest) = got.split_at_mut(1);
                scope_all!([&streams[0], &streams[1]], |a, b| {
                    let x0 = a.upload(&plans[0].send)?;
                    let mut y0 = a.upload(&plans[0].recv)?;
                    let x1 = b.upload(&plans[1].send)?;
                    let mut y1 = b.upload(&plans[1].recv)?;
                    nccl::group(|g| {
                        issue(g, a, &comms[0], op, &x0, &mut y0)?;
                        issue(g, b, &comms[1], op, &x1, &mut y1)
                    })?;
                    a.copy_to_host(&y0, &mut first[0])?.wait()?;
                    b.copy_to_host(&y1, &mut rest[0])?.wait()?;
                    Ok::<_, Error>(())
                })?;
            }
            for (rank, (plan, got)) in plans.iter().zip(&got).enumerate() {
                if let Some((range, expected)) = &plan.expected {
                    check_eq(
                        &format!("grouped {op:?} of {count} f32 per rank, rank {rank} of {ranks}"),
                        expected,
                        &got[range.clone()],
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// A group's closure that returns an `Err`, or panics, after issuing a collective: the
/// group still ends (NCCL enqueues what was issued, whose buffers are still borrowed),
/// the `Err` or the panic comes out, the scope ends without hanging, and the thread can
/// open groups again. On one rank, a broadcast makes the issued operation visible: its
/// receive buffer becomes the send buffer.
fn a_group_that_fails_or_panics_still_enqueues_what_it_issued() -> TestResult {
    let _one_at_a_time = exclusive();
    let device = Device::new(0)?;
    let comm = Communicator::join(&device, &UniqueId::new()?, 0, 1)?;
    let stream = device.new_stream()?;
    let input: Vec<u32> = (0..4099).collect();
    let mut got = poisoned::<u32>(input.len());
    let outcome = scope(&stream, |s| {
        let x = s.upload(&input)?;
        let mut y = s.alloc_zeroed::<u32>(input.len())?;
        let failed = nccl::group(|g| {
            g.broadcast(s, &comm, &x, &mut y, 0)?;
            Err::<(), gpu_tests::Failed>("the closure's own error".into())
        });
        let message = failed.as_ref().err().and_then(|e| e.message());
        ensure!(
            message == Some("the closure's own error"),
            "the closure's Err came back as {message:?}"
        );
        s.copy_to_host(&y, &mut got)?.wait()?;
        Ok::<_, gpu_tests::Failed>(())
    });
    outcome?;
    check_eq("a broadcast issued before the closure's Err", &input, &got)?;

    let mut after_panic = poisoned::<u32>(input.len());
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scope(&stream, |s| {
            let x = s.upload(&input)?;
            let mut y = s.alloc_zeroed::<u32>(input.len())?;
            nccl::group(|g| {
                g.broadcast(s, &comm, &x, &mut y, 0)?;
                panic!("a panic inside the group, after a broadcast was issued");
                #[allow(unreachable_code)]
                Ok::<_, Error>(())
            })?;
            Ok::<_, Error>(())
        })
    }));
    ensure!(panicked.is_err(), "the panic did not come out of the scope");
    // The thread's group state was reset on the way out: a group and the scope's own
    // collectives work again, on the same communicator.
    scope(&stream, |s| {
        let x = s.upload(&input)?;
        let mut y = s.alloc_zeroed::<u32>(input.len())?;
        nccl::group(|g| g.broadcast(s, &comm, &x, &mut y, 0))?;
        s.all_reduce_in_place(&comm, &mut y, Sum)?;
        s.copy_to_host(&y, &mut after_panic)?.wait()?;
        Ok::<_, Error>(())
    })?;
    ensure!(!comm.is_aborted(), "the communicator was aborted");
    check_eq("a group after the panic", &input, &after_panic)
}

/// A communicator dropped inside a group, one the group holds no calls of (those it
/// holds are borrowed until its end): NCCL queues its destruction for the group's end,
/// which still enqueues the group's broadcast on the other communicator; the result is
/// right, and the thread's next group works. For a communicator that never ran a
/// collective and for one that did (NCCL's connections set up).
fn a_communicator_dropped_inside_a_group_leaves_the_group_working() -> TestResult {
    let _one_at_a_time = exclusive();
    let device = Device::new(0)?;
    let one_rank = || Communicator::join(&device, &UniqueId::new()?, 0, 1);
    let comm = one_rank()?;
    let stream = device.new_stream()?;
    let input: Vec<u32> = (0..4099).map(|i| 3 * i + 1).collect();
    for used in [false, true] {
        let dropped = one_rank()?;
        if used {
            scope(&stream, |s| {
                let mut x = s.upload(&input)?;
                s.all_reduce_in_place(&dropped, &mut x, Sum)
            })?;
        }
        let mut got = poisoned::<u32>(input.len());
        scope(&stream, |s| {
            let x = s.upload(&input)?;
            let mut y = s.alloc_zeroed::<u32>(input.len())?;
            nccl::group(|g| {
                g.broadcast(s, &comm, &x, &mut y, 0)?;
                drop(dropped);
                Ok::<_, Error>(())
            })?;
            nccl::group(|g| g.all_reduce_in_place(s, &comm, &mut y, Sum))?;
            s.copy_to_host(&y, &mut got)?.wait()?;
            Ok::<_, Error>(())
        })?;
        let which = if used { "used" } else { "fresh" };
        check_eq(
            &format!("a group that dropped a {which} communicator"),
            &input,
            &got,
        )?;
    }
    ensure!(!comm.is_aborted(), "the group's communicator was aborted");
    Ok(())
}

/// The data-parallel overlap driven by one thread: each device's scope forks onto a
/// stream of its device's most urgent priority, lending its gradient; both forks'
/// all-reduces go in one group (nested forks, as nested scopes), while each parent
/// doubles another buffer of its own; after the joins each parent adds that buffer to
/// the gradient. Each device gets the sum plus twice its own input.
fn forks_of_every_device_sum_in_one_group_beside_their_parents() -> TestResult {
    let _one_at_a_time = exclusive();
    let ranks = rank_count()?.min(2);
    let devices = devices_of(ranks)?;
    let comms = Communicator::for_devices(&devices)?;
    let streams = streams_of(&devices)?;
    let urgent = devices
        .iter()
        .map(|d| d.new_stream_with_priority(*d.stream_priorities()?.start()))
        .collect::<stream_core::Result<Vec<_>>>()?;
    let count = 1 << 16;
    let inputs = inputs_of(Rng::new().next_u64(), ranks, count);
    let sum = sum_of(&inputs);
    let mut results = vec![poisoned::<f32>(count); ranks];
    let (first, rest) = results.split_at_mut(1);
    scope(&streams[0], |a| {
        let mut grad0 = a.upload(&inputs[0])?;
        let own0 = a.upload(&inputs[0])?;
        let mut doubled0 = a.alloc::<f32>(count)?;
        if ranks == 1 {
            a.fork(&urgent[0], (&mut grad0,), |c, (mut g0,)| {
                nccl::group(|g| g.all_reduce_in_place(c, &comms[0], &mut g0, Sum))?;
                kernels::scale(a, 2.0, &own0, &mut doubled0)
            })?;
        } else {
            scope(&streams[1], |b| {
                let mut grad1 = b.upload(&inputs[1])?;
                let own1 = b.upload(&inputs[1])?;
                let mut doubled1 = b.alloc::<f32>(count)?;
                a.fork(&urgent[0], (&mut grad0,), |ca, (mut g0,)| {
                    b.fork(&urgent[1], (&mut grad1,), |cb, (mut g1,)| {
                        nccl::group(|g| {
                            g.all_reduce_in_place(ca, &comms[0], &mut g0, Sum)?;
                            g.all_reduce_in_place(cb, &comms[1], &mut g1, Sum)
                        })?;
                        kernels::scale(a, 2.0, &own0, &mut doubled0)?;
                        kernels::scale(b, 2.0, &own1, &mut doubled1)
                    })
                })?;
                kernels::axpy(b, 1.0, &doubled1, &mut grad1)?;
                b.copy_to_host(&grad1, &mut rest[0])?.wait()?;
                Ok::<_, Error>(())
            })?;
        }
        kernels::axpy(a, 1.0, &doubled0, &mut grad0)?;
        a.copy_to_host(&grad0, &mut first[0])?.wait()?;
        Ok::<_, Error>(())
    })?;
    for (r, got) in results.iter().enumerate() {
        let expected: Vec<f32> = sum
            .iter()
            .zip(&inputs[r])
            .map(|(s, x)| s + 2.0 * x)
            .collect();
        check_eq(
            &format!("device {r}: the sum plus twice its own"),
            &expected,
            got,
        )?;
    }
    Ok(())
}
