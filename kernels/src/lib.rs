//! CUDA kernels with typed, safe launch wrappers for `stream_core` scopes.
//!
//! Every wrapper takes the scope and branded device memory: `&` for what the kernel
//! reads, `&mut` for what it writes, so the borrow checker proves that no buffer is
//! both read and written by one launch, and that nothing from another scope gets in.
//! Kernels are compiled with NVRTC on first use, once per process for devices of one
//! compute capability, and loaded once per device; each module is compiled only when
//! one of its kernels is first launched (the element-wise kernels and the reductions
//! have a module per precision, the SGEMM one per kernel and form of its operands), and
//! modules needed by several threads at once compile side by side.
//!
//! The memory-bound kernels run at cuBLAS's bandwidth or above (on an H200, 64 Mi `f32`:
//! `axpy` 4107 GB/s, 1.30x `cublasSaxpy`; `fill` 4192, 1.03x `cuMemsetD32Async`; `dot`
//! 4071-4168, 1.01-1.02x `cublasSdot`; an 8192x8192 `transpose` 3792-3803, 1.02-1.04x
//! `cublasSgeam`; a device copy 3986-4093), measured by `bench --case membound`. The
//! tiled SGEMM reaches 92% of cuBLAS at 4096^3 (47071 against 51118 GFLOP/s on an H200,
//! the `kernels` example); `Cublas::sgemm` is there for the rest.
//!
//! ```no_run
//! use stream_core::{scope, Device, Error};
//! # fn main() -> stream_core::Result<()> {
//! let dev = Device::new(0)?;
//! let stream = dev.new_stream()?;
//! let x = vec![1.0f32; 1 << 20];
//! let y = vec![2.0f32; 1 << 20];
//! let mut out = vec![0f32; 1 << 20];
//! let mut total = [0f32];
//! scope(&stream, |s| {
//!     let dx = s.upload(&x)?;
//!     let mut dy = s.upload(&y)?;
//!     kernels::axpy(s, 3.0, &dx, &mut dy)?;          // dy = 3 * dx + dy
//!     let mut sum = s.alloc::<f32>(1)?;
//!     kernels::reduce_sum(s, &dy, &mut sum)?;
//!     s.copy_to_host(&sum, &mut total)?.wait()?;
//!     s.copy_to_host(&dy, &mut out)?; // `y` is still borrowed by its upload: write elsewhere
//!     Ok::<_, Error>(())
//! })?;
//! assert_eq!(total[0], 5.0 * (1 << 20) as f32);
//! # Ok(()) }
//! ```
//!
//! A kernel cannot read and write the same buffer through two arguments
//! (`ui-tests/tests/ui/kernel/same-buffer-read-and-written.rs`):
//!
//! ```compile_fail,E0502
//! # use stream_core::{scope, Error, Stream};
//! # fn f(stream: &Stream) -> Result<(), Error> {
//! scope(stream, |s| {
//!     let mut y = s.alloc_zeroed::<f32>(16)?;
//!     kernels::axpy(s, 2.0, &y, &mut y)?;
//!     Ok(())
//! })
//! # }
//! ```
#![deny(unsafe_code)]

pub mod cublas;
mod declarations;
mod elementwise;
#[cfg(test)]
mod launch_bounds;
pub mod modules;
mod reduce;
mod sgemm;
mod transpose;

pub use cublas::{Cublas, HalfGemm};
pub use elementwise::{axpy, fill, scale, Element, Float};
pub use reduce::{dot, reduce_sum};
pub use sgemm::{
    sgemm_tiled, sgemm_tiled_config, sgemm_tiled_op, Op, SplitK, MIN_K_PER_SPLIT,
    SGEMM_TILED_SOURCE,
};
pub use transpose::transpose;

use stream_core::LaunchConfig;

/// Threads per block of the element-wise and reduction kernels.
const BLOCK: u32 = 256;

/// Grid-stride launch shape for `n` elements: a thread for every four elements, up to a
/// cap on the number of blocks (each thread loops over its elements), so any `n` is a
/// valid shape. Four, not one: a block's start costs the GPU about what a few of its
/// threads' elements do, and the element-wise kernels load four of a thread's elements
/// before storing any (on an H200, 16 Mi `f32`: `axpy` 3839 GB/s against 3084 with a
/// thread an element). `fill` has a shape of its own ([`fill_grid`]).
fn grid_stride(n: usize) -> LaunchConfig {
    const PER_THREAD: usize = 4;
    LaunchConfig::for_elements(n.div_ceil(PER_THREAD).min(MAX_THREADS), BLOCK)
}

/// `fill`'s launch shape for `n` elements of `T`: a thread for every 16 bytes, which
/// `fill` stores as one vector (so `f16`'s grid is half `f32`'s for as many elements).
fn fill_grid<T>(n: usize) -> LaunchConfig {
    let bytes = n.saturating_mul(std::mem::size_of::<T>());
    LaunchConfig::for_elements(bytes.div_ceil(16).min(MAX_THREADS), BLOCK)
}

/// The most threads a grid-stride launch starts (65536 blocks); past it, each thread
/// loops.
const MAX_THREADS: usize = (1 << 16) * BLOCK as usize;
