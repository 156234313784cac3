//! A call that waits for the whole device (`trim_pinned_memory`) on one thread while a
//! scope on another thread is behind a collective whose peer died: it waits on the host
//! while that thread waits (its watch gives up and drains the stream) and while that
//! thread is busy elsewhere (the watchdog asks the watch in its place), and it is refused
//! in time when even an abort cannot drain the stream, instead of waiting in the driver
//! for that thread's next wait (`memory/watched_streams.rs`).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{gate_watch, is_timed_out, Watch, BOUNDED, GIVES_UP_AFTER};
use crate::device::watch::gate::{one_at_a_time, Gate};
use crate::device::watch::StreamWatch;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::WATCHDOG_GRACE;
use crate::scope::scope;

/// What one run gave: the trim's result and time, the pinned cache before and after it,
/// and how the other thread's scope ended.
struct Outcome {
    trimmed: Result<usize>,
    took: Duration,
    /// From just before the stall was enqueued to the trim's return.
    since_stall: Duration,
    cached_before: usize,
    cached_after: usize,
    owner_ended: Result<()>,
}

/// How the other thread's scope is set up and what it does once stalled.
#[derive(Clone, Copy, PartialEq)]
struct Owner {
    /// Waits for the trim to return before it ends its scope: busy elsewhere, not
    /// waiting for its stream. Else it ends its scope at once (its end polls the watch).
    busy: bool,
    /// Its watch cannot stop the stall (as an abort waits for a call stuck in NCCL); the
    /// trim's thread opens the gate once the trim has returned.
    stuck: bool,
}

/// A watch whose abort cannot drain the stream (it never gives up), though it says, once
/// `after` has passed, that it is overdue.
struct CannotAbort {
    after: Duration,
}

impl StreamWatch for CannotAbort {
    fn check(&self, _waited: Duration) -> Result<()> {
        Ok(())
    }

    fn overdue(&self, waited: Duration) -> Option<Error> {
        (waited >= self.after).then_some(Error::CollectiveTimedOut {
            timeout: self.after,
        })
    }
}

/// Stalls a watched scope on another thread and, once it is stalled, trims the pinned
/// cache here (with a block cached when `cached`).
fn trim_beside_another_threads_stall(
    device: &Device,
    owner: Owner,
    cached: bool,
) -> Result<Outcome> {
    if cached {
        drop(device.alloc_pinned::<u32>(1 << 20)?); // cached: a trim frees it
    }
    let cached_before = device.pinned_memory_stats().cached_bytes;
    let (stalled_tx, stalled_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let gate = Gate::default();
    std::thread::scope(|threads| {
        let gate = &gate;
        let owning = threads.spawn(move || {
            let stream = device.new_stream()?;
            let watch = match owner.stuck {
                false => gate_watch(gate),
                true => Watch::new(Arc::new(CannotAbort {
                    after: GIVES_UP_AFTER,
                })),
            };
            let ended = scope(&stream, |s| {
                s.watch_collective(&watch);
                let stalling = Instant::now();
                gate.stall(&s.stream.raw)?;
                let _ = stalled_tx.send(stalling);
                if owner.busy {
                    let _ = go_rx.recv();
                }
                Ok::<_, Error>(())
            });
            gate.open();
            Ok::<_, Error>(ended)
        });
        let stalling = stalled_rx.recv().unwrap_or_else(|_| Instant::now());
        let start = Instant::now();
        let trimmed = device.trim_pinned_memory(0);
        let took = start.elapsed();
        let since_stall = stalling.elapsed();
        let cached_after = device.pinned_memory_stats().cached_bytes;
        if owner.stuck {
            gate.open();
        }
        let _ = go_tx.send(());
        let owner_ended = owning.join().expect("no panic")?;
        let (busy, stuck) = (owner.busy, owner.stuck);
        eprintln!(
            "trim beside a stall (owner busy: {busy}, abort stuck: {stuck}): {trimmed:?} in \
             {took:?}; its scope: {owner_ended:?}"
        );
        Ok(Outcome {
            trimmed,
            took,
            since_stall,
            cached_before,
            cached_after,
            owner_ended,
        })
    })
}

/// The other thread busy elsewhere: the watchdog asks its watch, which gives up after
/// 200 ms and opens the gate (as an abort lets the collective end); the trim, waiting
/// on the host meanwhile, then frees the cache. Without the wait on the host it waited
/// in `cuMemFreeHost` for the stall's own limit, 20 s. That thread's scope ends with the
/// watch's error, which the watchdog left with it.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_trim_beside_a_busy_threads_stall_waits_for_the_watchdog_then_frees() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let owner = Owner {
        busy: true,
        stuck: false,
    };
    let run = trim_beside_another_threads_stall(&device, owner, true)?;
    assert_the_trim_freed_once_the_watch_gave_up(&run);
    // The watchdog counts from a look that found the stream busy, after the stall was
    // enqueued; the trim began a little after that.
    let since_stall = run.since_stall;
    assert!(
        since_stall >= GIVES_UP_AFTER,
        "the trim took {:?}, {since_stall:?} after the stall",
        run.took
    );
    Ok(())
}

/// The other thread ending its scope (waiting, its watch polled): the trim waits on the
/// host until the watch gave up and the abort drained the stream, then frees the cache.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_trim_beside_a_waiting_threads_stall_waits_for_its_watch_then_frees() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let owner = Owner {
        busy: false,
        stuck: false,
    };
    let run = trim_beside_another_threads_stall(&device, owner, true)?;
    assert_the_trim_freed_once_the_watch_gave_up(&run);
    Ok(())
}

