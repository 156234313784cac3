//! Serve: many clients send requests to one GPU through async/await, on a tokio runtime
//! of two worker threads, and every reply is checked against the CPU.
//!
//! Run with `cargo run --release --example serve`. It needs an NVIDIA GPU with its
//! driver; without one it says so and exits with status 1.
//!
//! A request is `y = 2 * weights + x`: the client's input goes to the GPU, a kernel
//! combines it with weights shared by all clients, and the reply comes back. Each
//! request is one [`Stream::run_owned`]: the future owns the client's pinned buffers
//! while the GPU uses them and hands them back with the reply, so no executor thread
//! ever waits for the GPU. The shared weights are an `Arc<DeviceVec>` that every request
//! owns a clone of.
//!
//! `cargo run --release --example serve -- --poll` runs the same with the device's
//! completion thread polling the GPU while requests are in flight
//! ([`CompletionMode::Poll`]: one core busy during work, no wake-up per request), which
//! copy-bound servers of short requests may prefer; the default sleeps in the driver.
//!
//! `stream_core` depends on no runtime: its futures need nothing from an executor but a
//! `Waker`, and complete from the device's completion thread, so the same code runs on
//! any executor. Cancelling a request (dropping its future) does not stop the GPU work:
//! the buffers go to the completion thread, which frees them once the work is done.

use std::sync::Arc;

use stream_core::future::{set_completion_mode, CompletionMode};
use stream_core::{Device, DeviceVec, Error, PinnedBuffer, Stream};

const CLIENTS: usize = 64;
const REQUESTS_PER_CLIENT: usize = 50;
const STREAMS: usize = 4;
const EXECUTOR_THREADS: usize = 2;
const N: usize = 1 << 16;

fn main() {
    let mode = match std::env::args().nth(1).as_deref() {
        None => CompletionMode::Sleep,
        Some("--poll") => CompletionMode::Poll,
        Some(other) => {
            eprintln!("serve: unknown argument {other:?} (the one option is --poll)");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(EXECUTOR_THREADS)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("serve: cannot start the tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    match run(&runtime, mode) {
        Ok(0) => println!(
            "serve: all {} replies match the CPU",
            CLIENTS * REQUESTS_PER_CLIENT
        ),
        Ok(wrong) => {
            eprintln!("serve: {wrong} replies differ from the CPU");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("serve: {e}");
            if matches!(e, Error::NoDriver | Error::NoDevice { .. }) {
                eprintln!(
                    "serve: this example needs an NVIDIA GPU and its driver; none was found."
                );
            }
            std::process::exit(1);
        }
    }
}

/// What one client owns between requests: its request and reply buffers.
struct Client {
    input: PinnedBuffer<f32>,
    reply: PinnedBuffer<f32>,
}

/// Runs the example's clients as tasks of `runtime`, the device's completion thread in
/// `mode`; returns how many replies differ from the CPU's.
fn run(runtime: &tokio::runtime::Runtime, mode: CompletionMode) -> Result<usize, Error> {
    let dev = Device::new(0)?;
    set_completion_mode(&dev, mode)?;
    println!(
        "device 0: {}; {CLIENTS} clients, {STREAMS} streams, {EXECUTOR_THREADS} tokio worker threads, completion {mode:?}",
        dev.name()?
    );
    // `axpy`'s module, compiled before the first request rather than by it (NVRTC takes
    // a tenth of a second or more).
    let began = std::time::Instant::now();
    dev.prepare_kernels(&[kernels::modules::ELEMENTWISE_F32])?;
    println!(
        "the f32 element-wise kernels compiled and loaded in {} ms, before the first request",
        began.elapsed().as_millis()
    );
    let weights: Vec<f32> = (0..N).map(|i| (i % 100) as f32 * 0.5).collect();
    // Uploaded once, blocking until it is ready for every stream, then shared.
    let shared = Arc::new(dev.upload_vec(&weights)?);
    let weights = Arc::new(weights);
    let streams = Arc::new(
        (0..STREAMS)
            .map(|_| dev.new_stream())
            .collect::<Result<Vec<_>, _>>()?,
    );
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| {
            let client = Client {
                input: dev.alloc_pinned::<f32>(N)?,
                reply: dev.alloc_pinned::<f32>(N)?,
            };
            let (streams, shared, weights) = (
                Arc::clone(&streams),
                Arc::clone(&shared),
                Arc::clone(&weights),
            );
            Ok(runtime.spawn(async move {
                serve_client(id, client, &streams[id % STREAMS], shared, &weights).await
            }))
        })
        .collect::<Result<_, Error>>()?;
    let mut wrong = 0;
    for (id, client) in clients.into_iter().enumerate() {
        match runtime.block_on(client) {
            Ok(result) => wrong += result?,
            Err(_) => {
                eprintln!("serve: client {id} panicked");
                wrong += REQUESTS_PER_CLIENT;
            }
        }
    }
    Ok(wrong)
}

/// One client: `REQUESTS_PER_CLIENT` requests, one after the other; returns how many
/// replies were wrong.
async fn serve_client(
    id: usize,
    mut client: Client,
    stream: &Stream,
    shared: Arc<DeviceVec<f32>>,
    weights: &[f32],
) -> Result<usize, Error> {
    let mut wrong = 0;
    for round in 0..REQUESTS_PER_CLIENT {
        // The request: fresh input, and a reply buffer poisoned with NaN.
        for (i, x) in client.input.iter_mut().enumerate() {
            *x = ((i + id * 7 + round) % 50) as f32;
        }
        client.reply.fill(f32::NAN);
        let ((returned, _), ()) = stream
            .run_owned((client, Arc::clone(&shared)), |s, (client, shared)| {
                let w = s.attach_ref(shared)?; // read-only view of the shared weights
                let mut y = s.upload(&client.input[..])?;
                kernels::axpy(s, 2.0, &w, &mut y)?; // y = 2 * w + y
                let _reply = s.copy_to_host(&y, &mut client.reply[..])?; // the future waits
                Ok::<_, Error>(())
            })
            .await?;
        client = returned;
        wrong += client
            .reply
            .iter()
            .zip(client.input.iter().zip(weights))
            .filter(|(y, (x, w))| **y != 2.0 * **w + **x)
            .count();
    }
    Ok(wrong)
}
