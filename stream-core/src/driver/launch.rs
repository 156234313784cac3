//! Launching a kernel.

use std::ffi::c_void;

use cudarc::driver::result;

use super::module::Function;
use super::stream::RawStream;
use crate::error::{DriverResultExt, Result};

/// Launches `function` with `grid` x `block` threads and `shared_bytes` of dynamic shared
/// memory on `stream`, with the argument pointers `args`.
///
/// # Safety
///
/// * `function`'s module is loaded in `stream`'s context and stays loaded until the
///   kernel has run.
/// * `args` matches the kernel's CUDA parameter list exactly: one pointer to a value of
///   each parameter's type, in order.
/// * The kernel is memory-safe for these arguments and this launch shape: every device
///   address it is given is memory that stays valid until it has run, which it accesses
///   only within the length passed beside it, writing only memory no other work touches
///   meanwhile.
pub(crate) unsafe fn launch(
    function: &Function,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared_bytes: u32,
    stream: &RawStream,
    args: &mut [*mut c_void],
) -> Result<()> {
    // SAFETY: the caller's contract above; `stream` is live (borrowed).
    unsafe { result::launch_kernel(function.raw, grid, block, shared_bytes, stream.raw(), args) }
        .call("cuLaunchKernel")
}
