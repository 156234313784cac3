//! Staged copies of pageable host memory (`stream-core/src/host/staging/`): uploads and
//! downloads above the threshold go through a ring of pooled pinned blocks, chunk by
//! chunk; below it, and for pinned memory (`host_memory_is_pinned`), the copy is
//! direct. Exact around chunk boundaries for every ring size and thread count, never
//! reusing a block a pending copy still reads, bounded in pinned memory, never waiting
//! for another stream, correct inside a fork and from a thread per GPU at once.
//!
//! Staged copies are checked one direction at a time: a staged upload is read back by
//! a direct download into pinned memory, and a staged download reads what a direct
//! upload from pinned memory wrote, so neither half can hide a bug of the other. The
//! thread-local counters of `stream_core::staging` prove which path each copy took,
//! and each test sets the staging configuration it needs for its own thread.
//! (`PinnedBuffer` and the pinned pool themselves are tested in `test_pinned.rs`.)
//!
//! Every test draws fresh non-zero random data and poisons its outputs first. Without
//! a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::time::{Duration, Instant};

use gpu_tests::{
    check_eq, device, ensure, poison, poisoned, serial, stream, Element, Rng, TestResult,
};
use stream_core::staging::{
    host_memory_is_pinned, staged_copy_counts, with_staging_config, StagingConfig,
};
use stream_core::{scope, Device, Error, Stream};

gpu_tests::test_main! {
    gpu: [
        staged_round_trip_is_exact_around_chunk_boundaries_u8 = staged_round_trip_is_exact_around_chunk_boundaries::<u8>,
        staged_round_trip_is_exact_around_chunk_boundaries_u16 = staged_round_trip_is_exact_around_chunk_boundaries::<u16>,
        staged_round_trip_is_exact_around_chunk_boundaries_u32 = staged_round_trip_is_exact_around_chunk_boundaries::<u32>,
        staged_round_trip_is_exact_around_chunk_boundaries_f32 = staged_round_trip_is_exact_around_chunk_boundaries::<f32>,
        staged_round_trip_is_exact_around_chunk_boundaries_f64 = staged_round_trip_is_exact_around_chunk_boundaries::<f64>,
        staged_round_trip_is_exact_around_chunk_boundaries_i64 = staged_round_trip_is_exact_around_chunk_boundaries::<i64>,
        staged_round_trip_is_exact_around_chunk_boundaries_u128 = staged_round_trip_is_exact_around_chunk_boundaries::<u128>,
        staged_round_trip_is_exact_with_small_odd_chunks_every_ring_and_thread_count,
        pageable_memory_is_detected_and_pinned_memory_is_not,
        pinned_sub_slices_take_the_direct_path_and_round_trip_exactly,
        staging_block_is_not_reused_while_a_long_kernel_delays_its_copy,
        staged_uploads_behind_a_long_kernel_keep_pinned_memory_bounded,
        staged_copies_on_another_stream_never_wait_for_pending_staging_blocks,
        staged_copies_inside_a_fork_child_are_exact,
        staged_round_trips_from_a_thread_per_gpu_at_once_are_exact,
    ],
}

// `serial()` is held by the tests that need a long kernel to keep running while they
// work, and by those that free page-locked memory (`cuMemFreeHost`) when a `Device` of
// their own is dropped (with its pinned pool). Seen on an H200: `cuMemFreeHost` waits
// until the device is idle and holds up some of other threads' driver calls meanwhile
// (not their stream queries: stream-core's `scope/outstanding/tests/other_threads.rs`),
// so run in parallel with a test that freed page-locked memory, these tests saw their long
// kernels end before they could observe them (in a suite run on 2026-11-29: the
// thread-per-GPU test's devices dropped during `staging_block_is_not_reused_...`'s
// window). (The pool tests that trim or drop pinned memory are in another binary,
// `test_pinned`.)

/// Element counts just below, at and just above `bytes`, for `T`.
fn around<T>(bytes: usize) -> [usize; 3] {
    let n = bytes / std::mem::size_of::<T>();
    [n - 1, n, n + 1]
}

