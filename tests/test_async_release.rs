//! Forgetting, dropping and panicking around the owned-buffer futures
//! (`stream_core::future`), on tokio's multi-threaded runtime and on the workspace's
//! `mini-executor`: futures dropped at random points, forgotten (also after ringing the
//! head-of-line doorbell), or whose `run_owned` closure panicked (on the calling thread
//! and in a spawned task) never release memory before the GPU is done, and everything
//! not forgotten is back in the pools afterwards (device and pinned statistics equal to
//! before).
//!
//! The tests of this file take one lock each, so that they run one at a time: the pool
//! statistics and the completion counters they compare are shared by the process.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

mod async_support;

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use async_support::workers::{self, Kind, Task, Workers};
use async_support::{
    new_streams, pinned_copy, quiet, request, serial, DropAfter, LONG_SPIN, SPIN, STREAMS,
};
use gpu_tests::{device, ensure, panic_message, spin, Failed, Rng, TestResult};
use mini_executor::block_on;
use stream_core::future::completion_stats;
use stream_core::{Device, Error, PinnedBuffer, Scope, Stream};

gpu_tests::test_main! {
    gpu: [
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
    ],
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
    let executor = workers::start(kind, 2)?;
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
                handles.push(spawn_dropped_after(&executor, future, polls));
            }
            1 => {
                let future = stream.upload_owned(input);
                handles.push(spawn_dropped_after(&executor, future, polls));
            }
            _ => {
                let vec = dev.upload_vec(&input)?;
                let future = stream.download_owned(vec, dev.alloc_pinned::<f32>(n)?);
                handles.push(spawn_dropped_after(&executor, future, polls));
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

/// Spawns on `executor` a task that polls `future` at most `polls` times and then drops
/// it ([`DropAfter`]); the task's output is `None` when it was dropped.
fn spawn_dropped_after<F, T>(
    executor: &Workers,
    future: F,
    polls: usize,
) -> Task<Option<Result<(), Error>>>
where
    F: Future<Output = Result<T, Error>> + Unpin + Send + 'static,
    T: Send + 'static,
{
    executor.spawn(async move {
        DropAfter {
            inner: Some(future),
            polls,
        }
        .await
        .map(|r| r.map(|_| ()))
    })
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
    let executor = workers::start(kind, 1)?;
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
        drop(stream.run_owned(buffer, download_behind_a_spin_then_panic));
    }));
    let right_after = AfterThePanic::now(&dev, &stream)?;
    let outcome = caught.map(|()| "run_owned returned".to_string());
    right_after.check("run_owned", outcome, with_buffer)?;
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
    let executor = workers::start(kind, 2)?;
    let task_stream = Arc::clone(&stream);
    let task = executor.spawn(async move {
        task_stream
            .run_owned(buffer, download_behind_a_spin_then_panic)
            .await
            .map(|_| ())
    });
    let joined = task.join();
    let right_after = AfterThePanic::now(&dev, &stream)?;
    let outcome = joined.map(|result| format!("the task returned {result:?}"));
    right_after.check(executor.name(), outcome, with_buffer)?;
    drop(executor);
    let after = quiet(&dev, &[&stream])?;
    ensure!(
        after == before,
        "after the work before the panic completed the pools hold {after:?}, before {before:?}"
    );
    Ok(())
}

/// The closure of the panic tests: a download into the owned buffer enqueued behind a
/// spinning kernel (so it is still running when the panic unwinds), then the panic.
fn download_behind_a_spin_then_panic<'s, 'env>(
    s: &'s Scope<'s, 'env>,
    buffer: &'env mut PinnedBuffer<u32>,
) -> Result<(), Error> {
    spin(s, SPIN)?;
    let x = s.alloc_zeroed::<u32>(buffer.len())?;
    let _download = s.copy_to_host(&x, &mut buffer[..])?;
    panic!("deliberate panic in a run_owned closure");
}

/// What the panic tests read right after the panic reached them: the pinned bytes in
/// use, and whether the stream still ran the work enqueued before the panic.
struct AfterThePanic {
    in_use: usize,
    busy: bool,
}

impl AfterThePanic {
    fn now(dev: &Device, stream: &Stream) -> TestResult<Self> {
        Ok(AfterThePanic {
            in_use: dev.pinned_memory_stats().in_use_bytes,
            busy: !stream.is_idle()?,
        })
    }

    /// `outcome` is the deliberate panic (`Ok` says what `who` returned instead), and
    /// while the stream was busy the buffer was still in use (`with_buffer` bytes).
    fn check(
        self,
        who: &str,
        outcome: std::thread::Result<String>,
        with_buffer: usize,
    ) -> TestResult {
        match outcome {
            Err(panic) => ensure!(
                panic_message(panic.as_ref()).contains("deliberate"),
                "{who}: the panic that came out is another one: {}",
                panic_message(panic.as_ref())
            ),
            Ok(returned) => {
                return Err(Failed::from(format!(
                    "{who}: {returned} although the run_owned closure panicked"
                )))
            }
        }
        ensure!(
            !self.busy || self.in_use == with_buffer,
            "{who}: the stream is still busy, yet the panicked closure's buffer is already \
             back in the pool ({} bytes in use, {with_buffer} with the buffer)",
            self.in_use
        );
        Ok(())
    }
}
