//! Page-locked host memory: `PinnedBuffer` (`stream-core/src/host/pinned_buffer.rs`),
//! write-combined buffers included, and the per-device pool it comes from
//! (`host/pinned_pool.rs`): its statistics, trimming, zeroing of reused blocks, and
//! what `alloc_pinned` returns when the request cannot be met.
//!
//! Round trips through pinned buffers are in `test_transfers.rs`; staged copies, which
//! take their blocks from the same pool, in `test_staging.rs`.
//!
//! Every test draws fresh non-zero random data and poisons its outputs first. Without
//! a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{
    check_eq, check_error, ensure, expect_err, poison, poisoned, stream, Rng, TestResult,
};
use stream_core::staging::{with_staging_config, StagingConfig};
use stream_core::{scope, Device, Error, PinnedMemoryStats};

gpu_tests::test_main! {
    gpu: [
        write_combined_buffer_is_an_exact_source_and_destination,
        pool_statistics_track_in_use_cached_peak_and_trim,
        reused_pinned_block_is_zeroed_again,
        alloc_pinned_reports_size_overflow_and_host_out_of_memory,
    ],
}

/// A write-combined buffer works as an upload source and a download destination, and
/// reads back exactly on the host (slowly: that is the documented cost).
fn write_combined_buffer_is_an_exact_source_and_destination() -> TestResult {
    let stream = stream()?;
    let dev = stream.device();
    let mut rng = Rng::new();
    let n = (1 << 20) + 5;
    let input: Vec<u32> = rng.vec(n);
    let mut wc_in = dev.alloc_pinned_write_combined::<u32>(n)?;
    wc_in.copy_from_slice(&input);
    let mut wc_out = dev.alloc_pinned_write_combined::<u32>(n)?;
    poison(&mut wc_out);
    scope(&stream, |s| -> TestResult {
        let x = s.upload(&wc_in)?;
        s.copy_to_host(&x, &mut wc_out)?.wait()?;
        Ok(())
    })?;
    check_eq("write-combined round trip", &input, &wc_out)
}

/// `Ok` when `dev`'s pinned statistics are exactly `(in_use, cached, peak_in_use)` bytes.
fn stats_are(dev: &Device, what: &str, in_use: usize, cached: usize, peak: usize) -> TestResult {
    let stats: PinnedMemoryStats = dev.pinned_memory_stats();
    let got = (
        stats.in_use_bytes,
        stats.cached_bytes,
        stats.peak_in_use_bytes,
    );
    ensure!(
        got == (in_use, cached, peak),
        "{what}: pinned (in_use, cached, peak_in_use) = {got:?}, expected {:?}",
        (in_use, cached, peak)
    );
    Ok(())
}

/// On a fresh `Device` (its own pool): allocations count their size class in use,
/// drops move them to cached, a same-class allocation reuses a cached block, staged
/// copies leave their ring cached and nothing in use, `trim_pinned_memory` frees the
/// largest cached blocks down to what it is asked to keep, and the peak records the
/// most in use at once until it is reset.
fn pool_statistics_track_in_use_cached_peak_and_trim() -> TestResult {
    with_staging_config(StagingConfig::DEFAULT, || {
        const MIB: usize = 1 << 20;
        let dev = Device::new(0)?;
        stats_are(&dev, "a fresh device", 0, 0, 0)?;
        let empty = dev.alloc_pinned::<u8>(0)?;
        stats_are(&dev, "after alloc_pinned(0)", 0, 0, 0)?;
        drop(empty);
        let mut a = dev.alloc_pinned::<u8>(3 * MIB)?; // a 4 MiB block
        a.fill(0xFF);
        let b = dev.alloc_pinned::<f64>(1000)?; // 8000 bytes: an 8 KiB block
        stats_are(
            &dev,
            "4 MiB + 8 KiB allocated",
            4 * MIB + 8192,
            0,
            4 * MIB + 8192,
        )?;
        drop(a);
        stats_are(&dev, "4 MiB dropped", 8192, 4 * MIB, 4 * MIB + 8192)?;
        let c = dev.alloc_pinned::<u32>(MIB)?; // 4 MiB again: the cached block
        stats_are(&dev, "4 MiB reallocated", 4 * MIB + 8192, 0, 4 * MIB + 8192)?;
        drop((b, c));
        stats_are(&dev, "all dropped", 0, 4 * MIB + 8192, 4 * MIB + 8192)?;

        // A staged 8 MiB upload: two 4 MiB chunks, two ring blocks (one of them the
        // cached one), 8 MiB in use while it is issued, none afterwards.
        let stream = dev.new_stream()?;
        let input = vec![7u8; 8 * MIB];
        scope(&stream, |s| -> TestResult {
            s.upload(&input)?;
            Ok(())
        })?;
        stats_are(
            &dev,
            "after a staged 8 MiB upload",
            0,
            8 * MIB + 8192,
            8 * MIB,
        )?;

        // Above 32 MiB, blocks are multiples of 32 MiB.
        let big = dev.alloc_pinned::<u8>(40 * MIB)?;
        stats_are(&dev, "40 MiB allocated", 64 * MIB, 8 * MIB + 8192, 64 * MIB)?;
        drop(big);
        let big = dev.alloc_pinned::<u8>(50 * MIB)?;
        stats_are(
            &dev,
            "50 MiB reuses the 64 MiB block",
            64 * MIB,
            8 * MIB + 8192,
            64 * MIB,
        )?;
        drop(big);

        // Trimming to 10 MiB frees the largest blocks first: the 64 MiB one.
        let freed = dev.trim_pinned_memory(10 * MIB)?;
        ensure!(
            freed == 64 * MIB,
            "trim_pinned_memory(10 MiB) freed {freed} bytes, expected 64 MiB"
        );
        stats_are(&dev, "after trim to 10 MiB", 0, 8 * MIB + 8192, 64 * MIB)?;
        let freed = dev.trim_pinned_memory(0)?;
        ensure!(
            freed == 8 * MIB + 8192,
            "trim_pinned_memory(0) freed {freed} bytes, expected {}",
            8 * MIB + 8192
        );
        stats_are(&dev, "after trim to 0", 0, 0, 64 * MIB)?;
        ensure!(
            dev.trim_pinned_memory(0)? == 0,
            "a second trim freed something"
        );
        let kept = dev.alloc_pinned::<u8>(MIB)?;
        dev.reset_peak_pinned_memory_stats();
        stats_are(&dev, "peak reset with 1 MiB in use", MIB, 0, MIB)?;
        drop(kept);
        Ok(())
    })
}

