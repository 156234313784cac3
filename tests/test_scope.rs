//! Scopes (`stream-core/src/scope/mod.rs`, `scope/exit.rs`) and `#[gpu_scope]`
//! functions: nesting on two streams, the closure's value and error coming back
//! unchanged, `#[gpu_scope]` free functions and methods, many scopes in a row, scopes
//! on several threads at once, and proof that a scope's end synchronises its own
//! stream only, never the device.
//!
//! Elsewhere: panics inside a scope in `test_panics.rs`, forks in `test_fork.rs`,
//! hand-offs in `test_hand_off.rs`, the contexts scopes bind in `test_contexts.rs`.
//!
//! Every test draws fresh non-zero random data, poisons its outputs before the GPU
//! runs, and compares the result with a CPU reference element by element (bit-exact).
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::fmt;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use gpu_tests::{
    check_eq, ensure, panic_message, poisoned, round_trips_on, spin, stream, Element, Failed, Rng,
    TestResult,
};
use stream_core::{gpu_scope, scope, Error, Scope};

gpu_tests::test_main! {
    gpu: [
        nested_scopes_on_two_streams_each_return_their_own_data,
        scope_returns_the_closures_own_error_unchanged,
        scope_returns_a_library_error_converted_into_the_closures_error_type,
        scope_returns_the_closures_value_and_the_stream_stays_usable_after_an_error,
        gpu_scope_free_function_runs_its_body_in_a_scope_on_the_callers_stream,
        gpu_scope_method_uses_its_receiver_inside_the_scope,
        gpu_scope_function_returns_its_own_error_type,
        thousand_small_scopes_in_a_loop_are_all_correct,
        scopes_on_two_threads_each_return_their_own_data,
        scope_on_b_completes_while_a_long_kernel_runs_on_a,
        scope_on_another_thread_completes_while_a_long_kernel_runs_on_a,
        eight_threads_run_thousands_of_scopes_with_random_sizes,
    ],
}

/// A user error type, with `From<stream_core::Error>` so `?` works in scopes.
#[derive(Debug, PartialEq)]
enum StepError {
    Gpu(Error),
    Rejected { index: usize },
}

impl From<Error> for StepError {
    fn from(e: Error) -> Self {
        StepError::Gpu(e)
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::Gpu(e) => write!(f, "GPU error: {e}"),
            StepError::Rejected { index } => write!(f, "input rejected at index {index}"),
        }
    }
}

/// Two scopes, the inner one on a second stream, nested three deep: each downloads its
/// own data. The outer scope's download stays pending across the inner scope and is
/// waited for afterwards.
fn nested_scopes_on_two_streams_each_return_their_own_data() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let mut rng = Rng::new();
    let n = (1 << 20) + 3;
    let outer_in: Vec<f32> = rng.vec(n);
    let inner_in: Vec<f32> = rng.vec(n);
    let innermost_in: Vec<u64> = rng.vec(4097);
    let mut outer_early = poisoned::<f32>(n);
    let mut outer_late = poisoned::<f32>(n);
    let mut inner_out = poisoned::<f32>(n);
    let mut innermost_out = poisoned::<u64>(4097);
    scope(&a, |s| -> TestResult {
        let x = s.upload(&outer_in)?;
        let early = s.copy_to_host(&x, &mut outer_early)?;
        scope(&b, |t| -> TestResult {
            let y = t.upload(&inner_in)?;
            let host = t.copy_to_host(&y, &mut inner_out)?.wait()?;
            check_eq("inner scope (stream b), read after wait", &inner_in, host)?;
            scope(&a, |u| -> TestResult {
                let z = u.upload(&innermost_in)?;
                let _download = u.copy_to_host(&z, &mut innermost_out)?;
                Ok(())
            })
        })?;
        let host = early.wait()?;
        check_eq(
            "outer scope's download, pending across the inner scope",
            &outer_in,
            host,
        )?;
        let _late = s.copy_to_host(&x, &mut outer_late)?;
        Ok(())
    })?;
    check_eq(
        "inner scope's download after both scopes",
        &inner_in,
        &inner_out,
    )?;
    check_eq(
        "innermost scope (stream a again)",
        &innermost_in,
        &innermost_out,
    )?;
    check_eq(
        "outer scope's download issued after the inner scope",
        &outer_in,
        &outer_late,
    )
}

