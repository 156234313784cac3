//! [`Kernel`]: a declared kernel's name, code and admitted launch shapes, and the fast
//! path to its function on a device.
//!
//! A kernel is compiled (or its PTX loaded) on the first launch on a device, once per
//! source and device, never per launch. The hot path is a few atomic loads and a
//! compare: for each of the ordinals 0 to 7, each `Kernel` keeps its function on the
//! first live device of that ordinal that launched it (a `FunctionSlot`, released when
//! that device is dropped), so that a process driving several GPUs (a thread each)
//! launches on every one of them without a lock, and so does a device made again after
//! its ordinal's first was dropped. A device of a higher ordinal, or a second live
//! device of an ordinal, looks the function up in its own
//! [module cache](super::module_cache).

use crate::device::DeviceInner;
use crate::driver::function_slot::FunctionSlot;
use crate::driver::module::Function;
use crate::error::Result;
use crate::kernel::module_cache::ModuleCache;
use crate::kernel::params::KernelParam;
use crate::kernel::shape::KernelShape;

/// Where a kernel's code comes from.
#[derive(Debug, Clone, Copy)]
pub enum KernelSource {
    /// CUDA C++ source, compiled with NVRTC for the device's own architecture (once per
    /// process for devices of one compute capability).
    Cuda(&'static str),
    /// Precompiled PTX text, JIT-compiled by the driver.
    Ptx(&'static str),
}

impl KernelSource {
    /// The source's text, CUDA C++ or PTX.
    pub(crate) fn text(self) -> &'static str {
        match self {
            KernelSource::Cuda(text) | KernelSource::Ptx(text) => text,
        }
    }
}

/// A kernel declared with `#[kernel]`: its name, its code and the launch shapes its
/// declaration admits. Lives in a `static` made by the macro; launching goes through the
/// declaration's safe wrapper, and [`launch`](crate::__private::launch) refuses any
/// configuration outside `shape` before loading the kernel.
#[derive(Debug)]
pub struct Kernel {
    name: &'static str,
    pub(crate) source: KernelSource,
    /// The launch shapes the declaration promises the kernel is memory-safe for.
    pub(crate) shape: KernelShape,
    /// The declaration's parameters, in order (empty for a kernel made without them,
    /// whose graph nodes then cannot have their scalars changed).
    pub(crate) params: &'static [KernelParam],
    /// The function on the first live device of each ordinal below
    /// [`FAST_PATH_ORDINALS`] that launched the kernel.
    by_ordinal: [FunctionSlot; FAST_PATH_ORDINALS],
}

/// How many device ordinals have a lock-free path to a kernel's function: the GPUs of
/// one node (eight on the largest common hosts).
const FAST_PATH_ORDINALS: usize = 8;

/// A kernel loaded on one device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoadedKernel {
    /// `DeviceInner::id` of the device whose module holds `function`.
    pub(crate) device_id: u64,
    /// The function, valid while that device's module cache keeps its module loaded
    /// (until the device is dropped).
    pub(crate) function: Function,
}

impl Kernel {
    /// A kernel named `name` (its `extern "C"` name in the code) with code `source`,
    /// launched only with shapes that `shape` admits.
    pub const fn new(name: &'static str, source: KernelSource, shape: KernelShape) -> Self {
        Kernel {
            name,
            source,
            shape,
            params: &[],
            by_ordinal: [const { FunctionSlot::new() }; FAST_PATH_ORDINALS],
        }
    }

    /// The same kernel, with the declaration's parameters described (the macro's
    /// output; see [`KernelParam`]).
    pub const fn with_params(mut self, params: &'static [KernelParam]) -> Self {
        self.params = params;
        self
    }

    /// The kernel's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The kernel's function on `device`, compiling or loading its module on first use.
    #[inline]
    pub(crate) fn load(&'static self, device: &DeviceInner) -> Result<LoadedKernel> {
        let slot = self.by_ordinal.get(device.ordinal);
        match slot.and_then(|slot| slot.get(device.id)) {
            // The slot pairs a function with the id of the device it was loaded on (ids
            // are never reused), so this is the function in `device`'s module cache.
            Some(function) => Ok(LoadedKernel {
                device_id: device.id,
                function,
            }),
            None => self.load_slow(slot, device),
        }
    }

    /// Lets the next device of `ordinal` keep its function in this kernel's fast path,
    /// if the device `device_id` kept its own there (called as that device is dropped).
    pub(crate) fn release_fast_path(&self, ordinal: usize, device_id: u64) {
        if let Some(slot) = self.by_ordinal.get(ordinal) {
            slot.release(device_id);
        }
    }

    #[cold]
    fn load_slow(
        &'static self,
        slot: Option<&FunctionSlot>,
        device: &DeviceInner,
    ) -> Result<LoadedKernel> {
        let loaded = ModuleCache::of(device).load(self, device)?;
        if let Some(slot) = slot {
            slot.keep(loaded.device_id, &loaded.function);
        }
        Ok(loaded)
    }
}
