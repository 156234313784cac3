//! Items that macro expansions name (`::stream_core::__private::...`). Not public API:
//! anything here may change in any release.

pub use crate::kernel::{Kernel, KernelSource};
pub use crate::launch::{arg, launch, BlockRule, KernelShape, LaunchConfig, SharedRule};
pub use crate::repr::DeviceRepr;
pub use crate::scope::{scope, Scope};
/// Tuning and observation of staged pageable copies, for the benchmark's sweeps and the
/// GPU tests (see the `staging` module's docs).
pub use crate::staging::{
    host_memory_is_pinned, set_staging_config, staged_copy_counts, staging_config,
    with_staging_config, StagingConfig,
};
pub use crate::stream::Stream;
pub use crate::view::{DeviceMemory, DeviceMemoryMut};
pub use crate::Result;

/// Device address and length of memory a kernel reads: its two CUDA parameters
/// `const T* p, size_t p_len`.
#[inline(always)]
pub fn read_parts<'s, T: DeviceRepr>(memory: &impl DeviceMemory<'s, T>) -> [u64; 2] {
    let raw = memory.raw(crate::view::sealed::TOKEN);
    [raw.ptr, raw.len as u64]
}

/// Device address and length of memory a kernel writes: its two CUDA parameters
/// `T* p, size_t p_len`. Taking `&mut` is what proves no other argument aliases it.
#[inline(always)]
pub fn write_parts<'s, T: DeviceRepr>(memory: &mut impl DeviceMemoryMut<'s, T>) -> [u64; 2] {
    let raw = memory.raw(crate::view::sealed::TOKEN);
    [raw.ptr, raw.len as u64]
}

/// A scalar kernel argument; the bound is the check that only plain-old-data crosses.
#[inline(always)]
pub fn scalar<T: DeviceRepr>(value: T) -> T {
    value
}

/// The scope's raw stream, for interop launches (cuBLAS) inside this workspace.
#[inline(always)]
pub fn raw_stream(scope: &Scope<'_, '_>) -> cudarc::driver::sys::CUstream {
    scope.raw
}
