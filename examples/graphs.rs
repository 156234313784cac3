//! Graphs: an inference-style loop captured once into a CUDA graph and replayed step
//! after step: write the input into pinned memory, replay, read the output. Each step is
//! 100 small kernels; replaying them costs one launch.
//!
//! The same step also runs as plain launches in a scope, and the example prints the time
//! per step of both, checks that both compute what the CPU computes, and checks that
//! they agree with each other.
//!
//! Run with `cargo run --release --example graphs` (`-- --steps N` for another number
//! of steps than 300, at least 2). It needs an NVIDIA GPU with its driver; without one
//! it says so and exits with status 1.

use std::time::Instant;

use stream_core::{scope, Device, DeviceBuffer, DeviceSlice, Enqueue, Error};

/// Elements of the "activations".
const WIDTH: usize = 4096;
/// Layers of the "model": two kernels each (`scale`, then `axpy` of the layer's
/// weights), so a step is `2 * LAYERS` kernels.
const LAYERS: usize = 50;
/// Steps of the loop, unless `--steps N` says otherwise.
const STEPS: usize = 300;
/// What each layer scales its input by.
const DECAY: f32 = 0.5;

fn main() {
    let steps = match steps_argument(std::env::args().skip(1)) {
        Ok(steps) => steps,
        Err(why) => {
            eprintln!("graphs: {why}\nusage: graphs [--steps N]   (N >= 2, default {STEPS})");
            std::process::exit(2);
        }
    };
    match run(steps) {
        Ok(0) => println!("graphs: all results match the CPU"),
        Ok(wrong) => {
            eprintln!("graphs: {wrong} checks failed");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("graphs: {e}");
            if matches!(e, Error::NoDriver | Error::NoDevice { .. }) {
                eprintln!(
                    "graphs: this example needs an NVIDIA GPU and its driver; none was found."
                );
            }
            std::process::exit(1);
        }
    }
}

/// The `--steps N` argument, or `STEPS` without one.
fn steps_argument(mut args: impl Iterator<Item = String>) -> Result<usize, String> {
    let mut steps = STEPS;
    while let Some(arg) = args.next() {
        if arg != "--steps" {
            return Err(format!("unknown argument {arg:?}"));
        }
        steps = args
            .next()
            .and_then(|n| n.parse().ok())
            .filter(|&n| n >= 2)
            .ok_or("--steps needs a number of at least 2")?;
    }
    Ok(steps)
}

/// One step of the model, wherever the work goes: a scope runs it, a graph capture
/// records it (both implement `Enqueue`). The result ends in `x`.
fn layers<'s>(
    q: &'s impl Enqueue<'s>,
    weights: DeviceSlice<'_, 's, f32>,
    x: &mut DeviceBuffer<'s, f32>,
    y: &mut DeviceBuffer<'s, f32>,
) -> stream_core::Result<()> {
    for layer in 0..LAYERS {
        let w = weights.slice(layer * WIDTH..(layer + 1) * WIDTH)?;
        kernels::scale(q, DECAY, &*x, y)?; // y = DECAY * x
        kernels::axpy(q, 1.0, &w, y)?; // y += w
        std::mem::swap(x, y);
    }
    Ok(())
}

/// The CPU's step (`mul_add`, the fused multiply-add the GPU uses for `a * x + y`).
fn layers_on_cpu(weights: &[f32], input: &[f32]) -> Vec<f32> {
    let mut x = input.to_vec();
    for layer in weights.chunks_exact(WIDTH) {
        for (v, w) in x.iter_mut().zip(layer) {
            *v = 1.0f32.mul_add(DECAY * *v, *w);
        }
    }
    x
}

/// The input of step `step`.
fn input_of(step: usize) -> Vec<f32> {
    (0..WIDTH)
        .map(|i| ((i * 7 + step * 13) % 101) as f32 * 0.01 - 0.5)
        .collect()
}

