//! The owned-buffer futures (`stream_core::future`): `run_owned`, `upload_owned`,
//! `download_owned` on the workspace's minimal executor (multi-threaded, one worker, and
//! `block_on`; tokio cannot be fetched where this workspace is built, and the futures
//! need nothing but a `Waker`).
//!
//! What is proven: results equal the CPU's for 10,000 concurrent requests over four
//! streams; futures dropped at random points, forgotten, or whose closure panicked
//! never release memory before the GPU is done, and everything not forgotten is back in
//! the pools afterwards (device and pinned statistics equal to before); no executor
//! thread waits while a long kernel runs.
//!
//! The tests of this file take one lock each, so that they run one at a time: the pool
//! statistics and the completion counters they compare are shared by the process.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use gpu_tests::{check_eq, device, ensure, panic_message, poisoned, spin, Failed, Rng, TestResult};
use mini_executor::{block_on, Executor};
use stream_core::future::completion_stats;
use stream_core::{scope, Device, Error, PinnedBuffer, Stream};

gpu_tests::test_main! {
    gpu: [
        upload_owned_and_download_owned_round_trip_every_owned_buffer_type,
        run_owned_computes_a_kernel_over_owned_pinned_buffers,
        staged_download_into_an_owned_vec_has_landed_when_the_future_resolves,
        empty_copies_resolve_at_once_with_their_buffers,
        download_owned_of_mismatched_lengths_is_length_mismatch,
        ten_thousand_concurrent_requests_over_four_streams_on_four_workers,
        ten_thousand_concurrent_requests_over_four_streams_on_one_worker,
        requests_on_block_on_are_correct,
        futures_dropped_at_random_points_release_their_memory_only_after_the_gpu,
        forgotten_future_leaks_its_buffer_and_the_stream_keeps_working,
        panic_in_the_run_owned_closure_propagates_and_releases_after_the_gpu,
        no_executor_thread_waits_while_a_long_kernel_runs,
    ],
}

/// About 50 ms of spinning on an H100/H200: long enough that work behind it is still
/// pending when the test looks.
const SPIN: u64 = 100_000_000;
/// About one second of spinning.
const LONG_SPIN: u64 = 2_000_000_000;
/// Concurrent requests of the load tests.
const REQUESTS: usize = 10_000;
/// Streams the requests are spread over.
const STREAMS: usize = 4;
/// How long a test waits for the completion thread to finish everything.
const QUIET_TIMEOUT: Duration = Duration::from_secs(60);

/// The lock that makes this file's tests run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Device and pinned bytes in use once nothing is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InUse {
    device: usize,
    pinned: usize,
}