/// One round trip of `len` elements on `stream`, each direction checked on its own:
/// pageable `input` -> device -> pinned (staged upload, direct download), and pinned ->
/// device -> pageable (direct upload, staged download). Returns how many uploads and
/// downloads were staged.
fn round_trip<T: Element>(stream: &Stream, rng: &mut Rng, len: usize) -> TestResult<(u64, u64)> {
    let dev = stream.device();
    let input: Vec<T> = rng.vec(len);
    let mut pinned_in = dev.alloc_pinned::<T>(len)?;
    rng.fill(&mut pinned_in);
    let mut pinned_out = dev.alloc_pinned::<T>(len)?;
    poison(&mut pinned_out);
    let mut pageable_out = poisoned::<T>(len);
    let before = staged_copy_counts();
    scope(stream, |s| -> TestResult {
        let x = s.upload(&input)?;
        let host = s.copy_to_host(&x, &mut pinned_out)?.wait()?;
        check_eq(
            &format!("{len} {} uploaded from pageable memory", T::NAME),
            &input,
            host,
        )?;
        let y = s.upload(&pinned_in)?;
        let _download = s.copy_to_host(&y, &mut pageable_out)?;
        Ok(())
    })?;
    check_eq(
        &format!("{len} {} downloaded into pageable memory", T::NAME),
        &pinned_in,
        &pageable_out,
    )?;
    let after = staged_copy_counts();
    Ok((after.0 - before.0, after.1 - before.1))
}

/// With the default configuration: sizes `chunk * k - 1`, `chunk * k`, `chunk * k + 1`
/// (in elements) for k = 1..=3, and around the threshold, where the two below the
/// threshold must take the direct path and all others the staged one.
fn staged_round_trip_is_exact_around_chunk_boundaries<T: Element>() -> TestResult {
    let config = StagingConfig::DEFAULT;
    with_staging_config(config, || {
        let stream = stream()?;
        let mut rng = Rng::new();
        let threshold = config.upload_threshold;
        ensure!(
            config.download_threshold == threshold,
            "this test assumes one threshold for both directions"
        );
        let chunk_sizes = (1..=3).flat_map(|k| around::<T>(k * config.chunk_bytes));
        for len in around::<T>(threshold).into_iter().chain(chunk_sizes) {
            let bytes = len * std::mem::size_of::<T>();
            let staged = u64::from(bytes >= threshold);
            let counts = round_trip::<T>(&stream, &mut rng, len)?;
            ensure!(
                counts == (staged, staged),
                "{len} {} ({bytes} bytes, threshold {threshold}): staged (uploads, downloads) = \
                 {counts:?}, expected ({staged}, {staged})",
                T::NAME
            );
        }
        Ok(())
    })
}

/// Chunks that are not a multiple of the element size (12 KiB + 5 bytes, so elements
/// straddle chunk boundaries) and a 64 KiB chunk, with rings of 1 to 4 blocks and 1 to
/// 4 memcpy threads, over sizes that wrap the ring several times.
fn staged_round_trip_is_exact_with_small_odd_chunks_every_ring_and_thread_count() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for chunk in [3 * 4096 + 5, 64 << 10] {
        for (ring_blocks, threads) in [(1, 1), (2, 4), (3, 2), (4, 3)] {
            let config = StagingConfig {
                upload_threshold: 0,
                download_threshold: 0,
                chunk_bytes: chunk,
                ring_blocks,
                threads,
            };
            with_staging_config(config, || -> TestResult {
                for k in [1, 2, 5, 9] {
                    for len in around::<u32>(k * chunk) {
                        let counts = round_trip::<u32>(&stream, &mut rng, len)?;
                        ensure!(
                            counts == (1, 1),
                            "{config:?}: {counts:?} staged, not (1, 1)"
                        );
                    }
                    for len in around::<u8>(k * chunk) {
                        round_trip::<u8>(&stream, &mut rng, len)?;
                    }
                }
                // One byte is staged too when the threshold is 0.
                ensure!(
                    round_trip::<u8>(&stream, &mut rng, 1)? == (1, 1),
                    "1 byte not staged"
                );
                Ok(())
            })?;
        }
    }
    Ok(())
}

