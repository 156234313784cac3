//! The host waits behind a watched scope's stream, bounded, on one GPU: the scope's own
//! (its end, on return and on unwind, a download's wait, a copy from pageable memory)
//! and those that are no scope's own, bounded by the watches of the scopes open on the
//! thread (the out-of-memory retry, the housekeeping stream, the calls that wait for
//! the whole device). The scope's stream is stalled by a host function until a watch
//! gives up and opens its gate (`device/watch/gate.rs`), as an NCCL abort ends a
//! collective whose peer died.
//! Unbounded, each wait would last the stall's 20 s. (With a real collective and two
//! GPUs: `tests/test_nccl_hung.rs`.)
//!
//! Ignored without `--include-ignored`: they need a GPU.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Watch;
use crate::device::watch::gate::{one_at_a_time, trace, Gate, OpensGate};
use crate::device::Device;
use crate::driver::event::RawEvent;
use crate::error::{Error, Result};
use crate::scope::scope;

/// How long the watch lets a wait go on before it gives up.
const GIVES_UP_AFTER: Duration = Duration::from_millis(200);
/// What a bounded wait may take at most (the stall itself lasts 20 s).
const BOUNDED: Duration = Duration::from_secs(5);

fn is_timed_out<T>(result: &Result<T>) -> bool {
    matches!(result, Err(Error::CollectiveTimedOut { .. }))
}

fn gate_watch(gate: &Gate) -> Watch {
    Watch::new(Arc::new(OpensGate {
        gate: gate.clone(),
        after: GIVES_UP_AFTER,
    }))
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn out_of_memory_behind_a_stalled_watched_stream_returns_the_watchs_error() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let stream = device.new_stream()?;
    // The whole card: out of memory after the retry (larger is refused without one).
    let too_big = device.total_memory()?;
    let gate = Gate::default();
    let mut allocated = None;
    let ended = scope(&stream, |s| {
        s.outstanding.watch(&gate_watch(&gate));
        gate.stall(&s.stream.raw)?;
        let start = Instant::now();
        let result = s.alloc::<u8>(too_big).map(drop);
        allocated = Some((result, start.elapsed()));
        Ok::<_, Error>(())
    });
    gate.open();
    let (result, took) = allocated.expect("the scope ran its closure");
    assert!(is_timed_out(&result), "the allocation returned {result:?}");
    assert!(took < BOUNDED, "the allocation took {took:?}");
    // The scope's end reports the watch's error again.
    assert!(is_timed_out(&ended), "the scope ended with {ended:?}");
    Ok(())
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_blocking_call_whose_housekeeping_stream_waits_behind_it_returns_the_watchs_error() -> Result<()>
{
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let stream = device.new_stream()?;
    let gate = Gate::default();
    let mut uploaded = None;
    let ended = scope(&stream, |s| {
        s.outstanding.watch(&gate_watch(&gate));
        gate.stall(&s.stream.raw)?;
        // As a converted `CudaSlice` of this stream makes it (`interop/cudarc_slice.rs`).
        let behind = RawEvent::new(&device.inner.context)?;
        behind.record(&s.stream.raw)?;
        device.inner.housekeeping.wait(&behind)?;
        let start = Instant::now();
        let result = device.upload_vec(&[1u32; 16]).map(drop);
        uploaded = Some((result, start.elapsed()));
        Ok::<_, Error>(())
    });
    gate.open();
    let (result, took) = uploaded.expect("the scope ran its closure");
    assert!(is_timed_out(&result), "upload_vec returned {result:?}");
    assert!(took < BOUNDED, "upload_vec took {took:?}");
    assert!(is_timed_out(&ended), "the scope ended with {ended:?}");
    // The housekeeping stream went on once the gate opened.
    assert_eq!(device.upload_vec(&[2u32; 16])?.len(), 16);
    Ok(())
}

/// A scope nested in a watched one, on a stream of its own and with no watch: its
/// allocation's retry waits for the outer scope's stalled stream (an open scope of this
/// thread with memory of its own), bounded by the outer scope's watch, which keeps the
/// error for the outer scope's end.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_nested_scopes_retry_is_bounded_by_the_outer_scopes_watch() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let (outer_stream, inner_stream) = (device.new_stream()?, device.new_stream()?);
    // The whole card: out of memory after the retry (larger is refused without one).
    let too_big = device.total_memory()?;
    let gate = Gate::default();
    let mut allocated = None;
    let ended = scope(&outer_stream, |outer| {
        let _mine = outer.alloc::<u32>(1024)?; // lists the outer scope among the open ones
        outer.outstanding.watch(&gate_watch(&gate));
        gate.stall(&outer.stream.raw)?;
        let inner_ended = scope(&inner_stream, |inner| {
            let start = Instant::now();
            let result = inner.alloc::<u8>(too_big).map(drop);
            allocated = Some((result, start.elapsed()));
            Ok::<_, Error>(())
        });
        assert!(
            inner_ended.is_ok(),
            "the inner scope ended with {inner_ended:?}"
        );
        Ok::<_, Error>(())
    });
    gate.open();
    let (result, took) = allocated.expect("the inner scope ran its closure");
    assert!(
        is_timed_out(&result),
        "the inner allocation returned {result:?}"
    );
    assert!(took < BOUNDED, "the inner allocation took {took:?}");
    assert!(is_timed_out(&ended), "the outer scope ended with {ended:?}");
    Ok(())
}

