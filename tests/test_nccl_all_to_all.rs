//! `Scope::all_to_all`, `Scope::all_to_all_v` and `Group::all_to_all`: block `r` of
//! every rank's send buffer lands in block `q` of rank `r`'s receive buffer, where `q` is
//! the sender (blocks of equal length, or of the lengths the counts give), compared bit
//! for bit with the CPU; one communicator per thread (the scope's methods) and one
//! thread driving every device (the group's); and every refusal before anything is
//! enqueued.
//!
//! On one GPU the communicators have one rank (the block goes to the rank itself,
//! through NCCL's send and receive to itself); with two, the ranks exchange. Without a
//! CUDA device these tests are reported as ignored; without NCCL they fail, naming it.

use gpu_tests::nccl_ranks::{
    devices_of, exclusive, on_ranks, rank_count, rank_input, streams_of, NcclValue,
};
use gpu_tests::{check_eq, ensure, poisoned, Rng, TestResult};
use stream_core::nccl::{self, Communicator, UniqueId};
use stream_core::{scope, scope_all, Device, Error};

gpu_tests::test_main! {
    gpu: [
        every_rank_gets_its_block_from_every_rank,
        uneven_blocks_go_where_the_counts_say,
        one_thread_drives_an_all_to_all_over_every_device,
        bad_buffers_and_calls_are_refused_before_anything_is_enqueued,
        a_ranks_send_to_itself_and_its_receive_must_agree,
    ],
}

/// What rank `rank` receives from an all-to-all of `inputs` (one per rank, `ranks`
/// blocks each): block `r` is block `rank` of rank `r`'s input.
fn routed<T: Copy>(inputs: &[Vec<T>], rank: usize) -> Vec<T> {
    let block = inputs[0].len() / inputs.len();
    inputs
        .iter()
        .flat_map(|input| input[rank * block..(rank + 1) * block].iter().copied())
        .collect()
}

/// Every rank's input of `ranks` blocks of `block` elements.
fn inputs_of<T: NcclValue>(seed: u64, ranks: usize, block: usize) -> Vec<Vec<T>> {
    (0..ranks)
        .map(|r| rank_input(seed, r, block * ranks, false))
        .collect()
}

/// One thread and communicator per rank (`Communicator::join`), the scope's
/// `all_to_all` on blocks of 0, 1, 1001 and 65536 elements of three element types.
fn every_rank_gets_its_block_from_every_rank() -> TestResult {
    let ranks = rank_count()?;
    let seed = Rng::new().next_u64();
    fn exchange<T: NcclValue>(ranks: usize, seed: u64) -> TestResult {
        for block in [0, 1, 1001, 65536] {
            let inputs = inputs_of::<T>(seed ^ block as u64, ranks, block);
            on_ranks(ranks, |rank, comm, stream| {
                let before = poisoned::<T>(block * ranks);
                let mut got = before.clone();
                scope(stream, |s| {
                    let send = s.upload(&inputs[rank])?;
                    let mut recv = s.upload(&before)?;
                    s.all_to_all(comm, &send, &mut recv)?;
                    s.copy_to_host(&recv, &mut got)?.wait()?;
                    Ok::<_, Error>(())
                })?;
                check_eq(
                    &format!(
                        "all_to_all of {block} {} per block, rank {rank} of {ranks}",
                        std::any::type_name::<T>()
                    ),
                    &routed(&inputs, rank),
                    &got,
                )
            })?;
        }
        Ok(())
    }
    exchange::<f32>(ranks, seed)?;
    exchange::<u8>(ranks, seed)?;
    exchange::<i64>(ranks, seed)
}

/// How many elements rank `from` sends rank `to` in round `round`: 0 to 1500, zero for
/// some pairs (including a rank and itself), different in each direction.
fn count(round: u64, from: usize, to: usize) -> usize {
    let mix = round
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((from * 7 + to * 13) as u64)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    match (mix >> 40) % 4 {
        0 => 0,
        _ => ((mix >> 20) % 1501) as usize,
    }
}