/// `host_memory_is_pinned`: a `Vec`, a boxed slice and a stack array are pageable; a
/// `PinnedBuffer`, its sub-slices and a write-combined buffer are pinned.
fn pageable_memory_is_detected_and_pinned_memory_is_not() -> TestResult {
    let dev = device()?;
    let vec = vec![1u8; 8 << 20];
    let boxed: Box<[u32]> = vec![2u32; 1 << 20].into_boxed_slice();
    let stack = [3u64; 512];
    for (what, pinned) in [
        ("Vec<u8> of 8 MiB", host_memory_is_pinned(&dev, &vec)?),
        ("Box<[u32]> of 4 MiB", host_memory_is_pinned(&dev, &boxed)?),
        (
            "[u64; 512] on the stack",
            host_memory_is_pinned(&dev, &stack)?,
        ),
    ] {
        ensure!(
            !pinned,
            "{what} was detected as pinned: it would never be staged"
        );
    }
    let buffer = dev.alloc_pinned::<f32>((1 << 20) + 3)?;
    let wc = dev.alloc_pinned_write_combined::<u16>(5000)?;
    ensure!(
        wc.is_write_combined() && !buffer.is_write_combined(),
        "write-combined flags"
    );
    for (what, pinned) in [
        ("PinnedBuffer", host_memory_is_pinned(&dev, &buffer)?),
        (
            "PinnedBuffer[3..1000]",
            host_memory_is_pinned(&dev, &buffer[3..1000])?,
        ),
        (
            "PinnedBuffer[1 << 20..]",
            host_memory_is_pinned(&dev, &buffer[1 << 20..])?,
        ),
        (
            "write-combined PinnedBuffer",
            host_memory_is_pinned(&dev, &wc)?,
        ),
    ] {
        ensure!(
            pinned,
            "{what} was detected as pageable: it would be staged needlessly"
        );
    }
    Ok(())
}

/// Sub-slices `&buf[a..b]` of pinned buffers, at odd offsets and above the staging
/// threshold, are uploaded and downloaded by the direct path (no copy is staged) and
/// exactly; the elements outside the destination range keep their poison.
fn pinned_sub_slices_take_the_direct_path_and_round_trip_exactly() -> TestResult {
    with_staging_config(StagingConfig::DEFAULT, || {
        let stream = stream()?;
        let dev = stream.device();
        let mut rng = Rng::new();
        let n = 3 * (StagingConfig::DEFAULT.chunk_bytes / 8) + 11;
        let mut source = dev.alloc_pinned::<f64>(n + 10)?;
        rng.fill(&mut source);
        let mut target = dev.alloc_pinned::<f64>(n + 20)?;
        poison(&mut target);
        let mut expected = vec![f64::POISON; n + 20];
        expected[7..n + 7].copy_from_slice(&source[3..n + 3]);
        let before = staged_copy_counts();
        scope(&stream, |s| -> TestResult {
            let x = s.upload(&source[3..n + 3])?;
            s.copy_to_host(&x, &mut target[7..n + 7])?.wait()?;
            Ok(())
        })?;
        ensure!(
            staged_copy_counts() == before,
            "a copy from or to pinned sub-slices was staged: {:?} -> {:?}",
            before,
            staged_copy_counts()
        );
        check_eq(
            "pinned target after copying source[3..n+3] to [7..n+7]",
            &expected,
            &target,
        )
    })
}

/// About two seconds of spinning on an H100/H200 (clock ~1.7-2 GHz): the host's part
/// below takes well under one alone, but over one second in a loaded suite run (seen
/// once on an H200 host, with half the time).
const LONG_SPIN_CYCLES: u64 = 4_000_000_000;

