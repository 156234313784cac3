//! Coalesced matrix transpose through shared memory.

use stream_core::{DeviceMemory, DeviceMemoryMut, Enqueue, Error, LaunchConfig, Result};

use crate::declarations as k;

/// `output = input^T`, where `input` is `rows x cols` row-major and `output` is
/// `cols x rows`. Both must hold `rows * cols` elements.
pub fn transpose<'s>(
    s: &'s impl Enqueue<'s>,
    input: &impl DeviceMemory<'s, f32>,
    rows: u32,
    cols: u32,
    output: &mut impl DeviceMemoryMut<'s, f32>,
) -> Result<()> {
    let elements = rows as usize * cols as usize;
    for (what, actual) in [
        ("transpose: input (rows * cols)", input.len()),
        ("transpose: output (rows * cols)", output.len()),
    ] {
        if actual != elements {
            return Err(Error::from(stream_core::error::ShapeMismatch {
                what,
                expected: elements,
                actual,
            }));
        }
    }
    // 64x64 tiles, 64x4 threads each (every thread moves 16 elements).
    let config = LaunchConfig::for_2d(cols as usize, rows as usize, (64, 64));
    let config = LaunchConfig {
        block: (64, 4, 1),
        ..config
    };
    k::transpose_f32(s, config, input, output, rows, cols)
}
