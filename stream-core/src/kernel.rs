//! [`Kernel`]: a declared kernel's name and code, and its per-device cache of loaded
//! functions.
//!
//! A kernel is compiled (or its PTX loaded) on the first launch on a device, once per
//! source and device, never per launch. The hot path is one atomic load and a compare:
//! each `Kernel` remembers the function of the first device it was loaded on; other
//! devices look it up in their own cache under a per-device lock.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::{result, sys};

use crate::compile::compile_cubin;
use crate::device::DeviceInner;
use crate::error::{DriverResultExt, Error, Result};
use crate::launch::KernelShape;

/// Where a kernel's code comes from.
#[derive(Debug, Clone, Copy)]
pub enum KernelSource {
    /// CUDA C++ source, compiled with NVRTC for the device's own architecture.
    Cuda(&'static str),
    /// Precompiled PTX text, JIT-compiled by the driver.
    Ptx(&'static str),
}

/// A kernel declared with `#[kernel]`: its name, its code and the launch shapes its
/// declaration admits. Lives in a `static` made by the macro; launching goes through the
/// declaration's safe wrapper, and [`launch`](crate::launch::launch) refuses any
/// configuration outside `shape` before loading the kernel.
#[derive(Debug)]
pub struct Kernel {
    name: &'static str,
    source: KernelSource,
    /// The launch shapes the declaration promises the kernel is memory-safe for.
    pub(crate) shape: KernelShape,
    first: OnceLock<LoadedKernel>,
}

/// A kernel loaded on one device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoadedKernel {
    /// `DeviceInner::id` of the device whose module holds `function`.
    pub(crate) device_id: u64,
    pub(crate) function: sys::CUfunction,
    /// The most threads per block this kernel can be launched with (registers limit it).
    pub(crate) max_threads_per_block: u32,
    /// Shared memory the kernel declares statically.
    pub(crate) static_shared_bytes: u32,
}

// SAFETY: a `CUfunction` is an opaque handle, valid on any thread where its context is
// current; launches bind the context first.
unsafe impl Send for LoadedKernel {}
// SAFETY: see `Send`; the handle is only read.
unsafe impl Sync for LoadedKernel {}

impl Kernel {
    /// A kernel named `name` (its `extern "C"` name in the code) with code `source`,
    /// launched only with shapes that `shape` admits.
    pub const fn new(name: &'static str, source: KernelSource, shape: KernelShape) -> Self {
        Kernel {
            name,
            source,
            shape,
            first: OnceLock::new(),
        }
    }

    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The kernel's function on `device`, compiling or loading its module on first use.
    #[inline]
    pub(crate) fn load(&'static self, device: &DeviceInner) -> Result<LoadedKernel> {
        match self.first.get() {
            Some(k) if k.device_id == device.id => Ok(*k),
            _ => self.load_slow(device),
        }
    }