/// A staged upload issued behind a ~2 s kernel on stream A leaves its two staging
/// blocks waiting for the kernel. Meanwhile, on stream B, staged uploads and downloads
/// of the same chunk size, and a `PinnedBuffer` of the same size class scribbled over
/// by the host, all need blocks: if the pool handed out A's blocks, A's upload would
/// carry B's bytes or the scribble. A probe download enqueued after A's upload proves
/// the kernel was still running when all of that was done. Then a staged upload on A
/// larger than its ring must wait for its own blocks (behind the kernel): its data too
/// must be exact.
fn staging_block_is_not_reused_while_a_long_kernel_delays_its_copy() -> TestResult {
    let _serial = serial();
    let chunk = 1 << 20;
    let config = StagingConfig {
        upload_threshold: 0,
        download_threshold: 0,
        chunk_bytes: chunk,
        ring_blocks: 2,
        threads: 2,
    };
    with_staging_config(config, || {
        let a = stream()?;
        let b = a.device().new_stream()?;
        let dev = a.device().clone();
        let mut rng = Rng::new();
        let n = 2 * chunk / 4; // exactly the ring: the upload returns without waiting
        let first: Vec<u32> = rng.vec(n);
        let second: Vec<u32> = rng.vec(n);
        let third: Vec<u32> = rng.vec(5 * n / 2 + 3); // wraps the ring twice
        let value: u32 = rng.value();
        let (mut first_out, mut second_out) = (poisoned::<u32>(n), poisoned::<u32>(n));
        let mut third_out = poisoned::<u32>(third.len());
        let mut probe = dev.alloc_pinned::<u32>(1)?;
        poison(&mut probe);
        let mut warm = dev.alloc_pinned::<u32>(1)?;
        let mut third_took = Duration::ZERO;
        scope(&a, |s| -> TestResult {
            let mut flag = s.alloc_zeroed::<u32>(1)?;
            // Load (compile) the kernel first, so the long launch below spins at once.
            gpu_tests::spin_then_write(s, 0, 0, &mut flag)?;
            s.copy_to_host(&flag, &mut warm)?.wait()?;

            gpu_tests::spin_then_write(s, LONG_SPIN_CYCLES, value, &mut flag)?;
            let x = s.upload(&first)?;
            let probe = s.copy_to_host(&flag, &mut probe)?; // pinned: direct, asynchronous

            scope(&b, |t| -> TestResult {
                let y = t.upload(&second)?;
                let host = t.copy_to_host(&y, &mut second_out)?.wait()?;
                check_eq(
                    "stream B's staged round trip during the kernel",
                    &second,
                    host,
                )
            })?;
            let mut scribble = dev.alloc_pinned::<u8>(chunk)?;
            ensure!(
                scribble.iter().all(|&v| v == 0),
                "a PinnedBuffer allocated while staging blocks are pending is not zeroed"
            );
            scribble.fill(0xAB);
            drop(scribble);
            ensure!(
                !probe.is_ready()?,
                "the {LONG_SPIN_CYCLES}-cycle kernel had already finished: this test did not \
                 exercise blocks pending behind it (raise LONG_SPIN_CYCLES)"
            );

            let start = Instant::now();
            let z = s.upload(&third)?;
            third_took = start.elapsed();
            let host = probe.wait()?;
            ensure!(
                host[0] == value,
                "the kernel wrote {:#x}, not {value:#x}",
                host[0]
            );
            let _first = s.copy_to_host(&x, &mut first_out)?;
            let _third = s.copy_to_host(&z, &mut third_out)?;
            Ok(())
        })?;
        check_eq(
            "upload staged behind the kernel, while B used the pool",
            &first,
            &first_out,
        )?;
        check_eq(
            "upload wrapping its ring behind the kernel",
            &third,
            &third_out,
        )?;
        ensure!(
            third_took >= Duration::from_millis(50),
            "a staged upload that wraps its ring behind a running kernel returned after \
             {third_took:?}: it cannot have waited for its own blocks"
        );
        Ok(())
    })
}

