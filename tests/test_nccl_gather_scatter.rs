//! `Scope::gather`, `Scope::scatter` and their `Group` forms: every rank's send buffer
//! lands in its block of the root's receive buffer, and block `r` of the root's send
//! buffer in rank `r`'s receive buffer, compared bit for bit with the CPU, for every
//! root; the buffers the other ranks do not use stay untouched (and may be empty); one
//! thread driving every device; and every refusal before anything is enqueued.
//!
//! On one GPU the communicators have one rank, the root (its block goes to itself
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
        every_root_gathers_every_ranks_block,
        every_root_scatters_a_block_to_every_rank,
        one_thread_gathers_and_scatters_over_every_device,
        bad_roots_and_buffers_are_refused_before_anything_is_enqueued,
    ],
}

/// Block lengths: none, one, odd, and large enough for NCCL's larger protocols.
const BLOCKS: [usize; 4] = [0, 1, 1001, 65536];

/// One thread and communicator per rank: `gather` to each root in turn, with blocks of
/// [`BLOCKS`] elements of two element types. Non-roots pass an empty receive buffer on
/// even roots and a poisoned one of the root's length on odd ones, which must come back
/// unchanged.
fn every_root_gathers_every_ranks_block() -> TestResult {
    let ranks = rank_count()?;
    let seed = Rng::new().next_u64();
    fn gathers<T: NcclValue>(ranks: usize, seed: u64) -> TestResult {
        for block in BLOCKS {
            let inputs: Vec<Vec<T>> = (0..ranks)
                .map(|r| rank_input(seed ^ block as u64, r, block, false))
                .collect();
            let all: Vec<T> = inputs.concat();
            for root in 0..ranks {
                on_ranks(ranks, |rank, comm, stream| {
                    let recv_len = if rank == root || root % 2 == 1 {
                        block * ranks
                    } else {
                        0
                    };
                    let before = poisoned::<T>(recv_len);
                    let mut got = before.clone();
                    scope(stream, |s| {
                        let send = s.upload(&inputs[rank])?;
                        let mut recv = s.upload(&before)?;
                        s.gather(comm, &send, &mut recv, root)?;
                        s.copy_to_host(&recv, &mut got)?.wait()?;
                        Ok::<_, Error>(())
                    })?;
                    let what = format!(
                        "gather of {block} {} to root {root}, rank {rank} of {ranks}",
                        std::any::type_name::<T>()
                    );
                    let expected = if rank == root { &all } else { &before };
                    check_eq(&what, expected, &got)
                })?;
            }
        }
        Ok(())
    }
    gathers::<f32>(ranks, seed)?;
    gathers::<i64>(ranks, seed)
}

/// One thread and communicator per rank: `scatter` from each root in turn, with blocks
/// of [`BLOCKS`] elements; non-roots pass an empty send buffer or a full-length one.
fn every_root_scatters_a_block_to_every_rank() -> TestResult {
    let ranks = rank_count()?;
    let seed = Rng::new().next_u64();
    for block in BLOCKS {
        for root in 0..ranks {
            let inputs: Vec<Vec<u32>> = (0..ranks)
                .map(|r| rank_input(seed ^ (block * 31 + root) as u64, r, block * ranks, false))
                .collect();
            on_ranks(ranks, |rank, comm, stream| {
                let before = poisoned::<u32>(block);
                let mut got = before.clone();
                let send_len = if rank == root || root % 2 == 1 {
                    block * ranks
                } else {
                    0
                };
                scope(stream, |s| {
                    let send = s.upload(&inputs[rank][..send_len])?;
                    let mut recv = s.upload(&before)?;
                    s.scatter(comm, &send, &mut recv, root)?;
                    s.copy_to_host(&recv, &mut got)?.wait()?;
                    Ok::<_, Error>(())
                })?;
                check_eq(
                    &format!("scatter of {block} from root {root}, rank {rank} of {ranks}"),
                    &inputs[root][rank * block..(rank + 1) * block],
                    &got,
                )
            })?;
        }
    }
    Ok(())
}