    #[cold]
    fn load_slow(&'static self, device: &DeviceInner) -> Result<LoadedKernel> {
        let loaded = device.modules.load(self, device)?;
        let _ = self.first.set(loaded);
        Ok(loaded)
    }
}

/// The modules and functions loaded on one device, unloaded when the device goes.
#[derive(Default)]
pub(crate) struct ModuleCache {
    inner: Mutex<ModuleCacheInner>,
}

#[derive(Default)]
struct ModuleCacheInner {
    /// By source text (address, length): one module per source, however many kernels
    /// it holds.
    modules: HashMap<(usize, usize), sys::CUmodule>,
    /// By `Kernel` address.
    functions: HashMap<usize, LoadedKernel>,
}

// SAFETY: the handles inside are opaque driver handles, only used with the device's
// context bound, and all access goes through the mutex.
unsafe impl Send for ModuleCacheInner {}

impl ModuleCache {
    fn load(&self, kernel: &'static Kernel, device: &DeviceInner) -> Result<LoadedKernel> {
        let mut cache = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let kernel_key = kernel as *const Kernel as usize;
        if let Some(k) = cache.functions.get(&kernel_key) {
            return Ok(*k);
        }
        let _bound = device.bind()?;
        let source_key = match kernel.source {
            KernelSource::Cuda(text) | KernelSource::Ptx(text) => {
                (text.as_ptr() as usize, text.len())
            }
        };
        let module = match cache.modules.get(&source_key) {
            Some(&m) => m,
            None => {
                let m = load_module(kernel.name, kernel.source, device)?;
                cache.modules.insert(source_key, m);
                m
            }
        };
        let name = CString::new(kernel.name).map_err(|_| Error::KernelNotFound {
            kernel: kernel.name.to_owned(),
        })?;
        // SAFETY: `module` is loaded in the device's (current) context and stays loaded
        // until the device's `ModuleCache` is dropped.
        let function = match unsafe { result::module::get_function(module, name) } {
            Ok(f) => f,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => {
                return Err(Error::KernelNotFound {
                    kernel: kernel.name.to_owned(),
                })
            }
            Err(e) => return Err(Error::driver("cuModuleGetFunction", e)),
        };
        let attribute = |attr| {
            // SAFETY: `function` was just obtained from a loaded module.
            unsafe { result::function::get_function_attribute(function, attr) }
                .call("cuFuncGetAttribute")
        };
        let loaded = LoadedKernel {
            device_id: device.id,
            function,
            max_threads_per_block: attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            )?
            .max(0) as u32,
            static_shared_bytes: attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
            )?
            .max(0) as u32,
        };
        // Allow dynamic shared memory up to the device's opt-in limit once, at load, so
        // launches never change function attributes (no race between threads).
        let dynamic_max = device
            .limits
            .max_shared_per_block_optin
            .saturating_sub(loaded.static_shared_bytes);
        // SAFETY: `function` is alive; the value is within the device's opt-in limit.
        unsafe {
            result::function::set_function_attribute(
                function,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dynamic_max as i32,
            )
        }
        .call("cuFuncSetAttribute")?;
        cache.functions.insert(kernel_key, loaded);
        Ok(loaded)
    }

    /// Unloads every module; called by the device's `Drop` with its context bound.
    ///
    /// No kernel of these modules can still be running: kernels are launched only inside
    /// scopes, every scope synchronises its stream before it ends (a fork's stream is
    /// joined into its parent's) or has seen the context stop with a sticky error, and no
    /// scope is open, since each one borrows a stream that holds the device.
    pub(crate) fn unload_all(&self) {
        let mut cache = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        cache.functions.clear();
        for (_, module) in cache.modules.drain() {
            // DEVICE-WIDE SYNC: cuModuleUnload, reached only from the device's drop.
            // SAFETY: loaded by `load_module` in this device's context (bound by the
            // caller), unloaded once; no kernel of it can run or be launched any more
            // (see above), and the cache forgets its functions first.
            let _ = unsafe { result::module::unload(module) };
        }
    }
}

fn load_module(kernel: &str, source: KernelSource, device: &DeviceInner) -> Result<sys::CUmodule> {
    let image: Vec<u8> = match source {
        KernelSource::Cuda(text) => compile_cubin(kernel, text, device.compute_capability)?,
        KernelSource::Ptx(text) => {
            let mut bytes = text.as_bytes().to_vec();
            bytes.push(0); // the driver reads PTX as a NUL-terminated string
            bytes
        }
    };
    // SAFETY: `image` is a CUBIN produced by NVRTC or NUL-terminated PTX text, alive for
    // the call; the device's context is current (bound by the caller).
    match unsafe { result::module::load_data(image.as_ptr().cast()) } {
        Ok(m) => {
            load_every_function(m)?;
            Ok(m)
        }
        Err(e) if matches!(source, KernelSource::Ptx(_)) => Err(Error::KernelCompile {
            kernel: kernel.to_owned(),
            log: format!(
                "the driver could not load the PTX: {}",
                Error::driver("cuModuleLoadData", e)
            ),
        }),
        Err(e) => Err(Error::driver("cuModuleLoadData", e)),
    }
}

/// Loads every function of `module` onto the device now.
///
/// Under CUDA's lazy loading (the default since 12.2) a function is copied to the
/// device at its first use, and that copy waits for the kernels running on the device,
/// on every stream: measured, a scope on stream B waited a whole second for a kernel on
/// stream A the first time it launched a kernel. Loading all of a module's functions
/// when the module is loaded confines that wait to the first launch from a module on a
/// device; warm modules up before overlapping work if even that matters. Drivers older
/// than CUDA 12.4 (without `cuFuncLoad`) keep their default.
fn load_every_function(module: sys::CUmodule) -> Result<()> {
    const FUNC_LOAD_SINCE: i32 = 12040;
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .call("cuDriverGetVersion")?;
    if version < FUNC_LOAD_SINCE {
        return Ok(());
    }
    let mut count: std::ffi::c_uint = 0;
    // SAFETY: `module` was just loaded in the current context; `count` is a valid
    // out-pointer.
    unsafe { sys::cuModuleGetFunctionCount(&mut count, module) }
        .result()
        .call("cuModuleGetFunctionCount")?;
    let mut functions: Vec<sys::CUfunction> = vec![std::ptr::null_mut(); count as usize];
    // SAFETY: `functions` has room for exactly `count` handles.
    unsafe { sys::cuModuleEnumerateFunctions(functions.as_mut_ptr(), count, module) }
        .result()
        .call("cuModuleEnumerateFunctions")?;
    for function in functions {
        // SAFETY: `function` belongs to `module`, loaded in the current context.
        unsafe { sys::cuFuncLoad(function) }
            .result()
            .call("cuFuncLoad")?;
    }
    Ok(())
}