/// The scope's own waits, on one GPU (the two-GPU originals: `test_nccl_hung`): its end,
/// a download's `Pending::wait`, and a copy from pageable memory, each behind the stall.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn the_scopes_own_waits_behind_a_stalled_watched_stream_return_the_watchs_error() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let stream = device.new_stream()?;
    let mut pinned = device.alloc_pinned::<u32>(1024)?;
    let pageable = vec![3u32; 1024];
    for wait in ["end", "pending_wait", "pageable_upload"] {
        let gate = Gate::default();
        let start = Instant::now();
        let mut inner = None;
        let ended = scope(&stream, |s| {
            let x = s.upload(&[7u32; 1024])?;
            let mut y = s.alloc::<u32>(1024)?;
            s.outstanding.watch(&gate_watch(&gate));
            gate.stall(&s.stream.raw)?;
            inner = match wait {
                "pending_wait" => Some(s.copy_to_host(&x, &mut pinned[..])?.wait().map(drop)),
                "pageable_upload" => Some(s.copy_to_device(&pageable, &mut y)),
                _ => None,
            };
            Ok::<_, Error>(())
        });
        let took = start.elapsed();
        gate.open();
        if let Some(inner) = &inner {
            assert!(is_timed_out(inner), "{wait}: the wait returned {inner:?}");
        }
        assert!(
            is_timed_out(&ended),
            "{wait}: the scope ended with {ended:?}"
        );
        assert!(took < BOUNDED, "{wait}: the scope took {took:?}");
    }
    Ok(())
}

/// A scope unwinding from a panic behind the stall: its end is bounded as on return, so
/// the panic reaches `catch_unwind` within the bound.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_scope_unwinding_behind_a_stalled_watched_stream_is_bounded_too() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let stream = device.new_stream()?;
    let gate = Gate::default();
    let start = Instant::now();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = scope(&stream, |s| {
            s.outstanding.watch(&gate_watch(&gate));
            gate.stall(&s.stream.raw)?;
            panic!("a panic behind the stall (expected by this test)");
            #[allow(unreachable_code)]
            Ok::<_, Error>(())
        });
    }));
    let took = start.elapsed();
    gate.open();
    assert!(unwound.is_err(), "the panic did not propagate");
    assert!(took < BOUNDED, "the unwinding scope took {took:?}");
    Ok(())
}

/// Runs `call` inside a scope on a new stream of `device` whose collective's peer died
/// (as `issue_as` registers it: `Scope::watch_collective`), timed, and returns what it
/// returned, how long it took, and how the scope ended.
fn behind_a_stalled_watched_stream<T>(
    device: &Device,
    call: impl FnOnce() -> Result<T>,
) -> Result<(Result<T>, Duration, Result<()>)> {
    let stream = device.new_stream()?;
    let gate = Gate::default();
    let mut outcome = None;
    let ended = scope(&stream, |s| {
        s.watch_collective(&gate_watch(&gate));
        gate.stall(&s.stream.raw)?;
        let start = Instant::now();
        trace(format_args!("makes its call behind its stall"));
        let result = call();
        trace(format_args!(
            "its call returned after {:?}",
            start.elapsed()
        ));
        outcome = Some((result, start.elapsed()));
        Ok::<_, Error>(())
    });
    gate.open();
    let (result, took) = outcome.expect("the scope ran its closure");
    Ok((result, took, ended))
}

