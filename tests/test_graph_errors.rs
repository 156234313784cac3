//! CUDA graphs, the paths that change or refuse a graph: scalar arguments changed in
//! place (and every wrong handle refused), whole-graph updates (and the topology changes
//! the driver cannot apply refused, leaving the graph as it was), captures the driver
//! invalidates, closures that fail, the `StreamCapturing` refusal of scopes and forks on
//! a stream someone else is capturing, and graphs or held memory of another device.
//! Every refusal is an `Err` with a message that says what to do, and everything keeps
//! working afterwards.
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
use gpu_tests::{
    check_eq, device, ensure, gpu_status, poison, stream, Failed, GpuStatus, Rng, Test, TestFn,
    TestResult,
};
use stream_core::{
    interop, kernel, scope, Capture, Device, DeviceSliceMut, DeviceVec, Error, Graph, LaunchConfig,
    PinnedBuffer, PinnedSliceMut, ScalarParam, Stream,
};

fn main() {
    let mut gpu: Vec<Test> = vec![
        (
            "scalar_arguments_change_later_replays_and_wrong_handles_are_refused",
            scalar_arguments_change_later_replays_and_wrong_handles_are_refused as TestFn,
        ),
        (
            "a_whole_graph_update_applies_new_arguments_and_refuses_other_topologies",
            a_whole_graph_update_applies_new_arguments_and_refuses_other_topologies,
        ),
        (
            "a_graph_with_allocations_of_its_own_refuses_updates",
            a_graph_with_allocations_of_its_own_refuses_updates,
        ),
        (
            "a_wait_on_an_event_recorded_outside_the_capture_invalidates_it",
            a_wait_on_an_event_recorded_outside_the_capture_invalidates_it,
        ),
        (
            "a_synchronisation_of_the_capturing_stream_invalidates_the_capture",
            a_synchronisation_of_the_capturing_stream_invalidates_the_capture,
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

const SRC: &str = r#"
extern "C" __global__ void affine_u32(unsigned a, unsigned b, const unsigned* x, size_t x_len,
                                      unsigned* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = a * x[i] + b;
}

extern "C" __global__ void __launch_bounds__(32) square_u32(const unsigned* x, size_t x_len,
                                                            unsigned* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = x[i] * x[i];
}
"#;

#[kernel(cuda = SRC)]
/// `y[i] = a * x[i] + b` (wrapping).
unsafe fn affine_u32(a: u32, b: u32, x: &[u32], y: &mut [u32]);

#[kernel(cuda = SRC, block = 32)]
/// `y[i] = x[i] * x[i]` (wrapping); admits only blocks of 32 threads.
unsafe fn square_u32(x: &[u32], y: &mut [u32]);

/// The CPU's `affine_u32`.
fn affine(a: u32, b: u32, x: &[u32]) -> Vec<u32> {
    x.iter()
        .map(|&v| a.wrapping_mul(v).wrapping_add(b))
        .collect()
}

/// `Ok` when `result` is an `Error::GraphArgument` whose message contains every piece of
/// `parts`.
fn expect_argument_error<T>(
    what: &str,
    result: stream_core::Result<T>,
    parts: &[&str],
) -> TestResult {
    match result {
        Ok(_) => Err(Failed::from(format!(
            "{what}: succeeded, but it must be refused"
        ))),
        Err(e @ Error::GraphArgument { .. }) => {
            let message = e.to_string();
            for part in parts {
                ensure!(
                    message.contains(part),
                    "{what}: the message {message:?} does not contain {part:?}"
                );
            }
            Ok(())
        }
        Err(e) => Err(Failed::from(format!(
            "{what}: expected GraphArgument, got {e:?}"
        ))),
    }
}

/// Replays the graph on `stream` with `inputs` and returns a copy of what it wrote.
fn replay_with(
    stream: &Stream,
    graph: &mut Graph<(PinnedBuffer<u32>, PinnedBuffer<u32>)>,
    inputs: &[u32],
) -> Result<Vec<u32>, Failed> {
    {
        let (x, y) = graph.held_mut();
        x.copy_from_slice(inputs);
        poison(y);
    }
    scope(stream, |s| s.replay(graph).map(drop))?;
    Ok(graph.held().1.to_vec())
}

/// Scalars named by `KernelNode::scalar` and changed by `Graph::set_scalar` change the
/// next replays (only the named one: the other keeps its value); naming a parameter of
/// the wrong type, a slice, an unknown name, asking for the last kernel of a capture
/// that launched none, and using a handle of another graph are `GraphArgument`s that
/// change nothing.
fn scalar_arguments_change_later_replays_and_wrong_handles_are_refused() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut rng = Rng::new();
    let n = 1000;
    let config = LaunchConfig::for_elements(n, 256);
    let held = (dev.alloc_pinned::<u32>(n)?, dev.alloc_pinned::<u32>(n)?);
    let (mut graph, (a, b)) =
        dev.capture(held, |g, (x_host, mut y_host)| -> Result<_, Failed> {
            expect_argument_error(
                "last_kernel before any launch",
                g.last_kernel(),
                &["no kernel was launched"],
            )?;
            let x = g.upload(&x_host)?;
            let mut y = g.alloc::<u32>(n)?;
            affine_u32(g, config, 3, 5, &x, &mut y)?;
            let node = g.last_kernel()?;
            ensure!(
                node.kernel_name() == "affine_u32",
                "the last kernel is {}",
                node.kernel_name()
            );
            expect_argument_error("a: f32", node.scalar::<f32>("a"), &["`a`", "u32", "f32"])?;
            expect_argument_error("x", node.scalar::<u32>("x"), &["device memory"])?;
            expect_argument_error("c", node.scalar::<u32>("c"), &["a: u32, b: u32"])?;
            let handles = (node.scalar::<u32>("a")?, node.scalar::<u32>("b")?);
            g.copy_to_host(&y, &mut y_host)?;
            Ok(handles)
        })?;
    let inputs: Vec<u32> = rng.vec(n);
    check_eq(
        "a = 3, b = 5",
        &affine(3, 5, &inputs),
        &replay_with(&stream, &mut graph, &inputs)?,
    )?;
    graph.set_scalar(a, 7)?;
    check_eq(
        "a = 7, b = 5",
        &affine(7, 5, &inputs),
        &replay_with(&stream, &mut graph, &inputs)?,
    )?;
    graph.set_scalar(b, 11)?;
    let inputs: Vec<u32> = rng.vec(n);
    check_eq(
        "a = 7, b = 11",
        &affine(7, 11, &inputs),
        &replay_with(&stream, &mut graph, &inputs)?,
    )?;

    let held = (dev.alloc_pinned::<u32>(n)?, dev.alloc_pinned::<u32>(n)?);
    let (mut other, other_a) = dev.capture(held, |g, (x_host, mut y_host)| {
        let x = g.upload(&x_host)?;
        let mut y = g.alloc::<u32>(n)?;
        affine_u32(g, config, 1, 0, &x, &mut y)?;
        g.copy_to_host(&y, &mut y_host)?;
        g.last_kernel()?.scalar::<u32>("a")
    })?;
    expect_argument_error(
        "a handle of another graph",
        graph.set_scalar(other_a, 100),
        &["another graph"],
    )?;
    expect_argument_error(
        "a handle of the first graph on the second",
        other.set_scalar(a, 100),
        &["another graph"],
    )?;
    check_eq(
        "after the refused changes (a = 7, b = 11 still)",
        &affine(7, 11, &inputs),
        &replay_with(&stream, &mut graph, &inputs)?,
    )?;
    check_eq(
        "the other graph (a = 1, b = 0 still)",
        &affine(1, 0, &inputs),
        &replay_with(&stream, &mut other, &inputs)?,
    )
}

/// The body of the updatable graph: no allocation of its own (the intermediate is a held
/// `DeviceVec`), one `affine_u32` launch, or two launches when `extra` (another
/// topology).
#[allow(clippy::type_complexity)]
fn updatable_body<'g>(
    g: &'g Capture<'g>,
    (x_host, mut y_host, mut x, mut y): (
        PinnedSliceMut<'g, 'g, u32>,
        PinnedSliceMut<'g, 'g, u32>,
        DeviceSliceMut<'g, 'g, u32>,
        DeviceSliceMut<'g, 'g, u32>,
    ),
    (a, b): (u32, u32),
    extra: bool,
) -> Result<ScalarParam<u32>, Error> {
    let config = LaunchConfig::for_elements(y.len(), 256);
    g.copy_to_device(&x_host, &mut x)?;
    affine_u32(g, config, a, b, &x, &mut y)?;
    let a_param = g.last_kernel()?.scalar::<u32>("a")?;
    if extra {
        affine_u32(g, config, 1, 1, &x, &mut y)?;
    }
    g.copy_to_host(&y, &mut y_host)?;
    Ok(a_param)
}

/// The graph of [`updatable_body`] and what it holds.
type Updatable<'v> = Graph<(
    PinnedBuffer<u32>,
    PinnedBuffer<u32>,
    &'v mut DeviceVec<u32>,
    &'v mut DeviceVec<u32>,
)>;

