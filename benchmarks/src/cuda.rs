//! The benchmark's own kernels: declared once for this library with `#[kernel]`, and
//! compiled to the same CUBIN (same NVRTC options as the library) for the raw and the
//! cudarc baselines, so all three launch identical machine code.
#![allow(unsafe_code)]

use std::ffi::CString;

use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys};
use stream_core::{kernel, LaunchConfig};

use crate::error::{Error, Result};

/// CUDA source of the benchmark kernels. Convention of this workspace: each slice is a
/// pointer and a `size_t` length, and a kernel stays below the lengths it is given.
pub const SOURCE: &str = r#"
// The smallest useful kernel: one thread adds one to y[0], so that the number of
// launches that ran can be checked afterwards.
extern "C" __global__ void tiny_u32(unsigned* y, size_t y_len) {
    if (blockIdx.x == 0 && threadIdx.x == 0 && y_len > 0) y[0] += 1u;
}

// y[i] = f^iters(x[i]) with f(v) = fmaf(v, 0.999f, 0.001f): element-wise work whose cost
// is set by `iters` (a dependent chain of fused multiply-adds per element).
extern "C" __global__ void work_f32(unsigned iters, const float* x, size_t x_len,
                                    float* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        for (unsigned k = 0; k < iters; ++k) v = fmaf(v, 0.999f, 0.001f);
        y[i] = v;
    }
}
"#;

/// The tiled SGEMM of the `kernels` crate in one pass for operands as stored, for the raw
/// and cudarc baselines: the module `kernels` compiles.
pub const SGEMM_SOURCE: &str = kernels::SGEMM_TILED_SOURCE;

#[kernel(cuda = SOURCE)]
pub unsafe fn tiny_u32(y: &mut [u32]);

#[kernel(cuda = SOURCE)]
pub unsafe fn work_f32(iters: u32, x: &[f32], y: &mut [f32]);

/// `tiny_u32` declared a second time: a `Kernel` of its own, which only the launch
/// case's "device made again" row launches (so that no other device keeps its
/// per-ordinal fast path).
pub mod made_again {
    use stream_core::kernel;

    #[kernel(cuda = super::SOURCE)]
    pub unsafe fn tiny_u32(y: &mut [u32]);
}

/// Launch shape of `tiny_u32`: one block of 32 threads.
pub const TINY_CONFIG: LaunchConfig = LaunchConfig::new((1, 1, 1), (32, 1, 1));

/// Launch shape of `work_f32` over `n` elements: grid-stride, 256 threads per block, at
/// most 2^16 blocks (the `kernels` crate's shape).
pub fn work_config(n: usize) -> LaunchConfig {
    LaunchConfig::for_elements(n.min((1 << 16) * 256), 256)
}

/// The same launch shape for cudarc's safe API.
pub fn to_cudarc(c: LaunchConfig) -> cudarc::driver::LaunchConfig {
    cudarc::driver::LaunchConfig {
        grid_dim: c.grid,
        block_dim: c.block,
        shared_mem_bytes: c.shared_mem_bytes,
    }
}

/// What `work_f32` computes for one element, on the CPU (`mul_add` is the correctly
/// rounded fused multiply-add, like `fmaf`, so the results agree bit for bit).
pub fn work_reference(x: f32, iters: u32) -> f32 {
    (0..iters).fold(x, |v, _| v.mul_add(0.999, 0.001))
}

/// Compiles `source` to a CUBIN for compute capability `major.minor` with the options
/// `stream_core` uses for its own kernels.
pub fn compile_cubin(source: &str, (major, minor): (i32, i32)) -> Result<Vec<u8>> {
    // SAFETY: only `dlopen`s the NVRTC library by its well-known names, so that a missing
    // library is an error rather than the panic of cudarc's lazy loader.
    if !unsafe { nvrtc_sys::is_culib_present() } {
        return Err(Error::msg(
            "the NVRTC runtime compiler (libnvrtc) could not be loaded; install the CUDA toolkit's NVRTC library",
        ));
    }
    let c_source =
        CString::new(source).map_err(|_| Error::msg("CUDA source contains a NUL byte"))?;
    let program = Program(
        nvrtc::create_program(&c_source, None)
            .map_err(|e| Error::msg(format!("nvrtcCreateProgram failed: {e:?}")))?,
    );
    let options = [
        format!("--gpu-architecture=sm_{major}{minor}"),
        "--std=c++17".to_owned(),
        "-default-device".to_owned(),
    ];
    // SAFETY: `program` is alive until its `Drop`; the options contain no NUL bytes.
    if let Err(e) = unsafe { nvrtc::compile_program(program.0, &options) } {
        // SAFETY: as above; a log exists after a compile attempt.
        let log = unsafe { nvrtc::get_program_log(program.0) }
            .map(|chars| {
                let bytes: Vec<u8> = chars
                    .into_iter()
                    .map(|c| c as u8)
                    .take_while(|&b| b != 0)
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_default();
        return Err(Error::msg(format!("NVRTC failed ({e:?}):\n{log}")));
    }
    let mut size = 0usize;
    // SAFETY: the program is alive and compiled; `size` is a valid out-pointer.
    let sized = unsafe { nvrtc_sys::nvrtcGetCUBINSize(program.0, &mut size) };
    sized
        .result()
        .map_err(|e| Error::msg(format!("nvrtcGetCUBINSize failed: {e:?}")))?;
    let mut image = vec![0u8; size];
    // SAFETY: `image` has the `size` bytes NVRTC asked for.
    let got = unsafe { nvrtc_sys::nvrtcGetCUBIN(program.0, image.as_mut_ptr().cast()) };
    got.result()
        .map_err(|e| Error::msg(format!("nvrtcGetCUBIN failed: {e:?}")))?;
    Ok(image)
}

/// An NVRTC program, destroyed on drop.
struct Program(nvrtc_sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by `create_program`, destroyed once, here.
        let _ = unsafe { nvrtc::destroy_program(self.0) };
    }
}
