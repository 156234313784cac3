//! Launch shapes ([`LaunchConfig`]), their validation against the device's and the
//! kernel's limits, and the one unsafe launch entry that `#[kernel]` wrappers call.

use std::ffi::c_void;

use cudarc::driver::{result, sys};

use crate::error::{DriverResultExt, Error, Result};
use crate::kernel::{Kernel, LoadedKernel};
use crate::scope::Scope;

/// Grid and block shape of a kernel launch, plus dynamic shared memory.
///
/// A launch whose grid has a zero dimension does nothing (an empty problem); a block
/// with a zero dimension, or any dimension over the device's or the kernel's limit, is
/// an [`Error::InvalidLaunch`] naming the limit.
///
/// ```
/// use stream_core::LaunchConfig;
/// let cfg = LaunchConfig::for_elements(1000, 256);
/// assert_eq!(cfg.grid, (4, 1, 1));
/// assert_eq!(cfg.block, (256, 1, 1));
/// let tiles = LaunchConfig::for_2d(1920, 1080, (32, 8)).with_shared_mem(4096);
/// assert_eq!(tiles.grid, (60, 135, 1));
/// assert_eq!(tiles.shared_mem_bytes, 4096);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// An explicit shape without dynamic shared memory.
    pub const fn new(grid: (u32, u32, u32), block: (u32, u32, u32)) -> Self {
        LaunchConfig {
            grid,
            block,
            shared_mem_bytes: 0,
        }
    }

    /// One thread per element: `ceil(n / block_size)` blocks of `block_size` threads.
    /// A grid too large for the device is reported when launching.
    pub fn for_elements(n: usize, block_size: u32) -> Self {
        let blocks = if block_size == 0 {
            1
        } else {
            n.div_ceil(block_size as usize)
        };
        LaunchConfig::new((saturate(blocks), 1, 1), (block_size, 1, 1))
    }

    /// One thread per element of a `width x height` grid, in `tile = (x, y)` blocks.
    pub fn for_2d(width: usize, height: usize, tile: (u32, u32)) -> Self {
        let blocks = |len: usize, t: u32| {
            if t == 0 {
                1
            } else {
                saturate(len.div_ceil(t as usize))
            }
        };
        LaunchConfig::new(
            (blocks(width, tile.0), blocks(height, tile.1), 1),
            (tile.0, tile.1, 1),
        )
    }

    /// The same shape with `bytes` of dynamic shared memory per block.
    pub const fn with_shared_mem(mut self, bytes: u32) -> Self {
        self.shared_mem_bytes = bytes;
        self
    }

    fn is_empty(&self) -> bool {
        self.grid.0 == 0 || self.grid.1 == 0 || self.grid.2 == 0
    }

    /// Checks the shape against the device's and the kernel's limits.
    fn validate(
        &self,
        kernel: &'static str,
        device: &DeviceLimits,
        loaded: &LoadedKernel,
    ) -> Result<()> {
        let invalid = |what, value: u64, limit: u64, source_of_limit| {
            Err(Error::InvalidLaunch {
                kernel,
                what,
                value,
                limit,
                source_of_limit,
            })
        };
        let (bx, by, bz) = self.block;
        for (what, v, max, src) in [
            (
                "block.x",
                bx,
                device.max_block[0],
                "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X",
            ),
            (
                "block.y",
                by,
                device.max_block[1],
                "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y",
            ),
            (
                "block.z",
                bz,
                device.max_block[2],
                "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z",
            ),
        ] {
            if v == 0 {
                return invalid(
                    what,
                    0,
                    1,
                    "a block needs at least one thread in each dimension",
                );
            }
            if v > max {
                return invalid(what, v.into(), max.into(), src);
            }
        }
        let threads = u64::from(bx) * u64::from(by) * u64::from(bz);
        if threads > device.max_threads_per_block.into() {
            return invalid(
                "threads per block",
                threads,
                device.max_threads_per_block.into(),
                "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
            );
        }
        if threads > loaded.max_threads_per_block.into() {
            return invalid(
                "threads per block",
                threads,
                loaded.max_threads_per_block.into(),
                "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: this kernel's registers allow no more",
            );
        }
        let (gx, gy, gz) = self.grid;
        for (what, v, max, src) in [
            (
                "grid.x",
                gx,
                device.max_grid[0],
                "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X",
            ),
            (
                "grid.y",
                gy,
                device.max_grid[1],
                "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y",
            ),
            (
                "grid.z",
                gz,
                device.max_grid[2],
                "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z",
            ),
        ] {
            if v > max {
                return invalid(what, v.into(), max.into(), src);
            }
        }
        let shared = u64::from(self.shared_mem_bytes) + u64::from(loaded.static_shared_bytes);
        if shared > device.max_shared_per_block_optin.into() {
            return invalid(
                "shared memory per block (dynamic + static)",
                shared,
                device.max_shared_per_block_optin.into(),
                "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
            );
        }
        Ok(())
    }
}

fn saturate(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// A device's launch limits, read once when the device is opened.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceLimits {
    pub(crate) max_threads_per_block: u32,
    pub(crate) max_block: [u32; 3],
    pub(crate) max_grid: [u32; 3],
    pub(crate) max_shared_per_block_optin: u32,
}

impl DeviceLimits {
    pub(crate) fn query(
        attribute: impl Fn(sys::CUdevice_attribute) -> Result<i32>,
    ) -> Result<Self> {
        use sys::CUdevice_attribute::*;
        let get = |a| attribute(a).map(|v| v.max(0) as u32);
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
        })
    }
}

/// Launches `kernel` on the scope's stream with the argument pointers `args`.
///
/// No event is recorded and nothing is allocated: the scope's stream orders the launch
/// after earlier work on the same memory and before the scope's final synchronisation.
///
/// # Safety
///
/// `args` must match the kernel's CUDA parameter list exactly (one pointer to a value
/// of each parameter's type, in order); every device address passed must be memory of
/// the scope's brand that the kernel accesses only within the length passed beside it,
/// writing only memory borrowed mutably for the call. `#[kernel]` declarations make
/// this promise once, in their `unsafe fn` signature.
#[inline]
pub unsafe fn launch(
    scope: &Scope<'_, '_>,
    kernel: &'static Kernel,
    config: LaunchConfig,
    args: &mut [*mut c_void],
) -> Result<()> {
    let device = &scope.device().inner;
    let loaded = kernel.load(device)?;
    config.validate(kernel.name(), &device.limits, &loaded)?;
    if config.is_empty() {
        return Ok(());
    }
    // SAFETY: `loaded.function` belongs to a module loaded on the scope's device (its
    // cache entry carries the device's unique id) and stays loaded while the device
    // lives; the shape was validated above; the scope's stream is live and its context
    // current; the arguments are the caller's promise (see `# Safety`).
    unsafe {
        result::launch_kernel(
            loaded.function,
            config.grid,
            config.block,
            config.shared_mem_bytes,
            scope.raw,
            args,
        )
    }
    .call("cuLaunchKernel")
}

/// The pointer a kernel argument array holds for `value`.
#[inline(always)]
pub fn arg<T>(value: &T) -> *mut c_void {
    (value as *const T).cast_mut().cast()
}
