//! What the managed-memory test binaries share (`test_managed`,
//! `test_managed_stream_attached`, `test_managed_limits`): the in-place affine kernel
//! and its CPU reference, the binary's lock, the device's managed mode, and random
//! inputs. Each binary uses the part it needs.
#![allow(dead_code)]

use std::sync::MutexGuard;

use gpu_tests::{device, ensure, Failed, Rng, TestResult};
use stream_core::{
    kernel, Device, DeviceMemoryMut, Error, LaunchConfig, ManagedAccess, ManagedVec, Scope,
};

/// Elements of most tests: 16 MiB of `u32`.
pub const LEN: usize = 1 << 22;

const AFFINE_SRC: &str = r#"
extern "C" __global__ void __launch_bounds__(256)
affine_in_place_u32(unsigned a, unsigned b, unsigned* y, size_t y_len) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < y_len;
         i += (size_t)gridDim.x * blockDim.x) {
        y[i] = y[i] * a + b;
    }
}
"#;

#[kernel(cuda = AFFINE_SRC, block = 256)]
/// `y[i] = y[i] * a + b` (wrapping), in place, grid-stride.
unsafe fn affine_in_place_u32(a: u32, b: u32, y: &mut [u32]);

/// Queues `y = y * a + b` on `s`'s stream.
pub fn affine<'s>(
    s: &'s Scope<'s, '_>,
    a: u32,
    b: u32,
    y: &mut impl DeviceMemoryMut<'s, u32>,
) -> Result<(), Error> {
    let config = LaunchConfig::for_elements(y.len().min(1 << 24), 256);
    affine_in_place_u32(s, config, a, b, y)
}

/// The CPU reference of [`affine`].
pub fn affine_cpu(x: &[u32], a: u32, b: u32) -> Vec<u32> {
    x.iter()
        .map(|v| v.wrapping_mul(a).wrapping_add(b))
        .collect()
}

/// Takes this binary's lock and device 0.
pub fn begin() -> TestResult<(MutexGuard<'static, ()>, Device)> {
    Ok((gpu_tests::serial(), device()?))
}

/// A managed vec of `input.len()` elements in mode `access`, holding `input`.
pub fn managed_from(
    dev: &Device,
    input: &[u32],
    access: ManagedAccess,
) -> TestResult<ManagedVec<u32>> {
    let mut v = dev.alloc_managed_with_access::<u32>(input.len(), access)?;
    v.host_mut()?.copy_from_slice(input);
    Ok(v)
}

/// The device's own mode, failing clearly when it has no managed memory at all.
pub fn device_access(dev: &Device) -> TestResult<ManagedAccess> {
    dev.managed_access()?.ok_or_else(|| {
        Failed::from(
            "the device reports no managed memory support (CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 0)",
        )
    })
}

/// Fails with a clear message unless the device has concurrent managed access (the
/// tests of what only that mode allows).
pub fn require_concurrent(dev: &Device) -> TestResult {
    let access = device_access(dev)?;
    ensure!(
        access == ManagedAccess::Concurrent,
        "this test needs a device with concurrent managed access (H100/H200 have it); this one is {access:?}"
    );
    Ok(())
}

/// Two random multipliers and offsets, and random input.
pub fn fresh(len: usize) -> (Vec<u32>, u32, u32) {
    let mut rng = Rng::new();
    (rng.vec(len), rng.value(), rng.value())
}