/// The closure's own error comes back from `scope` exactly as returned, after the work
/// it enqueued has finished (the host buffer it downloaded into is complete).
fn scope_returns_the_closures_own_error_unchanged() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let input: Vec<u32> = rng.vec(1 << 20);
    let mut out = poisoned::<u32>(input.len());
    let result = scope(&stream, |s| -> Result<(), StepError> {
        let x = s.upload(&input)?;
        let _download = s.copy_to_host(&x, &mut out)?;
        Err(StepError::Rejected { index: 17 })
    });
    ensure!(
        result == Err(StepError::Rejected { index: 17 }),
        "scope returned {result:?}, not the closure's Err(Rejected {{ index: 17 }})"
    );
    check_eq("download enqueued before the closure failed", &input, &out)
}

/// A library error inside the closure, propagated with `?`, arrives as the closure's
/// error type wrapping exactly that error.
fn scope_returns_a_library_error_converted_into_the_closures_error_type() -> TestResult {
    let stream = stream()?;
    let input = [1.0f32; 5];
    let result = scope(&stream, |s| -> Result<(), StepError> {
        let mut x = s.alloc::<f32>(7)?;
        s.copy_to_device(&input, &mut x)?;
        Err(StepError::Rejected { index: 0 }) // not reached: the copy fails first
    });
    let expected = StepError::Gpu(Error::from(stream_core::error::LengthMismatch {
        what: "copy_to_device",
        source_len: 5,
        destination_len: 7,
    }));
    ensure!(result == Err(expected), "scope returned {result:?}");
    Ok(())
}

/// `scope` returns the closure's `Ok` value; after a scope that failed, the same stream
/// runs a new scope correctly.
fn scope_returns_the_closures_value_and_the_stream_stays_usable_after_an_error() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let input: Vec<i64> = rng.vec(4097);
    let failed = scope(&stream, |s| -> Result<(), StepError> {
        let _x = s.upload(&input)?;
        Err(StepError::Rejected { index: 3 })
    });
    ensure!(failed.is_err(), "the failing scope returned {failed:?}");
    let mut out = poisoned::<i64>(input.len());
    let value = scope(&stream, |s| -> Result<usize, Failed> {
        let x = s.upload(&input)?;
        let host = s.copy_to_host(&x, &mut out)?.wait()?;
        Ok(host.len() * 2 + 1)
    })?;
    ensure!(
        value == 2 * 4097 + 1,
        "scope returned {value}, not the closure's {}",
        2 * 4097 + 1
    );
    check_eq("round trip after a failed scope", &input, &out)
}

#[gpu_scope]
fn upload_then_download(s: &Scope, input: &[f32], out: &mut [f32]) -> stream_core::Result<()> {
    let x = s.upload(input)?;
    let _download = s.copy_to_host(&x, out)?;
    Ok(())
}

/// A `#[gpu_scope]` free function is called with the stream in the scope's place; its
/// download is complete when it returns.
fn gpu_scope_free_function_runs_its_body_in_a_scope_on_the_callers_stream() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for len in [0, 1, 4097, (1 << 20) + 7] {
        let input: Vec<f32> = rng.vec(len);
        let mut out = poisoned::<f32>(len);
        upload_then_download(&stream, &input, &mut out)?;
        check_eq(
            &format!("#[gpu_scope] fn round trip of {len}"),
            &input,
            &out,
        )?;
    }
    Ok(())
}

/// Frames data with a constant border on the GPU (a method, so the receiver's fields are
/// used inside the scope).
struct Framer {
    border: f32,
    width: usize,
}

impl Framer {
    #[gpu_scope]
    fn frame(&self, s: &Scope, input: &[f32], out: &mut [f32]) -> stream_core::Result<usize> {
        let n = input.len() + 2 * self.width;
        let mut x = s.alloc::<f32>(n)?;
        s.fill(&mut x, self.border)?;
        s.copy_to_device(
            input,
            &mut x.slice_mut(self.width..self.width + input.len())?,
        )?;
        s.copy_to_host(&x, out)?.wait()?;
        Ok(n)
    }
}

/// A `#[gpu_scope]` method (`&self`, then the scope) reads its fields in the scope and
/// returns its value.
fn gpu_scope_method_uses_its_receiver_inside_the_scope() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let framer = Framer {
        border: rng.value(),
        width: 3 + rng.below(100),
    };
    let input: Vec<f32> = rng.vec(10_000);
    let n = input.len() + 2 * framer.width;
    let mut expected = vec![framer.border; n];
    expected[framer.width..framer.width + input.len()].copy_from_slice(&input);
    let mut out = poisoned::<f32>(n);
    let returned = framer.frame(&stream, &input, &mut out)?;
    ensure!(returned == n, "the method returned {returned}, not {n}");
    check_eq("framed data", &expected, &out)
}

#[gpu_scope]
fn checked_round_trip(s: &Scope, input: &[u32], out: &mut [u32]) -> Result<u32, StepError> {
    if let Some(index) = input.iter().position(|&v| v == u32::POISON) {
        return Err(StepError::Rejected { index });
    }
    let x = s.upload(input)?;
    s.copy_to_host(&x, out)?.wait()?;
    Ok(input.len() as u32)
}