/// Waits until no future's completion is pending, synchronises `streams` (so the pool
/// sees their frees complete) and the housekeeping stream, and reads what is in use.
fn quiet(dev: &Device, streams: &[&Stream]) -> TestResult<InUse> {
    let start = Instant::now();
    while completion_stats().in_flight > 0 {
        ensure!(
            start.elapsed() < QUIET_TIMEOUT,
            "{} operations still in flight after {QUIET_TIMEOUT:?}: the completion thread \
             never saw their events complete",
            completion_stats().in_flight
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    for stream in streams {
        scope(stream, |_| Ok::<_, Error>(()))?;
    }
    dev.trim_memory(0)?;
    Ok(InUse {
        device: dev.memory_stats()?.in_use_bytes,
        pinned: dev.pinned_memory_stats().in_use_bytes,
    })
}

fn doubled(input: &[f32]) -> Vec<f32> {
    input.iter().map(|v| v * 2.0).collect()
}

fn new_streams(dev: &Device, n: usize) -> TestResult<Arc<Vec<Stream>>> {
    let streams = (0..n)
        .map(|_| dev.new_stream())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(streams))
}

fn pinned_copy(dev: &Device, data: &[f32]) -> Result<PinnedBuffer<f32>, Error> {
    let mut buf = dev.alloc_pinned::<f32>(data.len())?;
    buf.copy_from_slice(data);
    Ok(buf)
}

/// One request of the load tests, of one of three kinds (`kind` is 0, 1 or 2), checked
/// against the CPU: 2x through `run_owned` over pinned buffers; a plain round trip
/// through `upload_owned(Vec)` and `download_owned(DeviceVec, Box<[f32]>)`; and 2x in
/// three steps (`upload_owned(PinnedBuffer)`, `run_owned` over the `DeviceVec`,
/// `download_owned` into a `Vec`).
async fn request(kind: usize, dev: Device, stream: &Stream, input: Vec<f32>) -> TestResult {
    let n = input.len();
    match kind {
        0 => {
            let owned = (pinned_copy(&dev, &input)?, pinned_copy(&dev, &poisoned(n))?);
            let ((_, output), ()) = stream
                .run_owned(owned, |s, (input, output)| {
                    let x = s.upload(&input[..])?;
                    let mut y = s.alloc::<f32>(x.len())?;
                    kernels::scale(s, 2.0f32, &x, &mut y)?;
                    let _download = s.copy_to_host(&y, &mut output[..])?;
                    Ok::<_, Error>(())
                })
                .await?;
            check_eq("run_owned request (2x)", &doubled(&input), &output)
        }
        1 => {
            let (on_gpu, input) = stream.upload_owned(input).await?;
            let (_, output) = stream
                .download_owned(on_gpu, poisoned::<f32>(n).into_boxed_slice())
                .await?;
            check_eq("upload_owned + download_owned round trip", &input, &output)
        }
        _ => {
            let (on_gpu, _) = stream.upload_owned(pinned_copy(&dev, &input)?).await?;
            let (on_gpu, ()) = stream
                .run_owned(on_gpu, |s, on_gpu| {
                    let mut x = s.attach(on_gpu)?;
                    let mut y = s.alloc::<f32>(x.len())?;
                    kernels::scale(s, 2.0f32, &x, &mut y)?;
                    s.copy_device(&y, &mut x)?;
                    Ok::<_, Error>(())
                })
                .await?;
            let (_, output) = stream.download_owned(on_gpu, poisoned::<f32>(n)).await?;
            check_eq("three-step request (2x)", &doubled(&input), &output)
        }
    }
}

/// Each owned buffer type makes the round trip, and every buffer comes back.
fn upload_owned_and_download_owned_round_trip_every_owned_buffer_type() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut rng = Rng::new();
    let n = (1 << 16) + 3;
    let input: Vec<u32> = rng.vec(n);
    block_on(async {
        let (a, vec) = stream.upload_owned(input.clone()).await?;
        check_eq("Vec handed back by upload_owned", &input, &vec)?;
        let (b, boxed) = stream
            .upload_owned(input.clone().into_boxed_slice())
            .await?;
        check_eq("Box handed back by upload_owned", &input, &boxed)?;
        let mut pinned = dev.alloc_pinned::<u32>(n)?;
        pinned.copy_from_slice(&input);
        let (c, _) = stream.upload_owned(pinned).await?;
        for (what, vec) in [
            ("from a Vec", a),
            ("from a Box", b),
            ("from a PinnedBuffer", c),
        ] {
            let shared = Arc::new(vec);
            let (shared, out) = stream
                .download_owned(Arc::clone(&shared), poisoned::<u32>(n))
                .await?;
            check_eq(&format!("upload {what}, download into a Vec"), &input, &out)?;
            let mut pinned_out = dev.alloc_pinned::<u32>(n)?;
            pinned_out.fill(u32::MAX);
            let (_, pinned_out) = stream.download_owned(shared, pinned_out).await?;
            check_eq(
                &format!("upload {what}, download into a PinnedBuffer"),
                &input,
                &pinned_out,
            )?;
        }
        Ok::<_, Failed>(())
    })
}

/// `run_owned` over pinned buffers: upload, a kernel, a download, all on the GPU when
/// the future resolves, and the owned value comes back.
fn run_owned_computes_a_kernel_over_owned_pinned_buffers() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = dev.new_stream()?;
    let input: Vec<f32> = Rng::new().vec((1 << 20) + 7);
    block_on(request(0, dev.clone(), &stream, input.clone()))?;
    block_on(request(2, dev, &stream, input))
}

