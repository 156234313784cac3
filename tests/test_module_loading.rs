//! First launches of kernels of several modules from threads of one device at once
//! (`stream-core/src/kernel/module_cache.rs`): each thread's module compiles outside the
//! device's module lock, so the compiles run side by side; threads that need the same
//! module share one compile and one load; every thread gets its own kernel and exact
//! results. The `kernels` crate's element-wise kernels and reductions are a module per
//! precision, so the threads below need three modules of each and share each one.
//!
//! This binary holds only this test, so its launches are the process's first (each
//! module is compiled and loaded here, not found loaded). It prints how long the
//! threads took, from the barrier to the last result: with `CUDA_CACHE_DISABLE=1`, about
//! the longest compile when they run side by side, their sum when one device compiles
//! one module at a time. Without a CUDA device it is reported as ignored (see
//! `gpu_tests::run`).

use std::sync::Barrier;
use std::time::Instant;

use gpu_tests::{check_eq, device, ensure, poisoned, Real, TestResult};
use half::{bf16, f16};
use stream_core::{scope, Device};

gpu_tests::test_main! {
    gpu: [
        first_launches_of_several_modules_from_threads_of_one_device_are_exact,
    ],
}

/// Elements each thread fills and sums: more than one block, not a multiple of one.
const LEN: usize = 4096 + 37;

/// After `start`, on a new stream of `device`: fills `LEN` elements of `T` with 3, sums
/// `i % 16` over `LEN` elements, and checks both exactly (every value and partial sum is
/// a small integer, exact in every precision and accumulator).
fn fill_and_sum<T>(device: &Device, start: &Barrier) -> TestResult
where
    T: Real,
    T::Accumulator: Real,
{
    let three = T::from_f64(3.0);
    let terms: Vec<T> = (0..LEN).map(|i| T::from_f64((i % 16) as f64)).collect();
    let expected: f64 = (0..LEN).map(|i| (i % 16) as f64).sum();
    let mut filled = poisoned::<T>(LEN);
    let mut sum = poisoned::<T::Accumulator>(1);
    // Before anything that can fail: a thread that returned early would leave the others
    // (and the test) waiting at the barrier for good.
    start.wait();
    let stream = device.new_stream()?;
    scope(&stream, |s| -> TestResult {
        let mut y = s.alloc::<T>(LEN)?;
        kernels::fill(s, &mut y, three)?;
        let x = s.upload(&terms)?;
        let mut out = s.alloc::<T::Accumulator>(1)?;
        kernels::reduce_sum(s, &x, &mut out)?;
        let _filled = s.copy_to_host(&y, &mut filled)?;
        let _sum = s.copy_to_host(&out, &mut sum)?;
        Ok(())
    })?;
    check_eq(
        &format!("kernels::fill(3) of {LEN} {}", T::NAME),
        &[three; LEN],
        &filled,
    )?;
    ensure!(
        sum[0].to_f64() == expected,
        "kernels::reduce_sum of {LEN} {} is {}, not {expected}",
        T::NAME,
        sum[0].to_f64()
    );
    Ok(())
}

/// Eight threads, two per element type (f32, f64, f16, bf16: three modules of
/// element-wise kernels and three of reductions, f16 and bf16 sharing theirs), start
/// their first launches together; each result is exact.
fn first_launches_of_several_modules_from_threads_of_one_device_are_exact() -> TestResult {
    let device = device()?;
    type Job = fn(&Device, &Barrier) -> TestResult;
    let jobs: [(&str, Job); 8] = [
        ("f32", fill_and_sum::<f32>),
        ("f64", fill_and_sum::<f64>),
        ("f16", fill_and_sum::<f16>),
        ("bf16", fill_and_sum::<bf16>),
        ("f32", fill_and_sum::<f32>),
        ("f64", fill_and_sum::<f64>),
        ("f16", fill_and_sum::<f16>),
        ("bf16", fill_and_sum::<bf16>),
    ];
    let start = Barrier::new(jobs.len() + 1);
    let (outcomes, all) = std::thread::scope(|threads| {
        let running: Vec<_> = jobs
            .iter()
            .map(|&(name, job)| {
                let (device, start) = (&device, &start);
                (name, threads.spawn(move || job(device, start)))
            })
            .collect();
        start.wait();
        let began = Instant::now();
        let outcomes: Vec<_> = running
            .into_iter()
            .map(|(name, thread)| (name, thread.join()))
            .collect();
        (outcomes, began.elapsed())
    });
    for (name, outcome) in outcomes {
        match outcome {
            Ok(Ok(_)) => {}
            Ok(Err(failed)) => {
                let why = failed.message().unwrap_or("failed");
                return Err(format!("the {name} thread: {why}").into());
            }
            Err(_) => return Err(format!("the {name} thread panicked").into()),
        }
    }
    eprintln!(
        "test_module_loading: 8 threads' first launches (6 modules) took {} ms",
        all.as_millis()
    );
    Ok(())
}
