//! Telling pinned host memory (one DMA, no staging) from pageable memory (staged).

use crate::device::Device;
use crate::driver::memory::{host_alloc_flags, memory_type, MEMORY_TYPE_HOST};
use crate::error::Result;
use crate::memory::{as_bytes, DeviceRepr};

/// `true` when `host` (its first and last byte) is `cuMemHostAlloc` memory, or device
/// or managed memory: copies of it take the direct path at any size. Binds the
/// device's context for the lookups.
pub fn host_memory_is_pinned<T: DeviceRepr>(device: &Device, host: &[T]) -> Result<bool> {
    let _bound = device.inner.bind()?;
    Ok(!is_pageable(as_bytes(host)))
}

/// `true` unless the driver knows both the first and the last byte of `bytes`
/// (`bytes` is not empty) as memory it can DMA directly.
pub(crate) fn is_pageable(bytes: &[u8]) -> bool {
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => !(dma_capable(first) && dma_capable(last)),
        _ => false,
    }
}

/// `true` for page-locked memory from `cuMemHostAlloc` (any context's: `PinnedBuffer`s,
/// other libraries' pinned buffers), and for device or managed memory, which the
/// driver copies without a host staging copy of ours.
///
/// Plain `CU_MEMORYTYPE_HOST` is not trusted alone: with HMM (heterogeneous memory
/// management, open kernel modules), the driver may know pageable memory too.
/// Memory page-locked by `cuMemHostRegister` (this library never registers any) is
/// therefore staged: correct, if slower than its direct DMA.
fn dma_capable(byte: &u8) -> bool {
    let address = std::ptr::from_ref(byte);
    host_alloc_flags(address).is_some()
        || memory_type(address).is_some_and(|t| t != MEMORY_TYPE_HOST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_slices_are_never_pageable() {
        assert!(!is_pageable(&[]));
    }
}