/// A download into a pageable `Vec` owned by `run_owned`, large enough to be staged,
/// behind a spinning kernel: staged downloads finish on the staging thread after the
/// stream's work, and the owned value comes back only once that copy-out has landed
/// (every element checked), never while it may still be written.
fn staged_download_into_an_owned_vec_has_landed_when_the_future_resolves() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = dev.new_stream()?;
    let n = (8 << 20) / 4 + 5; // 8 MiB and a bit: above the staging threshold
    let input: Vec<f32> = Rng::new().vec(n);
    let (_, staged_before) = stream_core::staging::staged_copy_counts();
    let owned = (pinned_copy(&dev, &input)?, poisoned::<f32>(n));
    let ((_, output), ()) = block_on(stream.run_owned(owned, |s, (input, output)| {
        let x = s.upload(&input[..])?;
        spin(s, SPIN)?;
        let mut y = s.alloc::<f32>(x.len())?;
        kernels::scale(s, 2.0f32, &x, &mut y)?;
        let _download = s.copy_to_host(&y, &mut output[..])?; // not waited: the future does
        Ok::<_, Error>(())
    }))?;
    let (_, staged_after) = stream_core::staging::staged_copy_counts();
    ensure!(
        staged_after > staged_before,
        "the download into a Vec was not staged ({staged_before} -> {staged_after} staged downloads)"
    );
    check_eq(
        "staged download in run_owned (2x)",
        &doubled(&input),
        &output,
    )
}

/// Zero-length copies allocate and enqueue nothing and resolve at once.
fn empty_copies_resolve_at_once_with_their_buffers() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = dev.new_stream()?;
    let in_flight = completion_stats().in_flight;
    let upload = stream.upload_owned(Vec::<f32>::new());
    ensure!(
        completion_stats().in_flight == in_flight,
        "an empty upload handed an operation to the completion thread"
    );
    let (empty, host) = block_on(upload)?;
    ensure!(
        empty.is_empty() && host.is_empty(),
        "the empty upload is not empty"
    );
    let (_, host) = block_on(stream.download_owned(empty, Vec::<f32>::new()))?;
    ensure!(host.is_empty(), "the empty download is not empty");
    Ok(())
}

/// A download into a buffer of another length is refused before anything is enqueued.
fn download_owned_of_mismatched_lengths_is_length_mismatch() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = dev.new_stream()?;
    let vec = dev.upload_vec(&[1u32, 2, 3, 4])?;
    match block_on(stream.download_owned(vec, vec![0u32; 5])) {
        Err(Error::LengthMismatch {
            source_len: 4,
            destination_len: 5,
            ..
        }) => Ok(()),
        other => Err(Failed::from(format!(
            "download of 4 elements into 5: expected LengthMismatch 4 != 5, got {:?}",
            other.map(|_| ())
        ))),
    }
}

/// `REQUESTS` requests of random small sizes, all spawned at once on `workers` worker
/// threads over `STREAMS` streams; every result is checked, and the pools hold what they
/// held before.
fn concurrent_requests(workers: usize) -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let streams = new_streams(&dev, STREAMS)?;
    let before = quiet(&dev, &streams.iter().collect::<Vec<_>>())?;
    let executor = Executor::new(workers);
    let mut rng = Rng::new();
    let handles: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let len = 1 + rng.below(1024);
            let input: Vec<f32> = rng.vec(len);
            let (dev, streams) = (dev.clone(), Arc::clone(&streams));
            executor.spawn(async move { request(i % 3, dev, &streams[i % STREAMS], input).await })
        })
        .collect();
    for (i, handle) in handles.into_iter().enumerate() {
        match handle.join() {
            Ok(result) => result.map_err(|e| {
                Failed::from(format!(
                    "request {i} (kind {}): {}",
                    i % 3,
                    e.message().map_or("", |m| m)
                ))
            })?,
            Err(panic) => {
                return Err(Failed::from(format!(
                    "request {i} panicked: {}",
                    panic_message(panic.as_ref())
                )))
            }
        }
    }
    drop(executor);
    let after = quiet(&dev, &streams.iter().collect::<Vec<_>>())?;
    ensure!(
        after == before,
        "after {REQUESTS} requests the pools hold {after:?}, before they held {before:?}: \
         memory of a request was not released"
    );
    Ok(())
}

fn ten_thousand_concurrent_requests_over_four_streams_on_four_workers() -> TestResult {
    concurrent_requests(4)
}

fn ten_thousand_concurrent_requests_over_four_streams_on_one_worker() -> TestResult {
    concurrent_requests(1)
}

