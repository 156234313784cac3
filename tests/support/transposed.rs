//! [`transposed`]: the CPU's transpose, the reference of the transpose kernels and of
//! GEMM operands stored transposed.

/// `x^T` for `x` a row-major `rows x cols` matrix: `cols x rows`, element `(c, r)` at
/// `c * rows + r` (empty when either is 0).
pub fn transposed<T: Copy>(x: &[T], rows: usize, cols: usize) -> Vec<T> {
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| x[r * cols + c]))
        .collect()
}
