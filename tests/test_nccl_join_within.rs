//! `Communicator::join_within`: a rank whose peers never come gets `JoinTimedOut` at
//! its limit instead of waiting inside NCCL for good, and the device goes on working;
//! ranks that all come get ordinary members, whose collectives match the CPU.
//!
//! One GPU suffices for the first (the missing rank is simply never started); the
//! second uses every visible GPU, up to eight. Without a CUDA device these tests are
//! reported as ignored; without NCCL they fail, naming it.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use gpu_tests::nccl_ranks::{exclusive, on_ranks_joined_by, rank_count, rank_input};
use gpu_tests::{check_eq, ensure, Failed, Rng, TestResult};
use stream_core::nccl::{Communicator, Sum, UniqueId};
use stream_core::{scope, Device, Error};

gpu_tests::test_main! {
    gpu: [
        a_rank_whose_peer_never_comes_times_out,
        ranks_that_all_come_get_ordinary_members,
    ],
}

/// Rank 0 of 2 joins alone, with a limit of two seconds: `JoinTimedOut` naming the limit,
/// after at least the limit and well before the test's own patience (with no time at
/// all, at once; rank 2 of 2 is refused before NCCL is asked); then a communicator
/// of one rank, joined with `Duration::MAX` (no limit), all-reduces on the same device.
fn a_rank_whose_peer_never_comes_times_out() -> TestResult {
    let _one_at_a_time = exclusive();
    let device = Device::new(0)?;
    let limit = Duration::from_secs(2);
    let started = Instant::now();
    let joined = Communicator::join_within(&device, &UniqueId::new()?, 0, 2, limit);
    let took = started.elapsed();
    match joined {
        Err(Error::JoinTimedOut { timeout }) => ensure!(timeout == limit, "{timeout:?}"),
        Err(e) => return Err(Failed::from(format!("expected JoinTimedOut, got {e}"))),
        Ok(_) => return Err(Failed::from("a communicator of two ranks with one joined")),
    }
    ensure!(
        took >= limit && took < limit + Duration::from_secs(8),
        "gave up after {took:?} with a limit of {limit:?}"
    );
    println!("join_within: one rank of two gave up after {took:?} (limit {limit:?})");

    // No time at all: the same error at once; a rank outside the size: refused before
    // NCCL is asked.
    let started = Instant::now();
    let zero = Communicator::join_within(&device, &UniqueId::new()?, 0, 2, Duration::ZERO);
    ensure!(
        matches!(
            zero,
            Err(Error::JoinTimedOut {
                timeout: Duration::ZERO
            })
        ),
        "a zero limit: {:?}",
        zero.err()
    );
    ensure!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let outside = Communicator::join_within(&device, &UniqueId::new()?, 2, 2, limit);
    ensure!(
        matches!(outside, Err(Error::InvalidRank { rank: 2, size: 2 })),
        "rank 2 of 2: {:?}",
        outside.err()
    );

    // A limit no clock can reach is no limit.
    let alone = Communicator::join_within(&device, &UniqueId::new()?, 0, 1, Duration::MAX)?;
    let stream = device.new_stream()?;
    let mut got = [0f32; 5];
    scope(&stream, |s| {
        let mut x = s.upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0])?;
        s.all_reduce_in_place(&alone, &mut x, Sum)?;
        s.copy_to_host(&x, &mut got)?.wait()?;
        Ok::<_, Error>(())
    })?;
    check_eq(
        "an all_reduce of one rank after the timeout",
        &[1.0, 2.0, 3.0, 4.0, 5.0],
        &got,
    )
}

/// One thread per visible GPU joins with `join_within` (30 s): each member has its
/// rank and the size, and an all_reduce of 4099 integers matches the CPU's sum. The
/// time each join took is printed beside a plain `join`'s (information, not a check).
fn ranks_that_all_come_get_ordinary_members() -> TestResult {
    let ranks = rank_count()?;
    let seed = Rng::new().next_u64();
    let inputs: Vec<Vec<i32>> = (0..ranks)
        .map(|r| rank_input(seed, r, 4099, false))
        .collect();
    let expected: Vec<i32> = (0..4099)
        .map(|i| inputs.iter().fold(0i32, |sum, x| sum.wrapping_add(x[i])))
        .collect();
    // A plain join first: the process's first communicator pays for NCCL's own start.
    for bounded in [false, true] {
        let took = Mutex::new(vec![Duration::ZERO; ranks]);
        let join = |device: &Device, id: &UniqueId, rank, size| {
            let started = Instant::now();
            let comm = if bounded {
                Communicator::join_within(device, id, rank, size, Duration::from_secs(30))
            } else {
                Communicator::join(device, id, rank, size)
            };
            took.lock().unwrap_or_else(PoisonError::into_inner)[rank] = started.elapsed();
            comm
        };
        on_ranks_joined_by(ranks, join, |rank, comm, stream| {
            ensure!(
                (comm.rank(), comm.size()) == (rank, ranks),
                "rank {} of {}",
                comm.rank(),
                comm.size()
            );
            let mut got = vec![0i32; 4099];
            scope(stream, |s| {
                let mut x = s.upload(&inputs[rank])?;
                s.all_reduce_in_place(comm, &mut x, Sum)?;
                s.copy_to_host(&x, &mut got)?.wait()?;
                Ok::<_, Error>(())
            })?;
            check_eq(
                &format!("all_reduce, rank {rank} of {ranks}"),
                &expected,
                &got,
            )
        })?;
        let how = if bounded { "join_within" } else { "join" };
        let took = took.into_inner().unwrap_or_else(PoisonError::into_inner);
        println!("{how}: {ranks} rank(s) joined in {took:?}");
    }
    Ok(())
}
