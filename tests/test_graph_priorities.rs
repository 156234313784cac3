//! Branches of a CUDA graph recorded on a stream of a chosen priority
//! (`Capture::fork_with_priority`, `stream-core/src/graph/fork.rs`): the graph computes
//! what the CPU computes at every replay, on a default and on an urgent replay stream;
//! a priority outside the device's range is refused before anything is recorded; an
//! update between a capture with such a branch and one without is refused, and one
//! between two with it applies. (That the priority takes effect is measured, not
//! tested: `bench --case nccl`'s overlap rows replayed as graphs.)
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::graph_kernels::{affine, affine_u32};
use gpu_tests::{check_eq, device, ensure, poison, Failed, Rng, TestResult};
use stream_core::{
    scope, Capture, DeviceSliceMut, DeviceVec, Error, Graph, LaunchConfig, PinnedBuffer,
    PinnedSliceMut, Stream,
};

gpu_tests::test_main! {
    gpu: [
        a_branch_of_a_chosen_priority_computes_what_the_cpu_computes,
        a_priority_outside_the_devices_range_is_refused_before_anything_is_recorded,
        an_update_keeps_the_graphs_choice_of_priorities,
    ],
}

/// Elements per half of the output.
const HALF: usize = 3000;

/// What the graphs here hold: the input and output on the host, both on the device.
type Halves<'v> = Graph<(
    PinnedBuffer<u32>,
    PinnedBuffer<u32>,
    &'v mut DeviceVec<u32>,
    &'v mut DeviceVec<u32>,
)>;

/// The input is uploaded; the upper half of the output is computed on a branch
/// (`branch_priority`: of that priority, else a plain fork) with `(a, b)`, the lower
/// half beside it on the capture's own stream with `(b, a)`; then both are downloaded.
fn body<'g>(
    g: &'g Capture<'g>,
    (x_host, mut y_host, mut x, mut y): (
        PinnedSliceMut<'g, 'g, u32>,
        PinnedSliceMut<'g, 'g, u32>,
        DeviceSliceMut<'g, 'g, u32>,
        DeviceSliceMut<'g, 'g, u32>,
    ),
    branch_priority: Option<i32>,
    (a, b): (u32, u32),
) -> Result<(), Error> {
    let config = LaunchConfig::for_elements(HALF, 256);
    g.copy_to_device(&x_host, &mut x)?;
    {
        let (x_lo, x_hi) = x.as_slice().split_at(HALF)?;
        let (mut y_lo, mut y_hi) = y.split_at_mut(HALF)?;
        let lent = (x_hi, &mut y_hi);
        // The same closure for both (a closure kept in a variable would not be generic
        // over the branch's lifetime, which `fork` asks for).
        macro_rules! branch {
            () => {
                |c, (x_hi, mut y_hi)| {
                    affine_u32(c, config, a, b, &x_hi, &mut y_hi)?;
                    affine_u32(g, config, b, a, &x_lo, &mut y_lo) // beside the branch
                }
            };
        }
        match branch_priority {
            Some(priority) => g.fork_with_priority(priority, lent, branch!())?,
            None => g.fork(lent, branch!())?,
        }
    }
    g.copy_to_host(&y, &mut y_host).map(drop)
}

/// The pinned and device buffers a graph of [`body`] holds.
type Buffers = (
    PinnedBuffer<u32>,
    PinnedBuffer<u32>,
    DeviceVec<u32>,
    DeviceVec<u32>,
);

/// New [`Buffers`] on `dev`.
fn buffers(dev: &stream_core::Device) -> stream_core::Result<Buffers> {
    let n = 2 * HALF;
    Ok((
        dev.alloc_pinned(n)?,
        dev.alloc_pinned(n)?,
        dev.alloc_vec(n)?,
        dev.alloc_vec(n)?,
    ))
}

/// Replays `graph` on `stream` with new inputs and checks both halves against the CPU.
fn replay_and_check(
    what: &str,
    graph: &mut Halves<'_>,
    stream: &Stream,
    (a, b): (u32, u32),
    rng: &mut Rng,
) -> TestResult {
    let inputs: Vec<u32> = rng.vec(2 * HALF);
    {
        let (x, y, _, _) = graph.held_mut();
        x.copy_from_slice(&inputs);
        poison(y);
    }
    scope(stream, |s| s.replay(graph).map(drop))?;
    let mut expected = affine(b, a, &inputs[..HALF]);
    expected.extend(affine(a, b, &inputs[HALF..]));
    check_eq(what, &expected, graph.held().1)
}

