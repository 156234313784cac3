//! Waiting without blocking, for the owned-buffer futures (`stream_core::future`), on
//! tokio's multi-threaded runtime and on the workspace's `mini-executor`: while a
//! one-second kernel runs behind a future, the executor's one worker runs other tasks;
//! with the head-of-line bypass on, a short operation resolves long before a long one
//! of another stream that the completion thread sleeps on; a bypass stream dropped
//! while its operation is pending still resolves it; and the completion thread sleeps,
//! rather than spins, while an operation's work runs.
//!
//! The tests of this file take one lock each, so that they run one at a time: their
//! timings and the completion counters they compare are shared by the process.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

mod async_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_support::workers::{self, joined, spawn_spin, Kind};
use async_support::{process_cpu_time, serial, LONG_SPIN, SPIN};
use gpu_tests::{check_eq, device, ensure, spin, Rng, TestResult};
use mini_executor::block_on;
use stream_core::future::completion_stats;

gpu_tests::test_main! {
    gpu: [
        no_tokio_worker_waits_while_a_long_kernel_runs =
            || no_worker_waits_while_a_long_kernel_runs(Kind::Tokio),
        no_mini_executor_worker_waits_while_a_long_kernel_runs =
            || no_worker_waits_while_a_long_kernel_runs(Kind::Mini),
        head_of_line_bypass_on_tokio_resolves_a_short_operation_before_a_long_one_of_another_stream =
            || short_operation_is_not_held_behind_a_long_one(Kind::Tokio),
        head_of_line_bypass_on_mini_executor_resolves_a_short_operation_before_a_long_one_of_another_stream =
            || short_operation_is_not_held_behind_a_long_one(Kind::Mini),
        bypass_stream_dropped_while_its_operation_is_pending_still_resolves_it,
        the_sleeping_completion_thread_burns_no_core_while_a_long_kernel_runs,
    ],
}

/// While a one-second kernel runs behind a `run_owned` future, the one worker thread of
/// a `kind` executor runs other tasks: nothing waits on the GPU.
fn no_worker_waits_while_a_long_kernel_runs(kind: Kind) -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = Arc::new(dev.new_stream()?);
    // Warm up: the spin kernel's module and the completion thread, so that neither is
    // made while the clock runs.
    block_on(stream.run_owned((), |s, ()| spin(s, 1)))?;
    let executor = workers::start(kind, 1)?;
    let start = Instant::now();
    let long = spawn_spin(&executor, Arc::clone(&stream), LONG_SPIN);
    let quick = executor.spawn(async { Ok(Instant::now()) });
    let quick_done = joined(quick)?;
    let long_done = joined(long)?;
    ensure!(
        quick_done < long_done && quick_done.duration_since(start) < Duration::from_millis(200),
        "{}: the quick task finished {:?} after the start and the long one {:?}: the \
         worker thread waited for the GPU",
        executor.name(),
        quick_done.duration_since(start),
        long_done.duration_since(start)
    );
    ensure!(
        long_done.duration_since(start) > Duration::from_millis(100),
        "the one-second kernel's future resolved after {:?}: it did not wait for the GPU",
        long_done.duration_since(start)
    );
    Ok(())
}

/// A short operation on a stream with the head-of-line bypass on, made while the
/// completion thread sleeps on a one-second kernel's operation of another stream,
/// resolves long before that kernel ends: it rang the doorbell, so it is not held
/// behind the long one.
fn short_operation_is_not_held_behind_a_long_one(kind: Kind) -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let long_stream = Arc::new(dev.new_stream()?);
    let short_stream = Arc::new(dev.new_stream()?);
    short_stream.set_head_of_line_bypass(true);
    workers::short_resolves_before_long(kind, &long_stream, &short_stream, "bypass on")?;
    Ok(())
}

/// A stream with the head-of-line bypass on is dropped (its companion stream, where the
/// ring waits, with it) right after an upload was made on it, while a long kernel runs
/// on another stream: the future still resolves, with its data on the device and its
/// buffer back, and nothing stays in flight.
fn bypass_stream_dropped_while_its_operation_is_pending_still_resolves_it() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let long_stream = dev.new_stream()?;
    let short_stream = dev.new_stream()?;
    short_stream.set_head_of_line_bypass(true);
    let in_flight_before = completion_stats().in_flight;
    let long = long_stream.run_owned((), |s, ()| spin(s, SPIN));
    let input = Rng::new().vec::<f32>(1 << 16);
    let upload = short_stream.upload_owned(input.clone());
    drop(short_stream);
    let (on_gpu, back) = block_on(upload)?;
    check_eq("the upload's host buffer, handed back", &back, &input)?;
    check_eq("the uploaded data", &on_gpu.to_host_vec()?, &input)?;
    block_on(long)?;
    let start = Instant::now();
    while completion_stats().in_flight > in_flight_before
        && start.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    ensure!(
        completion_stats().in_flight == in_flight_before,
        "operations still in flight 10 s after both futures resolved: {} (before: {in_flight_before})",
        completion_stats().in_flight
    );
    Ok(())
}

/// In the default mode the completion thread sleeps while an operation's work runs:
/// over 300 ms of a one-second kernel's operation in flight, the whole process burns
/// well under a core (the thread sleeps in `cuEventSynchronize` on the operation's
/// blocking-sync event; an event without that flag would be waited for spinning), and
/// the operation still resolves after its kernel.
fn the_sleeping_completion_thread_burns_no_core_while_a_long_kernel_runs() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = dev.new_stream()?;
    block_on(stream.run_owned((), |s, ()| spin(s, 1)))?; // the module and the thread
    let begin = Instant::now();
    let op = stream.run_owned((), |s, ()| spin(s, LONG_SPIN));
    let cpu = process_cpu_time()?;
    std::thread::sleep(Duration::from_millis(300));
    let (burned, elapsed) = (process_cpu_time()? - cpu, begin.elapsed());
    block_on(op)?;
    let resolved_after = begin.elapsed();
    ensure!(
        resolved_after > Duration::from_millis(300),
        "the one-second kernel's operation resolved after {resolved_after:?}: the test \
         proves nothing"
    );
    ensure!(
        burned < elapsed / 3,
        "while the operation ran, the process burned {burned:?} of CPU in {elapsed:?}: \
         the completion thread did not sleep"
    );
    Ok(())
}