/// A `#[gpu_scope]` function with its own error type: its early `return Err(..)` and its
/// converted library errors arrive unchanged, its `Ok` value too.
fn gpu_scope_function_returns_its_own_error_type() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let mut input: Vec<u32> = rng.vec(1000);
    let mut out = poisoned::<u32>(1000);
    let ok = checked_round_trip(&stream, &input, &mut out);
    ensure!(
        ok == Ok(1000),
        "checked_round_trip returned {ok:?}, not Ok(1000)"
    );
    check_eq("checked_round_trip output", &input, &out)?;

    let mut short = poisoned::<u32>(999);
    let mismatch = checked_round_trip(&stream, &input, &mut short);
    let expected = StepError::Gpu(Error::from(stream_core::error::LengthMismatch {
        what: "copy_to_host",
        source_len: 1000,
        destination_len: 999,
    }));
    ensure!(
        mismatch == Err(expected),
        "with a short output it returned {mismatch:?}"
    );

    input[123] = u32::POISON;
    let rejected = checked_round_trip(&stream, &input, &mut out);
    ensure!(
        rejected == Err(StepError::Rejected { index: 123 }),
        "with a bad input it returned {rejected:?}"
    );
    Ok(())
}

/// 1000 scopes in a row on one stream, each a small round trip of a random length,
/// half waited inside the scope and half left to the scope's end.
fn thousand_small_scopes_in_a_loop_are_all_correct() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for i in 0..1000 {
        let len = 1 + rng.below(300);
        let input: Vec<u32> = rng.vec(len);
        let mut out = poisoned::<u32>(len);
        scope(&stream, |s| -> TestResult {
            let x = s.upload(&input)?;
            if i % 2 == 0 {
                s.copy_to_host(&x, &mut out)?.wait()?;
            } else {
                let _download = s.copy_to_host(&x, &mut out)?;
            }
            Ok(())
        })?;
        check_eq(&format!("scope {i} of 1000 ({len} elements)"), &input, &out)?;
    }
    Ok(())
}

/// Two threads, each with its own stream of the same device, run scopes at the same
/// time; every round trip is correct.
fn scopes_on_two_threads_each_return_their_own_data() -> TestResult {
    let streams = [stream()?, stream()?];
    let rngs = [Rng::new(), Rng::new()];
    std::thread::scope(|t| {
        let workers: Vec<_> = streams
            .iter()
            .zip(rngs)
            .map(|(stream, rng)| t.spawn(move || round_trips_on(stream, rng, 200)))
            .collect();
        workers.into_iter().enumerate().try_for_each(|(i, w)| {
            w.join()
                .map_err(|p| Failed::from(format!("thread {i} panicked: {}", panic_message(&*p))))?
                .map_err(|f| Failed::from(format!("thread {i}: {}", f.message().unwrap_or(""))))
        })
    })
}

/// About one second of spinning: long enough to observe a stream still busy.
const LONG_SPIN: u64 = 2_000_000_000;

fn times(input: &[f32], factor: f32) -> Vec<f32> {
    input.iter().map(|v| v * factor).collect()
}

/// A scope on stream B runs to completion (its final synchronisation included) while a
/// one-second kernel is still running on stream A, on the same thread: the library
/// synchronises one stream, never the device.
fn scope_on_b_completes_while_a_long_kernel_runs_on_a() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let n = 65_537;
    let input: Vec<f32> = Rng::new().vec(n);
    let mut out = poisoned::<f32>(n);
    let mut report = (false, Duration::ZERO);
    scope(&a, |s| -> TestResult {
        // Load both kernel modules (the spin kernel's and `kernels::scale`'s) outside
        // the timing: loading a module waits for the device.
        spin(s, 0)?;
        warm_up_scale(s)?;
        spin(s, LONG_SPIN)?;
        let start = Instant::now();
        scope(&b, |t| -> TestResult {
            let x = t.upload(&input)?;
            let mut y = t.alloc::<f32>(n)?;
            kernels::scale(t, 2.0, &x, &mut y)?;
            t.copy_to_host(&y, &mut out)?.wait()?;
            Ok(())
        })?;
        report = (!a.is_idle()?, start.elapsed());
        Ok(())
    })?;
    let (a_busy, b_took) = report;
    ensure!(
        a_busy,
        "stream A was idle when B's scope ended (B took {b_took:?}): overlap not shown"
    );
    ensure!(
        b_took < Duration::from_millis(500),
        "B's scope took {b_took:?}: it waited for A"
    );
    check_eq("B's result", &times(&input, 2.0), &out)
}

