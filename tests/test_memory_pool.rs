//! The device's stream-ordered memory pool (`stream-core/src/memory/pool.rs`, set up
//! by `device/pool_setup.rs`): freed memory stays cached (release threshold
//! `u64::MAX`) so that scopes in a loop reuse it; `memory_stats` reports in-use,
//! cached, reserved and peak bytes; `trim_memory` and `set_memory_release_threshold`
//! work. What the pool does when memory runs out is tested in `test_out_of_memory.rs`.
//!
//! Every test here measures the one pool of device 0 that the whole process shares, so
//! they run one at a time ([`begin`] takes a lock), each from a pool with nothing
//! cached and no free pending (`trim_memory` waits for the frees of dropped
//! `DeviceVec`s). Without a CUDA device they are reported as ignored (see `gpu_tests::run`).
//! No test uses managed memory; the largest allocation is 512 MiB, and host buffers
//! stay at a few MiB.

use gpu_tests::pool::{begin, mib, MIB, PROBE, SLACK};
use gpu_tests::{check_eq, ensure, poisoned, Failed, Rng, TestResult};
use stream_core::{scope, Device, DeviceMemoryStats};

gpu_tests::test_main! {
    gpu: [
        freed_memory_is_reused_across_many_scopes,
        stats_track_in_use_and_peak,
        trim_releases_cached_memory_and_keeps_live_memory,
        release_threshold_can_be_set,
    ],
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
