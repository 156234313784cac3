//! Device memory: allocations come from the device's stream-ordered pool, which keeps
//! freed memory cached (release threshold `u64::MAX`) so that scopes in a loop reuse it;
//! out of memory, the library releases the cache and retries once before it returns
//! `OutOfMemory`, and keeps working afterwards; `memory_stats` reports in-use, cached,
//! reserved and peak bytes; `trim_memory` and `set_memory_release_threshold` work.
//!
//! Every test here measures the one pool of device 0 that the whole process shares, so
//! they run one at a time ([`begin`] takes a lock), each from a pool with nothing
//! cached and no free pending (`trim_memory` waits for the frees of dropped
//! `DeviceVec`s). Without a CUDA device they are reported as ignored (see `gpu_tests::run`).
//! No test uses managed memory; the largest allocations take about 80% of the device
//! memory that is free when the test starts, and host buffers stay at a few MiB.

use std::sync::{Mutex, MutexGuard, PoisonError};

use gpu_tests::{
    check_eq, device, ensure, expect_err, poisoned, round_trip_in, spin, Failed, Rng, TestResult,
};
use stream_core::{scope, Device, DeviceMemoryStats, Error};

gpu_tests::test_main! {
    gpu: [
        out_of_memory_larger_than_card_is_an_error_and_the_stream_keeps_working,
        out_of_memory_releases_cached_memory_before_failing,
        out_of_memory_retry_waits_for_this_threads_pending_frees,
        allocation_that_needs_the_cached_memory_succeeds_when_the_card_is_full,
        freed_memory_is_reused_across_many_scopes,
        stats_track_in_use_and_peak,
        trim_releases_cached_memory_and_keeps_live_memory,
        release_threshold_can_be_set,
    ],
}

const MIB: usize = 1 << 20;

/// Tolerance for the pool's block granularity when comparing reserved or free bytes.
const SLACK: usize = 64 * MIB;

/// Elements of the host buffers the tests round-trip (4 MiB of `u32`).
const PROBE: usize = MIB;

/// About 200 ms of spinning on an H100/H200 (clocks near 2 GHz): the host issues the
/// next calls long before it ends.
const SPIN: u64 = 400_000_000;

/// Takes this binary's lock (the tests share one pool), and starts from the state
/// `Device::new` leaves: release threshold `u64::MAX`, nothing cached.
fn begin() -> TestResult<(MutexGuard<'static, ()>, Device)> {
    static POOL: Mutex<()> = Mutex::new(());
    let lock = POOL.lock().unwrap_or_else(PoisonError::into_inner);
    let dev = device()?;
    dev.set_memory_release_threshold(u64::MAX)?;
    dev.trim_memory(0)?;
    Ok((lock, dev))
}

/// Sets the release threshold back to `u64::MAX` when dropped, so a failing test does
/// not leave the pool releasing memory for the tests after it.
struct RestoreThreshold<'a>(&'a Device);

impl Drop for RestoreThreshold<'_> {
    fn drop(&mut self) {
        // A failure here shows up in the next test's `begin`.
        let _ = self.0.set_memory_release_threshold(u64::MAX);
    }
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

fn round_down(bytes: usize, to: usize) -> usize {
    bytes / to * to
}

/// `OutOfMemory` for `request` bytes, with plausible device numbers, and a message that
/// names the request and says that the library already released its cache and retried.
fn check_out_of_memory(what: &str, e: Error, request: usize, total: usize) -> TestResult {
    let message = e.to_string();
    let Error::OutOfMemory {
        requested,
        free,
        total: reported_total,
    } = e
    else {
        return Err(Failed::from(format!(
            "{what}: got {e:?}, expected OutOfMemory"
        )));
    };
    ensure!(
        requested == request,
        "{what}: requested is {requested}, not {request}"
    );
    ensure!(
        reported_total == total,
        "{what}: total is {reported_total}, but Device::total_memory() is {total}"
    );
    ensure!(
        0 < free && free <= total,
        "{what}: implausible free {free} of total {total}"
    );
    for part in [&request.to_string(), "retrying once", "; "] {
        ensure!(
            message.contains(part),
            "{what}: the message {message:?} does not contain {part:?}"
        );
    }
    Ok(())
}