/// A graph whose branch is on the device's most urgent stream, replayed five times on a
/// default-priority stream and five on an urgent one: every replay matches the CPU.
fn a_branch_of_a_chosen_priority_computes_what_the_cpu_computes() -> TestResult {
    let dev = device()?;
    let urgent = *dev.stream_priorities()?.start();
    let streams = [dev.new_stream()?, dev.new_stream_with_priority(urgent)?];
    let mut rng = Rng::new();
    let ab = (rng.value(), rng.value());
    let (x_host, y_host, mut x, mut y) = buffers(&dev)?;
    let held = (x_host, y_host, &mut x, &mut y);
    let (mut graph, ()) = dev.capture(held, |g, views| body(g, views, Some(urgent), ab))?;
    for (name, stream) in ["default", "urgent"].iter().zip(&streams) {
        for replay in 0..5 {
            let what = format!("replay {replay} on a stream of the {name} priority");
            replay_and_check(&what, &mut graph, stream, ab, &mut rng)?;
        }
    }
    Ok(())
}

/// A priority less urgent than the least the device offers (CUDA's numbers grow toward
/// the less urgent) is `InvalidStreamPriority`: the branch's closure never runs, the
/// capture returns the error, and a capture made next works.
fn a_priority_outside_the_devices_range_is_refused_before_anything_is_recorded() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let outside = *dev.stream_priorities()?.end() + 1;
    let mut branch_ran = false;
    let refused = dev.capture((), |g, ()| {
        let mut y = g.alloc::<u32>(16)?;
        g.fork_with_priority(outside, &mut y, |_, _| {
            branch_ran = true;
            Ok::<_, Error>(())
        })
    });
    match refused {
        Err(Error::InvalidStreamPriority { priority, .. }) => {
            ensure!(priority == outside, "the error names priority {priority}")
        }
        other => {
            return Err(Failed::from(format!(
                "priority {outside}: expected InvalidStreamPriority, got {:?}",
                other.map(drop)
            )))
        }
    }
    ensure!(!branch_ran, "the branch's closure ran");
    let mut rng = Rng::new();
    let ab = (rng.value(), rng.value());
    let (x_host, y_host, mut x, mut y) = buffers(&dev)?;
    let held = (x_host, y_host, &mut x, &mut y);
    let (mut graph, ()) = dev.capture(held, |g, views| body(g, views, None, ab))?;
    replay_and_check("the next capture", &mut graph, &stream, ab, &mut rng)
}

/// The instance keeps each node's priority only when it was made so: an update from a
/// capture with a chosen priority to one without, and the reverse, is a `GraphUpdate`
/// naming the difference, and the graph replays as before; an update between two with
/// one applies its new arguments.
fn an_update_keeps_the_graphs_choice_of_priorities() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let urgent = *dev.stream_priorities()?.start();
    let mut rng = Rng::new();
    let (first, second) = ((rng.value(), rng.value()), (rng.value(), rng.value()));
    for chosen in [true, false] {
        let priority = |yes: bool| yes.then_some(urgent);
        let (x_host, y_host, mut x, mut y) = buffers(&dev)?;
        let held = (x_host, y_host, &mut x, &mut y);
        let (mut graph, ()) =
            dev.capture(held, |g, views| body(g, views, priority(chosen), first))?;
        let refused = graph.update(|g, views| body(g, views, priority(!chosen), second));
        match refused {
            Err(Error::GraphUpdate(refusal)) => ensure!(
                refusal.reason.contains("chosen priority"),
                "the refusal says {:?}",
                refusal.reason
            ),
            other => {
                return Err(Failed::from(format!(
                    "an update from chosen = {chosen} to {}: {other:?}",
                    !chosen
                )))
            }
        }
        replay_and_check(
            "after the refused update",
            &mut graph,
            &stream,
            first,
            &mut rng,
        )?;
        graph.update(|g, views| body(g, views, priority(chosen), second))?;
        replay_and_check(
            "after the applied update",
            &mut graph,
            &stream,
            second,
            &mut rng,
        )?;
    }
    Ok(())
}