/// Replays the updatable graph on `stream` with `inputs` and returns a copy of what it
/// wrote.
fn replay_updatable(
    stream: &Stream,
    graph: &mut Updatable<'_>,
    inputs: &[u32],
) -> Result<Vec<u32>, Failed> {
    {
        let (x, y, _, _) = graph.held_mut();
        x.copy_from_slice(inputs);
        poison(y);
    }
    scope(stream, |s| s.replay(graph).map(drop))?;
    Ok(graph.held().1.to_vec())
}

/// `Graph::update` with the same work and new scalars changes later replays, and the
/// handles the update's closure makes work; an update with another topology (one more
/// launch) or with another kernel in a launch's place is a `GraphUpdate` that leaves the
/// graph as it was.
fn a_whole_graph_update_applies_new_arguments_and_refuses_other_topologies() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut rng = Rng::new();
    let n = 1200;
    let (mut x_dev, mut y_dev) = (dev.alloc_vec::<u32>(n)?, dev.alloc_vec::<u32>(n)?);
    let held = (
        dev.alloc_pinned::<u32>(n)?,
        dev.alloc_pinned::<u32>(n)?,
        &mut x_dev,
        &mut y_dev,
    );
    let (mut graph, _) = dev.capture(held, |g, views| updatable_body(g, views, (3, 4), false))?;
    let replay =
        |graph: &mut Updatable<'_>, inputs: &[u32]| replay_updatable(&stream, graph, inputs);
    let inputs: Vec<u32> = rng.vec(n);
    check_eq(
        "as captured (3, 4)",
        &affine(3, 4, &inputs),
        &replay(&mut graph, &inputs)?,
    )?;

    let a = graph.update(|g, views| updatable_body(g, views, (5, 6), false))?;
    check_eq(
        "updated to (5, 6)",
        &affine(5, 6, &inputs),
        &replay(&mut graph, &inputs)?,
    )?;
    graph.set_scalar(a, 9)?;
    check_eq(
        "a handle made by the update's closure (9, 6)",
        &affine(9, 6, &inputs),
        &replay(&mut graph, &inputs)?,
    )?;

    let refused = graph.update(|g, views| updatable_body(g, views, (1, 2), true));
    match refused {
        Err(Error::GraphUpdate(refusal)) => {
            let reason = &refusal.reason;
            ensure!(reason.contains("kernel"), "the refusal says {reason:?}")
        }
        other => {
            return Err(Failed::from(format!(
                "an update with one more launch: {other:?}"
            )))
        }
    }
    let refused = graph.update(|g, (x_host, mut y_host, mut x, mut y)| {
        g.copy_to_device(&x_host, &mut x)?;
        square_u32(g, LaunchConfig::for_elements(n, 32), &x, &mut y)?;
        g.copy_to_host(&y, &mut y_host)?;
        Ok::<_, Error>(())
    });
    match refused {
        Err(Error::GraphUpdate(refusal)) => ensure!(
            refusal.reason.contains("square_u32") && refusal.reason.contains("affine_u32"),
            "the refusal says {:?}",
            refusal.reason
        ),
        other => {
            return Err(Failed::from(format!(
                "an update with another kernel: {other:?}"
            )))
        }
    }
    let inputs: Vec<u32> = rng.vec(n);
    check_eq(
        "after the refused updates, still (9, 6)",
        &affine(9, 6, &inputs),
        &replay(&mut graph, &inputs)?,
    )
}