/// Asking for twice the card's memory is `OutOfMemory` (after the retry) from
/// `alloc`, `alloc_zeroed` and `alloc_vec`; the scope, a new scope on the same stream,
/// and the device's `DeviceVec` helpers then still move fresh data correctly, and the
/// failed attempts leave nothing in use.
fn out_of_memory_larger_than_card_is_an_error_and_the_stream_keeps_working() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let total = dev.total_memory()?;
    let request = total
        .checked_mul(2)
        .ok_or_else(|| Failed::from(format!("2 * total memory ({total}) overflows")))?;
    let before = dev.memory_stats()?;
    let mut rng = Rng::new();
    let (first, second, third): (Vec<u32>, Vec<u32>, Vec<u32>) =
        (rng.vec(PROBE), rng.vec(PROBE), rng.vec(4097));
    let (mut first_out, mut second_out) = (poisoned::<u32>(PROBE), poisoned::<u32>(PROBE));

    scope(&stream, |s| -> TestResult {
        let e = expect_err("alloc::<u8>(2 * total)", s.alloc::<u8>(request).map(drop))?;
        check_out_of_memory("alloc::<u8>(2 * total)", e, request, total)?;
        let e = expect_err(
            "alloc_zeroed::<u32>(2 * total / 4)",
            s.alloc_zeroed::<u32>(request / 4).map(drop),
        )?;
        check_out_of_memory("alloc_zeroed::<u32>", e, request / 4 * 4, total)?;
        round_trip_in(
            s,
            &first,
            &mut first_out,
            "round trip in the scope after out of memory",
        )
    })?;
    scope(&stream, |s| -> TestResult {
        round_trip_in(
            s,
            &second,
            &mut second_out,
            "round trip in a new scope after out of memory",
        )
    })?;

    let e = expect_err(
        "alloc_vec::<u8>(2 * total)",
        dev.alloc_vec::<u8>(request).map(drop),
    )?;
    check_out_of_memory("alloc_vec::<u8>(2 * total)", e, request, total)?;
    let v = dev.upload_vec(&third)?;
    check_eq("upload_vec after out of memory", &third, &v.to_host_vec()?)?;
    drop(v);
    // Waits for the housekeeping stream, where the `DeviceVec` was freed.
    dev.trim_memory(0)?;

    let after = dev.memory_stats()?;
    ensure!(
        after.in_use_bytes <= before.in_use_bytes,
        "the failed allocations left memory in use: {} before, {} after",
        mib(before.in_use_bytes),
        mib(after.in_use_bytes)
    );
    Ok(())
}

