//! Managed memory: a dataset larger than one chunk, processed in place on the GPU chunk
//! by chunk, while a second stream prefetches the next chunk; the host then checks
//! every result.
//!
//! Run with `cargo run --release --example managed`. It needs an NVIDIA GPU with its
//! driver; without one it says so and exits with status 1.
//!
//! A `ManagedVec` has one address on the host and on the GPU, and the driver migrates
//! its pages to where they are used. Where it may be touched is its type: the host
//! reads and writes it (`host_mut`) while no scope has it; `attach_managed` gives the
//! scope a view for its kernels and takes it from the host (touching it then is a
//! compile error) until the scope ends. Without prefetches every page would fault its
//! way to the GPU when the kernel first touches it; `prefetch_to_device` moves a chunk
//! in bulk, here on a second stream (a `fork`) while the first computes on the chunk
//! before.

use std::time::Instant;

use stream_core::{kernel, scope, Device, Error, LaunchConfig, ManagedSliceMut, Scope};

/// Floats in all: 256 MiB, in chunks of 32 MiB.
const TOTAL: usize = 64 << 20;
const CHUNK: usize = 8 << 20;

const SOURCE: &str = r#"
extern "C" __global__ void __launch_bounds__(256)
double_plus_one_f32(float* y, size_t y_len) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < y_len;
         i += (size_t)gridDim.x * blockDim.x) {
        y[i] = 2.0f * y[i] + 1.0f;
    }
}
"#;

#[kernel(cuda = SOURCE, block = 256)]
/// `y = 2 y + 1`, in place.
unsafe fn double_plus_one_f32(y: &mut [f32]);

fn main() {
    match run() {
        Ok(0) => println!("managed: all {TOTAL} results match the CPU"),
        Ok(wrong) => {
            eprintln!("managed: {wrong} of {TOTAL} results differ from the CPU");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("managed: {e}");
            if matches!(e, Error::NoDriver | Error::NoDevice { .. }) {
                eprintln!(
                    "managed: this example needs an NVIDIA GPU and its driver; none was found."
                );
            }
            std::process::exit(1);
        }
    }
}

/// The value element `i` starts with.
fn input(i: usize) -> f32 {
    (i % 1000) as f32
}

/// Runs the example; returns how many results differ from the CPU's.
fn run() -> Result<usize, Error> {
    let dev = Device::new(0)?;
    let access = dev.managed_access()?;
    println!("device 0: {}, managed access: {access:?}", dev.name()?);
    let (compute, prefetcher) = (dev.new_stream()?, dev.new_stream()?);

    // Refused with an error, never oversubscribed, if the GPU does not have it free.
    let mut data = dev.alloc_managed::<f32>(TOTAL)?;
    for (i, x) in data.host_mut()?.iter_mut().enumerate() {
        *x = input(i);
    }

    let start = Instant::now();
    scope(&compute, |s| {
        // From here to the scope's end the host cannot touch `data`: the view has it.
        let view = s.attach_managed(&mut data)?;
        let mut chunks = into_chunks(view, CHUNK)?;
        s.prefetch_to_device(&chunks[0])?;
        for i in 0..chunks.len() {
            let (done, ahead) = chunks.split_at_mut(i + 1);
            let current = &mut done[i];
            match ahead.first() {
                // The child prefetches chunk i + 1 on the second stream while the parent
                // runs chunk i on the first; when the fork returns, the first stream
                // waits (on the GPU, not the host) for the prefetch, so the next kernel
                // finds its chunk on the device.
                Some(next) => s.fork(&prefetcher, next, |c, next| {
                    c.prefetch_to_device(&next)?;
                    process(s, current)
                })?,
                None => process(s, current)?,
            }
        }
        Ok::<_, Error>(())
    })?; // the streams are done: `data` is the host's again
    let seconds = start.elapsed().as_secs_f64();

    let wrong = data
        .host()?
        .iter()
        .enumerate()
        .filter(|&(i, &y)| y != 2.0 * input(i) + 1.0)
        .count();
    println!(
        "{} MiB in {} chunks of {} MiB processed in place in {:.1} ms (the kernel's compilation included)",
        (TOTAL * 4) >> 20,
        TOTAL.div_ceil(CHUNK),
        (CHUNK * 4) >> 20,
        seconds * 1e3
    );
    Ok(wrong)
}

/// `y = 2 y + 1` on one chunk, on the scope's stream.
fn process<'s>(
    s: &'s Scope<'s, '_>,
    chunk: &mut ManagedSliceMut<'_, 's, f32>,
) -> Result<(), Error> {
    let config = LaunchConfig::for_elements(chunk.len().min((1 << 16) * 256), 256);
    double_plus_one_f32(s, config, chunk)
}

/// `view` cut into consecutive chunks of `len` elements (the last may be shorter).
fn into_chunks<'a, 's>(
    mut view: ManagedSliceMut<'a, 's, f32>,
    len: usize,
) -> Result<Vec<ManagedSliceMut<'a, 's, f32>>, Error> {
    let mut chunks = Vec::new();
    while view.len() > len {
        let (head, tail) = view.into_split_at_mut(len)?;
        chunks.push(head);
        view = tail;
    }
    chunks.push(view);
    Ok(chunks)
}
