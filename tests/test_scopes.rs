//! Scopes: nesting on two streams, error propagation, `#[gpu_scope]` functions and
//! methods, many scopes in a row, scopes on several threads, and panics inside a scope
//! while large transfers are in flight.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use gpu_tests::{
    check_eq, ensure, panic_message, poison, poisoned, stream, Element, Failed, Rng, TestResult,
    BIG_BYTES,
};
use stream_core::{gpu_scope, scope, Error, Scope, Stream};

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
        panic_after_large_pageable_download_leaves_the_host_buffer_completely_written,
        panic_after_large_pinned_download_leaves_the_host_buffer_completely_written,
        panic_after_large_pageable_upload_then_freeing_the_source_is_harmless,
        panic_after_large_pinned_upload_then_freeing_the_source_is_harmless,
    ],
}

/// The message of the panics these tests raise on purpose (they print it: that is
/// expected).
const DELIBERATE: &str = "deliberate panic inside a scope (expected by this test)";

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
    let expected = StepError::Gpu(Error::LengthMismatch {
        what: "copy_to_device",
        source_len: 5,
        destination_len: 7,
    });
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
    let expected = StepError::Gpu(Error::LengthMismatch {
        what: "copy_to_host",
        source_len: 1000,
        destination_len: 999,
    });
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

fn round_trips_on(stream: &Stream, mut rng: Rng, rounds: usize) -> TestResult {
    for round in 0..rounds {
        let len = 1 + rng.below(1 << 16);
        let input: Vec<f64> = rng.vec(len);
        let mut out = poisoned::<f64>(input.len());
        scope(stream, |s| -> TestResult {
            let x = s.upload(&input)?;
            let _download = s.copy_to_host(&x, &mut out)?;
            Ok(())
        })?;
        check_eq(&format!("round {round} on this thread"), &input, &out)?;
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

/// Panics inside a scope right after enqueueing a 256 MiB download of a pattern into
/// `host` (poisoned first): once `catch_unwind` returns, every element must hold the
/// pattern, because the scope synchronised its stream while unwinding.
fn panic_after_download_into(stream: &Stream, host: &mut [u32]) -> TestResult {
    let pattern: u32 = Rng::new().value();
    let len = host.len();
    poison(host);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        scope(stream, |s| -> stream_core::Result<()> {
            let mut x = s.alloc::<u32>(len)?;
            s.fill(&mut x, pattern)?;
            let _download = s.copy_to_host(&x, host)?;
            panic!("{DELIBERATE}");
        })
    }));
    expect_deliberate_panic(caught)?;
    check_eq(
        "host buffer after a panic in the scope that downloads into it",
        &vec![pattern; len],
        host,
    )
}

fn panic_after_large_pageable_download_leaves_the_host_buffer_completely_written() -> TestResult {
    let stream = stream()?;
    let mut host = poisoned::<u32>(BIG_BYTES / 4);
    panic_after_download_into(&stream, &mut host)
}

fn panic_after_large_pinned_download_leaves_the_host_buffer_completely_written() -> TestResult {
    let stream = stream()?;
    let mut host = stream.device().alloc_pinned::<u32>(BIG_BYTES / 4)?;
    panic_after_download_into(&stream, &mut host)
}

/// Panics inside a scope right after enqueueing a 256 MiB upload from host memory made
/// by `make` into a `DeviceVec`; after `catch_unwind`, the source is overwritten and
/// freed, and new host memory of the same kind is written (likely the same pages). The
/// `DeviceVec` must hold the original data, and the stream keep working.
fn panic_after_upload_from<H>(stream: &Stream, make: impl Fn(usize) -> TestResult<H>) -> TestResult
where
    H: std::ops::DerefMut<Target = [u32]>,
{
    let len = BIG_BYTES / 4;
    let mut rng = Rng::new();
    let mut source = make(len)?;
    rng.fill(&mut source);
    let expected = source.to_vec();
    let mut target = stream.device().alloc_vec::<u32>(len)?;
    let caught = catch_unwind(AssertUnwindSafe(|| {
        scope(stream, |s| -> stream_core::Result<()> {
            let mut t = s.attach(&mut target)?;
            s.copy_to_device(&source, &mut t)?;
            panic!("{DELIBERATE}");
        })
    }));
    expect_deliberate_panic(caught)?;
    poison(&mut source);
    drop(source);
    let mut reuse = make(len)?;
    poison(&mut reuse);
    drop(reuse);
    check_eq(
        "DeviceVec uploaded into before a panic",
        &expected,
        &target.to_host_vec()?,
    )?;
    round_trips_on(stream, rng, 3)
}

fn panic_after_large_pageable_upload_then_freeing_the_source_is_harmless() -> TestResult {
    let stream = stream()?;
    panic_after_upload_from(&stream, |len| Ok(vec![0u32; len]))
}

fn panic_after_large_pinned_upload_then_freeing_the_source_is_harmless() -> TestResult {
    let stream = stream()?;
    let dev = stream.device().clone();
    panic_after_upload_from(&stream, |len| Ok(dev.alloc_pinned::<u32>(len)?))
}

/// `Ok` when `caught` is the panic of [`DELIBERATE`].
fn expect_deliberate_panic<T: fmt::Debug>(caught: std::thread::Result<T>) -> TestResult {
    match caught {
        Err(payload) if panic_message(&*payload) == DELIBERATE => Ok(()),
        Err(payload) => Err(format!("a different panic: {}", panic_message(&*payload)).into()),
        Ok(result) => Err(format!("the scope did not panic; it returned {result:?}").into()),
    }
}