/// Out of memory, the library hands the pool's cached memory back to the driver before
/// it gives up, and reports the free memory measured after that.
///
/// This test fails without the trim-and-retry (unless the driver released the cache on
/// its own): 1 GiB is left cached by an ended scope, then a request larger than the card
/// fails; afterwards nothing is cached any more, and the error's `free` includes the
/// released GiB.
fn out_of_memory_releases_cached_memory_before_failing() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let total = dev.total_memory()?;
    let cache = 1024 * MIB;
    scope(&stream, |s| -> TestResult {
        let mut x = s.alloc::<u8>(cache)?;
        s.fill(&mut x, 0x5A)?;
        Ok(())
    })?;
    let cached = dev.memory_stats()?;
    ensure!(
        cached.cached_bytes >= cache,
        "an ended scope's {} are not cached (threshold u64::MAX): {cached:?}",
        mib(cache)
    );
    let (free_before, _) = dev.memory_info()?;

    let request = total
        .checked_mul(2)
        .ok_or_else(|| Failed::from(format!("2 * total memory ({total}) overflows")))?;
    let e = scope(&stream, |s| -> TestResult<Error> {
        expect_err("alloc::<u8>(2 * total)", s.alloc::<u8>(request).map(drop))
    })?;
    let reported_free = match &e {
        Error::OutOfMemory { free, .. } => *free,
        other => {
            return Err(Failed::from(format!(
                "alloc::<u8>(2 * total): got {other:?}, expected OutOfMemory"
            )))
        }
    };
    check_out_of_memory("alloc::<u8>(2 * total)", e, request, total)?;

    let after = dev.memory_stats()?;
    ensure!(
        after.cached_bytes <= SLACK,
        "out of memory did not release the cache: {} still cached ({after:?})",
        mib(after.cached_bytes)
    );
    ensure!(
        reported_free >= free_before + cache / 2,
        "the error reports {} free, but {} were free with {} cached before: the free \
         memory was not measured after releasing the cache",
        mib(reported_free),
        mib(free_before),
        mib(cache)
    );
    Ok(())
}

/// The retry recovers: memory freed on this thread's outer scope's stream, behind a
/// long kernel, is needed by an allocation on another stream, first in a nested scope,
/// then by a `DeviceVec`. Both succeed, after waiting for the outer stream, and hold
/// their data.
///
/// This test fails without the wait-trim-retry: the pool never makes one stream wait
/// for another (`CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES` is off, see
/// `Device::new`), the free has not run yet (the kernel spins for ~200 ms), nothing
/// else is cached (`begin` trimmed the pool), and the device has only ~40% of the
/// request free. So the first attempt fails with out of memory; the retry waits for
/// the outer scope's stream (an open scope of this thread), after which the freed
/// memory can be reused. `outer.is_idle()` right after the allocation proves that the
/// allocation waited for it.
fn out_of_memory_retry_waits_for_this_threads_pending_frees() -> TestResult {
    let (_lock, dev) = begin()?;
    let outer = dev.new_stream()?;
    let inner = dev.new_stream()?;
    let (free, _) = dev.memory_info()?;
    let big = round_down(free / 5 * 3, 2 * MIB) / 4; // elements of u32: 60% of free
    let mut rng = Rng::new();
    let (first, second): (Vec<u32>, Vec<u32>) = (rng.vec(PROBE), rng.vec(PROBE));
    let (mut first_out, mut second_out) = (poisoned::<u32>(PROBE), poisoned::<u32>(PROBE));
    let mut vec_zeros = poisoned::<u32>(PROBE);
    let mut vec = None;

    scope(&outer, |s| -> TestResult {
        // Fills the card with memory freed on `outer` behind a long kernel, and checks
        // that an allocation of `big` elsewhere cannot get it yet.
        let free_behind_a_kernel = |what: &str| -> TestResult {
            let mut a = s.alloc::<u32>(big)?;
            s.fill(&mut a, 0xA)?;
            spin(s, SPIN)?;
            drop(a);
            let (free_now, _) = dev.memory_info()?;
            ensure!(
                big * 4 > free_now && !outer.is_idle()?,
                "precondition of {what}: {} must exceed the {} free, and `outer` must still                  be spinning (is the machine so loaded that 200 ms passed?)",
                mib(big * 4),
                mib(free_now)
            );
            Ok(())
        };

        free_behind_a_kernel("the nested scope")?;
        scope(&inner, |t| -> TestResult {
            let mut b = t.alloc::<u32>(big)?;
            ensure!(
                outer.is_idle()?,
                "the nested scope's allocation returned while `outer` still ran its kernel:                  the first attempt did not fail, so this test did not exercise the retry"
            );
            t.fill(&mut b, 0xB)?;
            t.copy_to_device(&first, &mut b.slice_mut(big - PROBE..)?)?;
            t.copy_to_host(&b.slice(big - PROBE..)?, &mut first_out)?
                .wait()?;
            Ok(())
        })?;

        free_behind_a_kernel("the DeviceVec")?;
        let v = dev.alloc_vec::<u32>(big)?;
        ensure!(
            outer.is_idle()?,
            "alloc_vec returned while `outer` still ran its kernel: the first attempt did              not fail, so this test did not exercise the retry"
        );
        vec = Some(v);
        Ok(())
    })?;
    check_eq(
        "data through the nested scope's buffer made by the retry",
        &first,
        &first_out,
    )?;

    let v = vec.ok_or_else(|| Failed::from("the DeviceVec was not made"))?;
    scope(&outer, |s| -> TestResult {
        let view = s.attach_ref(&v)?;
        s.copy_to_host(&view.slice(big - PROBE..)?, &mut vec_zeros)?
            .wait()?;
        let mut x = s.alloc::<u32>(PROBE)?;
        s.copy_to_device(&second, &mut x)?;
        s.copy_to_host(&x, &mut second_out)?.wait()?;
        Ok(())
    })?;
    check_eq(
        "tail of the DeviceVec made by the retry (zeroed)",
        &vec![0; PROBE],
        &vec_zeros,
    )?;
    check_eq("a round trip afterwards", &second, &second_out)
}

