//! `GpuTimer` on a real GPU (`stream-core/src/timing/`): it measures the GPU time of the
//! work between its ends (also across a fork), reading it before the stop has completed
//! is an error and never a wait, and reading it without its ends, or with the stop before
//! the start, says which.
//!
//! GPU work of a known length is `gpu_tests::spin` (about 50 ms per 100 million cycles
//! on an H100/H200); the tests compare measurements with each other and with the host's
//! clock, never with a fixed clock rate. Without a CUDA device these tests are reported
//! as ignored (see `gpu_tests::run`).

use std::time::{Duration, Instant};

use gpu_tests::{check_error, device, ensure, expect_err, spin, TestResult};
use stream_core::{scope, Error, GpuTimer, Stream};

gpu_tests::test_main! {
    gpu: [
        a_timer_measures_the_gpu_time_of_the_work_between_its_ends,
        a_timer_measures_across_a_fork,
        reading_a_timer_before_its_stop_completes_is_an_error_not_a_wait,
        a_timer_read_without_its_ends_says_which_is_missing,
        a_stop_that_ran_before_the_start_is_an_error,
    ],
}

/// Spin cycles of one unit of work (about 25 ms).
const UNIT: u64 = 50_000_000;

/// The GPU time of `units` units of spinning between the timer's ends in one scope on
/// `stream`, and the host time of that scope.
fn timed_spin(timer: &GpuTimer, stream: &Stream, units: u64) -> TestResult<(Duration, Duration)> {
    let host = Instant::now();
    scope(stream, |s| -> TestResult {
        timer.start(s)?;
        for _ in 0..units {
            spin(s, UNIT)?;
        }
        timer.stop(s)?;
        Ok(())
    })?;
    let host = host.elapsed();
    Ok((timer.elapsed()?, host))
}

/// The spin kernel compiled and loaded before any measurement: a first launch compiles
/// it on the host, and a timer counts the time the GPU waited for that too.
fn warm_up(timer: &GpuTimer, stream: &Stream) -> TestResult {
    timed_spin(timer, stream, 1).map(drop)
}

/// Nothing between the ends measures under a millisecond; one unit measures at most the
/// host time of its scope and at least half of it (the scope is the spin, a launch and a
/// synchronisation); two and four units measure 2x and 4x one unit, within 25 %.
fn a_timer_measures_the_gpu_time_of_the_work_between_its_ends() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let timer = GpuTimer::new(&dev)?;
    warm_up(&timer, &stream)?;
    let (empty, _) = timed_spin(&timer, &stream, 0)?;
    ensure!(
        empty < Duration::from_millis(1),
        "nothing between start and stop measured {empty:?}"
    );
    let (one, host) = timed_spin(&timer, &stream, 1)?;
    // Under a sanitizer the tool's own work on every launch and synchronisation is host
    // time of the scope, unrelated to the GPU's: only the upper bound holds there.
    let under_a_tool = gpu_tests::sanitizer().is_some();
    ensure!(
        one <= host && (one * 2 >= host || under_a_tool),
        "one spin measured {one:?} on the GPU in a scope of {host:?} on the host"
    );
    for units in [2u32, 4] {
        let (many, _) = timed_spin(&timer, &stream, u64::from(units))?;
        let ratio = many.as_secs_f64() / one.as_secs_f64() / f64::from(units);
        ensure!(
            (0.75..=1.25).contains(&ratio),
            "{units} spins measured {many:?}, one {one:?}: {ratio:.2}x of {units} times one"
        );
    }
    Ok(())
}

/// Start on the parent, two units of spinning on a fork's child, the stop on the child
/// after them: the measurement covers the child's work (at least 1.5 units as measured
/// on one stream), and the stop needs no join to be read after the scope.
fn a_timer_measures_across_a_fork() -> TestResult {
    let dev = device()?;
    let (parent, child) = (dev.new_stream()?, dev.new_stream()?);
    let timer = GpuTimer::new(&dev)?;
    warm_up(&timer, &parent)?;
    let (one, _) = timed_spin(&timer, &parent, 1)?;
    scope(&parent, |s| -> TestResult {
        timer.start(s)?;
        s.fork(&child, (), |c, ()| -> TestResult {
            spin(c, UNIT)?;
            spin(c, UNIT)?;
            timer.stop(c)?;
            Ok(())
        })?;
        Ok(())
    })?;
    let across = timer.elapsed()?;
    ensure!(
        across.as_secs_f64() >= 1.5 * one.as_secs_f64(),
        "two spins on a fork's child measured {across:?} from the parent's start; one spin \
         measures {one:?}"
    );
    Ok(())
}

