//! Launch shapes ([`LaunchConfig`]), the shapes a `#[kernel]` declaration admits
//! ([`KernelShape`]), the validation of a launch against both and against the device's
//! and the kernel's limits, and the one unsafe launch entry that `#[kernel]` wrappers
//! call.

use std::ffi::c_void;

use cudarc::driver::{result, sys};

use crate::error::{DriverResultExt, Error, Result};
use crate::kernel::{Kernel, LoadedKernel};
use crate::scope::Scope;

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

    fn is_empty(&self) -> bool {
        self.grid.0 == 0 || self.grid.1 == 0 || self.grid.2 == 0
    }

    /// Checks the block and the grid against the device's limits (read when the device
    /// was opened: no driver call).
    fn check_device(&self, kernel: &'static str, device: &DeviceLimits) -> Result<()> {
        let invalid = |what, value: u64, limit, source_of_limit| {
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
    fn check_function(
        &self,
        kernel: &'static str,
        device: &DeviceLimits,
        loaded: &LoadedKernel,
    ) -> Result<()> {
        let threads = threads(self.block);
        if threads > loaded.max_threads_per_block.into() {
            return Err(Error::InvalidLaunch {
                kernel,
                what: "threads per block",
                value: threads,
                limit: LaunchLimit::AtMost(loaded.max_threads_per_block.into()),
                source_of_limit: "this kernel's registers \
                                  (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)",
            });
        }
        let shared = u64::from(self.shared_mem_bytes) + u64::from(loaded.static_shared_bytes);
        if shared > device.max_shared_per_block_optin.into() {
            return Err(Error::InvalidLaunch {
                kernel,
                what: "shared memory per block (dynamic + static)",
                value: shared,
                limit: LaunchLimit::AtMost(device.max_shared_per_block_optin.into()),
                source_of_limit:
                    "the device (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)",
            });
        }
        Ok(())
    }
}

/// Threads in a block of shape `block`.
fn threads(block: (u32, u32, u32)) -> u64 {
    u64::from(block.0) * u64::from(block.1) * u64::from(block.2)
}

/// What a limit in an [`Error::InvalidLaunch`] admits: at most, exactly or at least a
/// number.
///
/// ```
/// use stream_core::LaunchLimit;
/// assert_eq!(LaunchLimit::AtMost(1024).to_string(), "at most 1024");
/// assert_eq!(LaunchLimit::Exactly(256).to_string(), "exactly 256");
/// assert_eq!(LaunchLimit::AtLeast(4096).value(), 4096);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchLimit {
    /// The value may not exceed this (a device limit, `max_threads = N`).
    AtMost(u64),
    /// The value must be this (`block = ...`).
    Exactly(u64),
    /// The value may not be below this (a block dimension, `shared = ...`).
    AtLeast(u64),
}

impl LaunchLimit {
    /// The number the limit names.
    pub fn value(&self) -> u64 {
        match *self {
            LaunchLimit::AtMost(v) | LaunchLimit::Exactly(v) | LaunchLimit::AtLeast(v) => v,
        }
    }
}

impl std::fmt::Display for LaunchLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchLimit::AtMost(v) => write!(f, "at most {v}"),
            LaunchLimit::Exactly(v) => write!(f, "exactly {v}"),
            LaunchLimit::AtLeast(v) => write!(f, "at least {v}"),
        }
    }
}

/// The launch shapes a `#[kernel]` declaration admits (its `block`, `max_threads` and
/// `shared` arguments), made by the macro in the kernel's `static`. [`launch`] checks
/// every configuration against it first, before loading or enqueueing anything: these
/// are the shapes for which the declaration promises the kernel is memory-safe.
///
/// Const-constructible, so that it lives in the `static`; checking it costs a few
/// comparisons (and one call of the declaration's own rule for `shared = |block| ...`).
#[derive(Debug, Clone, Copy)]
pub struct KernelShape {
    /// The blocks admitted.
    pub block: BlockRule,
    /// The dynamic shared memory admitted.
    pub shared: SharedRule,
}

/// The blocks a declaration admits.
#[derive(Debug, Clone, Copy)]
pub enum BlockRule {
    /// No `block` or `max_threads`: the declaration promises the kernel is memory-safe
    /// for every block the device accepts.
    Any,
    /// `block = (x, y, z)`: exactly this block.
    Exactly {
        /// Threads in x, y, z.
        block: (u32, u32, u32),
        /// The declaration, for messages: ``"`#[kernel(block = 256)]` on `k`"``.
        declared: &'static str,
    },
    /// `max_threads = n`: any block of at most `threads` threads (within the device's
    /// limits).
    AtMost {
        /// The most threads per block.
        threads: u32,
        /// The declaration, for messages.
        declared: &'static str,
    },
}

