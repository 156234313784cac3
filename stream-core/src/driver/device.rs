//! Device queries: how many devices there are, and what one of them is.

use cudarc::driver::{result, sys};

use crate::error::{DriverResultExt, Error, Result};

/// How many CUDA devices the driver reports: `Ok(0)` when the driver loads but sees no
/// GPU, [`Error::NoDriver`] when there is no driver at all (never cudarc's loader
/// panic).
pub(crate) fn count() -> Result<usize> {
    // SAFETY: `is_culib_present` only tries to `dlopen` the driver library by its
    // well-known names and closes it again; it runs no library code besides the
    // loader's. Checking first is what turns "no driver" into an `Err` instead of the
    // panic cudarc's lazy loader would raise.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::NoDriver);
    }
    match result::init() {
        Ok(()) => {}
        Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => return Ok(0),
        Err(e) => return Err(Error::driver("cuInit", e)),
    }
    let count = result::device::get_count().call("cuDeviceGetCount")?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// A device of this process, by ordinal: a `CUdevice` that `cuDeviceGet` returned, which
/// is what every other call here needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceId(sys::CUdevice);

impl DeviceId {
    /// Device `ordinal` (below [`count`]).
    pub(crate) fn get(ordinal: usize) -> Result<Self> {
        let ordinal = i32::try_from(ordinal).map_err(|_| Error::NoDevice {
            ordinal,
            count: count().unwrap_or(0),
        })?;
        Ok(DeviceId(result::device::get(ordinal).call("cuDeviceGet")?))
    }

    /// The driver's handle.
    #[inline(always)]
    pub(crate) fn raw(self) -> sys::CUdevice {
        self.0
    }

    /// A handle that is only a number, for unit tests of code that keys on devices.
    #[cfg(test)]
    pub(crate) fn for_tests(raw: sys::CUdevice) -> Self {
        DeviceId(raw)
    }

    /// An attribute of the device.
    pub(crate) fn attribute(self, attr: sys::CUdevice_attribute) -> Result<i32> {
        // SAFETY: `self.0` came from `cuDeviceGet`; `attr` is a valid enum value.
        unsafe { result::device::get_attribute(self.0, attr) }.call("cuDeviceGetAttribute")
    }

    /// The marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub(crate) fn name(self) -> Result<String> {
        result::device::get_name(self.0).call("cuDeviceGetName")
    }

    /// Total device memory in bytes.
    pub(crate) fn total_memory(self) -> Result<usize> {
        // SAFETY: `self.0` came from `cuDeviceGet`.
        unsafe { result::device::total_mem(self.0) }.call("cuDeviceTotalMem")
    }

    /// `true` when this device can map `owner`'s memory (`cuDeviceCanAccessPeer`): NVLink
    /// or PCIe peer-to-peer between them. Only a query; granting is
    /// [`MemPool::grant_access`](super::pool::MemPool::grant_access).
    pub(crate) fn can_access_peer(self, owner: DeviceId) -> Result<bool> {
        let mut can = 0;
        // SAFETY: both handles came from `cuDeviceGet`; the call writes one `int` to
        // `can`, a live local.
        unsafe { sys::cuDeviceCanAccessPeer(&raw mut can, self.0, owner.0) }
            .result()
            .call("cuDeviceCanAccessPeer")?;
        Ok(can != 0)
    }
}
