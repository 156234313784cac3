//! Interop with cudarc: its context, streams and slices convert to a `Device`, a
//! `Stream` and a `DeviceVec` and back without copies; scopes on a converted stream are
//! ordered with cudarc's work on the same `CUstream`; a converted slice whose last use
//! was a long kernel on *another* cudarc stream (tracked by cudarc's events) is read
//! after that kernel, without the host waiting for it; what cannot convert is refused
//! with `Error::CudarcConversion` (or `StreamCapturing`), and a refused slice is given
//! back.
//!
//! Each test makes its own cudarc context (`CudaContext::new(0)`, the primary context,
//! as a cudarc program would) and its own streams, so cudarc's multi-stream event
//! tracking is on. Without a CUDA device the tests are reported as ignored (see
//! `gpu_tests::run`).
//!
//! The tests take one lock each and run one at a time. Several check that a call did
//! not wait for a ~100 ms kernel by finding the kernel still running right after it;
//! another test's driver calls in the same primary context (a module load, a free) may
//! wait for the device and hold this thread up meanwhile, which once made such a check
//! fail on an H100 although nothing of ours had waited.

use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig as CudarcLaunch,
    PushKernelArg,
};
use gpu_tests::cudarc_side::{converted, cudarc, cudarc_context, serial};
use gpu_tests::{
    check_eq, device, ensure, poisoned, round_trip_in, spin_then_write, Failed, Rng, TestResult,
};
use stream_core::{interop, scope, Device, DeviceVec, Error, Stream};

gpu_tests::test_main! {
    gpu: [
        a_device_from_a_cudarc_context_shares_it_and_hands_the_same_context_back,
        slices_round_trip_through_device_vec_and_back_at_the_same_address,
        a_scope_on_a_converted_cudarc_stream_is_ordered_with_cudarc_work_on_that_stream,
        a_slice_last_written_on_another_cudarc_stream_is_read_after_that_kernel,
        into_cudarc_right_behind_a_long_kernel_hands_cudarc_the_kernels_result,
        a_graph_and_download_owned_read_a_converted_slice_after_its_last_kernel,
        empty_slices_and_vecs_convert_both_ways,
    ],
}

/// Cycles of the kernels that keep a stream busy: about 100 ms on an H100 or H200,
/// long enough that a conversion that skipped a wait would read stale data, and that a
/// conversion that waited on the host would find the kernel finished.
const DELAY: u64 = 200_000_000;

/// Elements of the slices (4 MiB of `u32`).
const N: usize = 1 << 20;

/// A kernel for cudarc's own launch API: one block spins for about `cycles` clock cycles,
/// then fills `y` with `value`.
const SPIN_FILL_SRC: &str = r#"
extern "C" __global__ void spin_then_fill_u32(unsigned long long cycles, unsigned value,
                                              unsigned* y, size_t n) {
    long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) { }
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) y[i] = value;
}
"#;

/// [`SPIN_FILL_SRC`] compiled and loaded in `ctx` with cudarc's API.
fn spin_fill_kernel(ctx: &Arc<CudaContext>) -> TestResult<CudaFunction> {
    let ptx = cudarc("compile_ptx", cudarc::nvrtc::compile_ptx(SPIN_FILL_SRC))?;
    let module = cudarc("CudaContext::load_module", ctx.load_module(ptx))?;
    cudarc(
        "CudaModule::load_function",
        module.load_function("spin_then_fill_u32"),
    )
}

