//! Porting a cudarc program to scopes, line by line.
//!
//! `cudarc_version` is a small cudarc program: upload two vectors, launch a kernel that
//! takes a parameter struct, download the result into pinned memory. `ported_version` is
//! the same program written with this crate: above each line, the cudarc line it
//! replaces. `adopted_version` is the middle way a large program takes first: cudarc keeps
//! its context, stream and slices, and only the kernel moves into a scope, on cudarc's
//! own stream, through conversions that copy nothing. All three must compute the same
//! result as the CPU.
//!
//! Run with `cargo run --release --example port_from_cudarc`. It needs an NVIDIA GPU
//! with its driver (and NVRTC); without one it says so and exits with status 1.
//!
//! What the port removes: every `unsafe` block of the cudarc program (the launch, the
//! uninitialised pinned allocation, the `unsafe impl` of the parameter struct). The
//! kernel's `#[kernel]` declaration makes the one promise that remains, once.

use std::sync::Arc;

use cudarc::driver::{CudaContext, LaunchConfig as CudarcLaunchConfig, PushKernelArg};
use cudarc::nvrtc::compile_ptx;
use stream_core::{kernel, scope, Device, DeviceRepr, DeviceVec, Error, LaunchConfig, Stream};

/// Elements of the vectors.
const N: usize = 1 << 20;

/// The cudarc program's kernel: one `n` for both arrays.
const CUDARC_SRC: &str = r#"
struct Params { float a; float b; };
extern "C" __global__ void affine(Params p, const float* x, float* y, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = p.a * x[i] + p.b * y[i];
}
"#;

/// The same kernel for a `#[kernel]` declaration: each slice comes with its length.
const PORTED_SRC: &str = r#"
struct Params { float a; float b; };
extern "C" __global__ void affine(Params p, const float* x, size_t x_len,
                                  float* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < x_len && i < y_len) y[i] = p.a * x[i] + p.b * y[i];
}
"#;

/// The cudarc program's parameter struct, with the `unsafe impl` cudarc asks for.
#[derive(Clone, Copy)]
#[repr(C)]
struct CudarcParams {
    a: f32,
    b: f32,
}

// SAFETY: two `f32`s in `#[repr(C)]`: the layout of the CUDA `Params`, no padding.
unsafe impl cudarc::driver::DeviceRepr for CudarcParams {}

/// The ported parameter struct: the derive checks what the `unsafe impl` promised.
#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Params {
    a: f32,
    b: f32,
}

#[kernel(cuda = PORTED_SRC)]
/// `y[i] = p.a * x[i] + p.b * y[i]`.
unsafe fn affine(p: Params, x: &[f32], y: &mut [f32]);

type AnyError = Box<dyn std::error::Error>;

/// The cudarc program, as it was.
fn cudarc_version(x_host: &[f32], y_host: &[f32]) -> Result<Vec<f32>, AnyError> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let module = ctx.load_module(compile_ptx(CUDARC_SRC)?)?;
    let f = module.load_function("affine")?;
    let x = stream.clone_htod(x_host)?;
    let mut y = stream.clone_htod(y_host)?;
    let n = x_host.len();
    let params = CudarcParams { a: 2.0, b: 0.5 };
    let mut launch = stream.launch_builder(&f);
    launch.arg(&params).arg(&x).arg(&mut y).arg(&n);
    // SAFETY: `affine` takes (Params, const float*, float*, size_t): a `#[repr(C)]` pair
    // of `f32`, the two slices' device addresses and their common length, and it touches
    // only indices below `n`.
    unsafe { launch.launch(CudarcLaunchConfig::for_num_elems(n as u32)) }?;
    // SAFETY: the memory is uninitialised until the copy below fills all of it; it is
    // read only through `as_slice`, after that copy.
    let mut pinned = unsafe { ctx.alloc_pinned::<f32>(n) }?;
    stream.memcpy_dtoh(&y, &mut pinned)?;
    Ok(pinned.as_slice()?.to_vec())
}

