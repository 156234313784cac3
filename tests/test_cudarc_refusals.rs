//! Interop with cudarc, what cannot convert: contexts that are not primary, the
//! default and per-thread streams, and streams being captured into a graph are refused
//! with `Error::CudarcConversion` (or `StreamCapturing`) saying why, and a refused
//! slice is given back. (What converts: `test_cudarc`.)
//!
//! Each test makes its own cudarc context, as a cudarc program would. Without a CUDA
//! device the tests are reported as ignored (see `gpu_tests::run`).

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext};
use gpu_tests::cudarc_side::{converted, create_context, cudarc, cudarc_context, serial};
use gpu_tests::{check_eq, ensure, expect_err, poisoned, round_trip_in, Failed, Rng, TestResult};
use stream_core::{scope, Device, DeviceVec, Error, Stream};

gpu_tests::test_main! {
    gpu: [
        conversions_that_cannot_work_are_refused_and_give_the_slice_back,
        a_capturing_cudarc_stream_is_refused_by_conversions_and_scopes,
    ],
}

/// `Ok` when `error` is a `CudarcConversion` about `what` whose reason mentions `says`.
fn check_refusal(context: &str, error: &Error, what: &str, says: &str) -> TestResult {
    match error {
        Error::CudarcConversion(refusal) if refusal.what == what && refusal.reason.contains(says) => {
            let message = error.to_string();
            ensure!(
                message.contains(says),
                "{context}: the message {message:?} does not say {says:?}"
            );
            Ok(())
        }
        other => Err(Failed::from(format!(
            "{context}: expected CudarcConversion {{ what: {what:?}, reason mentioning {says:?} }}, \
             got {other:?}"
        ))),
    }
}

fn conversions_that_cannot_work_are_refused_and_give_the_slice_back() -> TestResult {
    let _serial = serial();
    let (ctx, _) = cudarc_context(1)?;
    let dev = Device::from_cudarc(Arc::clone(&ctx))?;
    let per_thread = ctx.per_thread_stream();

    // A slice of the per-thread stream: refused, given back unchanged.
    let slice = cudarc("alloc_zeros", per_thread.alloc_zeros::<u32>(16))?;
    let refused = match DeviceVec::from_cudarc(slice) {
        Ok(_) => return Err("a slice of the per-thread stream was converted".into()),
        Err(refused) => refused,
    };
    check_refusal(
        "from_cudarc of a per-thread slice",
        refused.error(),
        "CudaSlice",
        "per-thread",
    )?;
    let slice = refused
        .into_slice()
        .ok_or("a refused per-thread slice was not given back")?;
    check_eq(
        "a refused slice given back",
        &[0u32; 16],
        &cudarc("clone_dtoh", per_thread.clone_dtoh(&slice))?,
    )?;

    // cudarc's default and per-thread streams are not streams of their own.
    let err = expect_err(
        "Stream::from_cudarc(default_stream)",
        Stream::from_cudarc(&ctx.default_stream()),
    )?;
    check_refusal(
        "Stream::from_cudarc(default_stream)",
        &err,
        "CudaStream",
        "default stream",
    )?;
    let err = expect_err(
        "Stream::from_cudarc(per_thread_stream)",
        Stream::from_cudarc(&per_thread),
    )?;
    check_refusal(
        "Stream::from_cudarc(per_thread_stream)",
        &err,
        "CudaStream",
        "per-thread",
    )?;

    // A slice of the default stream converts (the device's context is bound around it).
    let data: Vec<u32> = Rng::new().vec(4096);
    let slice = cudarc("clone_htod", ctx.default_stream().clone_htod(&data))?;
    let vec = converted(
        "a slice of the default stream",
        DeviceVec::from_cudarc(slice),
    )?;
    check_eq(
        "to_host_vec of a default-stream slice",
        &data,
        &vec.to_host_vec()?,
    )?;
    let err = expect_err(
        "into_cudarc(per_thread_stream)",
        vec.into_cudarc(&per_thread),
    )?;
    check_refusal(
        "into_cudarc(per_thread_stream)",
        &err,
        "DeviceVec",
        "per-thread",
    )?;

    // A non-primary context, its streams and slices.
    let (raw_other, cu_device) = create_context(0)?;
    let other = cudarc(
        "CudaContext::from_raw_context",
        // SAFETY: `raw_other` is a context just made for `cu_device` (device 0), whose
        // ownership passes to cudarc here: nothing else destroys it.
        unsafe { CudaContext::from_raw_context(0, cu_device, raw_other) },
    )?;
    let err = expect_err(
        "Device::from_cudarc(non-primary)",
        Device::from_cudarc(Arc::clone(&other)),
    )?;
    check_refusal(
        "Device::from_cudarc(non-primary)",
        &err,
        "CudaContext",
        "primary context",
    )?;
    let other_stream = cudarc("new_stream (non-primary)", other.new_stream())?;
    let err = expect_err(
        "Stream::from_cudarc(non-primary)",
        Stream::from_cudarc(&other_stream),
    )?;
    check_refusal(
        "Stream::from_cudarc(non-primary)",
        &err,
        "CudaContext",
        "primary context",
    )?;
    let other_slice = cudarc(
        "alloc_zeros (non-primary)",
        other_stream.alloc_zeros::<u32>(8),
    )?;
    let refused = match DeviceVec::from_cudarc(other_slice) {
        Ok(_) => return Err("a slice of a non-primary context was converted".into()),
        Err(refused) => refused,
    };
    check_refusal(
        "from_cudarc(non-primary slice)",
        refused.error(),
        "CudaContext",
        "primary context",
    )?;
    ensure!(
        refused.into_slice().is_some(),
        "a refused slice of a non-primary context was not given back"
    );
    let vec = dev.upload_vec(&[1u32, 2, 3, 4])?;
    let err = expect_err(
        "into_cudarc(non-primary stream)",
        vec.into_cudarc(&other_stream),
    )?;
    check_refusal(
        "into_cudarc(non-primary stream)",
        &err,
        "DeviceVec",
        "primary context",
    )?;

    // The device still works.
    let stream = dev.new_stream()?;
    let input: Vec<u32> = Rng::new().vec(1024);
    let mut out = poisoned::<u32>(input.len());
    scope(&stream, |s| {
        round_trip_in(s, &input, &mut out, "after the refusals")
    })
}