/// Launches the spin-then-fill kernel on `stream` with cudarc's launch API, which makes
/// `stream` wait for `y`'s earlier uses and records `y`'s write event on `stream`.
fn launch_spin_fill(
    stream: &Arc<CudaStream>,
    kernel: &CudaFunction,
    y: &mut CudaSlice<u32>,
    value: u32,
) -> TestResult {
    let n = y.len();
    let config = CudarcLaunch {
        grid_dim: (1, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut launch = stream.launch_builder(kernel);
    launch.arg(&DELAY).arg(&value).arg(y).arg(&n);
    // SAFETY: `spin_then_fill_u32` takes (unsigned long long, unsigned, unsigned*,
    // size_t): `DELAY` is a `u64`, `value` a `u32`, `y` a `CudaSlice<u32>` (its device
    // address) and `n` its length as a `usize`; the kernel writes `y[0..n)` only.
    cudarc("cuLaunchKernel (spin_then_fill_u32)", unsafe {
        launch.launch(config)
    })?;
    Ok(())
}

/// A random `u32` that is neither zero nor the poison pattern.
fn fill_value(rng: &mut Rng) -> u32 {
    loop {
        let value = rng.next_u32();
        if value != 0 && value != <u32 as gpu_tests::Element>::POISON {
            return value;
        }
    }
}

fn a_device_from_a_cudarc_context_shares_it_and_hands_the_same_context_back() -> TestResult {
    let _serial = serial();
    let (ctx, _) = cudarc_context(0)?;
    let dev = Device::from_cudarc(Arc::clone(&ctx))?;
    let again = Device::from_cudarc(Arc::clone(&ctx))?;
    dev.ensure_same_device(&again)?;
    ensure!(
        Arc::ptr_eq(&dev.cudarc_context()?, &ctx),
        "Device::cudarc_context of a device made from a cudarc context must return that very \
         context (cudarc keeps its event tracking per CudaContext)"
    );
    ensure!(
        Arc::ptr_eq(&again.cudarc_context()?, &ctx),
        "converting the same cudarc context twice must give handles of one device"
    );
    // A device of this crate hands out one cudarc context, the same primary context.
    let ours = device()?;
    let handed = ours.cudarc_context()?;
    ensure!(
        Arc::ptr_eq(&handed, &ours.cudarc_context()?),
        "Device::cudarc_context must return the same Arc on every call"
    );
    ensure!(
        handed.cu_ctx() == ctx.cu_ctx(),
        "the context a Device hands out ({:?}) is not the primary context cudarc made ({:?})",
        handed.cu_ctx(),
        ctx.cu_ctx()
    );
    ensure!(
        Arc::ptr_eq(
            &Device::from_cudarc(Arc::clone(&handed))?.cudarc_context()?,
            &handed
        ),
        "converting the context a Device handed out must find that device again"
    );
    // Work runs in it.
    let stream = dev.new_stream()?;
    let input: Vec<u32> = Rng::new().vec(4096);
    let mut out = poisoned::<u32>(input.len());
    scope(&stream, |s| {
        round_trip_in(
            s,
            &input,
            &mut out,
            "a scope on a device made from a cudarc context",
        )
    })
}

fn slices_round_trip_through_device_vec_and_back_at_the_same_address() -> TestResult {
    let _serial = serial();
    let (ctx, streams) = cudarc_context(2)?;
    let (a, b) = (&streams[0], &streams[1]);
    let data: Vec<f32> = Rng::new().vec(N);
    let slice = cudarc("clone_htod", a.clone_htod(&data))?;
    let address = slice.device_ptr(a).0;
    let mut vec = converted(
        "a slice just uploaded by cudarc",
        DeviceVec::from_cudarc(slice),
    )?;
    check_eq(
        "to_host_vec of a converted slice (ordered after cudarc's upload on its stream)",
        &data,
        &vec.to_host_vec()?,
    )?;
    let stream = Device::from_cudarc(Arc::clone(&ctx))?.new_stream()?;
    scope(&stream, |s| {
        let mut x = s.attach(&mut vec)?;
        let at = interop::device_ptr_mut(&mut x);
        ensure!(
            at == address,
            "the attached vec is at {at:#x}, the cudarc slice was at {address:#x}: the memory was \
             copied instead of changing owner"
        );
        let mut doubled = s.alloc::<f32>(N)?;
        kernels::scale(s, 2.0f32, &x, &mut doubled)?;
        s.copy_device(&doubled, &mut x)?;
        Ok::<_, Failed>(())
    })?;
    let expected: Vec<f32> = data.iter().map(|x| 2.0 * x).collect();
    let slice = vec.into_cudarc(b)?;
    let back = slice.device_ptr(b).0;
    ensure!(
        back == address,
        "into_cudarc gave a slice at {back:#x}, the memory was at {address:#x}: it was copied"
    );
    check_eq(
        "the scope's result read by cudarc on another stream after into_cudarc",
        &expected,
        &cudarc("clone_dtoh", b.clone_dtoh(&slice))?,
    )?;
    let again = converted(
        "a slice handed to cudarc and back",
        DeviceVec::from_cudarc(slice),
    )?;
    check_eq(
        "to_host_vec after a second conversion",
        &expected,
        &again.to_host_vec()?,
    )
}

/// Empty memory changes owner both ways: cudarc's empty slice (`CudaStream::null`,
/// whatever address its zero-byte allocation has) becomes an empty `DeviceVec`, which
/// goes back to cudarc as an empty slice, and so does a `DeviceVec` of no elements made
/// here (which owns no allocation); each is then used (a copy of nothing) and dropped on
/// both sides without a failed or double free.
fn empty_slices_and_vecs_convert_both_ways() -> TestResult {
    let _serial = serial();
    let (ctx, streams) = cudarc_context(1)?;
    let a = &streams[0];
    let device = Device::from_cudarc(Arc::clone(&ctx))?;
    for round in 0..2 {
        let vec = match round {
            0 => converted(
                "cudarc's empty slice",
                DeviceVec::from_cudarc(cudarc("null", a.null::<f32>())?),
            )?,
            _ => device.alloc_vec::<f32>(0)?,
        };
        ensure!(vec.is_empty(), "round {round}: {} elements", vec.len());
        ensure!(vec.to_host_vec()?.is_empty(), "round {round}: to_host_vec");
        let slice: CudaSlice<f32> = vec.into_cudarc(a)?;
        ensure!(
            slice.is_empty(),
            "round {round}: a slice of {}",
            slice.len()
        );
        ensure!(
            cudarc("clone_dtoh", a.clone_dtoh(&slice))?.is_empty(),
            "round {round}: cudarc read something"
        );
        let again = converted("an empty slice handed back", DeviceVec::from_cudarc(slice))?;
        ensure!(again.is_empty(), "round {round}: back with {}", again.len());
        drop(again);
    }
    cudarc("synchronize", a.synchronize())?;
    cudarc("context errors", ctx.check_err())
}

fn a_scope_on_a_converted_cudarc_stream_is_ordered_with_cudarc_work_on_that_stream() -> TestResult {
    let _serial = serial();
    let (_ctx, streams) = cudarc_context(1)?;
    let a = &streams[0];
    let stream = Stream::from_cudarc(a)?;
    let fill = fill_value(&mut Rng::new());
    let marker = fill ^ 1; // what this crate's kernel writes into element 0 after spinning
    let mut out = poisoned::<u32>(N);
    scope(&stream, |s| {
        ensure!(
            interop::raw_stream(s) == a.cu_stream(),
            "the scope runs on {:?}, not on cudarc's stream {:?}",
            interop::raw_stream(s),
            a.cu_stream()
        );
        let mut buf = s.alloc::<u32>(N)?;
        // This crate's work: spin, then write `marker` to element 0.
        spin_then_write(s, DELAY, marker, &mut buf)?;
        // cudarc's work, on cudarc's stream handle: fill everything with `fill`. On the
        // same stream it runs after the kernel; on another stream it would run at once,
        // and the kernel's late write would survive in element 0.
        let at = interop::device_ptr_mut(&mut buf);
        // SAFETY: `at` is `buf`'s device memory of `N` 4-byte words (aligned: a pool
        // allocation), alive until the closure ends; `buf` is freed stream-ordered on the
        // scope's stream after everything enqueued here; the scope bound its context.
        cudarc("cuMemsetD32Async on cudarc's stream", unsafe {
            sys::cuMemsetD32Async(at, fill, N, a.cu_stream()).result()
        })?;
        // This crate's work again: the download runs after cudarc's memset.
        s.copy_to_host(&buf, &mut out)?.wait()?;
        Ok::<_, Failed>(())
    })?;
    check_eq(
        "scope kernel, then cudarc memset, then scope download, all on one stream",
        &vec![fill; N],
        &out,
    )?;
    // The stream is still cudarc's: dropping the Stream did not destroy it.
    drop(stream);
    let probe = cudarc(
        "clone_htod after the Stream was dropped",
        a.clone_htod(&[1u32, 2, 3]),
    )?;
    check_eq(
        "cudarc's stream after its Stream was dropped",
        &[1u32, 2, 3],
        &cudarc("clone_dtoh", a.clone_dtoh(&probe))?,
    )?;
    cudarc("synchronize", a.synchronize())
}

fn a_slice_last_written_on_another_cudarc_stream_is_read_after_that_kernel() -> TestResult {
    let _serial = serial();
    let (ctx, streams) = cudarc_context(2)?;
    let (a, b) = (&streams[0], &streams[1]);
    // Made before the kernel starts, so that the conversion does no first-time work.
    let dev = Device::from_cudarc(Arc::clone(&ctx))?;
    let ours = dev.new_stream()?;
    let b_here = Stream::from_cudarc(b)?;
    let kernel = spin_fill_kernel(&ctx)?;
    let value = fill_value(&mut Rng::new());
    // Allocated (and zeroed) on `a`, last written by a long kernel on `b`.
    let mut x = cudarc("alloc_zeros", a.alloc_zeros::<u32>(N))?;
    launch_spin_fill(b, &kernel, &mut x, value)?;
    let vec = converted(
        "a slice last written by a long kernel on another stream",
        DeviceVec::from_cudarc(x),
    )?;
    ensure!(
        !b_here.is_idle()?,
        "the kernel on cudarc's other stream had finished when DeviceVec::from_cudarc returned: \
         the conversion must not wait on the host (or the kernel ran shorter than the test \
         assumes: raise DELAY)"
    );
    let mut out = poisoned::<u32>(N);
    scope(&ours, |s| {
        let view = s.attach_ref(&vec)?;
        s.copy_to_host(&view, &mut out)?.wait()?;
        Ok::<_, Error>(())
    })?;
    let expected = vec![value; N];
    check_eq(
        "a scope's download of a converted slice whose last write was a ~100 ms kernel on \
         another cudarc stream (zeros would mean the scope did not wait for the slice's write \
         event)",
        &expected,
        &out,
    )?;
    check_eq(
        "to_host_vec of the same vec",
        &expected,
        &vec.to_host_vec()?,
    )
}

/// A converted slice last written by a long kernel on another cudarc stream, read by a
/// graph that holds it (its capture cannot wait on the slice's event on the GPU, so it
/// waits on the host before recording) and by `download_owned` (whose stream waits for
/// the event): both see the kernel's values, never the zeros before it.
fn a_graph_and_download_owned_read_a_converted_slice_after_its_last_kernel() -> TestResult {
    let _serial = serial();
    let (ctx, streams) = cudarc_context(2)?;
    let (a, b) = (&streams[0], &streams[1]);
    let dev = Device::from_cudarc(Arc::clone(&ctx))?;
    let ours = dev.new_stream()?;
    let kernel = spin_fill_kernel(&ctx)?;
    let mut rng = Rng::new();
    let expected = vec![fill_value(&mut rng); N];

    let mut x = cudarc("alloc_zeros", a.alloc_zeros::<u32>(N))?;
    launch_spin_fill(b, &kernel, &mut x, expected[0])?;
    let vec = converted(
        "a slice behind a long kernel, for a graph",
        DeviceVec::from_cudarc(x),
    )?;
    let output = dev.alloc_pinned::<u32>(N)?;
    let (mut graph, ()) = dev.capture((&vec, output), |g, (x, mut out)| {
        g.copy_to_host(&x, &mut out)?;
        Ok::<_, Error>(())
    })?;
    gpu_tests::poison(graph.held_mut().1);
    scope(&ours, |s| s.replay(&mut graph).map(drop))?;
    check_eq(
        "a graph's download of a converted slice whose last write was a long kernel on \
         another cudarc stream",
        &expected,
        graph.held().1,
    )?;
    drop(graph);

    let expected = vec![fill_value(&mut rng); N];
    let mut x = cudarc("alloc_zeros", a.alloc_zeros::<u32>(N))?;
    launch_spin_fill(b, &kernel, &mut x, expected[0])?;
    let vec = converted(
        "a slice behind a long kernel, for download_owned",
        DeviceVec::from_cudarc(x),
    )?;
    let (_, out) = mini_executor::block_on(ours.download_owned(vec, poisoned::<u32>(N)))?;
    check_eq(
        "download_owned of a converted slice whose last write was a long kernel on another \
         cudarc stream",
        &expected,
        &out,
    )
}

fn into_cudarc_right_behind_a_long_kernel_hands_cudarc_the_kernels_result() -> TestResult {
    let _serial = serial();
    let (ctx, streams) = cudarc_context(3)?;
    let (a, b, d) = (&streams[0], &streams[1], &streams[2]);
    let _dev = Device::from_cudarc(Arc::clone(&ctx))?; // kept: later conversions find it
    let kernel = spin_fill_kernel(&ctx)?;
    let value = fill_value(&mut Rng::new());
    let mut y = cudarc("alloc_zeros", a.alloc_zeros::<u32>(N))?;
    launch_spin_fill(b, &kernel, &mut y, value)?;
    // From cudarc and back at once, onto a third stream, while the kernel still runs.
    let vec = converted(
        "a slice last written by a long kernel",
        DeviceVec::from_cudarc(y),
    )?;
    let slice = vec.into_cudarc(d)?;
    check_eq(
        "cudarc's read on a third stream of a slice that went through a DeviceVec while a \
         kernel on another stream was writing it",
        &vec![value; N],
        &cudarc("clone_dtoh", d.clone_dtoh(&slice))?,
    )
}
