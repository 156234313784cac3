//! Other threads' waits for the whole device beside this crate's work: one thread
//! makes a call that waits (or may wait) for the whole device over and over, or in the
//! last test cuBLAS work that could, while four threads run scopes or graph captures
//! as fast as they can. Every result is checked.
//!
//! * cudarc's `CudaContext::synchronize` (`cuCtxSynchronize`) beside scopes and forks:
//!   the scopes are unaffected.
//! * The crate's own calls that may wait for the whole device (`cuMemFree` of a
//!   `ManagedVec`, `cuMemFreeHost` when [`Device::trim_pinned_memory`] frees cached
//!   pinned blocks) beside graph captures: no capture is invalidated.
//! * cuBLAS through `kernels::Cublas` beside graph captures (a fresh stream, handle
//!   and SGEMM each time; `cublasDestroy`, which waits for the whole device, runs only
//!   when the device is dropped): no capture is invalidated.
//!
//! Not here, because it is the driver's crash, not an outcome to test:
//! `cuCtxSynchronize` beside captures on other threads killed the process inside the
//! driver with SIGSEGV in 7 of 7 runs on 2x H200 (driver 580.159.04;
//! `benchmarks/results/2026-11-28-h200x2-device-sync-beside-captures.txt`). The crate
//! never calls it; `interop`'s docs tell cudarc users not to while captures run.
//!
//! The tests run one at a time (`gpu_tests::serial`): the first one's synchronisations
//! beside another test's captures would be the crash above.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gpu_tests::graph_kernels::square_u32;
use gpu_tests::{
    check_close, check_eq, device, ensure, gemm_reference, poison, poisoned, serial, signed,
    Failed, Real, Rng, TestResult,
};
use kernels::Cublas;
use stream_core::{scope, Device, Error, LaunchConfig};

gpu_tests::test_main! {
    gpu: [
        scopes_and_forks_beside_repeated_device_synchronisations_are_unaffected,
        captures_beside_managed_memory_frees_are_never_invalidated,
        captures_beside_pinned_memory_trims_are_never_invalidated,
        captures_beside_cublas_work_on_fresh_streams_are_never_invalidated,
    ],
}

/// How long each test keeps its threads going.
const SOAK: Duration = Duration::from_secs(2);

/// Elements per operation.
const N: usize = 1000;

/// What the work threads did: how many operations were checked, how many captures the
/// driver invalidated.
#[derive(Default)]
struct Tally {
    checked: u64,
    invalidated: u64,
}

/// Runs `wait` over and over on one thread (every 50 us) while four threads run `work`
/// on `dev` until the soak ends; returns the work's tally and how many waits ran.
fn beside(
    dev: &Device,
    wait: impl Fn() -> Result<(), Failed> + Sync,
    work: fn(&Device, u64, Instant) -> Result<Tally, Failed>,
) -> Result<(Tally, u64), Failed> {
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + SOAK;
    std::thread::scope(|t| {
        let waiter = t.spawn(|| {
            let mut waits = 0u64;
            while !stop.load(Ordering::Relaxed) {
                wait()?;
                waits += 1;
                std::thread::sleep(Duration::from_micros(50));
            }
            Ok::<_, Failed>(waits)
        });
        let workers: Vec<_> = (0..4u64)
            .map(|seed| t.spawn(move || work(dev, seed, deadline)))
            .collect();
        let mut tally = Tally::default();
        let mut failure = None;
        for worker in workers {
            match worker.join() {
                Ok(Ok(done)) => {
                    tally.checked += done.checked;
                    tally.invalidated += done.invalidated;
                }
                Ok(Err(failed)) => failure = failure.or(Some(failed)),
                Err(_) => failure = failure.or(Some(Failed::from("a work thread panicked"))),
            }
        }
        stop.store(true, Ordering::Relaxed);
        let waits = waiter
            .join()
            .map_err(|_| Failed::from("the waiting thread panicked"))??;
        match failure {
            Some(failed) => Err(failed),
            None => Ok((tally, waits)),
        }
    })
}

/// cudarc's whole-device synchronisation, every 50 us, beside four threads whose scopes
/// each make a stream, upload, allocate, square in a fork onto a second stream and
/// download: every scope's result is right (the synchronisations may return errors of
/// their own; they are counted, not judged).
fn scopes_and_forks_beside_repeated_device_synchronisations_are_unaffected() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let context = dev.cudarc_context()?;
    let refused = AtomicU64::new(0);
    let (tally, waits) = beside(
        &dev,
        || {
            if context.synchronize().is_err() {
                refused.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        },
        scopes_until,
    )?;
    eprintln!(
        "scopes beside device synchronisations: {} checked; {waits} synchronisations, {} \
         refused",
        tally.checked,
        refused.load(Ordering::Relaxed)
    );
    ensure!(
        tally.checked > 0 && waits > 0,
        "nothing ran beside anything"
    );
    Ok(())
}

/// `ManagedVec`s allocated and dropped (`cuMemFree`, which may wait for the whole
/// device) beside four threads capturing graphs: every capture succeeds and replays right.
fn captures_beside_managed_memory_frees_are_never_invalidated() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    if let Err(Error::ManagedMemoryUnsupported { ordinal }) = dev.alloc_managed::<u32>(1) {
        eprintln!("device {ordinal} has no managed memory: nothing to free beside captures");
        return Ok(());
    }
    let wait = || {
        dev.alloc_managed::<u32>(1 << 16)
            .map(drop)
            .map_err(Failed::from)
    };
    captures_are_never_invalidated_beside(&dev, "managed memory frees", wait)
}

