//! Shared-memory tiled SGEMM: 128x128 tiles of C per 256-thread block, 8x8 register
//! blocking per thread, slices of k double-buffered in shared memory, 16-byte loads and
//! stores where the rows allow them (see `cuda/sgemm_tiles.cuh`). A C of few tiles with
//! a long k (a weight gradient: 256 x 256 over a batch of 1024) has k split among blocks
//! ([`SplitK`]), so that the device's multiprocessors all work.

use stream_core::{DeviceMemory, DeviceMemoryMut, Enqueue, Error, LaunchConfig, Result};

use crate::declarations as k;

/// `c = alpha * a * b + beta * c`, row-major, `a` is `m x k`, `b` is `k x n`, `c` is
/// `m x n`. With `beta == 0`, `c` is not read (it may be uninitialised). Relative
/// error against an f64 reference: about `k * eps_f32` in the worst case.
///
/// When C has fewer 128x128 tiles than half the device's multiprocessors and k is long
/// enough, k is split among blocks ([`SplitK::choose`]): each block multiplies one range
/// of k into scratch memory allocated on `s` (at most a tile per multiprocessor, 64 KiB
/// each), and a second kernel adds the ranges in a fixed order. The result is the same
/// at every run; it may differ from the unsplit kernel's in the last bits (the sums are
/// grouped differently). Transposed operands: [`sgemm_tiled_op`].
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
    sgemm_tiled_op(s, Op::N, Op::N, m, n, k, alpha, a, b, beta, c)
}

/// `c = alpha * op_a(a) * op_b(b) + beta * c`, row-major: [`sgemm_tiled`] with either
/// operand stored transposed (BLAS's `op`), read in place, as in a backward pass: the
/// weight gradient `x^T dy` is `sgemm_tiled_op(s, Op::T, Op::N, ..)` on `x` as it is.
/// `op_a(a)` is `m x k` (so `a` holds `m * k` elements: `m x k`, or `k x m` with
/// [`Op::T`]), `op_b(b)` is `k x n`.
///
/// ```no_run
/// use kernels::Op;
/// use stream_core::{scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let stream = dev.new_stream()?;
/// let (rows, inputs, outputs) = (1024, 256, 128);
/// let x = vec![0.5f32; rows * inputs]; // rows x inputs
/// let dy = vec![1.0f32; rows * outputs]; // rows x outputs
/// let mut grad = vec![0.0f32; inputs * outputs];
/// scope(&stream, |s| {
///     let (dx, ddy) = (s.upload(&x)?, s.upload(&dy)?);
///     let mut dw = s.alloc::<f32>(inputs * outputs)?;
///     let (m, n, k) = (inputs as u32, outputs as u32, rows as u32);
///     kernels::sgemm_tiled_op(s, Op::T, Op::N, m, n, k, 1.0, &dx, &ddy, 0.0, &mut dw)?;
///     s.copy_to_host(&dw, &mut grad)?.wait()?;
///     Ok::<_, Error>(())
/// })?;
/// assert_eq!(grad[0], 512.0); // 1024 products of 0.5
/// # Ok(()) }
/// ```
#[allow(clippy::too_many_arguments)] // the BLAS signature
pub fn sgemm_tiled_op<'s>(
    s: &'s impl Enqueue<'s>,
    op_a: Op,
    op_b: Op,
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
    // Each form of the operands has kernels of its own, in modules compiled at their first
    // launch (`declarations.rs`), so that a program compiles only the forms it uses.
    let Some(split) = SplitK::choose(m, n, k, s.multiprocessor_count()) else {
        let config = sgemm_tiled_config(m, n);
        return match (op_a, op_b) {
            (Op::N, Op::N) => k::sgemm_tiled_nn(s, config, m, n, k, alpha, a, b, beta, c),
            (Op::T, Op::N) => k::sgemm_tiled_tn(s, config, m, n, k, alpha, a, b, beta, c),
            (Op::N, Op::T) => k::sgemm_tiled_nt(s, config, m, n, k, alpha, a, b, beta, c),
            (Op::T, Op::T) => k::sgemm_tiled_tt(s, config, m, n, k, alpha, a, b, beta, c),
        };
    };
    // `choose` keeps splits * m * n under a tile per multiprocessor: no overflow.
    let mut partials = s.alloc::<f32>(split.splits as usize * m as usize * n as usize)?;
    let (config, chunk, p) = (split.config(m, n), split.chunk, &mut partials);
    match (op_a, op_b) {
        (Op::N, Op::N) => k::sgemm_split_k_nn(s, config, m, n, k, chunk, a, b, p)?,
        (Op::T, Op::N) => k::sgemm_split_k_tn(s, config, m, n, k, chunk, a, b, p)?,
        (Op::N, Op::T) => k::sgemm_split_k_nt(s, config, m, n, k, chunk, a, b, p)?,
        (Op::T, Op::T) => k::sgemm_split_k_tt(s, config, m, n, k, chunk, a, b, p)?,
    }
    let sum = sum_config(m as usize * n as usize);
    k::sgemm_split_k_sum(s, sum, m, n, split.splits, alpha, &partials, beta, c)
    // `partials` is freed here, on `s`'s stream, after the sum that reads it.
}

/// How a GEMM reads an operand (BLAS's `op`): as stored, or transposed. Row-major
/// throughout: `op(x)` of `r x c` is `x` stored `r x c` with [`Op::N`], `c x r` with
/// [`Op::T`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// As stored.
    N,
    /// Transposed.
    T,
}

/// How [`sgemm_tiled`] splits k among blocks: `splits` ranges of `chunk` (a multiple of
/// the kernel's slice of 8; the last range may be shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitK {
    /// Ranges of k, one per block in z.
    pub splits: u32,
    /// The length of each range but the last.
    pub chunk: u32,
}

