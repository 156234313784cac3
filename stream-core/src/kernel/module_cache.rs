//! [`ModuleCache`]: the modules and functions loaded on one device, an extension of the
//! device unloaded when the device is dropped.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::device::DeviceInner;
use crate::driver::context::PrimaryContext;
use crate::driver::module::{Image, LoadError, Module};
use crate::driver::nvrtc::compile_cubin;
use crate::error::{Error, Result};
use crate::kernel::compiled_images::CompiledImages;
use crate::kernel::declaration::{Kernel, KernelSource, LoadedKernel};
use crate::memory::bound_wait_before_device_release;

/// The modules and functions loaded on one device.
pub(crate) struct ModuleCache {
    inner: Mutex<Loaded>,
    /// The device's context, which the modules are loaded into and unloaded from.
    context: Arc<PrimaryContext>,
    /// The device's ordinal, whose fast paths the drop releases.
    ordinal: usize,
}

#[derive(Default)]
struct Loaded {
    /// By source text (its content: one constant may be placed at several addresses, and
    /// a module prepared from a source must be the one its kernels' first launches find):
    /// one module per source, however many kernels it holds.
    modules: HashMap<&'static str, Module>,
    /// By `Kernel` address ([`kernel_key`]), with the `Kernel`.
    functions: HashMap<usize, (&'static Kernel, LoadedKernel)>,
}

impl ModuleCache {
    /// The cache of `device`.
    pub(crate) fn of(device: &DeviceInner) -> Arc<Self> {
        device.extension(|| ModuleCache {
            inner: Mutex::default(),
            context: Arc::clone(&device.context),
            ordinal: device.ordinal,
        })
    }

    /// `kernel`'s function on `device`: compiles or loads its module on first use
    /// ([`load_module`](Self::load_module)).
    ///
    /// Also the path of a launch of a kernel whose `Kernel` keeps another device's
    /// function for this ordinal (another live device of the ordinal launched it first)
    /// or none (an ordinal past the fast path's): the kernel's own entry is looked up
    /// first, by address, so that the source text is hashed only until the kernel has
    /// its function here.
    pub(crate) fn load(
        &self,
        kernel: &'static Kernel,
        device: &DeviceInner,
    ) -> Result<LoadedKernel> {
        let source_key = kernel.source.text();
        {
            let mut cache = self.lock();
            if let Some((_, loaded)) = cache.functions.get(&kernel_key(kernel)) {
                return Ok(*loaded);
            }
            if cache.modules.contains_key(source_key) {
                return cache.function(kernel, source_key, device);
            }
        }
        self.load_module(kernel.name(), kernel.source, device)?;
        self.lock().function(kernel, source_key, device)
    }