/// With the card mostly taken by memory freed on the scope's stream (two blocks of 40%
/// of the free memory, freed but still pending, around a live 64 MiB spacer), an
/// allocation of 60% of the free memory, larger than what the driver reports free and
/// than either freed block, succeeds, holds its data, and leaves the spacer intact. A
/// `DeviceVec` of the same size after the scope succeeds too.
///
/// The allocation needs the pool's cached memory. The driver may serve it by itself
/// (it can remap a pool's unused memory into one range); when it reports out of memory
/// instead, the library's retry (wait for the scope's stream, trim, retry) serves it.
/// Which of the two happens is the driver's choice, so this test cannot show that the
/// retry alone is needed; `out_of_memory_releases_cached_memory_before_failing` shows
/// that the retry runs.
fn allocation_that_needs_the_cached_memory_succeeds_when_the_card_is_full() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let (free, _) = dev.memory_info()?;
    let block = round_down(free / 5 * 2, 2 * MIB) / 4; // elements of u32: 40% of free
    let big = round_down(free / 5 * 3, 2 * MIB) / 4; // 60% of free
    let spacer_len = 64 * MIB / 4;
    let mut rng = Rng::new();
    let input: Vec<u32> = rng.vec(PROBE);
    let (mut head, mut tail, mut spacer_out, mut vec_tail) = (
        poisoned::<u32>(PROBE),
        poisoned::<u32>(PROBE),
        poisoned::<u32>(PROBE),
        poisoned::<u32>(PROBE),
    );
    scope(&stream, |s| -> TestResult {
        let mut a = s.alloc::<u32>(block)?;
        let mut spacer = s.alloc::<u32>(spacer_len)?;
        let mut b = s.alloc::<u32>(block)?;
        s.fill(&mut a, 0xA)?;
        s.fill(&mut spacer, 0x5)?;
        s.fill(&mut b, 0xB)?;
        drop(a);
        drop(b);
        let (free_now, _) = dev.memory_info()?;
        ensure!(
            big * 4 > free_now,
            "precondition: {} requested must exceed the {} the driver reports free",
            mib(big * 4),
            mib(free_now)
        );
        let mut c = s.alloc::<u32>(big)?;
        s.fill(&mut c, 0xC0FFEE)?;
        s.copy_to_device(&input, &mut c.slice_mut(big - PROBE..)?)?;
        s.copy_to_host(&c.slice(..PROBE)?, &mut head)?.wait()?;
        s.copy_to_host(&c.slice(big - PROBE..)?, &mut tail)?
            .wait()?;
        s.copy_to_host(&spacer.slice(spacer_len - PROBE..)?, &mut spacer_out)?
            .wait()?;
        Ok(())
    })?;
    check_eq(
        "head of the allocation that needed cached memory",
        &vec![0xC0FFEE; PROBE],
        &head,
    )?;
    check_eq(
        "tail of the allocation that needed cached memory",
        &input,
        &tail,
    )?;
    check_eq("the live spacer", &vec![0x5; PROBE], &spacer_out)?;

    let v = dev.alloc_vec::<u32>(big)?;
    scope(&stream, |s| -> TestResult {
        let view = s.attach_ref(&v)?;
        s.copy_to_host(&view.slice(big - PROBE..)?, &mut vec_tail)?
            .wait()?;
        Ok(())
    })?;
    check_eq(
        "tail of a DeviceVec that needed cached memory (zeroed)",
        &vec![0; PROBE],
        &vec_tail,
    )
}