impl SplitK {
    /// The split [`sgemm_tiled`] uses for an `m x n x k` product on a device of
    /// `multiprocessors`, or `None` to compute it in one pass: when C's tiles already
    /// occupy half the multiprocessors, or k is too short to give each block at least
    /// [`MIN_K_PER_SPLIT`] of it. Otherwise as many ranges as keep one block per
    /// multiprocessor.
    pub fn choose(m: u32, n: u32, k: u32, multiprocessors: u32) -> Option<SplitK> {
        let tiles = u64::from(m.div_ceil(TILE)) * u64::from(n.div_ceil(TILE));
        if tiles == 0 || 2 * tiles > u64::from(multiprocessors) {
            return None;
        }
        let by_blocks = u64::from(multiprocessors) / tiles;
        let by_k = u64::from(k / MIN_K_PER_SPLIT);
        let wanted = by_blocks.min(by_k);
        if wanted < 2 {
            return None;
        }
        let chunk = k.div_ceil(wanted as u32).next_multiple_of(SLICE);
        Some(SplitK {
            splits: k.div_ceil(chunk),
            chunk,
        })
    }

    /// The launch shape of the split kernel: [`sgemm_tiled_config`]'s, with one block in z
    /// per range.
    pub fn config(&self, m: u32, n: u32) -> LaunchConfig {
        let mut config = sgemm_tiled_config(m, n);
        config.grid.2 = self.splits;
        config
    }
}

/// The least k a split-k block gets: 4 of the kernel's slices. Measured against 64 on an
/// H200 (`bench --case sgemm`, three alternations): 256x256x1024 went from 1.17x-1.25x of
/// cuBLAS's time to 1.08x-1.12x (32 ranges instead of 16), 256x128x1024 from 1.29x-1.37x
/// to 1.07x-1.09x: more blocks at work outweigh the larger partial sums.
pub const MIN_K_PER_SPLIT: u32 = 32;

/// The kernel's slice of k (`BK` in `cuda/sgemm_tiles.cuh`).
const SLICE: u32 = 8;

/// The sum kernel's launch shape for `len` elements: 256 threads a block, enough blocks
/// for one element each, at most 65,535 (it strides past that).
fn sum_config(len: usize) -> LaunchConfig {
    let blocks = len.div_ceil(256).clamp(1, 65_535) as u32;
    LaunchConfig::new((blocks, 1, 1), (256, 1, 1))
}

/// The CUDA module of `sgemm_tiled`'s one-pass kernel (`extern "C" sgemm_tiled`) for
/// operands as stored, as [`sgemm_tiled`] compiles it. For programs that launch the kernel
/// themselves (the benchmark's raw and cudarc baselines), with [`sgemm_tiled_config`]'s
/// shape, so that they run the same code.
pub const SGEMM_TILED_SOURCE: &str = k::SGEMM_AS_STORED;

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

    #[test]
    fn split_k_fills_the_multiprocessors_only_for_few_tiles_and_a_long_k() {
        // A weight gradient on an H100 (132 multiprocessors): 4 tiles, k for 32 ranges.
        let split = SplitK::choose(256, 256, 1024, 132).unwrap();
        assert_eq!(
            split,
            SplitK {
                splits: 32,
                chunk: 32
            }
        );
        assert_eq!(split.config(256, 256).grid, (2, 2, 32));
        // 2 tiles: 33 blocks would do for each, k allows 32.
        let split = SplitK::choose(256, 128, 1024, 132).unwrap();
        assert_eq!((split.splits, split.chunk), (32, 32));
        let split = SplitK::choose(128, 128, 100_000, 132).unwrap();
        assert_eq!((split.splits, split.chunk), (132, 760));
        assert!(split.splits * split.chunk >= 100_000);
        // Enough tiles already, a short k, nothing to compute: one pass.
        assert_eq!(SplitK::choose(4096, 4096, 4096, 132), None);
        assert_eq!(SplitK::choose(2048, 1024, 4096, 132), None);
        // 64 tiles: two ranges fill 128 of 132.
        let split = SplitK::choose(1024, 1024, 4096, 132);
        assert_eq!(
            split,
            Some(SplitK {
                splits: 2,
                chunk: 2048
            })
        );
        assert_eq!(SplitK::choose(256, 256, 63, 132), None);
        assert_eq!(SplitK::choose(0, 256, 1024, 132), None);
        assert_eq!(SplitK::choose(256, 256, 1024, 0), None);
    }

    #[test]
    fn every_split_covers_k_with_whole_slices_and_no_empty_range() {
        for k in [128u32, 129, 1000, 1024, 4097, 65_535, u32::MAX] {
            for multiprocessors in [2u32, 8, 108, 132, 1024] {
                let Some(split) = SplitK::choose(1, 1, k, multiprocessors) else {
                    continue;
                };
                assert_eq!(split.chunk % 8, 0, "{k} {multiprocessors}");
                let covered = u64::from(split.splits) * u64::from(split.chunk);
                assert!(covered >= u64::from(k), "{k} {multiprocessors}: {split:?}");
                assert!(
                    covered - u64::from(split.chunk) < u64::from(k),
                    "{k}: {split:?}"
                );
                assert!(split.splits >= 2 && split.splits <= multiprocessors);
            }
        }
    }

    #[test]
    fn the_sum_covers_every_element_within_the_grid_limit() {
        assert_eq!(sum_config(1).grid, (1, 1, 1));
        assert_eq!(sum_config(0).grid, (1, 1, 1));
        assert_eq!(sum_config(65_536).grid, (256, 1, 1));
        assert_eq!(sum_config(usize::MAX).grid, (65_535, 1, 1));
    }
}
