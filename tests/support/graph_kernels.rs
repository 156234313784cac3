//! The two kernels of the graph tests that change or refuse graphs (`test_graph_errors`,
//! `test_graph_updates`), and the CPU's `affine_u32`.

use stream_core::kernel;

const SRC: &str = r#"
extern "C" __global__ void affine_u32(unsigned a, unsigned b, const unsigned* x, size_t x_len,
                                      unsigned* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = a * x[i] + b;
}

extern "C" __global__ void __launch_bounds__(32) square_u32(const unsigned* x, size_t x_len,
                                                            unsigned* y, size_t y_len) {
    size_t n = x_len < y_len ? x_len : y_len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = x[i] * x[i];
}
"#;

#[kernel(cuda = SRC)]
/// `y[i] = a * x[i] + b` (wrapping).
pub unsafe fn affine_u32(a: u32, b: u32, x: &[u32], y: &mut [u32]);

#[kernel(cuda = SRC, block = 32)]
/// `y[i] = x[i] * x[i]` (wrapping); admits only blocks of 32 threads.
pub unsafe fn square_u32(x: &[u32], y: &mut [u32]);

/// The CPU's `affine_u32`.
pub fn affine(a: u32, b: u32, x: &[u32]) -> Vec<u32> {
    x.iter()
        .map(|&v| a.wrapping_mul(v).wrapping_add(b))
        .collect()
}
