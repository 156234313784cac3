//! [`DeviceLimits`]: the launch limits of a device, read once when it is opened.

use cudarc::driver::sys::CUdevice_attribute;

use crate::driver::device::DeviceId;
use crate::error::Result;

/// A device's launch limits, read once when the device is opened, so that validating a
/// launch costs no driver call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceLimits {
    pub(crate) max_threads_per_block: u32,
    pub(crate) max_block: [u32; 3],
    pub(crate) max_grid: [u32; 3],
    pub(crate) max_shared_per_block_optin: u32,
    /// Streaming multiprocessors: how many blocks run at once, for choosing a grid.
    pub(crate) multiprocessors: u32,
}

impl DeviceLimits {
    pub(crate) fn query(device: DeviceId) -> Result<Self> {
        use CUdevice_attribute::*;
        let get = |a| device.attribute(a).map(|v| v.max(0) as u32);
        Ok(DeviceLimits {
            max_threads_per_block: get(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_block: [
                get(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
                get(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
                get(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
            ],
            max_grid: [
                get(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
                get(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
                get(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
            ],
            max_shared_per_block_optin: get(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            multiprocessors: get(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        })
    }
}