/// What a trim beside a stall that a watch ends shows: it freed the whole cache within the
/// bound, and the other thread's scope ended with the watch's error.
fn assert_the_trim_freed_once_the_watch_gave_up(run: &Outcome) {
    let (trimmed, took) = (&run.trimmed, run.took);
    assert!(
        matches!(trimmed, Ok(freed) if *freed >= run.cached_before),
        "trim_pinned_memory returned {trimmed:?} after {took:?}"
    );
    assert!(took < BOUNDED, "the trim took {took:?}");
    assert_eq!(run.cached_after, 0);
    let ended = &run.owner_ended;
    assert!(
        is_timed_out(ended),
        "the other thread's scope ended with {ended:?}"
    );
}

/// The other thread busy and its abort stuck (the stream stays stalled whatever the
/// watches do): the trim frees nothing and returns `HeldUpByAnotherThread` once the watch
/// is overdue by the watchdog's grace, instead of waiting in `cuMemFreeHost` for the
/// stall. A trim after the stall ended frees the cache.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_trim_beside_a_stall_no_abort_can_end_is_refused_and_frees_nothing() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let owner = Owner {
        busy: true,
        stuck: true,
    };
    let run = trim_beside_another_threads_stall(&device, owner, true)?;
    let (trimmed, took) = (&run.trimmed, run.took);
    assert!(
        matches!(trimmed, Err(Error::HeldUpByAnotherThread)),
        "trim_pinned_memory returned {trimmed:?} after {took:?}"
    );
    let refused_after = GIVES_UP_AFTER + WATCHDOG_GRACE;
    assert!(
        took >= refused_after && took < refused_after + BOUNDED,
        "the trim took {took:?}"
    );
    assert!(run.cached_before > 0);
    assert_eq!(
        run.cached_after, run.cached_before,
        "the refused trim freed memory"
    );
    assert!(
        run.owner_ended.is_ok(),
        "its scope ended with {:?}",
        run.owner_ended
    );
    device.trim_pinned_memory(0)?;
    assert_eq!(device.pinned_memory_stats().cached_bytes, 0);
    Ok(())
}

/// Nothing cached: the trim has no `cuMemFreeHost` to make, so it returns `Ok(0)` at once,
/// beside a busy thread's stall too.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_trim_with_nothing_cached_beside_a_busy_threads_stall_returns_at_once() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let owner = Owner {
        busy: true,
        stuck: false,
    };
    let run = trim_beside_another_threads_stall(&device, owner, false)?;
    let (trimmed, took) = (&run.trimmed, run.took);
    assert!(
        matches!(trimmed, Ok(0)),
        "trim_pinned_memory returned {trimmed:?} after {took:?}"
    );
    assert!(took < GIVES_UP_AFTER, "the trim took {took:?}");
    let ended = &run.owner_ended;
    assert!(
        is_timed_out(ended),
        "the other thread's scope ended with {ended:?}"
    );
    Ok(())
}

/// The race the host wait before a device-wide call cannot close: another thread's
/// stream stalls (here: before its scope notes the collective's watch) after this
/// thread's `trim_pinned_memory` found nothing to wait for and entered `cuMemFreeHost`,
/// which then waits for the stall, and that thread's next call (a copy into pinned
/// memory) waits behind `cuMemFreeHost` (traced on one H200), so its own wait never
/// polls. The watchdog asks the watch in its place: the stall ends within the watch's
/// bound, both calls return, and that thread's wait reports the watch's error. Without
/// the watchdog both waited for the stall's 20 s limit.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_stall_behind_a_device_wide_call_under_way_is_ended_by_the_watchdog() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    drop(device.alloc_pinned::<u32>(1 << 20)?); // cached: the trim frees it
    let mut pinned = device.alloc_pinned::<u32>(1024)?;
    let (stalled_tx, stalled_rx) = mpsc::channel();
    let (trimming_tx, trimming_rx) = mpsc::channel();
    let gate = Gate::default();
    let start = Instant::now();
    let (trimmed, owner) = std::thread::scope(|threads| {
        let (gate, pinned, device) = (&gate, &mut pinned, &device);
        let owner = threads.spawn(move || {
            let stream = device.new_stream()?;
            let mut waited = None;
            let ended = scope(&stream, |s| {
                let x = s.upload(&[7u32; 1024])?;
                gate.stall(&s.stream.raw)?;
                let _ = stalled_tx.send(());
                let _ = trimming_rx.recv();
                // Time for the trim to be inside `cuMemFreeHost`.
                std::thread::sleep(Duration::from_millis(50));
                s.watch_collective(&gate_watch(gate));
                waited = Some(s.copy_to_host(&x, &mut pinned[..])?.wait().map(drop));
                Ok::<_, Error>(())
            });
            gate.open();
            Ok::<_, Error>((waited.expect("the scope ran its closure"), ended))
        });
        let _ = stalled_rx.recv();
        let _ = trimming_tx.send(());
        let trimmed = device.trim_pinned_memory(0);
        let owner = owner.join().expect("no panic");
        (trimmed, owner)
    });
    let took = start.elapsed();
    let (waited, ended) = owner?;
    eprintln!(
        "a stall behind a trim under way: the trim {trimmed:?}, the wait {waited:?}, in {took:?}"
    );
    assert!(trimmed.is_ok(), "trim_pinned_memory returned {trimmed:?}");
    assert!(
        is_timed_out(&waited),
        "the other thread's wait returned {waited:?}"
    );
    assert!(is_timed_out(&ended), "its scope ended with {ended:?}");
    assert!(took < BOUNDED, "the two threads took {took:?}");
    Ok(())
}