/// The dynamic shared memory a declaration needs.
///
/// A launch with *less* than the declaration needs is refused: the kernel would index
/// past the end of its `extern __shared__` array. *More* is admitted: the kernel never
/// touches the bytes past what it needs, and the device's own limit (dynamic plus
/// static shared memory at most the opt-in maximum) is still checked for every launch.
#[derive(Debug, Clone, Copy)]
pub enum SharedRule {
    /// No `shared`: the declaration promises the kernel is memory-safe with any dynamic
    /// shared memory, none included.
    Any,
    /// `shared = BYTES`: at least this many bytes, whatever the block.
    AtLeast {
        /// The bytes needed.
        bytes: u32,
        /// The declaration, for messages.
        declared: &'static str,
    },
    /// `shared = |(x, y, z)| ...`: at least `bytes(block)` bytes for a block of that
    /// shape (called only with blocks within the device's limits).
    PerBlock {
        /// The declaration's rule.
        bytes: fn((u32, u32, u32)) -> u32,
        /// The declaration, for messages.
        declared: &'static str,
    },
}

impl KernelShape {
    /// Checks `block` against the declared `block` or `max_threads`.
    #[inline]
    fn check_block(&self, kernel: &'static str, block: (u32, u32, u32)) -> Result<()> {
        match self.block {
            BlockRule::Any => Ok(()),
            BlockRule::Exactly {
                block: admitted,
                declared,
            } => {
                for (what, value, admitted) in [
                    ("block.x", block.0, admitted.0),
                    ("block.y", block.1, admitted.1),
                    ("block.z", block.2, admitted.2),
                ] {
                    if value != admitted {
                        return Err(Error::InvalidLaunch {
                            kernel,
                            what,
                            value: value.into(),
                            limit: LaunchLimit::Exactly(admitted.into()),
                            source_of_limit: declared,
                        });
                    }
                }
                Ok(())
            }
            BlockRule::AtMost {
                threads: admitted,
                declared,
            } => {
                let value = threads(block);
                if value > u64::from(admitted) {
                    return Err(Error::InvalidLaunch {
                        kernel,
                        what: "threads per block",
                        value,
                        limit: LaunchLimit::AtMost(admitted.into()),
                        source_of_limit: declared,
                    });
                }
                Ok(())
            }
        }
    }

    /// Checks `config.shared_mem_bytes` against the declared `shared`; `config.block`
    /// is within the device's limits.
    #[inline]
    fn check_shared(&self, kernel: &'static str, config: &LaunchConfig) -> Result<()> {
        let (needed, declared) = match self.shared {
            SharedRule::Any => return Ok(()),
            SharedRule::AtLeast { bytes, declared } => (bytes, declared),
            SharedRule::PerBlock { bytes, declared } => (bytes(config.block), declared),
        };
        if config.shared_mem_bytes < needed {
            return Err(Error::InvalidLaunch {
                kernel,
                what: "dynamic shared memory (bytes)",
                value: config.shared_mem_bytes.into(),
                limit: LaunchLimit::AtLeast(needed.into()),
                source_of_limit: declared,
            });
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
/// `config` is checked first against the shapes the kernel's declaration admits
/// ([`KernelShape`]: its block, then, once the block is known to be within the device's
/// limits, its dynamic shared memory) and against the device's limits, all without a
/// driver call and before the kernel is loaded; then, once loaded, against the
/// function's own limits. Any refusal is an [`Error::InvalidLaunch`] and nothing is
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
/// this for every launch shape its [`KernelShape`] admits. `#[kernel]` declarations
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
    // SAFETY: `loaded.function` belongs to a module loaded on the scope's device (its
    // cache entry carries the device's unique id) and stays loaded while the device
    // lives. `config` was checked above against `kernel.shape`, the launch shapes the
    // declaration admits (its block, and at least the dynamic shared memory it needs),
    // so the caller's promise (see `# Safety`) covers this shape; and against the
    // device's and the function's limits, so the driver accepts it. The scope's stream
    // is live and its context current; the arguments are the caller's promise.
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
