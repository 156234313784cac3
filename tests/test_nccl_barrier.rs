//! `Communicator::barrier`: no rank's barrier returns before the last rank has called
//! it (one thread and communicator per rank, the ranks arriving 0.4 s apart), a barrier
//! of one rank returns at once, and the refusals (inside a group, a communicator of
//! `for_devices` with siblings, an aborted one). A barrier a rank never reaches is
//! `test_nccl_hung`'s.
//!
//! Without a CUDA device these tests are reported as ignored; without NCCL they fail,
//! naming it.

use std::time::{Duration, Instant};

use gpu_tests::nccl_ranks::{devices_of, exclusive, on_ranks, rank_count};
use gpu_tests::{ensure, TestResult};
use stream_core::nccl::{self, Communicator, UniqueId};
use stream_core::{Device, Error};

gpu_tests::test_main! {
    gpu: [
        no_rank_leaves_before_the_last_one_arrives,
        a_barrier_of_one_rank_returns_at_once,
        barriers_that_cannot_be_kept_are_refused,
    ],
}

/// How far apart the ranks arrive.
const STAGGER: Duration = Duration::from_millis(400);

/// After a first barrier that releases every rank at once, rank `r` waits `r × 0.4 s`
/// and calls `barrier` again, three times over: no rank's barrier returns before the
/// last rank's arrival (less 50 ms for how far apart the first barrier released them).
fn no_rank_leaves_before_the_last_one_arrives() -> TestResult {
    let ranks = rank_count()?;
    let last_arrival = STAGGER * (ranks as u32 - 1);
    let slack = Duration::from_millis(50);
    on_ranks(ranks, |rank, comm, _stream| {
        comm.barrier()?;
        for round in 0..3 {
            let released = Instant::now();
            std::thread::sleep(STAGGER * rank as u32);
            comm.barrier()?;
            let left = released.elapsed();
            ensure!(
                left + slack >= last_arrival,
                "round {round}: rank {rank} of {ranks} left the barrier {left:?} after the \
                 last release, before the last rank arrived at {last_arrival:?}"
            );
        }
        Ok(())
    })
}

/// One rank: the barrier returns at once, and the communicator goes on working.
fn a_barrier_of_one_rank_returns_at_once() -> TestResult {
    let _one_at_a_time = exclusive();
    let device = Device::new(0)?;
    let comm = Communicator::join(&device, &UniqueId::new()?, 0, 1)?;
    comm.barrier()?;
    let start = Instant::now();
    for _ in 0..10 {
        comm.barrier()?;
    }
    let each = start.elapsed() / 10;
    ensure!(
        each < Duration::from_millis(100),
        "a barrier of one rank took {each:?}"
    );
    ensure!(!comm.is_aborted(), "the communicator was aborted");
    comm.check()?;
    Ok(())
}

/// Inside a group, on a communicator of `for_devices` with siblings (two GPUs), and on
/// an aborted communicator: an `Err` of its kind, before anything is enqueued.
fn barriers_that_cannot_be_kept_are_refused() -> TestResult {
    let _one_at_a_time = exclusive();
    let device = Device::new(0)?;
    let comm = Communicator::join(&device, &UniqueId::new()?, 0, 1)?;
    let in_use = device.memory_stats()?.in_use_bytes;
    let err = nccl::group(|_| comm.barrier()).unwrap_err();
    ensure!(
        matches!(err, Error::NcclGroup { .. }),
        "a barrier inside a group: {err}"
    );
    // Refused before the barrier's token (device memory it keeps) was made.
    let after = device.memory_stats()?.in_use_bytes;
    ensure!(
        after == in_use,
        "a refused barrier left {after} bytes in use, not {in_use}"
    );
    comm.barrier()?;
    if rank_count()? > 1 {
        let siblings = Communicator::for_devices(&devices_of(2)?)?;
        let err = siblings[0].barrier().unwrap_err();
        ensure!(
            matches!(err, Error::NcclGroup { .. }),
            "a barrier on one of for_devices' communicators: {err}"
        );
    }
    comm.abort();
    let err = comm.barrier().unwrap_err();
    ensure!(
        matches!(err, Error::CommunicatorAborted { .. }),
        "a barrier on an aborted communicator: {err}"
    );
    Ok(())
}
