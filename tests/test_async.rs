//! The owned-buffer futures (`stream_core::future`): `run_owned`, `upload_owned`,
//! `download_owned` on tokio's multi-threaded runtime and on the workspace's minimal
//! hand-written executor (`mini-executor`: worker threads, and `block_on`). The futures
//! need nothing from either but a `Waker`.
//!
//! What is proven here: every owned buffer type makes the round trip and comes back;
//! results equal the CPU's, one request at a time and for 10,000 concurrent requests
//! over four streams on both executors; empty and mismatched copies; and the pools hold
//! afterwards what they held before. Drops, `forget` and panics are in
//! `test_async_release`; that no executor thread waits on the GPU, and the head-of-line
//! bypass, in `test_async_waiting`.
//!
//! The tests of this file take one lock each, so that they run one at a time: the pool
//! statistics and the completion counters they compare are shared by the process.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

mod async_support;

use std::sync::Arc;

use async_support::workers::{self, Kind};
use async_support::{doubled, new_streams, pinned_copy, quiet, request, serial, SPIN, STREAMS};
use gpu_tests::{check_eq, device, ensure, panic_message, poisoned, spin, Failed, Rng, TestResult};
use mini_executor::block_on;
use stream_core::future::completion_stats;
use stream_core::Error;

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
    ],
}

/// Concurrent requests of the load tests: 10,000, or 300 under a sanitizer (which runs
/// every kernel and copy serially: the full load did not finish in 200 s under
/// memcheck), every result still checked.
fn requests() -> usize {
    gpu_tests::load(10_000, 300)
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
        Err(Error::LengthMismatch(m)) if (m.source_len, m.destination_len) == (4, 5) => Ok(()),
        other => Err(Failed::from(format!(
            "download of 4 elements into 5: expected LengthMismatch 4 != 5, got {:?}",
            other.map(|_| ())
        ))),
    }
}

/// [`requests`] requests of random small sizes, all spawned at once on `workers` worker
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
    let executor = workers::start(kind, threads)?;
    let mut rng = Rng::new();
    let total = requests();
    let handles: Vec<_> = (0..total)
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
        "after {total} requests the pools hold {after:?}, before they held {before:?}: \
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