/// Forty staged uploads of exactly one ring each, all stuck behind a ~1 s kernel: the
/// pool would need 80 new blocks to never wait; it must instead wait for the oldest
/// pending blocks once a few rings' worth are pending, so the pinned memory of this
/// device stays within 16 chunks. Every upload is exact.
fn staged_uploads_behind_a_long_kernel_keep_pinned_memory_bounded() -> TestResult {
    let _serial = serial();
    let chunk = 1 << 20;
    let config = StagingConfig {
        upload_threshold: 0,
        download_threshold: 0,
        chunk_bytes: chunk,
        ring_blocks: 2,
        threads: 2,
    };
    with_staging_config(config, || {
        let dev = Device::new(0)?; // its own pool, so the statistics are this test's
        let stream = dev.new_stream()?;
        let mut rng = Rng::new();
        let n = 2 * chunk / 8;
        let inputs: Vec<Vec<u64>> = (0..40).map(|_| rng.vec(n)).collect();
        let mut outputs: Vec<Vec<u64>> = (0..40).map(|_| poisoned(n)).collect();
        scope(&stream, |s| -> TestResult {
            let mut flag = s.alloc_zeroed::<u32>(1)?;
            gpu_tests::spin_then_write(s, LONG_SPIN_CYCLES / 2, 1, &mut flag)?;
            let buffers = inputs
                .iter()
                .map(|input| s.upload(input))
                .collect::<Result<Vec<_>, Error>>()?;
            let stats = dev.pinned_memory_stats();
            ensure!(
                stats.in_use_bytes + stats.cached_bytes <= 16 * chunk
                    && stats.peak_in_use_bytes <= 16 * chunk,
                "40 staged uploads behind a kernel page-locked {stats:?}: more than 16 chunks"
            );
            for (x, out) in buffers.iter().zip(outputs.iter_mut()) {
                let _download = s.copy_to_host(x, out)?;
            }
            Ok(())
        })?;
        for (i, (input, output)) in inputs.iter().zip(&outputs).enumerate() {
            check_eq(
                &format!("upload {i} of 40 behind the kernel"),
                input,
                output,
            )?;
        }
        Ok(())
    })
}

/// Stream A holds as many pending staging blocks of one size class as the cap allows
/// (four one-ring uploads behind a ~2 s kernel). A scope on stream B then stages an
/// upload and a download of the same chunk size: the pool must page-lock new blocks
/// for B rather than wait for A's (a hidden cross-stream synchronisation), so B's
/// scope ends while A's kernel still runs.
fn staged_copies_on_another_stream_never_wait_for_pending_staging_blocks() -> TestResult {
    let _serial = serial();
    let chunk = 1 << 20;
    let config = StagingConfig {
        upload_threshold: 0,
        download_threshold: 0,
        chunk_bytes: chunk,
        ring_blocks: 2,
        threads: 2,
    };
    with_staging_config(config, || {
        let a = stream()?;
        let b = a.device().new_stream()?;
        let mut rng = Rng::new();
        let n = 2 * chunk / 4;
        let inputs: Vec<Vec<u32>> = (0..4).map(|_| rng.vec(n)).collect();
        let mut outputs: Vec<Vec<u32>> = (0..4).map(|_| poisoned(n)).collect();
        let second: Vec<u32> = rng.vec(n);
        let mut second_out = poisoned::<u32>(n);
        let mut report = (false, Duration::ZERO);
        scope(&a, |s| -> TestResult {
            let mut flag = s.alloc_zeroed::<u32>(1)?;
            gpu_tests::spin_then_write(s, 0, 0, &mut flag)?;
            gpu_tests::spin_then_write(s, LONG_SPIN_CYCLES, 1, &mut flag)?;
            let buffers = inputs
                .iter()
                .map(|input| s.upload(input))
                .collect::<Result<Vec<_>, Error>>()?;
            let start = Instant::now();
            scope(&b, |t| -> TestResult {
                let y = t.upload(&second)?;
                t.copy_to_host(&y, &mut second_out)?.wait()?;
                Ok(())
            })?;
            report = (!a.is_idle()?, start.elapsed());
            for (x, out) in buffers.iter().zip(outputs.iter_mut()) {
                let _download = s.copy_to_host(x, out)?;
            }
            Ok(())
        })?;
        let (a_busy, b_took) = report;
        ensure!(
            a_busy,
            "stream A was idle when B's scope ended (B took {b_took:?}): the test did not \
             keep A's staging blocks pending"
        );
        ensure!(
            b_took < Duration::from_millis(500),
            "B's staged copies took {b_took:?}: they waited for A's pending staging blocks"
        );
        check_eq("B's staged round trip", &second, &second_out)?;
        for (i, (input, output)) in inputs.iter().zip(&outputs).enumerate() {
            check_eq(&format!("A's upload {i} behind the kernel"), input, output)?;
        }
        Ok(())
    })
}

