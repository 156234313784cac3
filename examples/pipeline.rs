//! Pipeline: overlap uploads, kernels and downloads by spreading chunks over several
//! streams with `fork`, and print how much faster than one stream that is.
//!
//! Run with `cargo run --release --example pipeline`. It needs an NVIDIA GPU with its
//! driver; without one it says so and exits with status 1. With `-- --trace` it also
//! runs both once more into a [`Trace`] and writes `pipeline.trace.json`: open it in
//! <https://ui.perfetto.dev> to see the three streams overlap.
//!
//! On one stream every step waits for the one before it. The GPU has separate engines
//! for host-to-device copies, device-to-host copies and kernels, so with chunks on three
//! streams chunk 2 can upload while chunk 1 computes and chunk 0 downloads.

use std::time::Instant;

use stream_core::trace::Trace;
use stream_core::{scope, Device, Error, Scope, Stream};

/// Floats in all: 256 MiB, processed in chunks of 16 MiB.
const TOTAL: usize = 64 << 20;
const CHUNK: usize = 4 << 20;

fn main() {
    match run() {
        Ok(0) => println!("pipeline: all results match the CPU"),
        Ok(wrong) => {
            eprintln!("pipeline: {wrong} results differ from the CPU");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("pipeline: {e}");
            if matches!(e, Error::NoDriver | Error::NoDevice { .. }) {
                eprintln!(
                    "pipeline: this example needs an NVIDIA GPU and its driver; none was found."
                );
            }
            std::process::exit(1);
        }
    }
}

/// Runs the example; returns how many results differ from the CPU's.
fn run() -> Result<usize, Error> {
    let dev = Device::new(0)?;
    println!("device 0: {}", dev.name()?);
    let streams = [dev.new_stream()?, dev.new_stream()?, dev.new_stream()?];

    // Pinned (page-locked) host memory: the copy engines read and write it directly, so
    // copies run asynchronously and at full speed. It slices like a Vec.
    let mut input = dev.alloc_pinned::<f32>(TOTAL)?;
    input
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = (i % 1000) as f32);
    let mut output = dev.alloc_pinned::<f32>(TOTAL)?;

    let mut wrong = 0;
    let mut seconds = [0.0; 2];
    // Twice each, keeping the second time: the first run also compiles the kernel and
    // grows the memory pool.
    for _ in 0..2 {
        for (lanes, time) in seconds.iter_mut().enumerate() {
            output.fill(f32::NAN); // poison: a chunk that is never written shows up
            let start = Instant::now();
            if lanes == 0 {
                serial(&streams[0], &input, &mut output, None)?;
            } else {
                pipelined(&streams, &input, &mut output, None)?;
            }
            *time = start.elapsed().as_secs_f64();
            wrong += output
                .iter()
                .zip(input.iter())
                .filter(|(y, x)| **y != 2.0 * **x)
                .count();
        }
    }
    let [one, three] = seconds;
    println!(
        "{} MiB in {} chunks: 1 stream {:.1} ms, 3 streams {:.1} ms; overlap {:.2}x (serial time / pipelined time)",
        (TOTAL * 4) >> 20,
        TOTAL / CHUNK,
        one * 1e3,
        three * 1e3,
        one / three
    );
    if std::env::args().any(|a| a == "--trace") {
        // Once more each, recorded: the serial run, then the pipelined one.
        let trace = Trace::new();
        serial(&streams[0], &input, &mut output, Some(&trace))?;
        pipelined(&streams, &input, &mut output, Some(&trace))?;
        let path = "pipeline.trace.json";
        match std::fs::write(path, trace.to_chrome_json()?) {
            Ok(()) => println!(
                "wrote {path}: {} operations on 3 streams (open it in https://ui.perfetto.dev)",
                trace.len()
            ),
            Err(e) => eprintln!("pipeline: cannot write {path}: {e}"),
        }
    }
    Ok(wrong)
}

/// One chunk on one scope's stream: upload, `y = 2 x`, download. Nothing waits here:
/// the download's `Pending` is dropped, and the outermost scope's end waits for it.
fn process<'s, 'env>(
    s: &'s Scope<'s, 'env>,
    input: &'env [f32],
    output: &'env mut [f32],
) -> Result<(), Error> {
    let x = s.upload(input)?; // stream-ordered allocation and copy
    let mut y = s.alloc::<f32>(input.len())?;
    kernels::scale(s, 2.0, &x, &mut y)?;
    let _download = s.copy_to_host(&y, output)?;
    Ok(()) // `x` and `y` are freed here, stream-ordered, after the work that uses them
}

/// Every chunk on one stream, one after the other (recorded into `trace`, if given).
fn serial(
    stream: &Stream,
    input: &[f32],
    output: &mut [f32],
    trace: Option<&Trace>,
) -> Result<(), Error> {
    scope(stream, |s| {
        if let Some(trace) = trace {
            s.trace_into(trace)?;
        }
        for (x, y) in input.chunks(CHUNK).zip(output.chunks_mut(CHUNK)) {
            process(s, x, y)?;
        }
        Ok(())
    }) // synchronises the stream: `output` is complete and readable again
}

/// Chunk `i` on stream `i % 3`. Each `fork` starts a child scope on another stream
/// (ordered after the parent's work so far, by an event) and joins it back into the
/// parent's stream when its closure returns. The host never blocks inside, so all three
/// streams are fed at once; the outer scope's end waits for all of them. A traced
/// scope's forks record into its trace too.
fn pipelined(
    streams: &[Stream; 3],
    input: &[f32],
    output: &mut [f32],
    trace: Option<&Trace>,
) -> Result<(), Error> {
    scope(&streams[0], |s| {
        if let Some(trace) = trace {
            s.trace_into(trace)?;
        }
        s.fork(&streams[1], (), |c1, ()| {
            s.fork(&streams[2], (), |c2, ()| {
                for (i, (x, y)) in input
                    .chunks(CHUNK)
                    .zip(output.chunks_mut(CHUNK))
                    .enumerate()
                {
                    match i % 3 {
                        0 => process(s, x, y)?,
                        1 => process(c1, x, y)?,
                        _ => process(c2, x, y)?,
                    }
                }
                Ok(())
            })
        })
    })
}