/// The same requests, one after the other, on the calling thread.
fn requests_on_block_on_are_correct() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = dev.new_stream()?;
    let mut rng = Rng::new();
    for i in 0..300 {
        let len = 1 + rng.below(5000);
        let input: Vec<f32> = rng.vec(len);
        block_on(request(i % 3, dev.clone(), &stream, input))?;
    }
    Ok(())
}

/// Polls the inner future at most `polls` times (asking to be polled again at once
/// while it is pending), then drops it: `None`.
struct DropAfter<F> {
    inner: Option<F>,
    polls: usize,
}

impl<F: Future + Unpin> Future for DropAfter<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.polls == 0 {
            self.inner = None;
            return Poll::Ready(None);
        }
        self.polls -= 1;
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll(cx) {
            Poll::Ready(output) => Poll::Ready(Some(output)),
            Poll::Pending => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

/// Behind a spinning kernel on each stream, 2,000 futures of every kind are dropped
/// before their first poll or after one to three polls. Right after the drops, the
/// pinned memory they own is still in use (the GPU has not finished); once the
/// completion thread is done, everything is back in the pools, and the completion thread
/// released at least the futures dropped while their stream was busy.
fn futures_dropped_at_random_points_release_their_memory_only_after_the_gpu() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let streams = new_streams(&dev, STREAMS)?;
    let all: Vec<&Stream> = streams.iter().collect();
    let before = quiet(&dev, &all)?;
    let released_before = completion_stats().released_after_drop;
    // Keep every stream busy for about a second, so the drops below come before
    // completion.
    for stream in streams.iter() {
        drop(stream.run_owned((), |s, ()| spin(s, LONG_SPIN)));
    }
    let executor = Executor::new(2);
    let mut rng = Rng::new();
    let n = 1000;
    let mut handles = Vec::new();
    for i in 0..2000 {
        let stream = &streams[i % STREAMS];
        let polls = rng.below(4);
        let input: Vec<f32> = rng.vec(n);
        match i % 3 {
            0 => {
                let owned = (pinned_copy(&dev, &input)?, dev.alloc_pinned::<f32>(n)?);
                let future = stream.run_owned(owned, |s, (input, output)| {
                    let x = s.upload(&input[..])?;
                    let _download = s.copy_to_host(&x, &mut output[..])?;
                    Ok::<_, Error>(())
                });
                handles.push(executor.spawn(async move {
                    DropAfter {
                        inner: Some(future),
                        polls,
                    }
                    .await
                    .map(|r| r.map(|_| ()))
                }));
            }
            1 => {
                let future = stream.upload_owned(input);
                handles.push(executor.spawn(async move {
                    DropAfter {
                        inner: Some(future),
                        polls,
                    }
                    .await
                    .map(|r| r.map(|_| ()))
                }));
            }
            _ => {
                let vec = dev.upload_vec(&input)?;
                let future = stream.download_owned(vec, dev.alloc_pinned::<f32>(n)?);
                handles.push(executor.spawn(async move {
                    DropAfter {
                        inner: Some(future),
                        polls,
                    }
                    .await
                    .map(|r| r.map(|_| ()))
                }));
            }
        }
    }
    for handle in handles {
        match handle.join() {
            Ok(Some(result)) => result?,
            Ok(None) => {}
            Err(panic) => {
                return Err(Failed::from(format!(
                    "a request panicked: {}",
                    panic_message(panic.as_ref())
                )))
            }
        }
    }
    let in_use_now = dev.pinned_memory_stats().in_use_bytes;
    let still_busy = streams.iter().any(|s| !s.is_idle().unwrap_or(true));
    ensure!(
        !still_busy || in_use_now > before.pinned,
        "the streams are still busy, yet the pinned memory of the dropped futures is already \
         back in the pool ({in_use_now} bytes in use, {} before): it was released under the DMA",
        before.pinned
    );
    drop(executor);
    let after = quiet(&dev, &all)?;
    ensure!(
        after == before,
        "after the dropped futures completed the pools hold {after:?}, before {before:?}"
    );
    let released = completion_stats().released_after_drop - released_before;
    ensure!(
        released > 0,
        "no dropped future's memory was released by the completion thread, although the \
         streams were busy when they were dropped"
    );
    Ok(())
}

