//! Staged downloads into pageable memory that return at once (`host::staging::download`):
//! `copy_to_host` snapshots the source on the device and returns; a coordinator thread
//! copies each chunk out as its DMA lands; `Pending::wait` and the scope's end (also on
//! unwind) wait for that copy-out.
//!
//! Every test draws fresh non-zero random data, poisons its outputs first, and checks
//! that each copy took the staged path (`staged_copy_counts`). Without a CUDA device
//! these tests are reported as ignored (see `gpu_tests::run`).

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use gpu_tests::{check_eq, ensure, panic_message, poisoned, spin, stream, Failed, Rng, TestResult};
use stream_core::staging::{staged_copy_counts, with_staging_config, StagingConfig};
use stream_core::{scope, Error};

gpu_tests::test_main! {
    gpu: [
        staged_download_returns_before_its_copy_out_and_wait_delivers_every_byte,
        source_written_after_a_staged_download_leaves_the_download_unchanged,
        forgotten_staged_download_is_complete_when_the_scope_ends,
        staged_download_in_a_fork_child_is_complete_when_the_outermost_scope_ends,
        staged_downloads_are_exact_around_chunk_boundaries_waited_and_not,
        panic_while_a_staged_copy_out_is_in_flight_leaves_it_complete,
        staged_downloads_from_four_threads_at_once_are_exact,
    ],
}

/// Cycles of the kernel that delays a download: about 200 ms on an H100 or H200.
const DELAY_CYCLES: u64 = 400_000_000;

/// 64 MiB of `u32`: eight chunks of the default 8 MiB.
const LEN: usize = 16 << 20;

/// Downloads staged on this thread so far.
fn staged_downloads() -> u64 {
    staged_copy_counts().1
}

/// Behind a 200 ms kernel, `copy_to_host` into a `Vec` returns at once (well before the
/// kernel ends) with its `Pending` not ready; `wait` then delivers every byte.
fn staged_download_returns_before_its_copy_out_and_wait_delivers_every_byte() -> TestResult {
    let stream = stream()?;
    let input: Vec<u32> = Rng::new().vec(LEN);
    let mut out = poisoned::<u32>(LEN);
    let before = staged_downloads();
    let (mut returned_in, mut was_ready) = (Duration::ZERO, true);
    scope(&stream, |s| -> TestResult {
        let x = s.upload(&input)?;
        spin(s, DELAY_CYCLES)?;
        let start = Instant::now();
        let pending = s.copy_to_host(&x, &mut out)?;
        returned_in = start.elapsed();
        was_ready = pending.is_ready()?;
        let host = pending.wait()?;
        check_eq("staged download after wait", &input, host)
    })?;
    ensure!(
        staged_downloads() == before + 1,
        "the download did not take the staged path"
    );
    ensure!(
        !was_ready,
        "the download was ready right after copy_to_host, behind a 200 ms kernel"
    );
    ensure!(
        returned_in < Duration::from_millis(50),
        "copy_to_host took {returned_in:?} behind a 200 ms kernel: it waited for the copy"
    );
    Ok(())
}

/// The source is overwritten on the device right after the download was issued, before
/// it is waited for: the download still holds the old contents (it copied a snapshot).
fn source_written_after_a_staged_download_leaves_the_download_unchanged() -> TestResult {
    let stream = stream()?;
    let input: Vec<u32> = Rng::new().vec(LEN);
    let mut out = poisoned::<u32>(LEN);
    scope(&stream, |s| -> TestResult {
        let mut x = s.upload(&input)?;
        spin(s, DELAY_CYCLES / 4)?;
        let pending = s.copy_to_host(&x, &mut out)?;
        s.fill(&mut x, 0xDEAD_BEEF)?;
        let host = pending.wait()?;
        check_eq(
            "download issued before the source was overwritten",
            &input,
            host,
        )
    })
}

/// A staged download whose `Pending` is forgotten is complete when its scope returns
/// (the scope waits for the copy-out in its own frame).
fn forgotten_staged_download_is_complete_when_the_scope_ends() -> TestResult {
    let stream = stream()?;
    let input: Vec<u32> = Rng::new().vec(LEN);
    let mut out = poisoned::<u32>(LEN);
    scope(&stream, |s| -> TestResult {
        let x = s.upload(&input)?;
        spin(s, DELAY_CYCLES)?;
        std::mem::forget(s.copy_to_host(&x, &mut out)?);
        Ok(())
    })?;
    check_eq("forgotten staged download after its scope", &input, &out)
}

