//! Shared-memory tiled SGEMM: 128x128 tiles of C per 256-thread block, 8x8 register
//! blocking per thread, slices of k double-buffered in shared memory, 16-byte loads and
//! stores where the rows allow them (see `cuda/sgemm.cu`).

use stream_core::{DeviceMemory, DeviceMemoryMut, Enqueue, Error, LaunchConfig, Result};

use crate::declarations as k;

/// `c = alpha * a * b + beta * c`, row-major, `a` is `m x k`, `b` is `k x n`, `c` is
/// `m x n`. With `beta == 0`, `c` is not read (it may be uninitialised). Relative
/// error against an f64 reference: about `k * eps_f32` in the worst case.
#[allow(clippy::too_many_arguments)] // the BLAS signature, unchanged
pub fn sgemm_tiled<'s>(
    s: &'s impl Enqueue<'s>,
    m: u32,
    n: u32,
    k: u32,
    alpha: f32,
    a: &impl DeviceMemory<'s, f32>,
    b: &impl DeviceMemory<'s, f32>,
    beta: f32,
    c: &mut impl DeviceMemoryMut<'s, f32>,
) -> Result<()> {
    check_shapes(
        [
            "sgemm_tiled: a (m * k)",
            "sgemm_tiled: b (k * n)",
            "sgemm_tiled: c (m * n)",
        ],
        m,
        n,
        k,
        a.len(),
        b.len(),
        c.len(),
    )?;
    k::sgemm_tiled(s, sgemm_tiled_config(m, n), m, n, k, alpha, a, b, beta, c)
}

/// The launch shape [`sgemm_tiled`] uses for a `m x n` result: one 256-thread block per
/// 128x128 tile of C, with at most 65,535 blocks in y (each block then
/// computes every 65,535th row tile), so that every `m` has a valid shape.
/// For programs that launch the kernel themselves (the benchmark's raw and cudarc
/// baselines), so that they measure the same shape.
pub fn sgemm_tiled_config(m: u32, n: u32) -> LaunchConfig {
    let tiles = |len: u32| len.div_ceil(TILE);
    LaunchConfig::new((tiles(n), tiles(m).min(MAX_ROW_BLOCKS), 1), (256, 1, 1))
}

/// Rows and columns of C per block.
const TILE: u32 = 128;
/// The most blocks a grid may have in y (CUDA's limit).
const MAX_ROW_BLOCKS: u32 = 65_535;

/// Checks that `a`, `b`, `c` (named by `operands`) hold `m*k`, `k*n`, `m*n` elements.
pub(crate) fn check_shapes(
    operands: [&'static str; 3],
    m: u32,
    n: u32,
    k: u32,
    a: usize,
    b: usize,
    c: usize,
) -> Result<()> {
    let (m, n, k) = (m as usize, n as usize, k as usize);
    for (operand, expected, actual) in [
        (operands[0], m * k, a),
        (operands[1], k * n, b),
        (operands[2], m * n, c),
    ] {
        if expected != actual {
            return Err(Error::from(stream_core::error::ShapeMismatch {
                what: operand,
                expected,
                actual,
            }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_shape_is_valid_for_every_m_and_n() {
        let c = sgemm_tiled_config(u32::MAX, u32::MAX);
        assert_eq!(c.grid, (u32::MAX.div_ceil(128), MAX_ROW_BLOCKS, 1));
        assert_eq!(c.block, (256, 1, 1));
        assert_eq!(sgemm_tiled_config(129, 1).grid, (1, 2, 1));
        assert_eq!(sgemm_tiled_config(0, 5).grid, (1, 0, 1));
    }
}