/// 1000 scopes, each allocating, filling and freeing 64 MiB: after the first, the
/// 64 MiB stay cached (release threshold `u64::MAX`), reserved memory never grows past
/// what the first scope left (its peak included), and in-use memory is back to where it
/// started after every scope. Every 100th scope checks the data it wrote.
fn freed_memory_is_reused_across_many_scopes() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let len = 64 * MIB / 4;
    let mut out = poisoned::<u32>(PROBE);
    dev.reset_peak_memory_stats()?;
    let start = dev.memory_stats()?;
    let mut first: Option<DeviceMemoryStats> = None;
    for i in 0..1000u32 {
        let check = i % 100 == 0;
        scope(&stream, |s| -> TestResult {
            let mut x = s.alloc::<u32>(len)?;
            s.fill(&mut x, i + 1)?;
            if check {
                s.copy_to_host(&x.slice(len - PROBE..)?, &mut out)?.wait()?;
            }
            Ok(())
        })?;
        if check {
            check_eq(&format!("scope {i}"), &vec![i + 1; PROBE], &out)?;
        }
        let now = dev.memory_stats()?;
        ensure!(
            now.in_use_bytes <= start.in_use_bytes,
            "after scope {i}: {} in use, {} before the first scope",
            mib(now.in_use_bytes),
            mib(start.in_use_bytes)
        );
        match &first {
            None => {
                ensure!(
                    now.cached_bytes >= len * 4,
                    "after the first scope its {} are not cached: {now:?}",
                    mib(len * 4)
                );
                first = Some(now);
            }
            Some(first) => ensure!(
                now.reserved_bytes <= first.reserved_bytes + SLACK,
                "after scope {i}: {} reserved, {} after the first scope: freed memory is \
                 not reused",
                mib(now.reserved_bytes),
                mib(first.reserved_bytes)
            ),
        }
    }
    let (Some(first), end) = (first, dev.memory_stats()?) else {
        return Err(Failed::from("no scope ran"));
    };
    ensure!(
        end.peak_reserved_bytes <= first.reserved_bytes + SLACK,
        "reserved memory peaked at {} during 1000 scopes, {} after the first one",
        mib(end.peak_reserved_bytes),
        mib(first.reserved_bytes)
    );
    ensure!(
        end.peak_in_use_bytes <= start.in_use_bytes + len * 4 + SLACK,
        "in-use memory peaked at {} for scopes of {} each",
        mib(end.peak_in_use_bytes),
        mib(len * 4)
    );
    Ok(())
}