/// `all_to_all_v` with counts that differ per pair of ranks (zero for some), one thread
/// and communicator per rank, over a few rounds: each rank's receive buffer holds, in
/// rank order, the block every rank addressed to it.
fn uneven_blocks_go_where_the_counts_say() -> TestResult {
    let ranks = rank_count()?;
    let seed = Rng::new().next_u64();
    for round in seed..seed + 4 {
        let sends: Vec<Vec<usize>> = (0..ranks)
            .map(|q| (0..ranks).map(|r| count(round, q, r)).collect())
            .collect();
        let inputs: Vec<Vec<i32>> = (0..ranks)
            .map(|q| rank_input(round, q, sends[q].iter().sum(), false))
            .collect();
        // Rank `to`'s expected receive buffer: from each rank, the block at that rank's
        // offset for `to`.
        let expected = |to: usize| -> Vec<i32> {
            (0..ranks)
                .flat_map(|from| {
                    let at: usize = sends[from][..to].iter().sum();
                    inputs[from][at..at + sends[from][to]].iter().copied()
                })
                .collect()
        };
        on_ranks(ranks, |rank, comm, stream| {
            let recv_counts: Vec<usize> = (0..ranks).map(|from| sends[from][rank]).collect();
            let before = poisoned::<i32>(recv_counts.iter().sum());
            let mut got = before.clone();
            scope(stream, |s| {
                let send = s.upload(&inputs[rank])?;
                let mut recv = s.upload(&before)?;
                s.all_to_all_v(comm, &send, &sends[rank], &mut recv, &recv_counts)?;
                s.copy_to_host(&recv, &mut got)?.wait()?;
                Ok::<_, Error>(())
            })?;
            check_eq(
                &format!("all_to_all_v, counts {sends:?}, rank {rank} of {ranks}"),
                &expected(rank),
                &got,
            )
        })?;
    }
    Ok(())
}

/// `Communicator::for_devices` over every visible GPU (up to two here), one thread: each
/// device's all-to-all issued in one `nccl::group`, beside an all-reduce of the same
/// group, both checked.
fn one_thread_drives_an_all_to_all_over_every_device() -> TestResult {
    let _one_at_a_time = exclusive();
    let ranks = rank_count()?.min(2);
    let devices = devices_of(ranks)?;
    let comms = Communicator::for_devices(&devices)?;
    let streams = streams_of(&devices)?;
    let seed = Rng::new().next_u64();
    let block = 4099;
    let inputs = inputs_of::<f32>(seed, ranks, block);
    let mut got = vec![poisoned::<f32>(block * ranks); ranks];
    if ranks == 1 {
        scope(&streams[0], |a| {
            let x = a.upload(&inputs[0])?;
            let mut y = a.alloc::<f32>(block)?;
            nccl::group(|g| g.all_to_all(a, &comms[0], &x, &mut y))?;
            a.copy_to_host(&y, &mut got[0])?.wait()?;
            Ok::<_, Error>(())
        })?;
    } else {
        let (first, rest) = got.split_at_mut(1);
        scope_all!([&streams[0], &streams[1]], |a, b| {
            let x0 = a.upload(&inputs[0])?;
            let mut y0 = a.alloc::<f32>(block * 2)?;
            let x1 = b.upload(&inputs[1])?;
            let mut y1 = b.alloc::<f32>(block * 2)?;
            nccl::group(|g| {
                g.all_to_all(a, &comms[0], &x0, &mut y0)?;
                g.all_to_all(b, &comms[1], &x1, &mut y1)
            })?;
            a.copy_to_host(&y0, &mut first[0])?.wait()?;
            b.copy_to_host(&y1, &mut rest[0])?.wait()?;
            Ok::<_, Error>(())
        })?;
    }
    for (rank, got) in got.iter().enumerate() {
        check_eq(
            &format!("grouped all_to_all, device {rank} of {ranks}"),
            &routed(&inputs, rank),
            got,
        )?;
    }
    Ok(())
}

