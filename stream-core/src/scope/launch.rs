//! [`launch`]: the one launch entry, which `#[kernel]` wrappers call.

use std::ffi::c_void;

use crate::driver::launch::launch as driver_launch;
use crate::error::Result;
use crate::kernel::{Kernel, LaunchConfig};
use crate::scope::Scope;
use crate::trace::Category;

/// Launches `kernel` on the scope's stream with the argument pointers `args`.
///
/// `config` is checked first against the shapes the kernel's declaration admits
/// ([`KernelShape`](crate::kernel::KernelShape): its block, then, once the block is known to be within the device's
/// limits, its dynamic shared memory) and against the device's limits, all without a
/// driver call and before the kernel is loaded; then, once loaded, against the
/// function's own limits. Any refusal is an [`Error::InvalidLaunch`](crate::Error::InvalidLaunch) and nothing is
/// enqueued. No event is recorded and nothing is allocated: the scope's stream orders
/// the launch after earlier work on the same memory and before the scope's final
/// synchronisation.
///
/// # Safety
///
/// `args` must match the kernel's CUDA parameter list exactly (one pointer to a value
/// of each parameter's type, in order); every device address passed must be memory of
/// the scope's brand that the kernel accesses only within the length passed beside it,
/// writing only memory borrowed mutably for the call; and the kernel must keep all of
/// this for every launch shape its [`KernelShape`](crate::kernel::KernelShape) admits. `#[kernel]` declarations
/// make this promise once, in their `unsafe fn` signature and their shape arguments.
#[inline]
pub unsafe fn launch(
    scope: &Scope<'_, '_>,
    kernel: &'static Kernel,
    config: LaunchConfig,
    args: &mut [*mut c_void],
) -> Result<()> {
    let device = &scope.device().inner;
    let name = kernel.name();
    kernel.shape.check_block(name, config.block)?;
    config.check_device(name, &device.limits)?;
    kernel.shape.check_shared(name, &config)?;
    let loaded = kernel.load(device)?;
    config.check_function(name, &device.limits, &loaded)?;
    if config.is_empty() {
        return Ok(());
    }
    scope.traced(name, Category::Kernel, None, || {
        // SAFETY: `loaded.function` belongs to a module loaded in the scope's device's
        // context (its cache entry carries the device's unique id, never reused) and stays
        // loaded while the device lives, which the scope's stream keeps alive. `config` was
        // checked above against `kernel.shape`, the launch shapes the declaration admits
        // (its block, and at least the dynamic shared memory it needs), so the caller's
        // promise (see `# Safety`) covers this shape; and against the device's and the
        // function's limits, so the driver accepts it. The arguments are the caller's
        // promise. (A launch whose stream is not of the current context is refused by the
        // driver with an error, so which context is current cannot make it unsound.)
        unsafe {
            driver_launch(
                &loaded.function,
                config.grid,
                config.block,
                config.shared_mem_bytes,
                &scope.stream.raw,
                args,
            )
        }
    })
}

/// The pointer a kernel argument array holds for `value`.
#[inline(always)]
pub fn arg<T>(value: &T) -> *mut c_void {
    (value as *const T).cast_mut().cast()
}
