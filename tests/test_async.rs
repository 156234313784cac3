//! The owned-buffer futures (`stream_core::future`): `run_owned`, `upload_owned`,
//! `download_owned` on tokio's multi-threaded runtime and on the workspace's minimal
//! hand-written executor (`mini-executor`: worker threads, and `block_on`). The futures
//! need nothing from either but a `Waker`.
//!
//! What is proven, on both executors: results equal the CPU's for 10,000 concurrent
//! requests over four streams; futures dropped at random points, forgotten, or whose
//! closure panicked never release memory before the GPU is done, and everything not
//! forgotten is back in the pools afterwards (device and pinned statistics equal to
//! before); no executor thread waits while a long kernel runs.
//!
//! The tests of this file take one lock each, so that they run one at a time: the pool
//! statistics and the completion counters they compare are shared by the process.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

mod async_support;

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use async_support::workers::{Kind, Workers};
use async_support::{doubled, new_streams, pinned_copy, quiet, request, serial, DropAfter};
use gpu_tests::{check_eq, device, ensure, panic_message, poisoned, spin, Failed, Rng, TestResult};
use mini_executor::block_on;
use stream_core::future::completion_stats;
use stream_core::{Device, Error, Stream};

gpu_tests::test_main! {
    gpu: [
        upload_owned_and_download_owned_round_trip_every_owned_buffer_type,
        run_owned_computes_a_kernel_over_owned_pinned_buffers,
        staged_download_into_an_owned_vec_has_landed_when_the_future_resolves,
        empty_copies_resolve_at_once_with_their_buffers,
        download_owned_of_mismatched_lengths_is_length_mismatch,
        ten_thousand_concurrent_requests_over_four_streams_on_tokio_four_workers =
            || concurrent_requests(Kind::Tokio, 4, false),
        ten_thousand_concurrent_requests_over_four_streams_on_tokio_one_worker =
            || concurrent_requests(Kind::Tokio, 1, false),
        ten_thousand_concurrent_requests_over_four_streams_on_mini_executor_four_workers =
            || concurrent_requests(Kind::Mini, 4, false),
        ten_thousand_concurrent_requests_over_four_streams_on_mini_executor_one_worker =
            || concurrent_requests(Kind::Mini, 1, false),
        ten_thousand_concurrent_requests_over_four_streams_two_with_the_head_of_line_bypass =
            || concurrent_requests(Kind::Tokio, 4, true),
        requests_on_block_on_are_correct,
        futures_dropped_at_random_points_on_tokio_release_their_memory_only_after_the_gpu =
            || futures_dropped_at_random_points(Kind::Tokio, false),
        futures_dropped_at_random_points_on_mini_executor_release_their_memory_only_after_the_gpu =
            || futures_dropped_at_random_points(Kind::Mini, false),
        futures_dropped_at_random_points_on_head_of_line_bypass_streams_release_their_memory_only_after_the_gpu =
            || futures_dropped_at_random_points(Kind::Tokio, true),
        forgotten_future_on_tokio_leaks_its_buffer_and_the_stream_keeps_working =
            || forgotten_future(Kind::Tokio, false),
        forgotten_future_on_mini_executor_leaks_its_buffer_and_the_stream_keeps_working =
            || forgotten_future(Kind::Mini, false),
        forgotten_future_that_rang_the_doorbell_leaks_its_buffer_and_the_stream_keeps_working =
            || forgotten_future(Kind::Tokio, true),
        panic_in_the_run_owned_closure_propagates_and_releases_after_the_gpu,
        panic_in_a_run_owned_closure_of_a_tokio_task_releases_after_the_gpu =
            || panic_in_a_spawned_task(Kind::Tokio),
        panic_in_a_run_owned_closure_of_a_mini_executor_task_releases_after_the_gpu =
            || panic_in_a_spawned_task(Kind::Mini),
        no_tokio_worker_waits_while_a_long_kernel_runs =
            || no_worker_waits_while_a_long_kernel_runs(Kind::Tokio),
        no_mini_executor_worker_waits_while_a_long_kernel_runs =
            || no_worker_waits_while_a_long_kernel_runs(Kind::Mini),
        head_of_line_bypass_on_tokio_resolves_a_short_operation_before_a_long_one_of_another_stream =
            || short_operation_is_not_held_behind_a_long_one(Kind::Tokio),
        head_of_line_bypass_on_mini_executor_resolves_a_short_operation_before_a_long_one_of_another_stream =
            || short_operation_is_not_held_behind_a_long_one(Kind::Mini),
        bypass_stream_dropped_while_its_operation_is_pending_still_resolves_it,
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

/// `threads` workers of `kind`, or the reason there are none.
fn workers(kind: Kind, threads: usize) -> TestResult<Workers> {
    Workers::new(kind, threads)
        .map_err(|e| Failed::from(format!("cannot start {kind:?} with {threads} workers: {e}")))
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
/// held before. With `bypass`, every other stream has the head-of-line bypass on, so
/// that their requests ring the doorbell while the other streams have work.
fn concurrent_requests(kind: Kind, threads: usize, bypass: bool) -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let streams = new_streams(&dev, STREAMS)?;
    for stream in streams.iter().skip(1).step_by(2) {
        stream.set_head_of_line_bypass(bypass);
    }
    let before = quiet(&dev, &streams.iter().collect::<Vec<_>>())?;
    let executor = workers(kind, threads)?;
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
                    "{}: request {i} (kind {}): {}",
                    executor.name(),
                    i % 3,
                    e.message().map_or("", |m| m)
                ))
            })?,
            Err(panic) => {
                return Err(Failed::from(format!(
                    "{}: request {i} panicked: {}",
                    executor.name(),
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

/// Behind a spinning kernel on each stream, 2,000 futures of every kind, spawned on
/// `kind`'s two workers, are dropped before their first poll or after one to three
/// polls. Right after the drops, the
/// pinned memory they own is still in use (the GPU has not finished); once the
/// completion thread is done, everything is back in the pools, and the completion thread
/// released at least the futures dropped while their stream was busy. With `bypass`,
/// every other stream has the head-of-line bypass on, so that the futures dropped on
/// those are released by the doorbell thread as often as by the completion thread.
fn futures_dropped_at_random_points(kind: Kind, bypass: bool) -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let streams = new_streams(&dev, STREAMS)?;
    for stream in streams.iter().skip(1).step_by(2) {
        stream.set_head_of_line_bypass(bypass);
    }
    let all: Vec<&Stream> = streams.iter().collect();
    let before = quiet(&dev, &all)?;
    let released_before = completion_stats().released_after_drop;
    // Keep every stream busy for about a second, so the drops below come before
    // completion.
    for stream in streams.iter() {
        drop(stream.run_owned((), |s, ()| spin(s, LONG_SPIN)));
    }
    let executor = workers(kind, 2)?;
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
/// stream runs on. The future is polled once by a task of `kind` (so the completion
/// thread holds that task's waker) and forgotten there. It is made on a device handle
/// of its own, which the leak keeps open, so that the shared handle's pools stay clean.
/// With `ring`, the stream has the head-of-line bypass on and another stream runs a long
/// kernel meanwhile, so the forgotten operation also rings the doorbell, whose thread
/// finishes it: the buffer must stay leaked all the same.
fn forgotten_future(kind: Kind, ring: bool) -> TestResult {
    let _serial = serial();
    let dev = Device::new(0)?;
    let stream = Arc::new(dev.new_stream()?);
    let other = dev.new_stream()?;
    let before = quiet(&dev, &[&stream, &other])?;
    stream.set_head_of_line_bypass(ring);
    let busy_other = match ring {
        true => Some(other.run_owned((), |s, ()| spin(s, 4 * SPIN))),
        false => None,
    };
    let buffer = dev.alloc_pinned::<u32>(1024)?; // one 4 KiB block
    let block = dev.pinned_memory_stats().in_use_bytes - before.pinned;
    let executor = workers(kind, 1)?;
    let task_stream = Arc::clone(&stream);
    let pending_at_first_poll = executor.spawn(async move {
        let mut future = Box::pin(task_stream.run_owned(buffer, |s, buffer| {
            spin(s, SPIN)?;
            let x = s.alloc_zeroed::<u32>(buffer.len())?;
            let _download = s.copy_to_host(&x, &mut buffer[..])?;
            Ok::<_, Error>(())
        }));
        let pending =
            std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx).is_pending())).await;
        std::mem::forget(future);
        pending
    });
    let pending = pending_at_first_poll
        .join()
        .map_err(|p| Failed::from(panic_message(p.as_ref())))?;
    ensure!(
        pending,
        "the future behind a 50 ms kernel was ready at its first poll"
    );
    drop(executor);
    if let Some(busy) = busy_other {
        block_on(busy)?;
    }
    let after = quiet(&dev, &[&stream, &other])?;
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

/// A panic in the closure of a `run_owned` called by a task of `kind` ends that task
/// with the panic (the executor reports it), and the owned buffer stays in use until
/// the work enqueued before the panic has completed.
fn panic_in_a_spawned_task(kind: Kind) -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = Arc::new(dev.new_stream()?);
    let before = quiet(&dev, &[&stream])?;
    let buffer = dev.alloc_pinned::<u32>(1024)?;
    let with_buffer = dev.pinned_memory_stats().in_use_bytes;
    let executor = workers(kind, 2)?;
    let task_stream = Arc::clone(&stream);
    let task = executor.spawn(async move {
        task_stream
            .run_owned(buffer, |s, buffer| {
                spin(s, SPIN)?;
                let x = s.alloc_zeroed::<u32>(buffer.len())?;
                let len = buffer.len();
                let _download = s.copy_to_host(&x, &mut buffer[..])?;
                if len == 1024 {
                    panic!("deliberate panic in a spawned run_owned closure");
                }
                Ok::<_, Error>(())
            })
            .await
            .map(|_| ())
    });
    let joined = task.join();
    let in_use_right_after = dev.pinned_memory_stats().in_use_bytes;
    let busy = !stream.is_idle()?;
    match joined {
        Err(panic) => ensure!(
            panic_message(panic.as_ref()).contains("deliberate"),
            "{}: the task ended with another panic: {}",
            executor.name(),
            panic_message(panic.as_ref())
        ),
        Ok(result) => {
            return Err(Failed::from(format!(
                "{}: the task returned {result:?} although its run_owned closure panicked",
                executor.name()
            )))
        }
    }
    ensure!(
        !busy || in_use_right_after == with_buffer,
        "the stream is still busy, yet the panicked closure's buffer is already back in the \
         pool ({in_use_right_after} bytes in use, {with_buffer} with the buffer)"
    );
    drop(executor);
    let after = quiet(&dev, &[&stream])?;
    ensure!(
        after == before,
        "after the work before the panic completed the pools hold {after:?}, before {before:?}"
    );
    Ok(())
}

/// While a one-second kernel runs behind a `run_owned` future, the one worker thread of
/// a `kind` executor runs other tasks: nothing waits on the GPU.
fn no_worker_waits_while_a_long_kernel_runs(kind: Kind) -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let stream = Arc::new(dev.new_stream()?);
    // Warm up: the spin kernel's module and the completion thread, so that neither is
    // made while the clock runs.
    block_on(stream.run_owned((), |s, ()| spin(s, 1)))?;
    let executor = workers(kind, 1)?;
    let start = Instant::now();
    let long = spawn_spin(&executor, Arc::clone(&stream), LONG_SPIN);
    let quick = executor.spawn(async { Ok(Instant::now()) });
    let quick_done = joined(quick)?;
    let long_done = joined(long)?;
    ensure!(
        quick_done < long_done && quick_done.duration_since(start) < Duration::from_millis(200),
        "{}: the quick task finished {:?} after the start and the long one {:?}: the \
         worker thread waited for the GPU",
        executor.name(),
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

/// A short operation on a stream with the head-of-line bypass on, made while the
/// completion thread sleeps on a one-second kernel's operation of another stream,
/// resolves long before that kernel ends: it rang the doorbell, so it is not held
/// behind the long one.
fn short_operation_is_not_held_behind_a_long_one(kind: Kind) -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let long_stream = Arc::new(dev.new_stream()?);
    let short_stream = Arc::new(dev.new_stream()?);
    short_stream.set_head_of_line_bypass(true);
    // Warm up: the spin kernel's module, the completion thread, and the doorbell thread
    // (started by the first operation handed over while another stream has work).
    let warm = long_stream.run_owned((), |s, ()| spin(s, SPIN));
    block_on(short_stream.run_owned((), |s, ()| spin(s, 1)))?;
    block_on(warm)?;
    let executor = workers(kind, 1)?;
    let start = Instant::now();
    let long = spawn_spin(&executor, long_stream, LONG_SPIN);
    // By now the completion thread sleeps on the long kernel's event.
    std::thread::sleep(Duration::from_millis(50));
    let short = spawn_spin(&executor, short_stream, 1);
    let short_done = joined(short)?;
    let long_done = joined(long)?;
    let (short_after, long_after) = (
        short_done.duration_since(start),
        long_done.duration_since(start),
    );
    ensure!(
        long_after > Duration::from_millis(300),
        "the one-second kernel's future resolved after {long_after:?}: it did not wait for \
         the GPU, so the test proves nothing"
    );
    ensure!(
        short_done < long_done && short_after < Duration::from_millis(250),
        "{}: the short operation resolved {short_after:?} after the start and the long one \
         {long_after:?}: the short one was held behind the long one",
        executor.name()
    );
    Ok(())
}

/// A stream with the head-of-line bypass on is dropped (its companion stream, where the
/// ring waits, with it) right after an upload was made on it, while a long kernel runs
/// on another stream: the future still resolves, with its data on the device and its
/// buffer back, and nothing stays in flight.
fn bypass_stream_dropped_while_its_operation_is_pending_still_resolves_it() -> TestResult {
    let _serial = serial();
    let dev = device()?;
    let long_stream = dev.new_stream()?;
    let short_stream = dev.new_stream()?;
    short_stream.set_head_of_line_bypass(true);
    let in_flight_before = completion_stats().in_flight;
    let long = long_stream.run_owned((), |s, ()| spin(s, SPIN));
    let input = Rng::new().vec::<f32>(1 << 16);
    let upload = short_stream.upload_owned(input.clone());
    drop(short_stream);
    let (on_gpu, back) = block_on(upload)?;
    check_eq("the upload's host buffer, handed back", &back, &input)?;
    check_eq("the uploaded data", &on_gpu.to_host_vec()?, &input)?;
    block_on(long)?;
    let start = Instant::now();
    while completion_stats().in_flight > in_flight_before
        && start.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    ensure!(
        completion_stats().in_flight == in_flight_before,
        "operations still in flight 10 s after both futures resolved: {} (before: {in_flight_before})",
        completion_stats().in_flight
    );
    Ok(())
}

/// Spawns on `executor` a `run_owned` of a kernel spinning `cycles` on `stream`; the task
/// resolves to the instant the future resolved.
fn spawn_spin(
    executor: &Workers,
    stream: Arc<Stream>,
    cycles: u64,
) -> async_support::workers::Task<Result<Instant, Error>> {
    executor.spawn(async move {
        stream
            .run_owned((), |s, ()| spin(s, cycles))
            .await
            .map(|_| Instant::now())
    })
}

/// The value of a task, its panic or its error as the test's failure.
fn joined<T>(task: async_support::workers::Task<Result<T, Error>>) -> TestResult<T> {
    Ok(task
        .join()
        .map_err(|p| Failed::from(panic_message(p.as_ref())))??)
}