/// A block written by one `PinnedBuffer` and given back is zeroed before the next
/// buffer of its size class sees it (the pool's reuse keeps `alloc_pinned`'s promise).
fn reused_pinned_block_is_zeroed_again() -> TestResult {
    let dev = Device::new(0)?;
    let mut rng = Rng::new();
    for len in [1, 4095, 4096, 100_000, (1 << 20) + 1] {
        let mut first = dev.alloc_pinned::<u32>(len)?;
        rng.fill(&mut first);
        let cached_before = dev.pinned_memory_stats().cached_bytes;
        drop(first);
        let second = dev.alloc_pinned::<u32>(len)?;
        ensure!(
            dev.pinned_memory_stats().cached_bytes == cached_before,
            "alloc_pinned({len}) after dropping a buffer of the same size did not reuse its block"
        );
        check_eq(
            &format!("reused block of {len} u32"),
            &vec![0u32; len],
            &second,
        )?;
    }
    Ok(())
}

/// `alloc_pinned` of more elements than fit in `usize` bytes is `SizeOverflow`, and of
/// a petabyte (beyond the address space of the process) `HostOutOfMemory` with the
/// request, whose message says what to do and points to `trim_pinned_memory`. The pool
/// frees none of its cached blocks on its own to retry (`cuMemFreeHost` waits for the
/// whole device): a cached block is still cached after the failure. Afterwards a small
/// pinned buffer is zeroed, and a pinned buffer round-trips through the device.
fn alloc_pinned_reports_size_overflow_and_host_out_of_memory() -> TestResult {
    let dev = Device::new(0)?;
    drop(dev.alloc_pinned::<u8>(4096)?);
    stats_are(&dev, "after one 4 KiB buffer was dropped", 0, 4096, 4096)?;
    let overflow = expect_err(
        "alloc_pinned::<u64>(usize::MAX / 4)",
        dev.alloc_pinned::<u64>(usize::MAX / 4).map(drop),
    )?;
    check_error(
        "alloc_pinned::<u64>(usize::MAX / 4)",
        &overflow,
        &Error::SizeOverflow {
            len: usize::MAX / 4,
            elem_size: 8,
        },
        &["size overflow"],
    )?;
    let huge = 1usize << 50;
    let oom = expect_err(
        "alloc_pinned::<u8>(1 PiB)",
        dev.alloc_pinned::<u8>(huge).map(drop),
    )?;
    check_error(
        "alloc_pinned::<u8>(1 PiB)",
        &oom,
        &Error::HostOutOfMemory { requested: huge },
        &[
            &huge.to_string(),
            "out of pinned host memory",
            "trim_pinned_memory",
            "ulimit -l",
        ],
    )?;
    stats_are(&dev, "after the failed allocations", 0, 4096, 4096)?;
    // The pool still works afterwards.
    let small = dev.alloc_pinned::<u8>(10)?;
    ensure!(
        small.iter().all(|&v| v == 0),
        "alloc_pinned(10) after an OOM is not zeroed"
    );
    let input: Vec<u32> = Rng::new().vec(4097);
    let mut pinned = dev.alloc_pinned::<u32>(input.len())?;
    pinned.copy_from_slice(&input);
    let mut out = poisoned::<u32>(input.len());
    let stream = dev.new_stream()?;
    scope(&stream, |s| -> TestResult {
        let x = s.upload(&pinned)?;
        s.copy_to_host(&x, &mut out)?.wait()?;
        Ok(())
    })?;
    check_eq("pinned round trip after HostOutOfMemory", &input, &out)
}