/// Launches `kernels::scale` once on a few elements, so that its module is loaded (a
/// module's first load waits for the device, which would hide the overlap measured).
fn warm_up_scale<'s>(s: &'s Scope<'s, '_>) -> Result<(), Error> {
    let x = s.alloc_zeroed::<f32>(4)?;
    let mut y = s.alloc::<f32>(4)?;
    kernels::scale(s, 1.0, &x, &mut y)
}

/// As above, across threads: one thread keeps stream A busy for about a second inside
/// its scope; another thread's scope on stream B finishes meanwhile.
fn scope_on_another_thread_completes_while_a_long_kernel_runs_on_a() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let n = 65_537;
    let input: Vec<f32> = Rng::new().vec(n);
    let launched = Barrier::new(2);
    std::thread::scope(|t| -> TestResult {
        let holder = t.spawn(|| -> TestResult {
            scope(&a, |s| -> TestResult {
                spin(s, 0)?;
                warm_up_scale(s)?;
                spin(s, LONG_SPIN)?;
                launched.wait();
                Ok(())
            })
        });
        launched.wait();
        let mut out = poisoned::<f32>(n);
        let start = Instant::now();
        scope(&b, |s| -> TestResult {
            let x = s.upload(&input)?;
            let mut y = s.alloc::<f32>(n)?;
            kernels::scale(s, 2.0, &x, &mut y)?;
            s.copy_to_host(&y, &mut out)?.wait()?;
            Ok(())
        })?;
        let b_took = start.elapsed();
        let a_busy = !a.is_idle()?;
        holder.join().map_err(|p| {
            Failed::from(format!("thread holding A panicked: {}", panic_message(&*p)))
        })??;
        ensure!(
            a_busy,
            "stream A was idle when B's scope ended (B took {b_took:?})"
        );
        ensure!(
            b_took < Duration::from_millis(500),
            "B's scope took {b_took:?}: it waited for A"
        );
        check_eq("B's result", &times(&input, 2.0), &out)
    })
}

/// Eight threads, each with two streams of its own, run 1500 scopes each (150 under a
/// sanitizer, which checks every thread of every kernel: `gpu_tests::load`) with random
/// sizes (0 to 256 Ki elements): upload, scale (on the scope's stream or in a fork on
/// the thread's second stream), download, wait, check against the CPU.
fn eight_threads_run_thousands_of_scopes_with_random_sizes() -> TestResult {
    const THREADS: usize = 8;
    let scopes = gpu_tests::load(1500, 150);
    let dev = stream()?.device().clone();
    let seeds: Vec<u64> = {
        let mut rng = Rng::new();
        (0..THREADS).map(|_| rng.next_u64()).collect()
    };
    let start = Instant::now();
    let results: Vec<Result<usize, Failed>> = std::thread::scope(|t| {
        let workers: Vec<_> = seeds
            .iter()
            .map(|&seed| {
                let dev = dev.clone();
                t.spawn(move || -> Result<usize, Failed> {
                    let main = dev.new_stream()?;
                    let side = dev.new_stream()?;
                    let mut rng = Rng::with_seed(seed);
                    let mut elements = 0;
                    for round in 0..scopes {
                        let n = rng.below(1 << 18);
                        elements += n;
                        let input: Vec<f32> = rng.vec(n);
                        let mut out = poisoned::<f32>(n);
                        let use_fork = round % 3 == 0;
                        scope(&main, |s| -> TestResult {
                            let x = s.upload(&input)?;
                            let mut y = s.alloc::<f32>(n)?;
                            if use_fork {
                                s.fork(&side, (&x, &mut y), |c, (x, mut y)| {
                                    kernels::scale(c, 2.0, &x, &mut y)
                                })?;
                            } else {
                                kernels::scale(s, 2.0, &x, &mut y)?;
                            }
                            s.copy_to_host(&y, &mut out)?.wait()?;
                            Ok(())
                        })
                        .map_err(|f| {
                            Failed::from(format!(
                                "round {round}, n = {n}: {}",
                                f.message().unwrap_or("")
                            ))
                        })?;
                        check_eq(
                            &format!("round {round}, n = {n}"),
                            &times(&input, 2.0),
                            &out,
                        )?;
                    }
                    Ok(elements)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .map_err(|p| Failed::from(format!("worker panicked: {}", panic_message(&*p))))?
            })
            .collect()
    });
    let mut total = 0;
    for (i, result) in results.into_iter().enumerate() {
        total += result
            .map_err(|f| Failed::from(format!("thread {i}: {}", f.message().unwrap_or(""))))?;
    }
    println!(
        "eight_threads: {} scopes, {total} elements checked, in {:?}",
        THREADS * scopes,
        start.elapsed()
    );
    Ok(())
}