/// The same program with scopes.
fn ported_version(x_host: &[f32], y_host: &[f32]) -> Result<Vec<f32>, Error> {
    // let ctx = CudaContext::new(0)?;
    let dev = Device::new(0)?;
    // let stream = ctx.new_stream()?;
    let stream = dev.new_stream()?;
    // let module = ctx.load_module(compile_ptx(CUDARC_SRC)?)?;
    // let f = module.load_function("affine")?;
    //     (the `#[kernel]` declaration: compiled on the first launch, cached per device)
    // let n = x_host.len();
    let n = x_host.len();
    // let mut pinned = unsafe { ctx.alloc_pinned::<f32>(n) }?;
    let mut pinned = dev.alloc_pinned::<f32>(n)?;
    // (cudarc's calls are issued on `stream` one by one; here they go in a scope, which
    // synchronises `stream` when it ends)
    scope(&stream, |s| {
        // let x = stream.clone_htod(x_host)?;
        let x = s.upload(x_host)?;
        // let mut y = stream.clone_htod(y_host)?;
        let mut y = s.upload(y_host)?;
        // let params = CudarcParams { a: 2.0, b: 0.5 };
        let params = Params { a: 2.0, b: 0.5 };
        // let mut launch = stream.launch_builder(&f);
        // launch.arg(&params).arg(&x).arg(&mut y).arg(&n);
        // unsafe { launch.launch(LaunchConfig::for_num_elems(n as u32)) }?;
        affine(s, LaunchConfig::for_elements(n, 256), params, &x, &mut y)?;
        // stream.memcpy_dtoh(&y, &mut pinned)?;
        // pinned.as_slice()?
        s.copy_to_host(&y, &mut pinned[..])?.wait()?;
        Ok::<_, Error>(())
    })?;
    Ok(pinned.to_vec())
}

/// The middle way: cudarc keeps the context, the stream and the slices; only the kernel
/// runs in a scope, on cudarc's stream, ordered with cudarc's copies before and after it.
fn adopted_version(x_host: &[f32], y_host: &[f32]) -> Result<Vec<f32>, AnyError> {
    let ctx: Arc<CudaContext> = CudaContext::new(0)?;
    let cudarc_stream = ctx.new_stream()?;
    let x = cudarc_stream.clone_htod(x_host)?;
    let y = cudarc_stream.clone_htod(y_host)?;
    // The conversions: the same stream, the same allocations.
    let stream = Stream::from_cudarc(&cudarc_stream)?;
    let x = DeviceVec::from_cudarc(x)?;
    let mut y = DeviceVec::from_cudarc(y)?;
    let n = x.len();
    scope(&stream, |s| {
        let x = s.attach_ref(&x)?;
        let mut y = s.attach(&mut y)?;
        affine(
            s,
            LaunchConfig::for_elements(n, 256),
            Params { a: 2.0, b: 0.5 },
            &x,
            &mut y,
        )
    })?;
    let y = y.into_cudarc(&cudarc_stream)?;
    Ok(cudarc_stream.clone_dtoh(&y)?)
}

/// How many elements of `actual` differ from `expected`.
fn wrong(expected: &[f32], actual: &[f32]) -> usize {
    if expected.len() != actual.len() {
        return expected.len().max(actual.len());
    }
    expected.iter().zip(actual).filter(|(e, a)| e != a).count()
}

fn main() {
    match Device::count() {
        Ok(n) if n > 0 => {}
        Ok(_) | Err(_) => {
            eprintln!(
                "port_from_cudarc: this example needs an NVIDIA GPU with its driver, and none was \
                 found ({}); run it on a machine with a CUDA device",
                Device::count().map_or_else(|e| e.to_string(), |n| format!("{n} devices"))
            );
            std::process::exit(1);
        }
    }
    // Small integers and halves: every result is exact, on the GPU and on the CPU.
    let x: Vec<f32> = (0..N).map(|i| (i % 1000) as f32 - 500.0).collect();
    let y: Vec<f32> = (0..N).map(|i| (i % 7) as f32 * 2.0 - 6.0).collect();
    let expected: Vec<f32> = x.iter().zip(&y).map(|(x, y)| 2.0 * x + 0.5 * y).collect();
    let runs: [(&str, Result<Vec<f32>, AnyError>); 3] = [
        ("cudarc", cudarc_version(&x, &y)),
        ("ported", ported_version(&x, &y).map_err(Into::into)),
        ("adopted", adopted_version(&x, &y)),
    ];
    let mut failed = false;
    for (name, result) in runs {
        match result {
            Ok(out) => {
                let bad = wrong(&expected, &out);
                println!("{name:>8}: {N} elements, {bad} differ from the CPU");
                failed |= bad > 0;
            }
            Err(e) => {
                eprintln!("{name:>8}: failed: {e}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
    println!("port_from_cudarc: the cudarc program and both ports agree with the CPU");
}
