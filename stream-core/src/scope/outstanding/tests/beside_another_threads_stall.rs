//! A call that waits for the whole device (`trim_pinned_memory`) on one thread while a
//! scope on another thread is behind a collective whose peer died: it waits on the host
//! while that thread waits too (its watch gives up and drains the stream), and is refused
//! in time while that thread is busy elsewhere, instead of waiting in the driver for that
//! thread's next wait (`memory/watched_streams.rs`).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{gate_watch, is_timed_out, BOUNDED, GIVES_UP_AFTER};
use crate::device::watch::gate::{one_at_a_time, Gate};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::scope::scope;

/// What one run gave: the trim's result and time, the pinned cache before and after it,
/// and how the other thread's scope ended.
struct Outcome {
    trimmed: Result<usize>,
    took: Duration,
    cached_before: usize,
    cached_after: usize,
    owner_ended: Result<()>,
}

/// Stalls a watched scope on another thread and, once it is stalled, trims the pinned
/// cache here (with a block cached when `cached`). The other thread then `ends` its scope at once (its end waits, polling its
/// watch), or, when `busy`, only after the trim has returned (it waits for this thread:
/// a thread busy elsewhere, not waiting for its stream).
fn trim_beside_another_threads_stall(device: &Device, busy: bool, cached: bool) -> Result<Outcome> {
    if cached {
        drop(device.alloc_pinned::<u32>(1 << 20)?); // cached: a trim frees it
    }
    let cached_before = device.pinned_memory_stats().cached_bytes;
    let (stalled_tx, stalled_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    std::thread::scope(|threads| {
        let owner = threads.spawn(move || {
            let stream = device.new_stream()?;
            let gate = Gate::default();
            let ended = scope(&stream, |s| {
                s.watch_collective(&gate_watch(&gate));
                gate.stall(&s.stream.raw)?;
                let _ = stalled_tx.send(());
                if busy {
                    let _ = go_rx.recv();
                }
                Ok::<_, Error>(())
            });
            gate.open();
            Ok::<_, Error>(ended)
        });
        let _ = stalled_rx.recv();
        let start = Instant::now();
        let trimmed = device.trim_pinned_memory(0);
        let took = start.elapsed();
        let cached_after = device.pinned_memory_stats().cached_bytes;
        let _ = go_tx.send(());
        let owner_ended = owner.join().expect("no panic")?;
        let other = if busy { "busy" } else { "waiting" };
        eprintln!("trim beside a {other} thread's stall: {trimmed:?} in {took:?}; its scope: {owner_ended:?}");
        Ok(Outcome {
            trimmed,
            took,
            cached_before,
            cached_after,
            owner_ended,
        })
    })
}

/// The other thread busy elsewhere: the trim frees nothing and returns
/// `HeldUpByAnotherThread` once the watch is overdue (without the wait on the host, it
/// waited in `cuMemFreeHost` for the stall's own limit, 20 s). That thread's scope still
/// ends with its watch's error, and a trim after it frees the cache.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_trim_beside_a_busy_threads_stall_is_refused_in_time_and_frees_nothing() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let run = trim_beside_another_threads_stall(&device, true, true)?;
    let (trimmed, took) = (&run.trimmed, run.took);
    assert!(
        matches!(trimmed, Err(Error::HeldUpByAnotherThread)),
        "trim_pinned_memory returned {trimmed:?} after {took:?}"
    );
    assert!(
        took >= GIVES_UP_AFTER && took < BOUNDED,
        "the trim took {took:?}"
    );
    assert!(run.cached_before > 0);
    assert_eq!(
        run.cached_after, run.cached_before,
        "the refused trim freed memory"
    );
    let ended = &run.owner_ended;
    assert!(
        is_timed_out(ended),
        "the other thread's scope ended with {ended:?}"
    );
    device.trim_pinned_memory(0)?;
    assert_eq!(device.pinned_memory_stats().cached_bytes, 0);
    Ok(())
}

/// The other thread ending its scope (waiting, its watch polled): the trim waits on the
/// host until the watch gave up and the abort drained the stream, then frees the cache.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_trim_beside_a_waiting_threads_stall_waits_for_its_watch_then_frees() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let run = trim_beside_another_threads_stall(&device, false, true)?;
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
    Ok(())
}

/// Nothing cached: the trim has no `cuMemFreeHost` to make, so it returns `Ok(0)` at once,
/// beside a busy thread's stall too.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_trim_with_nothing_cached_beside_a_busy_threads_stall_returns_at_once() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let run = trim_beside_another_threads_stall(&device, true, false)?;
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
