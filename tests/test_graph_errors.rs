//! CUDA graphs, the paths that refuse a graph: captures the driver invalidates, closures
//! that fail, the `StreamCapturing` refusal of scopes and forks on
//! a stream someone else is capturing, and graphs or held memory of another device.
//! Every refusal is an `Err` with a message that says what to do, and everything keeps
//! working afterwards. (Graphs changed after capture: `test_graph_updates`.)
//!
//! Not covered: a failing instantiation (`cuGraphInstantiateWithFlags`). A capture makes
//! one graph, instantiated once, of work the driver accepted while recording it; no
//! input to the safe API makes instantiation fail, so its `Err` path is only read, not
//! run.
//!
//! * GPU tests are reported as ignored without a CUDA device (see `gpu_tests::run`).
//!   The two-GPU test is registered only on a machine with at least two devices, and
//!   the binary says so on stderr when it is left out.

use cudarc::driver::{result, sys};
use gpu_tests::graph_kernels::square_u32;
use gpu_tests::{
    check_eq, device, ensure, gpu_status, poison, stream, Failed, GpuStatus, Rng, Test, TestFn,
    TestResult,
};
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use stream_core::{interop, scope, Device, Error, LaunchConfig};

/// Held shared by each test that captures, and exclusively by the one that synchronises
/// the whole device during its capture: that synchronisation invalidates every capture
/// running in the process, so a test capturing at the same moment would fail for a
/// reason not its own (the likely cause of one failure in some 500 runs on 2x H200), or
/// die: the driver's `cuCtxSynchronize` beside captures on other threads crashes the
/// process with SIGSEGV (the one crash of this binary in the whole suite at 325ee81;
/// reproduced in 7 of 7 runs by a soak, `test_device_wide_waits.rs`'s docs).
static DEVICE_WIDE: RwLock<()> = RwLock::new(());

/// This test's share of [`DEVICE_WIDE`].
fn capturing() -> RwLockReadGuard<'static, ()> {
    DEVICE_WIDE.read().unwrap_or_else(PoisonError::into_inner)
}

fn main() {
    let mut gpu: Vec<Test> = vec![
        (
            "a_wait_on_an_event_recorded_outside_the_capture_invalidates_it",
            a_wait_on_an_event_recorded_outside_the_capture_invalidates_it as TestFn,
        ),
        (
            "a_synchronisation_of_the_capturing_stream_invalidates_the_capture",
            a_synchronisation_of_the_capturing_stream_invalidates_the_capture,
        ),
        (
            "another_thread_s_device_synchronisation_invalidates_a_capture_with_a_clear_error",
            another_thread_s_device_synchronisation_invalidates_a_capture_with_a_clear_error,
        ),
        (
            "an_error_of_the_closure_discards_the_capture",
            an_error_of_the_closure_discards_the_capture,
        ),
        (
            "scopes_and_forks_refuse_a_stream_being_captured",
            scopes_and_forks_refuse_a_stream_being_captured,
        ),
    ];
    match gpu_status() {
        GpuStatus::Present(n) if *n >= 2 => gpu.push((
            "graphs_and_held_memory_of_another_device_are_device_mismatch",
            graphs_and_held_memory_of_another_device_are_device_mismatch as TestFn,
        )),
        GpuStatus::Present(n) => eprintln!(
            "test_graph_errors: {n} CUDA device(s): the two-GPU test \
             graphs_and_held_memory_of_another_device_are_device_mismatch is not registered \
             (run this binary on a machine with two GPUs to cover it)"
        ),
        GpuStatus::Absent(_) => {}
    }
    gpu_tests::run(
        &gpu,
        &[(
            "graph_error_messages_say_what_happened_and_what_to_do",
            graph_error_messages_say_what_happened_and_what_to_do as TestFn,
        )],
    )
}