/// `true` when `got` matches the CPU's `expected` within a few rounding errors.
fn close(got: &[f32], expected: &[f32]) -> bool {
    got.iter()
        .zip(expected)
        .all(|(g, e)| (g - e).abs() <= 1e-5 * (1.0 + e.abs()))
}

/// Runs the example; returns how many checks failed.
fn run(steps: usize) -> Result<usize, Error> {
    let dev = Device::new(0)?;
    let stream = dev.new_stream()?;
    println!(
        "device 0: {}; a step is {} kernels over {WIDTH} elements",
        dev.name()?,
        2 * LAYERS
    );
    let weights_host: Vec<f32> = (0..LAYERS * WIDTH)
        .map(|i| ((i % 97) as f32 - 48.0) * 0.001)
        .collect();
    let weights = dev.upload_vec(&weights_host)?;
    let mut wrong = 0;

    // 1. Plain launches: the step in a scope, one launch per kernel, every step.
    let (mut input, mut output) = (
        dev.alloc_pinned::<f32>(WIDTH)?,
        dev.alloc_pinned::<f32>(WIDTH)?,
    );
    let mut plain_outputs = Vec::with_capacity(steps);
    let start = Instant::now();
    for step in 0..steps {
        input.copy_from_slice(&input_of(step));
        scope(&stream, |s| {
            let w = s.attach_ref(&weights)?;
            let mut x = s.upload(&input)?;
            let mut y = s.alloc::<f32>(WIDTH)?;
            layers(s, w, &mut x, &mut y)?;
            s.copy_to_host(&x, &mut output)?.wait()?;
            Ok::<_, Error>(())
        })?;
        plain_outputs.push(output.to_vec());
    }
    let plain = start.elapsed().as_secs_f64() / steps as f64;

    // 2. The same step captured once into a graph that holds the input and output
    //    buffers and reads the weights.
    let (mut graph, ()) =
        dev.capture((input, output, &weights), |g, (x_host, mut y_host, w)| {
            let mut x = g.upload(&x_host)?; // a copy node: reads the held input
            let mut y = g.alloc::<f32>(WIDTH)?; // the graph's own memory
            layers(g, w, &mut x, &mut y)?; // 100 kernel nodes
            g.copy_to_host(&x, &mut y_host)?; // a copy node: writes the held output
            Ok::<_, Error>(())
        })?;

    // 3. The inference loop: refill the input, replay, read the output. `replay`
    //    borrows the graph (and so its buffers) until `wait` hands it back: writing the
    //    input or reading the output while a replay runs does not compile.
    let mut graph_outputs = Vec::with_capacity(steps);
    let start = Instant::now();
    scope(&stream, |s| {
        let mut graph = &mut graph;
        for step in 0..steps {
            graph.held_mut().0.copy_from_slice(&input_of(step));
            graph = s.replay(graph)?.wait()?;
            graph_outputs.push(graph.held().1.to_vec());
        }
        Ok::<_, Error>(())
    })?;
    let replayed = start.elapsed().as_secs_f64() / steps as f64;

    println!(
        "plain launches: {:8.1} us per step ({:.2} us per kernel)",
        plain * 1e6,
        plain * 1e6 / (2 * LAYERS) as f64
    );
    println!(
        "graph replay:   {:8.1} us per step ({:.2} us per kernel), {:.1}x faster",
        replayed * 1e6,
        replayed * 1e6 / (2 * LAYERS) as f64,
        plain / replayed
    );

    for step in 0..steps {
        if graph_outputs[step] != plain_outputs[step] {
            eprintln!("step {step}: the graph's output differs from the plain launches'");
            wrong += 1;
        }
    }
    for step in [0, 1, steps / 2, steps - 1] {
        let expected = layers_on_cpu(&weights_host, &input_of(step));
        if !close(&graph_outputs[step], &expected) {
            eprintln!("step {step}: the graph's output differs from the CPU's");
            wrong += 1;
        }
    }
    let (_input, _output, _weights) = graph.into_held();
    Ok(wrong)
}