/// Inside the scope, right after the stop was recorded behind 8 units of spinning, the
/// timer is an `Error::Timer` saying the stop has not completed, returned at once while
/// the stream is still busy; after the scope it reads the spin's time.
fn reading_a_timer_before_its_stop_completes_is_an_error_not_a_wait() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let timer = GpuTimer::new(&dev)?;
    let (early, took, busy) = scope(&stream, |s| -> TestResult<_> {
        timer.start(s)?;
        for _ in 0..8 {
            spin(s, UNIT)?;
        }
        timer.stop(s)?;
        let t = Instant::now();
        let early = timer.elapsed();
        Ok((early, t.elapsed(), !stream.is_idle()?))
    })?;
    let err = expect_err("elapsed before the stop completed", early)?;
    check_error(
        "elapsed before the stop completed",
        &err,
        &Error::Timer {
            reason: "its stop has not completed on the GPU yet; read it after the scope \
                     that recorded the stop has ended, or after a wait that covers it",
        },
        &[
            "cannot read the GPU timer",
            "has not completed",
            "after the scope",
        ],
    )?;
    // 20 ms is far under the 8 units' ~200 ms; a sanitizer's interception of the
    // event query may take longer, still far under what a wait would take there.
    let refusal_limit = Duration::from_millis(gpu_tests::load(20, 100) as u64);
    ensure!(
        took < refusal_limit && busy,
        "elapsed took {took:?} to refuse (the stream was busy afterwards: {busy}): it waited"
    );
    let after = timer.elapsed()?;
    ensure!(
        after > Duration::from_millis(10),
        "8 spins measured {after:?} after the scope"
    );
    Ok(())
}

/// A new timer has no start; a start without a stop has no stop; a new start after a
/// complete measurement begins a new one, which has no stop yet.
fn a_timer_read_without_its_ends_says_which_is_missing() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let timer = GpuTimer::new(&dev)?;
    let no_start = Error::Timer {
        reason: "its start was never recorded; call start, then stop, in a scope",
    };
    let no_stop = Error::Timer {
        reason: "its stop was not recorded after its start; call stop in a scope",
    };
    let err = expect_err("a new timer", timer.elapsed())?;
    check_error(
        "a new timer",
        &err,
        &no_start,
        &["start was never recorded"],
    )?;
    scope(&stream, |s| timer.start(s))?;
    let err = expect_err("a timer with only a start", timer.elapsed())?;
    check_error(
        "a timer with only a start",
        &err,
        &no_stop,
        &["stop was not recorded"],
    )?;
    scope(&stream, |s| timer.stop(s))?;
    timer.elapsed()?;
    scope(&stream, |s| timer.start(s))?;
    let err = expect_err("a timer started again", timer.elapsed())?;
    check_error(
        "a timer started again",
        &err,
        &no_stop,
        &["stop was not recorded"],
    )?;
    Ok(())
}

/// The start behind 4 units of spinning on one stream, the stop on another, idle stream
/// with no order between them: the stop runs first, and the timer says so rather than
/// giving a time.
fn a_stop_that_ran_before_the_start_is_an_error() -> TestResult {
    let dev = device()?;
    let (busy, idle) = (dev.new_stream()?, dev.new_stream()?);
    let timer = GpuTimer::new(&dev)?;
    scope(&busy, |s| -> TestResult {
        for _ in 0..4 {
            spin(s, UNIT)?;
        }
        timer.start(s)?;
        scope(&idle, |t| timer.stop(t))?;
        Ok(())
    })?;
    let err = expect_err("a stop that ran before the start", timer.elapsed())?;
    check_error(
        "a stop that ran before the start",
        &err,
        &Error::Timer {
            reason: "its stop ran before its start on the GPU; record the stop on the \
                     start's stream, or on a stream ordered after it",
        },
        &["ran before its start", "ordered after it"],
    )
}