    /// Makes sure `source`'s module is loaded on `device`, compiling it first if no
    /// device of this compute capability has (`label` names it in errors).
    ///
    /// The compile runs outside this cache's lock, so that a first launch of another
    /// module on this device, or a launch of a loaded kernel found here, does not wait
    /// for it; threads that need the same image wait for one compile
    /// ([`CompiledImages`]). Only loading the image into the context is done under the
    /// lock, so each source is loaded once.
    pub(crate) fn load_module(
        &self,
        label: &str,
        source: KernelSource,
        device: &DeviceInner,
    ) -> Result<()> {
        if self.lock().modules.contains_key(source.text()) {
            return Ok(());
        }
        let image = image_of(label, source, device)?;
        let mut cache = self.lock();
        if let Entry::Vacant(slot) = cache.modules.entry(source.text()) {
            slot.insert(load_image(label, &image, device)?);
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Loaded> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Loaded {
    /// `kernel`'s function from its module (loaded, under `source_key`), kept for the
    /// next launch; the kept one when another thread took it first (while this one
    /// compiled), so that its attributes are set once, before any launch.
    fn function(
        &mut self,
        kernel: &'static Kernel,
        source_key: &'static str,
        device: &DeviceInner,
    ) -> Result<LoadedKernel> {
        if let Some((_, k)) = self.functions.get(&kernel_key(kernel)) {
            return Ok(*k);
        }
        let name = kernel.name();
        let not_found = || {
            Error::from(crate::error::KernelNotFound {
                kernel: name.to_owned(),
            })
        };
        let module = self.modules.get(source_key).ok_or_else(not_found)?;
        let c_name = CString::new(name).map_err(|_| not_found())?;
        // Dynamic shared memory up to the device's opt-in limit is allowed once, at
        // load, so launches never change function attributes (no race between threads).
        let function = module
            .function(&c_name, device.limits.max_shared_per_block_optin)
            .map_err(|e| match e {
                LoadError::NotFound => not_found(),
                LoadError::Rejected(e) | LoadError::Driver(e) => e,
            })?;
        let loaded = LoadedKernel {
            device_id: device.id,
            function,
        };
        self.functions.insert(kernel_key(kernel), (kernel, loaded));
        Ok(loaded)
    }
}

/// A kernel's key in [`Loaded::functions`]: its `Kernel`'s address (a `static`'s, one
/// per declaration).
fn kernel_key(kernel: &'static Kernel) -> usize {
    kernel as *const Kernel as usize
}

/// `source`'s image for `device`: CUDA compiled (once per process for devices of one
/// compute capability), PTX taken as it is.
fn image_of(kernel: &str, source: KernelSource, device: &DeviceInner) -> Result<Arc<Image>> {
    match source {
        KernelSource::Cuda(text) => {
            let capability = device.compute_capability;
            CompiledImages::process()
                .get_or_compile(text, capability, || compile_cubin(kernel, text, capability))
        }
        KernelSource::Ptx(text) => Ok(Arc::new(Image::ptx(text).ok_or_else(|| {
            Error::from(crate::error::KernelCompile {
                kernel: kernel.to_owned(),
                log: "the PTX text contains a NUL byte".to_owned(),
            })
        })?)),
    }
}

/// Loads `image` (of `kernel`'s source) into `device`'s context.
fn load_image(kernel: &str, image: &Image, device: &DeviceInner) -> Result<Module> {
    let bound = device.bind()?;
    match Module::load(image, &bound) {
        Ok(module) => Ok(module),
        Err(LoadError::Rejected(e)) if image.is_ptx() => {
            Err(Error::from(crate::error::KernelCompile {
                kernel: kernel.to_owned(),
                log: format!("the driver could not load the PTX: {e}"),
            }))
        }
        Err(LoadError::Rejected(e) | LoadError::Driver(e)) => Err(e),
        Err(LoadError::NotFound) => Err(Error::from(crate::error::KernelNotFound {
            kernel: kernel.to_owned(),
        })),
    }
}

impl Drop for ModuleCache {
    /// Runs when the device is dropped (the cache is its extension), with its context
    /// bound: unloads every module.
    ///
    /// No kernel of these modules can still be running: kernels are launched only inside
    /// scopes, every scope synchronises its stream before it ends (a fork's stream is
    /// joined into its parent's) or has seen the context stop with a sticky error, and no
    /// scope of this device handle is open, since each one borrows a stream that holds
    /// it. A scope of another handle of the GPU may be: `cuModuleUnload` waits for the
    /// whole GPU, so a collective whose peer died, on such a scope of this thread, is
    /// waited for first within its bounds (`memory::bound_wait_before_device_release`).
    fn drop(&mut self) {
        let loaded = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        // The cache forgets its functions first, and gives up the kernels' fast paths it
        // held, for the next device of this ordinal (a fast path keys on this device's
        // id, never reused, so none can find these functions after this).
        for (_, (kernel, function)) in loaded.functions.drain() {
            kernel.release_fast_path(self.ordinal, function.device_id);
        }
        // A context that cannot be bound any more leaves the modules loaded (a leak).
        let Ok(bound) = self.context.bind() else {
            return;
        };
        if !loaded.modules.is_empty() {
            // Its error is the scope's, whose end reports it.
            let _ = bound_wait_before_device_release(&self.context);
        }
        for (_, module) in loaded.modules.drain() {
            module.unload_waiting_for_device(&bound);
        }
    }
}