/// A forgotten future keeps its buffer (a leak, never a free under the DMA), and its
/// stream runs on. The future is made on a device handle of its own, which the leak
/// keeps open, so that the shared handle's pools stay clean.
fn forgotten_future_leaks_its_buffer_and_the_stream_keeps_working() -> TestResult {
    let _serial = serial();
    let dev = Device::new(0)?;
    let stream = dev.new_stream()?;
    let before = quiet(&dev, &[&stream])?;
    let buffer = dev.alloc_pinned::<u32>(1024)?; // one 4 KiB block
    let block = dev.pinned_memory_stats().in_use_bytes - before.pinned;
    let future = stream.run_owned(buffer, |s, buffer| {
        spin(s, SPIN)?;
        let x = s.alloc_zeroed::<u32>(buffer.len())?;
        let _download = s.copy_to_host(&x, &mut buffer[..])?;
        Ok::<_, Error>(())
    });
    std::mem::forget(future);
    let after = quiet(&dev, &[&stream])?;
    ensure!(
        after.pinned == before.pinned + block,
        "the forgotten future's pinned block must stay in use (leaked): {} bytes in use, \
         expected {} + {block}",
        after.pinned,
        before.pinned
    );
    let input: Vec<f32> = Rng::new().vec(4096);
    block_on(request(0, dev, &stream, input))
}

/// A panic in the closure propagates from `run_owned`; the owned buffer stays in use
/// while the work before the panic runs, and is released once it has completed.
fn panic_in_the_run_owned_closure_propagates_and_releases_after_the_gpu() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = dev.new_stream()?;
    let before = quiet(&dev, &[&stream])?;
    let buffer = dev.alloc_pinned::<u32>(1024)?;
    let with_buffer = dev.pinned_memory_stats().in_use_bytes;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        stream.run_owned(buffer, |s, buffer| {
            spin(s, SPIN)?;
            let x = s.alloc_zeroed::<u32>(buffer.len())?;
            let len = buffer.len();
            let _download = s.copy_to_host(&x, &mut buffer[..])?;
            if len == 1024 {
                panic!("deliberate panic in a run_owned closure");
            }
            Ok::<_, Error>(())
        })
    }));
    let in_use_right_after = dev.pinned_memory_stats().in_use_bytes;
    let busy = !stream.is_idle()?;
    match caught {
        Err(panic) => ensure!(
            panic_message(panic.as_ref()).contains("deliberate"),
            "run_owned propagated another panic: {}",
            panic_message(panic.as_ref())
        ),
        Ok(_) => {
            return Err(Failed::from(
                "run_owned returned although its closure panicked",
            ))
        }
    }
    ensure!(
        !busy || in_use_right_after == with_buffer,
        "the stream is still busy, yet the panicked closure's buffer is already back in the \
         pool ({in_use_right_after} bytes in use, {with_buffer} with the buffer)"
    );
    let after = quiet(&dev, &[&stream])?;
    ensure!(
        after == before,
        "after the work before the panic completed the pools hold {after:?}, before {before:?}"
    );
    Ok(())
}

/// While a one-second kernel runs behind a `run_owned` future, the one worker thread of
/// the executor runs other tasks: nothing waits on the GPU.
fn no_executor_thread_waits_while_a_long_kernel_runs() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = Arc::new(dev.new_stream()?);
    // Warm up: the spin kernel's module and the completion thread, so that neither is
    // made while the clock runs.
    block_on(stream.run_owned((), |s, ()| spin(s, 1)))?;
    let executor = Executor::new(1);
    let long_stream = Arc::clone(&stream);
    let start = Instant::now();
    let long = executor.spawn(async move {
        long_stream
            .run_owned((), |s, ()| spin(s, LONG_SPIN))
            .await
            .map(|_| Instant::now())
    });
    let quick = executor.spawn(async { Instant::now() });
    let quick_done = quick
        .join()
        .map_err(|p| Failed::from(panic_message(p.as_ref())))?;
    let long_done = long
        .join()
        .map_err(|p| Failed::from(panic_message(p.as_ref())))??;
    ensure!(
        quick_done < long_done && quick_done.duration_since(start) < Duration::from_millis(200),
        "the quick task finished {:?} after the start and the long one {:?}: the worker \
         thread waited for the GPU",
        quick_done.duration_since(start),
        long_done.duration_since(start)
    );
    ensure!(
        long_done.duration_since(start) > Duration::from_millis(100),
        "the one-second kernel's future resolved after {:?}: it did not wait for the GPU",
        long_done.duration_since(start)
    );
    Ok(())
}