/// Lengths that differ, a length that is not a multiple of the ranks, a call inside a
/// group, a communicator driven by one thread for several devices, another device's
/// communicator and an aborted one: each an `Err` of its kind, with the receive buffer
/// untouched, and the communicator (but the aborted one) still working afterwards.
fn bad_buffers_and_calls_are_refused_before_anything_is_enqueued() -> TestResult {
    let _one_at_a_time = exclusive();
    let ranks = rank_count()?.min(2);
    let device = Device::new(0)?;
    let comm = Communicator::join(&device, &UniqueId::new()?, 0, 1)?;
    let stream = device.new_stream()?;
    let input: Vec<u32> = (0..6).collect();
    let (mut untouched, mut after) = (vec![0u32; 6], vec![0u32; 6]);
    scope(&stream, |s| {
        let send = s.upload(&input)?;
        let mut recv = s.upload(&[7u32; 6])?;
        let mut short = s.upload(&[7u32; 5])?;
        let err = s.all_to_all(&comm, &send, &mut short).unwrap_err();
        ensure!(
            matches!(err, Error::LengthMismatch { .. }),
            "lengths: {err}"
        );
        let err = nccl::group(|_| s.all_to_all(&comm, &send, &mut recv)).unwrap_err();
        ensure!(
            matches!(err, Error::NcclGroup { .. }),
            "inside a group: {err}"
        );
        s.copy_to_host(&recv, &mut untouched)?.wait()?;
        s.all_to_all(&comm, &send, &mut recv)?;
        s.copy_to_host(&recv, &mut after)?.wait()?;
        Ok::<_, gpu_tests::Failed>(())
    })?;
    ensure!(untouched == [7; 6], "a refused call wrote {untouched:?}");
    ensure!(after == input, "after the refusals: {after:?}");

    if ranks > 1 {
        let devices = devices_of(2)?;
        let siblings = Communicator::for_devices(&devices)?;
        scope(&stream, |s| {
            let send = s.upload(&input)?;
            let mut recv = s.upload(&[7u32; 6])?;
            let err = s.all_to_all(&siblings[0], &send, &mut recv).unwrap_err();
            ensure!(matches!(err, Error::NcclGroup { .. }), "siblings: {err}");
            let err = nccl::group(|g| g.all_to_all(s, &siblings[1], &send, &mut recv)).unwrap_err();
            ensure!(
                matches!(err, Error::DeviceMismatch { .. }),
                "another device's communicator: {err}"
            );
            let mut odd = s.upload(&[7u32; 5])?;
            let odd_send = s.upload(&input[..5])?;
            let err =
                nccl::group(|g| g.all_to_all(s, &siblings[0], &odd_send, &mut odd)).unwrap_err();
            ensure!(
                matches!(err, Error::ShapeMismatch(..)),
                "5 over 2 ranks: {err}"
            );
            s.copy_to_host(&recv, &mut untouched)?.wait()?;
            Ok::<_, gpu_tests::Failed>(())
        })?;
        ensure!(untouched == [7; 6], "a refused call wrote {untouched:?}");
    }

    comm.abort();
    scope(&stream, |s| {
        let send = s.upload(&input)?;
        let mut recv = s.upload(&[7u32; 6])?;
        let err = s.all_to_all(&comm, &send, &mut recv).unwrap_err();
        ensure!(
            matches!(err, Error::CommunicatorAborted { .. }),
            "aborted: {err}"
        );
        Ok::<_, gpu_tests::Failed>(())
    })
}

/// NCCL copies a send to the rank itself into its paired receive with the send's
/// length: a longer send would write past the receive. On a communicator of one rank:
/// `all_to_all_v` whose counts for the rank itself differ, and a group's send to itself
/// longer (then shorter) than its receive, are refused before NCCL sees them, and the
/// elements just past the receive (the other half of one buffer) keep their values.
fn a_ranks_send_to_itself_and_its_receive_must_agree() -> TestResult {
    let _one_at_a_time = exclusive();
    let device = Device::new(0)?;
    let comm = Communicator::join(&device, &UniqueId::new()?, 0, 1)?;
    let stream = device.new_stream()?;
    let input: Vec<u32> = (0..16).collect();
    let before = poisoned::<u32>(16);
    let mut after = before.clone();
    scope(&stream, |s| {
        let send = s.upload(&input)?;
        let mut recv = s.upload(&before)?;
        let (mut head, _tail) = recv.split_at_mut(8)?;
        let err = s
            .all_to_all_v(&comm, &send, &[16], &mut head, &[8])
            .unwrap_err();
        ensure!(
            matches!(err, Error::LengthMismatch(..)),
            "16 to itself into 8: {err}"
        );
        Ok::<_, gpu_tests::Failed>(())
    })?;
    scope(&stream, |s| {
        let send = s.upload(&input)?;
        let mut recv = s.upload(&before)?;
        let (mut head, _tail) = recv.split_at_mut(8)?;
        // A longer send after its receive, then a shorter one before it.
        let err = nccl::group(|g| {
            g.recv(s, &comm, &mut head, 0)?;
            g.send(s, &comm, &send, 0)
        })
        .unwrap_err();
        ensure!(
            matches!(err, Error::LengthMismatch(..)),
            "a send of 16 to a receive of 8: {err}"
        );
        Ok::<_, gpu_tests::Failed>(())
    })?;
    ensure!(!comm.is_aborted(), "the communicator was aborted");
    scope(&stream, |s| {
        let send = s.upload(&input)?;
        let mut recv = s.upload(&before)?;
        {
            let (mut head, _tail) = recv.split_at_mut(8)?;
            let short = send.slice(..4)?;
            let err = nccl::group(|g| {
                g.send(s, &comm, &short, 0)?;
                g.recv(s, &comm, &mut head, 0)
            })
            .unwrap_err();
            ensure!(
                matches!(err, Error::LengthMismatch(..)),
                "a receive of 8 for a send of 4: {err}"
            );
        }
        s.copy_to_host(&recv, &mut after)?.wait()?;
        Ok::<_, gpu_tests::Failed>(())
    })?;
    ensure!(
        after[8..] == before[8..],
        "the elements past the receive changed: {:?}",
        &after[8..]
    );
    Ok(())
}