fn a_capturing_cudarc_stream_is_refused_by_conversions_and_scopes() -> TestResult {
    let _serial = serial();
    let (ctx, streams) = cudarc_context(1)?;
    let a = &streams[0];
    let _dev = Device::from_cudarc(Arc::clone(&ctx))?; // kept: later conversions find it
    let data: Vec<u32> = Rng::new().vec(64);
    let slice = cudarc("clone_htod", a.clone_htod(&data))?;
    let stream = Stream::from_cudarc(a)?;
    cudarc("synchronize", a.synchronize())?;
    // Relaxed mode: other threads' tests may keep calling the driver meanwhile.
    cudarc(
        "begin_capture",
        a.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED),
    )?;
    let while_capturing = DeviceVec::from_cudarc(slice);
    let scoped = scope(&stream, |_| Ok::<_, Error>(()));
    // Ended with the driver's own call: the (empty) graph is destroyed, never
    // instantiated.
    // SAFETY: `a` is a live stream whose capture began above; ending it returns the
    // captured graph, which nothing else holds.
    let graph = cudarc("cuStreamEndCapture", unsafe {
        result::stream::end_capture(a.cu_stream())
    })?;
    if !graph.is_null() {
        // SAFETY: the graph just returned, destroyed once.
        cudarc("cuGraphDestroy", unsafe { result::graph::destroy(graph) })?;
    }
    let refused = match while_capturing {
        Ok(_) => return Err("a slice of a capturing stream was converted".into()),
        Err(refused) => refused,
    };
    ensure!(
        *refused.error() == Error::StreamCapturing,
        "from_cudarc of a slice whose stream is capturing: expected StreamCapturing, got {:?}",
        refused.error()
    );
    ensure!(
        scoped == Err(Error::StreamCapturing),
        "a scope on a converted stream that cudarc is capturing: expected StreamCapturing, got \
         {scoped:?}"
    );
    // After the capture both work.
    let slice = refused
        .into_slice()
        .ok_or("the slice refused while capturing was not given back")?;
    let vec = converted("the slice after the capture", DeviceVec::from_cudarc(slice))?;
    check_eq("the slice after the capture", &data, &vec.to_host_vec()?)?;
    let mut out = poisoned::<u32>(data.len());
    scope(&stream, |s| {
        round_trip_in(s, &data, &mut out, "a scope after the capture ended")
    })
}
