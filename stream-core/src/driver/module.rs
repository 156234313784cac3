//! [`Module`]: code loaded into a context, and the [`Function`]s found in it.

use std::ffi::{CStr, CString};

use cudarc::driver::{result, sys};

use super::context::Bound;
use crate::error::{DriverResultExt, Error, Result};

/// Code the driver can load: a CUBIN that NVRTC produced (see
/// [`nvrtc::compile_cubin`](super::nvrtc::compile_cubin), the only way to make one), or
/// NUL-terminated PTX text, which the driver compiles for the device.
pub(crate) struct Image(ImageKind);

enum ImageKind {
    Cubin(Vec<u8>),
    Ptx(CString),
}

impl Image {
    /// A CUBIN image; only NVRTC's output is passed here.
    pub(super) fn cubin(bytes: Vec<u8>) -> Self {
        Image(ImageKind::Cubin(bytes))
    }

    /// PTX text, or `None` when it contains a NUL byte.
    pub(crate) fn ptx(text: &str) -> Option<Self> {
        CString::new(text).ok().map(|c| Image(ImageKind::Ptx(c)))
    }

    /// `true` for PTX (whose load failures are compile errors of the user's PTX).
    pub(crate) fn is_ptx(&self) -> bool {
        matches!(self.0, ImageKind::Ptx(_))
    }
}

/// A module loaded into a context. It is never unloaded implicitly (unloading waits for
/// the device, and a kernel of it must not run any more): dropping it leaks it, and
/// [`unload_waiting_for_device`](Self::unload_waiting_for_device) unloads it.
pub(crate) struct Module(sys::CUmodule);

// SAFETY: a `CUmodule` is an opaque handle the thread-safe driver accepts from any
// thread; only `unload` (consuming, `unsafe`) ends it.
unsafe impl Send for Module {}
// SAFETY: see `Send`; shared access only looks functions up.
unsafe impl Sync for Module {}

/// A kernel of a loaded module, with the limits read when it was found. Valid while
/// its module stays loaded; it is only used by [`launch`](super::launch::launch), whose
/// caller proves that.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Function {
    pub(super) raw: sys::CUfunction,
    /// The most threads per block the kernel can be launched with (its registers and
    /// `__launch_bounds__` limit it).
    pub(crate) max_threads_per_block: u32,
    /// Shared memory the kernel declares statically, in bytes.
    pub(crate) static_shared_bytes: u32,
}

// SAFETY: a `CUfunction` is an opaque handle, only passed to the thread-safe driver.
unsafe impl Send for Function {}
// SAFETY: see `Send`; the handle is only read.
unsafe impl Sync for Function {}

/// Why a module or function could not be had.
pub(crate) enum LoadError {
    /// The driver refused the image (malformed, or for another architecture).
    Rejected(Error),
    /// The module has no function of that name.
    NotFound,
    /// Another driver failure.
    Driver(Error),
}

impl Module {
    /// Loads `image` into the context `_bound` binds, and every function of it onto the
    /// device (see [`load_every_function`](Self::load_every_function)).
    pub(crate) fn load(image: &Image, _bound: &Bound<'_>) -> std::result::Result<Self, LoadError> {
        let data = match &image.0 {
            ImageKind::Cubin(bytes) => bytes.as_ptr().cast(),
            ImageKind::Ptx(text) => text.as_ptr().cast(),
        };
        // SAFETY: `data` is a CUBIN produced by NVRTC (a complete ELF image) or
        // NUL-terminated PTX text, alive for the call; a context is bound.
        let module = match unsafe { result::module::load_data(data) } {
            Ok(m) => Module(m),
            Err(e) => return Err(LoadError::Rejected(Error::driver("cuModuleLoadData", e))),
        };
        module.load_every_function().map_err(LoadError::Driver)?;
        Ok(module)
    }

    /// The function `name`, with the most dynamic shared memory it may use set to what
    /// `shared_per_block` (the device's opt-in limit of shared memory per block) leaves
    /// beside its static shared memory, so that launches never change function
    /// attributes.
    pub(crate) fn function(
        &self,
        name: &CStr,
        shared_per_block: u32,
    ) -> std::result::Result<Function, LoadError> {
        // SAFETY: the module is loaded (owned by `self`); `name` is NUL-terminated.
        let raw = match unsafe { result::module::get_function(self.0, name.to_owned()) } {
            Ok(f) => f,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => {
                return Err(LoadError::NotFound)
            }
            Err(e) => return Err(LoadError::Driver(Error::driver("cuModuleGetFunction", e))),
        };
        let attribute = |attr| {
            // SAFETY: `raw` was just obtained from this loaded module.
            unsafe { result::function::get_function_attribute(raw, attr) }
                .call("cuFuncGetAttribute")
                .map(|v| v.max(0) as u32)
        };
        let function = Function {
            raw,
            max_threads_per_block: attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            )
            .map_err(LoadError::Driver)?,
            static_shared_bytes: attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
            )
            .map_err(LoadError::Driver)?,
        };
        let dynamic = shared_per_block.saturating_sub(function.static_shared_bytes);
        let limit = i32::try_from(dynamic).unwrap_or(i32::MAX);
        // SAFETY: `raw` is a live function of this module; the attribute takes an `int`.
        unsafe {
            result::function::set_function_attribute(
                raw,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                limit,
            )
        }
        .call("cuFuncSetAttribute")
        .map_err(LoadError::Driver)?;
        Ok(function)
    }

    /// Loads every function of the module onto the device now.
    ///
    /// Under CUDA's lazy loading (the default since 12.2) a function is copied to the
    /// device at its first use, and that copy waits for the kernels running on the
    /// device, on every stream: measured, a scope on stream B waited a whole second for a
    /// kernel on stream A the first time it launched a kernel. Loading all of a module's
    /// functions when the module is loaded confines that wait to the first launch from a
    /// module on a device. Drivers older than CUDA 12.4 (without `cuFuncLoad`) keep their
    /// default.
    fn load_every_function(&self) -> Result<()> {
        // SAFETY: the module is loaded, into the context its loader bound.
        unsafe { super::versions::load_every_function(self.0) }.map(drop)
    }

    /// Unloads the module (`cuModuleUnload`, which waits for the device), in the
    /// context `_bound` binds (the one it was loaded into; under another the driver
    /// refuses with an error, which leaves it loaded).
    ///
    /// Safe as a `Box`'s drop is: the owner unloads, and a kernel of the module runs only
    /// through an `unsafe fn` ([`launch`](super::launch::launch), a graph's kernel node
    /// and its launch) whose caller proved the module stays loaded while the kernel may
    /// run (the crate keeps its modules for the device's life, and unloads them in the
    /// device's drop, when no scope or graph of the device is left).
    pub(crate) fn unload_waiting_for_device(self, _bound: &Bound<'_>) {
        // DEVICE-WIDE SYNC: cuModuleUnload, reached only from the device's drop.
        // SAFETY: `self` is consumed, so the module is unloaded once; the users of its
        // kernels' handles prove their own use (above).
        let _ = unsafe { result::module::unload(self.0) };
    }
}