/// `memory_stats` follows allocations: in use grows by what a scope holds (and a
/// `DeviceVec`), cached is reserved minus in use, the peak remembers the most in use,
/// in use goes back when the scope ends, and `reset_peak_memory_stats` restarts the
/// peaks from the current values.
fn stats_track_in_use_and_peak() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    dev.reset_peak_memory_stats()?;
    let base = dev.memory_stats()?;
    ensure!(
        base.peak_in_use_bytes == base.in_use_bytes
            && base.peak_reserved_bytes == base.reserved_bytes,
        "right after a reset the peaks are not the current values: {base:?}"
    );
    let (a_bytes, b_bytes) = (256 * MIB, 128 * MIB);
    let mut out = poisoned::<u8>(PROBE);
    let during = scope(&stream, |s| -> TestResult<DeviceMemoryStats> {
        let mut a = s.alloc::<u8>(a_bytes)?;
        let mut b = s.alloc::<u8>(b_bytes)?;
        s.fill(&mut a, 0xA1)?;
        s.fill(&mut b, 0xB2)?;
        s.copy_to_host(&b.slice(..PROBE)?, &mut out)?.wait()?;
        Ok(dev.memory_stats()?)
    })?;
    check_eq("the second buffer's contents", &vec![0xB2u8; PROBE], &out)?;
    ensure!(
        during.in_use_bytes >= base.in_use_bytes + a_bytes + b_bytes,
        "with {} allocated, in use is {} (from {})",
        mib(a_bytes + b_bytes),
        mib(during.in_use_bytes),
        mib(base.in_use_bytes)
    );
    ensure!(
        during.reserved_bytes >= during.in_use_bytes
            && during.cached_bytes == during.reserved_bytes - during.in_use_bytes,
        "reserved, in use and cached do not add up: {during:?}"
    );
    ensure!(
        during.peak_in_use_bytes >= during.in_use_bytes,
        "the peak is below the current value: {during:?}"
    );

    let after = dev.memory_stats()?;
    ensure!(
        after.in_use_bytes <= base.in_use_bytes,
        "after the scope {} are in use, {} before it",
        mib(after.in_use_bytes),
        mib(base.in_use_bytes)
    );
    ensure!(
        after.peak_in_use_bytes >= base.in_use_bytes + a_bytes + b_bytes,
        "the peak {} forgot the scope's {}",
        mib(after.peak_in_use_bytes),
        mib(a_bytes + b_bytes)
    );
    ensure!(
        after.peak_reserved_bytes >= after.peak_in_use_bytes,
        "peak reserved is below peak in use: {after:?}"
    );
    ensure!(
        after.cached_bytes >= a_bytes + b_bytes,
        "the scope's freed {} are not cached: {after:?}",
        mib(a_bytes + b_bytes)
    );

    let v = dev.alloc_vec::<u8>(32 * MIB)?;
    let with_vec = dev.memory_stats()?;
    ensure!(
        with_vec.in_use_bytes >= after.in_use_bytes + 32 * MIB,
        "a 32 MiB DeviceVec is not counted: {} in use, {} before it",
        mib(with_vec.in_use_bytes),
        mib(after.in_use_bytes)
    );

    // `v` stays alive: no free is pending that could change in-use during the reset.
    dev.reset_peak_memory_stats()?;
    let reset = dev.memory_stats()?;
    ensure!(
        reset.peak_in_use_bytes == reset.in_use_bytes
            && reset.peak_in_use_bytes < after.peak_in_use_bytes,
        "reset_peak_memory_stats did not restart the in-use peak: {reset:?}, before {after:?}"
    );
    ensure!(
        reset.peak_reserved_bytes == reset.reserved_bytes,
        "reset_peak_memory_stats did not restart the reserved peak: {reset:?}"
    );
    drop(v);
    Ok(())
}

