//! Deterministic `reduce_sum` and `dot`: for a given length the summation order is
//! fixed (a fixed number of blocks, each a fixed strided set of elements and a fixed
//! shared-memory tree; then one block over the partials), so repeated runs give the
//! same bits. No atomics.

use stream_core::{DeviceMemory, DeviceMemoryMut, Enqueue, Error, LaunchConfig, Result};

use crate::elementwise::Float;
use crate::BLOCK;

/// Most partial sums: enough blocks to fill a large GPU, few enough for one block to
/// finish the job.
const MAX_PARTIALS: usize = 1024;

/// Number of partial sums for `n` elements: a function of `n` only.
fn partials_for(n: usize) -> usize {
    n.div_ceil(BLOCK as usize).min(MAX_PARTIALS)
}

/// One block per partial sum (the kernels use exactly `BLOCK` threads).
pub(crate) fn partials_config(partials: usize) -> LaunchConfig {
    LaunchConfig::for_elements(partials * BLOCK as usize, BLOCK)
}

/// `out[0] = sum of x`, deterministic for a given length. `out` must have one element,
/// of `T`'s [accumulator](Float::Accumulator) (`f32` for `f16` and `bf16`). The error
/// bound is that of pairwise summation in the accumulator: about `log2(n) * eps * sum
/// |x|`.
pub fn reduce_sum<'s, T: Float>(
    s: &'s impl Enqueue<'s>,
    x: &impl DeviceMemory<'s, T>,
    out: &mut impl DeviceMemoryMut<'s, T::Accumulator>,
) -> Result<()> {
    Error::check_lengths("reduce_sum (out must hold one element)", 1, out.len())?;
    let mut partials = s.alloc::<T::Accumulator>(partials_for(x.len()))?;
    T::launch_sum_partials(s, x, &mut partials)?;
    T::launch_final_sum(s, &partials, out)
}

/// `out[0] = sum of x[i] * y[i]`, deterministic for a given length. `x` and `y` must
/// have the same length and `out` one element, of `T`'s
/// [accumulator](Float::Accumulator).
pub fn dot<'s, T: Float>(
    s: &'s impl Enqueue<'s>,
    x: &impl DeviceMemory<'s, T>,
    y: &impl DeviceMemory<'s, T>,
    out: &mut impl DeviceMemoryMut<'s, T::Accumulator>,
) -> Result<()> {
    Error::check_lengths("dot", x.len(), y.len())?;
    Error::check_lengths("dot (out must hold one element)", 1, out.len())?;
    let mut partials = s.alloc::<T::Accumulator>(partials_for(x.len()))?;
    T::launch_dot_partials(s, x, y, &mut partials)?;
    T::launch_final_sum(s, &partials, out)
}