/// Staged copies issued from a fork child run on the child's stream and are joined
/// like direct ones: an upload into a lent buffer, an upload into the child's own
/// buffer, downloads of both and of a parent buffer lent to the child, and the parent's
/// download of the lent buffer after the join.
fn staged_copies_inside_a_fork_child_are_exact() -> TestResult {
    let config = StagingConfig {
        chunk_bytes: 256 << 10,
        ring_blocks: 3,
        ..StagingConfig::DEFAULT
    };
    with_staging_config(config, || {
        let a = stream()?;
        let b = a.device().new_stream()?;
        let mut rng = Rng::new();
        let n = (3 << 20) / 4 + 5; // 3 MiB + 20 bytes of f32: 13 chunks
        let parent_in: Vec<f32> = rng.vec(n);
        let child_in: Vec<f32> = rng.vec(n);
        let child_own: Vec<f32> = rng.vec(n);
        let mut child_saw_parent = poisoned::<f32>(n);
        let mut child_saw_own = poisoned::<f32>(n);
        let mut parent_saw_child = poisoned::<f32>(n);
        let before = staged_copy_counts();
        scope(&a, |s| -> TestResult {
            let from_parent = s.upload(&parent_in)?;
            let mut lent = s.alloc::<f32>(n)?;
            s.fork(
                &b,
                (&from_parent, &mut lent),
                |c, (from_parent, mut lent)| -> TestResult {
                    c.copy_to_device(&child_in, &mut lent)?;
                    let own = c.upload(&child_own)?;
                    c.copy_to_host(&from_parent, &mut child_saw_parent)?
                        .wait()?;
                    let _own = c.copy_to_host(&own, &mut child_saw_own)?;
                    Ok(())
                },
            )?;
            let _after_join = s.copy_to_host(&lent, &mut parent_saw_child)?;
            Ok(())
        })?;
        let after = staged_copy_counts();
        ensure!(
            (after.0 - before.0, after.1 - before.1) == (3, 3),
            "staged (uploads, downloads) in the fork: {:?} -> {after:?}, expected 3 of each",
            before
        );
        check_eq(
            "parent buffer downloaded by the child",
            &parent_in,
            &child_saw_parent,
        )?;
        check_eq(
            "child's own buffer downloaded by the child",
            &child_own,
            &child_saw_own,
        )?;
        check_eq(
            "lent buffer filled by the child, downloaded by the parent",
            &child_in,
            &parent_saw_child,
        )
    })
}

/// A thread per GPU (two on one GPU where there is one, at most four), as the ranks of
/// one process copy: each makes ten staged round trips of 1 MiB and more at once with
/// the others, so their memcpy jobs share the process's workers. Every copy staged
/// (each thread's own counters) and exact.
fn staged_round_trips_from_a_thread_per_gpu_at_once_are_exact() -> TestResult {
    // Each thread's `Device` frees its pinned pool when dropped (see `serial()` above).
    let _serial = serial();
    let count = Device::count()?;
    let threads = count.clamp(2, 4);
    let start = std::sync::Barrier::new(threads);
    std::thread::scope(|t| -> TestResult {
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let start = &start;
                t.spawn(move || -> TestResult {
                    // Every thread reaches the barrier, also when its setup failed.
                    let stream = Device::new(i % count).and_then(|d| d.new_stream());
                    start.wait();
                    let stream = stream?;
                    let mut rng = Rng::new();
                    let before = staged_copy_counts();
                    for round in 0..10 {
                        let len = (1 << 20) + round * 4099 + i * 12_289;
                        let input: Vec<u8> = rng.vec(len);
                        let mut out = poisoned::<u8>(len);
                        scope(&stream, |s| -> TestResult {
                            let x = s.upload(&input)?;
                            s.copy_to_host(&x, &mut out)?.wait()?;
                            Ok(())
                        })?;
                        check_eq(&format!("thread {i}, round {round}"), &input, &out)?;
                    }
                    let after = staged_copy_counts();
                    ensure!(
                        (after.0 - before.0, after.1 - before.1) == (10, 10),
                        "thread {i}: staged (uploads, downloads) {before:?} -> {after:?}, expected 10 of each"
                    );
                    Ok(())
                })
            })
            .collect();
        for (i, worker) in workers.into_iter().enumerate() {
            worker
                .join()
                .map_err(|_| format!("thread {i} panicked"))??;
        }
        Ok(())
    })
}