/// `trim_memory(keep)` keeps at least `keep` of a larger cache, `trim_memory(0)` hands
/// every cached byte of an ended scope back to the driver (its free memory grows by as
/// much), and trimming inside a scope leaves live buffers' data intact.
fn trim_releases_cached_memory_and_keeps_live_memory() -> TestResult {
    let (_lock, dev) = begin()?;
    let stream = dev.new_stream()?;
    let bytes = 512 * MIB;
    scope(&stream, |s| -> TestResult {
        let mut x = s.alloc::<u8>(bytes)?;
        s.fill(&mut x, 0x77)?;
        Ok(())
    })?;
    let cached = dev.memory_stats()?;
    ensure!(
        cached.cached_bytes >= bytes,
        "an ended scope's {} are not cached: {cached:?}",
        mib(bytes)
    );
    let (free_cached, _) = dev.memory_info()?;

    let keep = 256 * MIB;
    dev.trim_memory(keep)?;
    let kept = dev.memory_stats()?;
    ensure!(
        kept.reserved_bytes >= keep,
        "trim_memory({}) left only {} reserved (from {})",
        mib(keep),
        mib(kept.reserved_bytes),
        mib(cached.reserved_bytes)
    );

    dev.trim_memory(0)?;
    let trimmed = dev.memory_stats()?;
    ensure!(
        trimmed.cached_bytes <= SLACK,
        "trim_memory(0) left {} cached: {trimmed:?}",
        mib(trimmed.cached_bytes)
    );
    let (free_trimmed, _) = dev.memory_info()?;
    ensure!(
        free_trimmed + SLACK >= free_cached + bytes,
        "trim_memory(0) released {} cached but the driver's free memory went from {} to {}",
        mib(bytes),
        mib(free_cached),
        mib(free_trimmed)
    );

    let input: Vec<u32> = Rng::new().vec(16 * MIB / 4);
    let mut out = poisoned::<u32>(input.len());
    scope(&stream, |s| -> TestResult {
        let x = s.upload(&input)?;
        let garbage = s.alloc_zeroed::<u32>(input.len())?;
        drop(garbage);
        dev.trim_memory(0)?;
        s.copy_to_host(&x, &mut out)?.wait()?;
        Ok(())
    })?;
    check_eq("a live buffer across trim_memory(0)", &input, &out)
}

/// `Device::new` sets the release threshold to `u64::MAX`; with `0` an ended scope's
/// memory goes back to the driver at the scope's synchronisation; with `u64::MAX` it
/// stays cached; the setting is the device's, so opening the device again restores
/// `u64::MAX` for every handle.
fn release_threshold_can_be_set() -> TestResult {
    let (_lock, dev) = begin()?;
    let _restore = RestoreThreshold(&dev);
    let stream = dev.new_stream()?;
    let bytes = 256 * MIB;
    let run_scope = || {
        scope(&stream, |s| -> TestResult {
            let mut x = s.alloc::<u8>(bytes)?;
            s.fill(&mut x, 0x33)?;
            Ok(())
        })
    };
    let threshold = dev.memory_release_threshold()?;
    ensure!(
        threshold == u64::MAX,
        "the release threshold is {threshold}, not u64::MAX"
    );

    dev.set_memory_release_threshold(0)?;
    ensure!(
        dev.memory_release_threshold()? == 0,
        "set_memory_release_threshold(0) reads back as {}",
        dev.memory_release_threshold()?
    );
    run_scope()?;
    let released = dev.memory_stats()?;
    ensure!(
        released.cached_bytes <= SLACK,
        "with threshold 0 an ended scope left {} cached: {released:?}",
        mib(released.cached_bytes)
    );

    dev.set_memory_release_threshold(3 << 30)?;
    ensure!(
        dev.memory_release_threshold()? == 3 << 30,
        "set_memory_release_threshold(3 GiB) reads back as {}",
        dev.memory_release_threshold()?
    );

    dev.set_memory_release_threshold(u64::MAX)?;
    run_scope()?;
    let kept = dev.memory_stats()?;
    ensure!(
        kept.cached_bytes >= bytes,
        "with threshold u64::MAX an ended scope's {} are not cached: {kept:?}",
        mib(bytes)
    );

    dev.set_memory_release_threshold(0)?;
    let again = Device::new(0)?;
    for (what, handle) in [("the first handle", &dev), ("the new handle", &again)] {
        let threshold = handle.memory_release_threshold()?;
        ensure!(
            threshold == u64::MAX,
            "after Device::new(0) {what} reads threshold {threshold}, not u64::MAX"
        );
    }
    Ok(())
}