/// `Communicator::for_devices` over every visible GPU (up to two here), one thread: a
/// gather to the last device and a scatter from it in one `nccl::group`, both checked.
fn one_thread_gathers_and_scatters_over_every_device() -> TestResult {
    let _one_at_a_time = exclusive();
    let ranks = rank_count()?.min(2);
    let devices = devices_of(ranks)?;
    let comms = Communicator::for_devices(&devices)?;
    let streams = streams_of(&devices)?;
    let seed = Rng::new().next_u64();
    let (block, root) = (4099, ranks - 1);
    let inputs: Vec<Vec<f32>> = (0..ranks)
        .map(|r| rank_input(seed, r, block * ranks, false))
        .collect();
    // Device r gathers its first block to the root, and the root scatters its input.
    let mut gathered = poisoned::<f32>(block * ranks);
    let mut scattered = vec![poisoned::<f32>(block); ranks];
    if ranks == 1 {
        scope(&streams[0], |a| {
            let x = a.upload(&inputs[0])?;
            let (mut all, mut mine) = (a.alloc::<f32>(block)?, a.alloc::<f32>(block)?);
            nccl::group(|g| {
                g.gather(a, &comms[0], &x, &mut all, 0)?;
                g.scatter(a, &comms[0], &x, &mut mine, 0)
            })?;
            a.copy_to_host(&all, &mut gathered)?.wait()?;
            a.copy_to_host(&mine, &mut scattered[0])?.wait()?;
            Ok::<_, Error>(())
        })?;
    } else {
        let (first, rest) = scattered.split_at_mut(1);
        scope_all!([&streams[0], &streams[1]], |a, b| {
            let x0 = a.upload(&inputs[0])?;
            let x1 = b.upload(&inputs[1])?;
            let head0 = x0.slice(..block)?;
            let head1 = x1.slice(..block)?;
            let mut unused = a.alloc::<f32>(0)?;
            let mut all = b.alloc::<f32>(block * 2)?;
            let (mut mine0, mut mine1) = (a.alloc::<f32>(block)?, b.alloc::<f32>(block)?);
            let nothing = a.alloc::<f32>(0)?;
            nccl::group(|g| {
                g.gather(a, &comms[0], &head0, &mut unused, 1)?;
                g.gather(b, &comms[1], &head1, &mut all, 1)?;
                g.scatter(a, &comms[0], &nothing, &mut mine0, 1)?;
                g.scatter(b, &comms[1], &x1, &mut mine1, 1)
            })?;
            b.copy_to_host(&all, &mut gathered)?.wait()?;
            a.copy_to_host(&mine0, &mut first[0])?.wait()?;
            b.copy_to_host(&mine1, &mut rest[0])?.wait()?;
            Ok::<_, Error>(())
        })?;
    }
    let heads: Vec<f32> = inputs.iter().flat_map(|x| x[..block].to_vec()).collect();
    check_eq("grouped gather to the last device", &heads, &gathered)?;
    for (rank, got) in scattered.iter().enumerate() {
        check_eq(
            &format!("grouped scatter from device {root}, device {rank} of {ranks}"),
            &inputs[root][rank * block..(rank + 1) * block],
            got,
        )?;
    }
    Ok(())
}

/// A root outside the communicator, a root's buffer of the wrong length (one block too
/// few, or not a whole number of blocks), a call inside a group: each an `Err` of its
/// kind with the receive buffer untouched, and the communicator working afterwards.
fn bad_roots_and_buffers_are_refused_before_anything_is_enqueued() -> TestResult {
    let _one_at_a_time = exclusive();
    let device = Device::new(0)?;
    let comm = Communicator::join(&device, &UniqueId::new()?, 0, 1)?;
    let stream = device.new_stream()?;
    let input: Vec<u32> = (1..=6).collect();
    let (mut untouched, mut after) = (vec![0u32; 7], vec![0u32; 6]);
    scope(&stream, |s| {
        let send = s.upload(&input)?;
        let mut recv = s.upload(&[7u32; 6])?;
        let mut long = s.upload(&[7u32; 7])?;
        let err = s.gather(&comm, &send, &mut recv, 1).unwrap_err();
        ensure!(
            matches!(err, Error::InvalidRank { .. }),
            "root 1 of 1: {err}"
        );
        let err = s.scatter(&comm, &send, &mut recv, usize::MAX).unwrap_err();
        ensure!(matches!(err, Error::InvalidRank { .. }), "root MAX: {err}");
        let err = s.gather(&comm, &send, &mut long, 0).unwrap_err();
        ensure!(
            matches!(err, Error::ShapeMismatch(..)) && err.to_string().contains("root's"),
            "a gather into 7 of 6: {err}"
        );
        let err = s.scatter(&comm, &send, &mut long, 0).unwrap_err();
        ensure!(
            matches!(err, Error::ShapeMismatch(..)) && err.to_string().contains("root's"),
            "a scatter of 6 into 7: {err}"
        );
        let err = nccl::group(|_| s.gather(&comm, &send, &mut recv, 0)).unwrap_err();
        ensure!(
            matches!(err, Error::NcclGroup { .. }),
            "inside a group: {err}"
        );
        s.copy_to_host(&long, &mut untouched)?.wait()?;
        s.gather(&comm, &send, &mut recv, 0)?;
        s.copy_to_host(&recv, &mut after)?.wait()?;
        Ok::<_, gpu_tests::Failed>(())
    })?;
    ensure!(untouched == [7; 7], "a refused call wrote {untouched:?}");
    ensure!(after == input, "after the refusals: {after:?}");
    Ok(())
}
