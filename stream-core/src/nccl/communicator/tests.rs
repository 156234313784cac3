//! An abort from another thread (what a watchdog does) while this thread issues
//! collectives on the communicator, one rank on one GPU: the abort handshake
//! (`driver/abort_handshake.rs`) makes NCCL's abort between this thread's calls, or after
//! its group's end, never during a call; every later call is refused.
//!
//! They run one at a time with the tests that stall the GPU (`one_at_a_time`): beside
//! them, a stalled test's `upload_vec` returned only at the stall's 20 s limit in every
//! full run of the lib's tests (3 of 3 on one H200; 0 of 40 runs of that test alone),
//! which fits NCCL freeing pinned host memory when a communicator is made or aborted
//! (`cuMemFreeHost` waits for the whole GPU, a stalled stream included, and holds up
//! other threads' driver calls meanwhile).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use crate::device::watch::gate::one_at_a_time;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::nccl::{self, Communicator, Sum, UniqueId};
use crate::scope::scope;

fn is_aborted<T>(result: &Result<T>) -> bool {
    matches!(result, Err(Error::CommunicatorAborted { .. }))
}

/// Collectives issued in a loop, an abort from another thread at a different moment
/// each round: the loop's next call is refused, the scope ends (the abort stopped what
/// was queued), and nothing crashes or hangs.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn an_abort_from_another_thread_lands_between_collectives() -> Result<()> {
    let _one = one_at_a_time(); // see the module's docs
    let device = Device::new(0)?;
    let stream = device.new_stream()?;
    for round in 0..20u64 {
        let comm = Communicator::join(&device, &UniqueId::new()?, 0, 1)?;
        let control = Arc::clone(comm.raw().control());
        let (started_tx, started) = mpsc::channel();
        let (issued, refused, ended) = std::thread::scope(|threads| {
            threads.spawn(move || {
                let _ = started.recv();
                std::thread::sleep(Duration::from_micros(50 * round));
                control.abort();
            });
            let (mut issued, mut refused) = (0u32, None);
            let ended = scope(&stream, |s| {
                let mut x = s.alloc_zeroed::<f32>(256)?;
                let _ = started_tx.send(());
                for _ in 0..1_000_000 {
                    match s.all_reduce_in_place(&comm, &mut x, Sum) {
                        Ok(()) => issued += 1,
                        Err(e) => {
                            refused = Some(e);
                            break;
                        }
                    }
                }
                Ok::<_, Error>(())
            });
            (issued, refused, ended)
        });
        assert!(
            matches!(refused, Some(Error::CommunicatorAborted { .. })),
            "round {round}: {refused:?} after {issued} calls"
        );
        assert!(
            ended.is_ok() || is_aborted(&ended),
            "round {round}: the scope ended with {ended:?}"
        );
        assert!(comm.is_aborted());
    }
    Ok(())
}

/// The abort asked for from another thread while this thread's group holds calls on
/// the communicator: it waits for the group's end (NCCL makes the held calls then, on
/// the communicator the abort would free), the group's later calls are refused, and the
/// abort is made after the end.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn an_abort_from_another_thread_waits_for_the_groups_end() -> Result<()> {
    let _one = one_at_a_time(); // see the module's docs
    let device = Device::new(0)?;
    let stream = device.new_stream()?;
    let comm = Communicator::join(&device, &UniqueId::new()?, 0, 1)?;
    let control = Arc::clone(comm.raw().control());
    let mut in_group = None;
    let ended = scope(&stream, |s| {
        let mut x = s.alloc_zeroed::<f32>(256)?;
        let mut y = s.alloc_zeroed::<f32>(256)?;
        in_group = Some(nccl::group(|g| {
            g.all_reduce_in_place(s, &comm, &mut x, Sum)?;
            // Another thread asks for the abort while the group holds that call.
            std::thread::scope(|threads| threads.spawn(|| control.abort()).join())
                .expect("the abort returns");
            assert!(comm.is_aborted(), "marked at once");
            g.all_reduce_in_place(s, &comm, &mut y, Sum)
        }));
        Ok::<_, Error>(())
    });
    let in_group = in_group.expect("the scope ran its closure");
    assert!(
        is_aborted(&in_group),
        "the group's second call: {in_group:?}"
    );
    assert!(
        ended.is_ok() || is_aborted(&ended),
        "the scope ended with {ended:?}"
    );
    Ok(())
}
