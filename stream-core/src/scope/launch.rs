//! [`launch`]: the one entry for a kernel's launch (`#[kernel]` wrappers call it), through
//! a [`LaunchTarget`], a scope (which runs it: [`launch_in_scope`]) or a graph capture
//! (which records it); and [`KernelArgs`], the argument pointers that carry the promise
//! which makes what takes them safe.

use std::ffi::c_void;

use crate::driver::launch::launch as driver_launch;
use crate::error::Result;
use crate::kernel::{Kernel, LaunchConfig};
use crate::memory::brand::{brand, Brand};
use crate::scope::Scope;
use crate::sealed::{self, Token, TOKEN};
use crate::trace::Category;

/// The argument pointers of one launch of a kernel, with the promise of [`launch`]'s
/// `# Safety` attached. Made only by the `unsafe` [`launch`] (its fields are private to
/// this file), so that what takes one (a scope's launch, a capture's record of it) is
/// safe: the promise travels with the pointers, and the brand `'s` in the type ties it to
/// the scope whose memory they pass.
pub struct KernelArgs<'a, 's> {
    kernel: &'static Kernel,
    pointers: &'a mut [*mut c_void],
    _brand: Brand<'s>,
}

impl<'a, 's> KernelArgs<'a, 's> {
    /// The kernel these arguments are for.
    #[inline(always)]
    pub(crate) fn kernel(&self) -> &'static Kernel {
        self.kernel
    }

    /// The argument pointers.
    #[inline(always)]
    pub(crate) fn pointers(&self) -> &[*mut c_void] {
        self.pointers
    }

    /// The same arguments and promise, borrowed again (a capture launches them, then
    /// reads them to remember the launch).
    #[inline(always)]
    pub(crate) fn reborrow(&mut self) -> KernelArgs<'_, 's> {
        KernelArgs {
            kernel: self.kernel,
            pointers: &mut *self.pointers,
            _brand: brand(),
        }
    }
}

/// What a kernel's launch goes through: a [`Scope`], which runs it on its stream, or a
/// graph [`Capture`](crate::graph::Capture), which records it. The launch half of
/// [`Enqueue`](crate::Enqueue), its subtrait; sealed.
#[doc(hidden)]
pub trait LaunchTarget<'s>: sealed::Enqueuer {
    /// Launches or records the kernel of `args` (for [`launch`]), whose promise they
    /// carry.
    fn launch_kernel(&self, _: Token, config: LaunchConfig, args: KernelArgs<'_, 's>)
        -> Result<()>;
}

/// Launches `kernel` with the argument pointers `args` through `target`: on a scope's
/// stream, or recorded into the graph a capture makes, with the launch's scalar
/// arguments remembered so that [`Graph::set_scalar`](crate::Graph::set_scalar) can
/// change them later. The launch shape is checked as for a scope, before anything is
/// enqueued or recorded.
///
/// # Safety
///
/// `args` match `kernel`'s CUDA parameter list exactly (one pointer to a live value of
/// each parameter's type, in order; when `kernel` describes its parameters
/// ([`KernelParam`](crate::kernel::KernelParam)s, as `#[kernel]` does), the description
/// is of exactly these); every device address they pass is memory branded `'s` (the
/// target's), which the kernel accesses only within the length passed beside it,
/// writing only memory borrowed mutably for the call; and the kernel keeps all of this
/// for every launch shape its [`KernelShape`](crate::kernel::KernelShape) admits.
/// `#[kernel]` declarations make this promise once, in their `unsafe fn` signature and
/// their shape arguments.
#[inline]
pub unsafe fn launch<'s>(
    target: &impl LaunchTarget<'s>,
    kernel: &'static Kernel,
    config: LaunchConfig,
    args: &mut [*mut c_void],
) -> Result<()> {
    // This function's contract is the promise the arguments carry, with the target's
    // brand `'s`.
    let args = KernelArgs {
        kernel,
        pointers: args,
        _brand: brand(),
    };
    target.launch_kernel(TOKEN, config, args)
}

impl<'s> sealed::Enqueuer for Scope<'s, '_> {}

impl<'s> LaunchTarget<'s> for Scope<'s, '_> {
    fn launch_kernel(
        &self,
        _: Token,
        config: LaunchConfig,
        args: KernelArgs<'_, 's>,
    ) -> Result<()> {
        launch_in_scope(self, config, args)
    }
}

/// Launches `args`' kernel on the scope's stream.
///
/// `config` is checked first against the shapes the kernel's declaration admits
/// ([`KernelShape`](crate::kernel::KernelShape): its block, then, once the block is known
/// to be within the device's limits, its dynamic shared memory) and against the device's
/// limits, all without a driver call and before the kernel is loaded; then, once loaded,
/// against the function's own limits. Any refusal is an
/// [`Error::InvalidLaunch`](crate::Error::InvalidLaunch) and nothing is enqueued. No
/// event is recorded and nothing is allocated: the scope's stream orders the launch
/// after earlier work on the same memory and before the scope's final synchronisation.
#[inline]
pub(crate) fn launch_in_scope<'s>(
    scope: &Scope<'s, '_>,
    config: LaunchConfig,
    args: KernelArgs<'_, 's>,
) -> Result<()> {
    let device = &scope.device().inner;
    let kernel = args.kernel;
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
        // (its block, and at least the dynamic shared memory it needs), so the promise
        // `args` carries (made only by `launch`) covers this shape; and against the
        // device's and the function's limits, so the driver accepts it. That promise is
        // about memory of the brand `'s`, this scope's (the types say so), so the memory
        // is valid on its stream. (A launch whose stream is not of the current context is
        // refused by the driver with an error, so which context is current cannot make it
        // unsound.)
        unsafe {
            driver_launch(
                &loaded.function,
                config.grid,
                config.block,
                config.shared_mem_bytes,
                &scope.stream.raw,
                args.pointers,
            )
        }
    })
}

/// The pointer a kernel argument array holds for `value`.
#[inline(always)]
pub fn arg<T>(value: &T) -> *mut c_void {
    (value as *const T).cast_mut().cast()
}
