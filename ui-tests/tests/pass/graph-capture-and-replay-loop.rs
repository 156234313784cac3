//! The graph workflow keeps compiling: a capture that holds owned and borrowed pinned
//! buffers and `DeviceVec`s, launches `#[kernel]` and `kernels` wrappers, forks, and
//! names a scalar; the inference loop (refill the input, replay, read the output) inside
//! one scope and across scopes; a scalar update, a whole-graph update, and the held
//! memory given back.
use stream_core::{
    kernel, scope, Capture, Device, DeviceSliceMut, Enqueue, Error, Graph, LaunchConfig,
    PinnedBuffer, PinnedSliceMut, Result,
};

const SRC: &str = r#"
extern "C" __global__ void add_f32(float b, float* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < y_len) y[i] += b;
}"#;

#[kernel(cuda = SRC, block = 256)]
unsafe fn add_f32(b: f32, y: &mut [f32]);

/// A helper generic over where the work goes: a scope runs it, a capture records it.
fn add_twice<'s>(s: &'s impl Enqueue<'s>, b: f32, y: &mut DeviceSliceMut<'_, 's, f32>) -> Result<()> {
    let config = LaunchConfig::for_elements(y.len(), 256);
    add_f32(s, config, b, y)?;
    add_f32(s, config, b, y)
}

/// The graph's body, a function so that `update` can capture it again.
fn body<'g>(
    g: &'g Capture<'g>,
    (x_host, mut y_host, w, mut state): (
        PinnedSliceMut<'g, 'g, f32>,
        PinnedSliceMut<'g, 'g, f32>,
        stream_core::DeviceSlice<'g, 'g, f32>,
        DeviceSliceMut<'g, 'g, f32>,
    ),
    b: f32,
) -> Result<()> {
    let x = g.upload(&x_host)?;
    kernels::axpy(g, 1.0, &x, &mut state)?;
    kernels::axpy(g, 1.0, &w, &mut state)?;
    add_twice(g, b, &mut state)?;
    g.copy_to_host(&state, &mut y_host)?;
    Ok(())
}

fn run(dev: &Device) -> Result<()> {
    let stream = dev.new_stream()?;
    let weights = dev.upload_vec(&[0.5f32; 1024])?;
    let mut state = dev.alloc_vec::<f32>(1024)?;
    let (input, output) = (dev.alloc_pinned::<f32>(1024)?, dev.alloc_pinned::<f32>(1024)?);

    let (mut graph, b) = dev.capture((input, output, &weights, &mut state), |g, views| {
        body(g, views, 1.0)?;
        g.last_kernel()?.scalar::<f32>("b")
    })?;
    graph.set_scalar(b, 2.0)?;
    scope(&stream, |s| {
        // The loop inside one scope: `replay` takes `&'env mut Graph` and `wait` hands
        // it back.
        let mut g = &mut graph;
        for step in 0..4 {
            g.held_mut().0.fill(step as f32);
            g = s.replay(g)?.wait()?;
            let _first: f32 = g.held().1[0];
        }
        Ok::<_, Error>(())
    })?;

    // Across scopes: each scope's end completes its replays.
    for _ in 0..2 {
        scope(&stream, |s| {
            let _replay = s.replay(&mut graph)?;
            Ok::<_, Error>(())
        })?;
        let _last: f32 = graph.held().1[0];
    }

    // The same work with another scalar, applied in place.
    graph.update(|g, views| body(g, views, 3.0))?;

    // Forks inside a capture, and the held memory given back.
    let out = dev.alloc_pinned::<f32>(512)?;
    let forked: Graph<PinnedBuffer<f32>> = scope(&stream, |s| {
        let (graph, ()) = s.capture(out, |g, mut out| {
            let mut y = g.alloc::<f32>(512)?;
            let (mut lo, mut hi) = y.split_at_mut(256)?;
            g.fork(&mut hi, |c, mut hi| c.fill(&mut hi, 1.0))?;
            g.fill(&mut lo, 2.0)?;
            g.copy_to_host(&y, &mut out)?;
            Ok::<_, Error>(())
        })?;
        Ok::<_, Error>(graph)
    })?;
    let _out: PinnedBuffer<f32> = forked.into_held();
    drop(graph);
    let _ = state.to_host_vec()?;
    Ok(())
}

fn main() {
    // Compiles everywhere; runs only where a GPU is.
    if let Ok(dev) = Device::new(0) {
        let _ = run(&dev);
    }
}
