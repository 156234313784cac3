//! [`LaunchConfig`]: the grid, block and dynamic shared memory of a launch, and its
//! checks against the device's limits and the loaded function's.

use crate::device::DeviceLimits;
use crate::error::{Error, LaunchLimit, Result};
use crate::kernel::declaration::LoadedKernel;
use crate::kernel::shape::threads;

/// Grid and block shape of a kernel launch, plus dynamic shared memory.
///
/// A launch whose grid has a zero dimension does nothing (an empty problem); a shape
/// the kernel's `#[kernel]` declaration does not admit (`block`, `max_threads`,
/// `shared`), a block with a zero dimension, or any dimension over the device's or the
/// kernel's limit, is an [`Error::InvalidLaunch`] naming the limit.
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

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.grid.0 == 0 || self.grid.1 == 0 || self.grid.2 == 0
    }

    /// Checks the block and the grid against the device's limits (read when the device
    /// was opened: no driver call).
    #[inline]
    pub(crate) fn check_device(&self, kernel: &'static str, device: &DeviceLimits) -> Result<()> {
        let invalid = |what, value: u64, limit, source_of_limit| {
            Err(Error::from(crate::error::InvalidLaunch {
                kernel,
                what,
                value,
                limit,
                source_of_limit,
            }))
        };
        let (bx, by, bz) = self.block;
        for (what, v, max, src) in [
            (
                "block.x",
                bx,
                device.max_block[0],
                "the device (CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)",
            ),
            (
                "block.y",
                by,
                device.max_block[1],
                "the device (CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)",
            ),
            (
                "block.z",
                bz,
                device.max_block[2],
                "the device (CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)",
            ),
        ] {
            if v == 0 {
                return invalid(
                    what,
                    0,
                    LaunchLimit::AtLeast(1),
                    "CUDA (a block needs at least one thread in each dimension)",
                );
            }
            if v > max {
                return invalid(what, v.into(), LaunchLimit::AtMost(max.into()), src);
            }
        }
        let threads = threads(self.block);
        if threads > device.max_threads_per_block.into() {
            return invalid(
                "threads per block",
                threads,
                LaunchLimit::AtMost(device.max_threads_per_block.into()),
                "the device (CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)",
            );
        }
        let (gx, gy, gz) = self.grid;
        for (what, v, max, src) in [
            (
                "grid.x",
                gx,
                device.max_grid[0],
                "the device (CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)",
            ),
            (
                "grid.y",
                gy,
                device.max_grid[1],
                "the device (CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)",
            ),
            (
                "grid.z",
                gz,
                device.max_grid[2],
                "the device (CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)",
            ),
        ] {
            if v > max {
                return invalid(what, v.into(), LaunchLimit::AtMost(max.into()), src);
            }
        }
        Ok(())
    }

    /// Checks the block and the shared memory against the loaded function's limits.
    #[inline]
    pub(crate) fn check_function(
        &self,
        kernel: &'static str,
        device: &DeviceLimits,
        loaded: &LoadedKernel,
    ) -> Result<()> {
        let threads = threads(self.block);
        if threads > loaded.function.max_threads_per_block.into() {
            return Err(Error::from(crate::error::InvalidLaunch {
                kernel,
                what: "threads per block",
                value: threads,
                limit: LaunchLimit::AtMost(loaded.function.max_threads_per_block.into()),
                source_of_limit: "this kernel's registers \
                                  (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)",
            }));
        }
        let shared =
            u64::from(self.shared_mem_bytes) + u64::from(loaded.function.static_shared_bytes);
        if shared > device.max_shared_per_block_optin.into() {
            return Err(Error::from(crate::error::InvalidLaunch {
                kernel,
                what: "shared memory per block (dynamic + static)",
                value: shared,
                limit: LaunchLimit::AtMost(device.max_shared_per_block_optin.into()),
                source_of_limit:
                    "the device (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)",
            }));
        }
        Ok(())
    }
}

fn saturate(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}