/// A graph that allocates memory of its own refuses `update` before capturing anything
/// (a new capture's allocations would be other memory), and still replays.
fn a_graph_with_allocations_of_its_own_refuses_updates() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let n = 256;
    let config = LaunchConfig::for_elements(n, 256);
    let held = (dev.alloc_pinned::<u32>(n)?, dev.alloc_pinned::<u32>(n)?);
    let (mut graph, ()) = dev.capture(held, |g, (x_host, mut y_host)| {
        let x = g.upload(&x_host)?;
        let mut y = g.alloc::<u32>(n)?;
        affine_u32(g, config, 2, 1, &x, &mut y)?;
        g.copy_to_host(&y, &mut y_host)?;
        Ok::<_, Error>(())
    })?;
    let mut called = false;
    let refused = graph.update(|_, _| {
        called = true;
        Ok::<_, Error>(())
    });
    ensure!(
        !called,
        "the update captured although the graph has allocations of its own"
    );
    match refused {
        Err(e @ Error::GraphUpdate { .. }) => {
            let message = e.to_string();
            ensure!(
                message.contains("allocation"),
                "the message says {message:?}"
            );
            ensure!(
                message.contains("capture a new graph"),
                "the message says {message:?}"
            );
        }
        other => return Err(Failed::from(format!("expected GraphUpdate, got {other:?}"))),
    }
    let inputs: Vec<u32> = Rng::new().vec(n);
    check_eq(
        "the graph after the refused update",
        &affine(2, 1, &inputs),
        &replay_with(&stream, &mut graph, &inputs)?,
    )
}

/// A capture whose stream is made to wait (through raw handles) for an event recorded on
/// a stream outside the capture, which would join outside work into the graph: the
/// driver invalidates the capture, `capture` returns `GraphCaptureInvalidated` (or the
/// driver's error, if the closure reports it first), and later captures work.
fn a_wait_on_an_event_recorded_outside_the_capture_invalidates_it() -> TestResult {
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

/// A closure that returns an error (here an `InvalidLaunch`, refused before anything is
/// recorded) makes `capture` return that error and discard what was recorded; later
/// captures work.
fn an_error_of_the_closure_discards_the_capture() -> TestResult {
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