/// The graph errors' messages say what happened and what to do (no GPU needed).
fn graph_error_messages_say_what_happened_and_what_to_do() -> TestResult {
    let cases = [
        (
            Error::from(stream_core::error::GraphCaptureInvalidated {
                cause: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED".to_owned(),
            }),
            &[
                "invalidated",
                "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
                "capture again",
            ][..],
        ),
        (
            Error::from(stream_core::error::GraphUpdate {
                reason: "the topology changed".to_owned(),
            }),
            &["the topology changed", "unchanged", "Device::capture"][..],
        ),
        (
            Error::from(stream_core::error::GraphArgument {
                reason: "kernel `k` has no parameter `c`".to_owned(),
            }),
            &["no parameter `c`", "nothing was changed"][..],
        ),
    ];
    for (error, parts) in cases {
        let message = error.to_string();
        for part in parts {
            ensure!(
                message.contains(part),
                "{error:?}: the message {message:?} does not contain {part:?}"
            );
        }
    }
    Ok(())
}

/// A capture whose stream is made to wait (through raw handles) for an event recorded on
/// a stream outside the capture, which would join outside work into the graph: the
/// driver invalidates the capture, `capture` returns `GraphCaptureInvalidated` (or the
/// driver's error, if the closure reports it first), and later captures work.
fn a_wait_on_an_event_recorded_outside_the_capture_invalidates_it() -> TestResult {
    let _capturing = capturing();
    let dev = device()?;
    let outside = dev.new_stream()?;
    let _context = interop::bind(&dev)?;
    let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
        .map_err(|e| Failed::from(format!("cuEventCreate: {e:?}")))?;
    let outcome = scope(&outside, |s| {
        let outside_stream = interop::raw_stream(s);
        let captured = dev.capture((), |g, ()| {
            let mut x = g.alloc::<u32>(64)?;
            g.fill(&mut x, 1)?;
            // SAFETY: both handles are live (the event above, the scope's stream); the
            // context is current. Recording only captures the stream's state.
            let recorded = unsafe { result::event::record(event, outside_stream) };
            // SAFETY: the capture's stream is live for the capture; the wait is what
            // this test makes the driver refuse.
            let waited = unsafe {
                result::stream::wait_event(
                    interop::raw_stream_of(g),
                    event,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
            };
            let _ = (recorded, waited);
            g.fill(&mut x, 2)?;
            Ok::<_, Error>(())
        });
        Ok::<_, Error>(captured.map(drop))
    })?;
    // SAFETY: created above, destroyed once; the driver allows destroying an event whose
    // recorded work is pending.
    let _ = unsafe { result::event::destroy(event) };
    match outcome {
        Err(e) => {
            let message = e.to_string();
            ensure!(
                message.contains("capture") || message.contains("CAPTURE"),
                "the invalidated capture's error says {message:?}"
            );
        }
        Ok(()) => {
            return Err(Failed::from(
                "a capture that waited on an event recorded outside it succeeded",
            ))
        }
    }
    capture_still_works(&dev)
}

/// A capture whose own stream is synchronised through its raw handle (a wait on the host
/// that a capture cannot record) is invalidated: `GraphCaptureInvalidated`, and later
/// captures work.
fn a_synchronisation_of_the_capturing_stream_invalidates_the_capture() -> TestResult {
    let _capturing = capturing();
    let dev = device()?;
    let outcome = dev.capture((), |g, ()| {
        let mut x = g.alloc::<u32>(64)?;
        g.fill(&mut x, 1)?;
        // SAFETY: the capture's stream is live for the capture; synchronising a capturing
        // stream is what this test makes the driver refuse.
        let synced = unsafe { result::stream::synchronize(interop::raw_stream_of(g)) };
        let _ = synced;
        Ok::<_, Error>(())
    });
    match outcome {
        Err(e @ Error::GraphCaptureInvalidated { .. }) => {
            let message = e.to_string();
            ensure!(message.contains("capture again"), "the message says {message:?}");
        }
        other => {
            return Err(Failed::from(format!(
                "a capture whose stream was synchronised: expected GraphCaptureInvalidated, got {other:?}"
            )))
        }
    }
    capture_still_works(&dev)
}

/// While a capture runs, another thread synchronises the whole device (the soak found
/// cudarc doing so when an event-tracking context makes its first stream): the driver
/// refuses that synchronisation and invalidates the capture, and the capture's next
/// operation, whatever the call, is `Error::GraphCaptureInvalidated` naming it and
/// saying what happened; later captures work.
fn another_thread_s_device_synchronisation_invalidates_a_capture_with_a_clear_error() -> TestResult
{
    let _alone = DEVICE_WIDE.write().unwrap_or_else(PoisonError::into_inner);
    let dev = device()?;
    let context = dev.cudarc_context()?;
    let outcome = dev.capture((), |g, ()| {
        let mut x = g.alloc::<u32>(64)?;
        g.fill(&mut x, 1)?;
        let synced = std::thread::scope(|t| {
            t.spawn(|| context.synchronize().map_err(|e| format!("{e:?}")))
                .join()
                .map_err(|_| "the synchronising thread panicked".to_owned())
        })?;
        ensure!(
            synced.is_err(),
            "cuCtxSynchronize during a capture succeeded: {synced:?}"
        );
        let after = g.alloc::<u32>(64);
        match after {
            Err(e @ Error::GraphCaptureInvalidated(_)) => Err::<(), _>(Failed::from(e.to_string())),
            other => Err(Failed::from(format!(
                "the capture's next allocation after another thread's cuCtxSynchronize: \
                 expected GraphCaptureInvalidated, got {other:?}"
            ))),
        }
    });
    match outcome {
        Err(failed) => {
            let message = failed.message().unwrap_or("").to_owned();
            for part in [
                "invalidated",
                "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
                "synchronised the \
                         whole device",
                "capture again",
            ] {
                ensure!(
                    message.contains(part),
                    "the message {message:?} lacks {part:?}"
                );
            }
        }
        Ok(_) => {
            return Err(Failed::from(
                "the capture survived a device-wide synchronisation",
            ))
        }
    }
    capture_still_works(&dev)
}

/// A closure that returns an error (here an `InvalidLaunch`, refused before anything is
/// recorded) makes `capture` return that error and discard what was recorded; later
/// captures work.
fn an_error_of_the_closure_discards_the_capture() -> TestResult {
    let _capturing = capturing();
    let dev = device()?;
    let outcome = dev.capture((), |g, ()| {
        let x = g.alloc_zeroed::<u32>(256)?;
        let mut y = g.alloc::<u32>(256)?;
        square_u32(g, LaunchConfig::for_elements(256, 64), &x, &mut y)?;
        Ok::<_, Error>(())
    });
    match outcome {
        Err(Error::InvalidLaunch(refusal)) => {
            let kernel = refusal.kernel;
            ensure!(kernel == "square_u32", "the refused launch names {kernel}")
        }
        other => {
            return Err(Failed::from(format!(
                "expected InvalidLaunch, got {other:?}"
            )))
        }
    }
    capture_still_works(&dev)
}

/// The refusal of scopes and forks on a stream another party is capturing into a graph
/// (`Error::StreamCapturing`): the stream's raw handle, taken in a scope, is put into
/// capture mode with raw driver calls; a scope on it and a fork onto it are refused
/// (their synchronisation would wait for work that never runs); once the capture has
/// ended, both work.
fn scopes_and_forks_refuse_a_stream_being_captured() -> TestResult {
    let _capturing = capturing();
    let captured = stream()?;
    let other = captured.device().new_stream()?;
    let _context = interop::bind(captured.device())?;
    let mut raw = std::ptr::null_mut();
    scope(&captured, |s| {
        raw = interop::raw_stream(s);
        Ok::<_, Error>(())
    })?;
    // SAFETY: `raw` is the live stream of `captured`, idle (its scope ended); nothing but
    // the calls below and the refused scopes uses it until the capture ends.
    unsafe {
        result::stream::begin_capture(
            raw,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        )
    }
    .map_err(|e| Failed::from(format!("cuStreamBeginCapture: {e:?}")))?;
    let refused_scope = scope(&captured, |_| Ok::<_, Error>(()));
    let refused_fork = scope(&other, |s| {
        s.fork(&captured, (), |_, ()| Ok::<_, Error>(()))
    });
    // SAFETY: ends the capture begun above on the same live stream.
    let graph = unsafe { result::stream::end_capture(raw) }
        .map_err(|e| Failed::from(format!("cuStreamEndCapture: {e:?}")))?;
    if !graph.is_null() {
        // SAFETY: the (empty) graph the capture made, destroyed once.
        let _ = unsafe { result::graph::destroy(graph) };
    }
    ensure!(
        refused_scope == Err(Error::StreamCapturing),
        "a scope on a capturing stream: {refused_scope:?}"
    );
    ensure!(
        refused_fork == Err(Error::StreamCapturing),
        "a fork onto a capturing stream: {refused_fork:?}"
    );
    let message = Error::StreamCapturing.to_string();
    ensure!(
        message.contains("end the capture"),
        "the message says {message:?}"
    );
    let input: Vec<u32> = Rng::new().vec(1000);
    let mut out = gpu_tests::poisoned::<u32>(1000);
    scope(&captured, |s| {
        s.fork(&other, (), |c, ()| {
            let x = c.upload(&input)?;
            c.copy_to_host(&x, &mut out).map(drop)
        })
    })?;
    check_eq("a scope and a fork after the capture ended", &input, &out)
}

/// Two GPUs: a graph replayed on a scope of the other device, and a `DeviceVec` of the
/// other device held by a capture, are `DeviceMismatch` (devices are values, not types:
/// this rule is checked at run time); both devices keep working.
fn graphs_and_held_memory_of_another_device_are_device_mismatch() -> TestResult {
    let _capturing = capturing();
    let (dev0, dev1) = (Device::new(0)?, Device::new(1)?);
    let stream1 = dev1.new_stream()?;
    let out = dev0.alloc_pinned::<u32>(16)?;
    let (mut graph, ()) = dev0.capture(out, |g, mut out| {
        let mut x = g.alloc::<u32>(16)?;
        g.fill(&mut x, 5)?;
        g.copy_to_host(&x, &mut out)?;
        Ok::<_, Error>(())
    })?;
    let refused = scope(&stream1, |s| s.replay(&mut graph).map(drop));
    ensure!(
        refused
            == Err(Error::DeviceMismatch {
                memory: 0,
                stream: 1
            }),
        "a replay on the other device's scope: {refused:?}"
    );
    let vec1 = dev1.alloc_vec::<u32>(16)?;
    let refused = dev0.capture(&vec1, |_, _| Ok::<_, Error>(()));
    ensure!(
        matches!(
            refused,
            Err(Error::DeviceMismatch {
                memory: 1,
                stream: 0
            })
        ),
        "a capture on device 0 holding a DeviceVec of device 1: {:?}",
        refused.map(drop)
    );
    let stream0 = dev0.new_stream()?;
    poison(graph.held_mut());
    scope(&stream0, |s| s.replay(&mut graph).map(drop))?;
    check_eq("the graph on its own device", &[5u32; 16], graph.held())
}

/// A small capture and replay, checked: the device works after an error.
fn capture_still_works(dev: &Device) -> TestResult {
    let stream = dev.new_stream()?;
    let out = dev.alloc_pinned::<u32>(512)?;
    let (mut graph, ()) = dev.capture(out, |g, mut out| {
        let mut x = g.alloc::<u32>(512)?;
        g.fill(&mut x, 31)?;
        g.copy_to_host(&x, &mut out)?;
        Ok::<_, Error>(())
    })?;
    poison(graph.held_mut());
    scope(&stream, |s| s.replay(&mut graph).map(drop))?;
    check_eq("a capture after the error", &[31u32; 512], graph.held())
}