/// Pinned memory allocated, dropped into the crate's pool and freed from it by
/// [`Device::trim_pinned_memory`] (`cuMemFreeHost`, which may wait for the whole device)
/// beside four threads capturing graphs: every capture succeeds and replays right.
fn captures_beside_pinned_memory_trims_are_never_invalidated() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let wait = || {
        drop(dev.alloc_pinned::<u32>(1 << 16)?);
        dev.trim_pinned_memory(0).map(drop).map_err(Failed::from)
    };
    captures_are_never_invalidated_beside(&dev, "pinned memory trims", wait)
}

/// cuBLAS beside four threads capturing graphs: each time a fresh stream, a
/// [`Cublas`] handle (the first made by `cublasCreate`, the rest taken from the
/// device's idle list), an SGEMM in a scope (the stream lends the handle a workspace,
/// freed stream-ordered when the stream drops) and the handle dropped back to the list.
/// Every capture succeeds and replays right, and every product is right.
fn captures_beside_cublas_work_on_fresh_streams_are_never_invalidated() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let (m, n, k) = (16, 4, 8);
    let mut rng = Rng::new();
    let (a, b) = (
        signed::<f32>(&mut rng, m * k),
        signed::<f32>(&mut rng, k * n),
    );
    let (ab, abs) = gemm_reference((m, n, k), &a, &b);
    let wait = || {
        let stream = dev.new_stream()?;
        let mut blas = Cublas::new(&dev)?;
        let mut out = poisoned::<f32>(m * n);
        scope(&stream, |s| -> TestResult {
            let (da, db) = (s.upload(&a)?, s.upload(&b)?);
            let mut dc = s.alloc::<f32>(m * n)?;
            blas.sgemm(s, m as u32, n as u32, k as u32, 1.0, &da, &db, 0.0, &mut dc)?;
            s.copy_to_host(&dc, &mut out)?.wait()?;
            Ok(())
        })?;
        check_close("an SGEMM beside captures", &out, |j| {
            (ab[j], (k + 3) as f64 * f32::U * abs[j])
        })
    };
    captures_are_never_invalidated_beside(&dev, "cuBLAS work on fresh streams", wait)
}

/// [`beside`] with captures as the work: none invalidated, every one checked.
fn captures_are_never_invalidated_beside(
    dev: &Device,
    what: &str,
    wait: impl Fn() -> Result<(), Failed> + Sync,
) -> TestResult {
    let (tally, waits) = beside(dev, wait, captures_until)?;
    eprintln!(
        "captures beside {what}: {} replayed right, {} invalidated; {waits} beside them",
        tally.checked, tally.invalidated
    );
    ensure!(
        tally.invalidated == 0,
        "{} captures were invalidated beside {what}",
        tally.invalidated
    );
    ensure!(
        tally.checked > 0 && waits > 0,
        "nothing ran beside anything"
    );
    Ok(())
}

/// Scopes of `upload -> square_u32 (in a fork) -> download` on `dev` until `deadline`.
fn scopes_until(dev: &Device, seed: u64, deadline: Instant) -> Result<Tally, Failed> {
    let other = dev.new_stream()?;
    let mut rng = Rng::with_seed(seed);
    let mut tally = Tally::default();
    while Instant::now() < deadline {
        let x_host: Vec<u32> = rng.vec(N);
        let expected: Vec<u32> = x_host.iter().map(|v| v.wrapping_mul(*v)).collect();
        let mut out = vec![0u32; N];
        let fresh = dev.new_stream()?;
        scope(&fresh, |s| {
            let x = s.upload(&x_host)?;
            let mut y = s.alloc::<u32>(N)?;
            s.fork(&other, (&x, &mut y), |c, (x, mut y)| {
                square_u32(c, LaunchConfig::for_elements(N, 32), &x, &mut y)
            })?;
            s.copy_to_host(&y, &mut out)?.wait()?;
            Ok::<_, Error>(())
        })?;
        check_eq("a scope beside device-wide waits", &expected, &out)?;
        tally.checked += 1;
    }
    Ok(tally)
}

/// Captures of `upload -> square_u32 (in a fork) -> download` on `dev` until `deadline`,
/// each replayed and checked; an invalidated capture is counted, any other error fails.
fn captures_until(dev: &Device, seed: u64, deadline: Instant) -> Result<Tally, Failed> {
    let stream = dev.new_stream()?;
    let mut rng = Rng::with_seed(seed);
    let mut tally = Tally::default();
    while Instant::now() < deadline {
        let mut x_host = dev.alloc_pinned::<u32>(N)?;
        rng.fill(&mut x_host[..]);
        let expected: Vec<u32> = x_host.iter().map(|v| v.wrapping_mul(*v)).collect();
        let held = (x_host, dev.alloc_pinned::<u32>(N)?);
        let captured = dev.capture(held, |g, (x_host, mut out)| {
            let x = g.upload(&x_host)?;
            let mut y = g.alloc::<u32>(N)?;
            g.fork((&x, &mut y), |c, (x, mut y)| {
                square_u32(c, LaunchConfig::for_elements(N, 32), &x, &mut y)
            })?;
            g.copy_to_host(&y, &mut out)?;
            Ok::<_, Error>(())
        });
        match captured {
            Ok((mut graph, ())) => {
                poison(&mut graph.held_mut().1[..]);
                scope(&stream, |s| s.replay(&mut graph).map(drop))?;
                check_eq(
                    "a capture beside device-wide waits",
                    &expected,
                    graph.held().1,
                )?;
                tally.checked += 1;
            }
            Err(Error::GraphCaptureInvalidated(_)) => tally.invalidated += 1,
            Err(other) => {
                return Err(Failed::from(format!(
                    "a capture beside device-wide waits: expected success or \
                     GraphCaptureInvalidated, got {other:?}"
                )))
            }
        }
    }
    Ok(tally)
}