/// A fork's child issues a staged download and returns without waiting: the outermost
/// scope's end waits for its copy-out too.
fn staged_download_in_a_fork_child_is_complete_when_the_outermost_scope_ends() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let input: Vec<u32> = Rng::new().vec(LEN);
    let mut out = poisoned::<u32>(LEN);
    scope(&a, |s| -> TestResult {
        let x = s.upload(&input)?;
        s.fork(&b, &x, |c, x| -> Result<(), Error> {
            spin(c, DELAY_CYCLES)?;
            let _pending = c.copy_to_host(&x, &mut out)?;
            Ok(())
        })?;
        Ok(())
    })?;
    check_eq(
        "staged download of a fork's child after the outer scope",
        &input,
        &out,
    )
}

/// With small chunks (16 KiB, rings of 1 to 3 blocks, 1 to 3 threads), downloads of
/// lengths around every chunk boundary up to four chunks are byte-exact, both waited
/// for and left to the scope's end.
fn staged_downloads_are_exact_around_chunk_boundaries_waited_and_not() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    const CHUNK: usize = 16 << 10;
    for (ring, threads) in [(1, 1), (2, 3), (3, 2)] {
        let config = StagingConfig {
            upload_threshold: usize::MAX,
            download_threshold: 1,
            chunk_bytes: CHUNK,
            ring_blocks: ring,
            threads,
        };
        for chunks in 1..=4usize {
            for delta in [-1isize, 0, 1] {
                let len = (chunks * CHUNK) as isize + delta;
                let len = len as usize;
                let input: Vec<u8> = rng.vec(len);
                let mut waited = poisoned::<u8>(len);
                let mut left = poisoned::<u8>(len);
                let before = staged_downloads();
                with_staging_config(config, || {
                    scope(&stream, |s| -> TestResult {
                        let x = s.upload(&input)?;
                        let host = s.copy_to_host(&x, &mut waited)?.wait()?;
                        check_eq(&format!("{len} bytes, waited"), &input, host)?;
                        let _left = s.copy_to_host(&x, &mut left)?;
                        Ok(())
                    })
                })?;
                check_eq(&format!("{len} bytes, left to the scope"), &input, &left)?;
                ensure!(
                    staged_downloads() == before + 2,
                    "downloads of {len} bytes (ring {ring}, {threads} threads) were not staged"
                );
            }
        }
    }
    Ok(())
}

/// A panic while a staged copy-out is in flight (behind a long kernel): once
/// `catch_unwind` returns, every byte has landed, because the unwinding scope waited for
/// the copy-out in its own frame.
fn panic_while_a_staged_copy_out_is_in_flight_leaves_it_complete() -> TestResult {
    const DELIBERATE: &str = "deliberate panic with a staged copy-out in flight";
    let stream = stream()?;
    let input: Vec<u32> = Rng::new().vec(LEN);
    let mut out = poisoned::<u32>(LEN);
    let was_ready = Cell::new(None);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        scope(&stream, |s| -> TestResult {
            let x = s.upload(&input)?;
            spin(s, DELAY_CYCLES)?;
            let pending = s.copy_to_host(&x, &mut out)?;
            was_ready.set(Some(pending.is_ready()?));
            panic!("{DELIBERATE}");
        })
    }));
    match caught {
        Err(payload) if panic_message(&*payload) == DELIBERATE => {}
        Err(payload) => {
            return Err(Failed::from(format!(
                "unexpected panic: {}",
                panic_message(&*payload)
            )))
        }
        Ok(result) => {
            return Err(Failed::from(format!(
                "the scope returned {result:?} instead of panicking"
            )))
        }
    }
    ensure!(
        was_ready.get() == Some(false),
        "the copy-out was not in flight at the panic ({:?})",
        was_ready.get()
    );
    check_eq("staged download after the panic", &input, &out)
}

/// Four threads, each with its own stream, issue ten staged downloads of 3 MiB + 5
/// bytes each, half waited for and half left to the scope: all exact.
fn staged_downloads_from_four_threads_at_once_are_exact() -> TestResult {
    let dev = stream()?.device().clone();
    std::thread::scope(|t| -> TestResult {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let dev = dev.clone();
                t.spawn(move || -> TestResult {
                    let stream = dev.new_stream()?;
                    let mut rng = Rng::new();
                    for round in 0..10 {
                        let len = (3 << 20) + 5;
                        let input: Vec<u8> = rng.vec(len);
                        let mut out = poisoned::<u8>(len);
                        scope(&stream, |s| -> TestResult {
                            let x = s.upload(&input)?;
                            let pending = s.copy_to_host(&x, &mut out)?;
                            if round % 2 == 0 {
                                pending.wait()?;
                            }
                            Ok(())
                        })?;
                        check_eq(&format!("round {round}"), &input, &out)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker.join().map_err(|p| {
                Failed::from(format!("a worker panicked: {}", panic_message(&*p)))
            })??;
        }
        Ok(())
    })
}
