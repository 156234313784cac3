//! CUDA graphs changed after capture: scalar arguments changed in place (and every
//! wrong handle refused), whole-graph updates (and the topology changes the driver
//! cannot apply refused, leaving the graph as it was), and graphs with allocations of
//! their own, which refuse updates. Every refusal is an `Err` with a message that says
//! what to do, and the graph replays as before afterwards. (Captures that fail, and
//! the refusals of scopes on capturing streams: `test_graph_errors`.)
//!
//! GPU tests are reported as ignored without a CUDA device (see `gpu_tests::run`).

use gpu_tests::graph_kernels::{affine, affine_u32, square_u32};
use gpu_tests::{check_eq, device, ensure, poison, Failed, Rng, Test, TestFn, TestResult};
use stream_core::{
    scope, Capture, DeviceSliceMut, DeviceVec, Error, Graph, LaunchConfig, PinnedBuffer,
    PinnedSliceMut, ScalarParam, Stream,
};

fn main() {
    let gpu: Vec<Test> = vec![
        (
            "scalar_arguments_change_later_replays_and_wrong_handles_are_refused",
            scalar_arguments_change_later_replays_and_wrong_handles_are_refused as TestFn,
        ),
        (
            "a_whole_graph_update_applies_new_arguments_and_refuses_other_topologies",
            a_whole_graph_update_applies_new_arguments_and_refuses_other_topologies as TestFn,
        ),
        (
            "a_graph_with_allocations_of_its_own_refuses_updates",
            a_graph_with_allocations_of_its_own_refuses_updates as TestFn,
        ),
    ];
    gpu_tests::run(&gpu, &[])
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