/// The calls that wait for the whole device, inside a scope whose collective's peer
/// died: a `ManagedVec`'s drop (`cuMemFree`) and `Device::trim_pinned_memory`
/// (`cuMemFreeHost`) wait for the scope's stream within its watch's bounds first, so the
/// watch's abort lets them go on; the scope's end reports the watch's error.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_managed_vecs_drop_behind_a_stalled_watched_stream_is_bounded() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let managed = device.alloc_managed::<u32>(1024)?;
    let (_, took, ended) = behind_a_stalled_watched_stream(&device, || {
        drop(managed);
        Ok(())
    })?;
    assert!(took < BOUNDED, "the drop took {took:?}");
    assert!(is_timed_out(&ended), "the scope ended with {ended:?}");
    Ok(())
}

/// A `ManagedVec` allocated (`cuMemAllocManaged`) inside a scope whose collective's peer
/// died, kept past the scope's end: whether the allocation waits for the stalled stream
/// (it would then wait for the stall's own limit, unbounded by the watch).
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn allocating_managed_memory_behind_a_stalled_watched_stream_does_not_wait_for_it() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let (managed, took, ended) =
        behind_a_stalled_watched_stream(&device, || device.alloc_managed::<u32>(1 << 20))?;
    assert!(managed.is_ok(), "alloc_managed returned {managed:?}");
    assert!(took < BOUNDED, "alloc_managed took {took:?}");
    assert!(is_timed_out(&ended), "the scope ended with {ended:?}");
    Ok(())
}

#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn trimming_pinned_memory_behind_a_stalled_watched_stream_returns_the_watchs_error() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    drop(device.alloc_pinned::<u32>(1 << 20)?); // 4 MiB cached by the pinned pool
    assert!(device.pinned_memory_stats().cached_bytes > 0);
    let (result, took, ended) =
        behind_a_stalled_watched_stream(&device, || device.trim_pinned_memory(0))?;
    assert!(
        is_timed_out(&result),
        "trim_pinned_memory returned {result:?}"
    );
    assert!(took < BOUNDED, "trim_pinned_memory took {took:?}");
    assert!(is_timed_out(&ended), "the scope ended with {ended:?}");
    // Freed all the same, once the stream had gone on.
    assert_eq!(device.pinned_memory_stats().cached_bytes, 0);
    Ok(())
}

/// Another handle of the same GPU dropped inside a scope whose collective's peer died:
/// its pinned pool frees its cached blocks (`cuMemFreeHost`, which waits for the whole
/// GPU), so the drop first waits for this thread's watched scopes, within their bounds.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn another_handles_drop_behind_a_stalled_watched_stream_is_bounded() -> Result<()> {
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let other = Device::new(0)?;
    drop(other.alloc_pinned::<u32>(1 << 20)?); // cached by the other handle's pool
    let (_, took, ended) = behind_a_stalled_watched_stream(&device, || {
        drop(other);
        Ok(())
    })?;
    assert!(took < BOUNDED, "the other handle's drop took {took:?}");
    assert!(is_timed_out(&ended), "the scope ended with {ended:?}");
    Ok(())
}

/// The same drop while the closure unwinds (a panic after the collective): bounded too,
/// and the panic reaches the caller once the scope's end has waited.
#[test]
#[ignore = "needs a GPU: run with --include-ignored on a machine with one"]
fn a_managed_vec_dropped_while_unwinding_behind_a_stalled_watched_stream_is_bounded() -> Result<()>
{
    let _one = one_at_a_time();
    let device = Device::new(0)?;
    let managed = device.alloc_managed::<u32>(1024)?;
    let start = Instant::now();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        behind_a_stalled_watched_stream(&device, || {
            let _owned = managed;
            panic!("a panic after the collective, with managed memory to drop");
            #[allow(unreachable_code)]
            Ok(())
        })
    }));
    let took = start.elapsed();
    assert!(unwound.is_err(), "the panic did not reach the caller");
    assert!(took < BOUNDED, "the unwinding scope took {took:?}");
    Ok(())
}

mod beside_another_threads_stall;
mod fed_without_a_wait;
mod lent_stream;
mod other_threads;
