//! Threads: several threads share one device and one read-only `DeviceVec`, each with
//! its own stream and its own scopes, and each checks its own results.
//!
//! Run with `cargo run --release --example threads`. It needs an NVIDIA GPU with its
//! driver; without one it says so and exits with status 1.
//!
//! `Device`, `Stream` and `DeviceVec` are `Send + Sync`; a `Scope` is neither, so each
//! thread opens its own scopes, and the work of one thread never waits for another's.

use stream_core::{scope, Device, DeviceVec, Error};

const THREADS: usize = 4;
const ROUNDS: usize = 8;
const N: usize = 1 << 20;

fn main() {
    match run() {
        Ok(0) => println!("threads: all results match the CPU"),
        Ok(wrong) => {
            eprintln!("threads: {wrong} results differ from the CPU");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("threads: {e}");
            if matches!(e, Error::NoDriver | Error::NoDevice { .. }) {
                eprintln!(
                    "threads: this example needs an NVIDIA GPU and its driver; none was found."
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
    // Uploaded once (this call blocks until the copy is done, so every stream may read
    // it), then shared read-only by all threads.
    let weights: Vec<f32> = (0..N).map(|i| (i % 100) as f32 * 0.5).collect();
    let shared = dev.upload_vec(&weights)?;

    let results: Vec<Result<usize, Error>> = std::thread::scope(|t| {
        let workers: Vec<_> = (0..THREADS)
            .map(|id| {
                let (dev, shared, weights) = (&dev, &shared, &weights);
                t.spawn(move || worker(id, dev, shared, weights))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut wrong = 0;
    for (id, r) in results.into_iter().enumerate() {
        let w = r?;
        println!("thread {id}: {ROUNDS} rounds of {N} elements, {w} wrong");
        wrong += w;
    }
    Ok(wrong)
}

/// One thread's work: its own stream, a scope per round, `y = 2 * shared + input`.
fn worker(
    id: usize,
    dev: &Device,
    shared: &DeviceVec<f32>,
    weights: &[f32],
) -> Result<usize, Error> {
    let stream = dev.new_stream()?; // this thread's stream: nobody else waits on it
    let mut wrong = 0;
    for round in 0..ROUNDS {
        let input: Vec<f32> = (0..N).map(|i| ((i + id * 7 + round) % 50) as f32).collect();
        let mut out = vec![f32::NAN; N];
        scope(&stream, |s| {
            let w = s.attach_ref(shared)?; // read-only view of the shared memory
            let mut y = s.upload(&input)?;
            kernels::axpy(s, 2.0, &w, &mut y)?; // y = 2 * w + y
            let _download = s.copy_to_host(&y, &mut out)?; // waited for by the scope's end
            Ok::<_, Error>(())
        })?; // this thread's stream is synchronised here; `out` is readable again
        wrong += out
            .iter()
            .zip(input.iter().zip(weights))
            .filter(|(y, (x, w))| **y != 2.0 * **w + **x)
            .count();
    }
    Ok(wrong)
}
