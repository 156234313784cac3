//! [`KernelShape`]: the launch shapes a `#[kernel]` declaration admits (its `block`,
//! `max_threads` and `shared` arguments), and the checks of a launch against them.

use crate::error::{Error, LaunchLimit, Result};
use crate::kernel::config::LaunchConfig;

/// Threads in a block of shape `block`.
pub(crate) fn threads(block: (u32, u32, u32)) -> u64 {
    u64::from(block.0) * u64::from(block.1) * u64::from(block.2)
}

/// The launch shapes a `#[kernel]` declaration admits (its `block`, `max_threads` and
/// `shared` arguments), made by the macro in the kernel's `static`. [`launch`](crate::__private::launch) checks
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
    pub(crate) fn check_block(&self, kernel: &'static str, block: (u32, u32, u32)) -> Result<()> {
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
                        return Err(Error::from(crate::error::InvalidLaunch {
                            kernel,
                            what,
                            value: value.into(),
                            limit: LaunchLimit::Exactly(admitted.into()),
                            source_of_limit: declared,
                        }));
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
                    return Err(Error::from(crate::error::InvalidLaunch {
                        kernel,
                        what: "threads per block",
                        value,
                        limit: LaunchLimit::AtMost(admitted.into()),
                        source_of_limit: declared,
                    }));
                }
                Ok(())
            }
        }
    }

    /// Checks `config.shared_mem_bytes` against the declared `shared`; `config.block`
    /// is within the device's limits.
    #[inline]
    pub(crate) fn check_shared(&self, kernel: &'static str, config: &LaunchConfig) -> Result<()> {
        let (needed, declared) = match self.shared {
            SharedRule::Any => return Ok(()),
            SharedRule::AtLeast { bytes, declared } => (bytes, declared),
            SharedRule::PerBlock { bytes, declared } => (bytes(config.block), declared),
        };
        if config.shared_mem_bytes < needed {
            return Err(Error::from(crate::error::InvalidLaunch {
                kernel,
                what: "dynamic shared memory (bytes)",
                value: config.shared_mem_bytes.into(),
                limit: LaunchLimit::AtLeast(needed.into()),
                source_of_limit: declared,
            }));
        }
        Ok(())
    }
}
