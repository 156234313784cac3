//! Giving a kernel declaration a Rust body.
//!
//! The kernel's code is the CUDA source named by `cuda = ...`; the declaration is only
//! its signature, ending in `;`.
use stream_core::kernel;

const SRC: &str = r#"
extern "C" __global__ void axpy_f32(float a, const float* x, size_t x_len, float* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < x_len && i < y_len) y[i] = a * x[i] + y[i];
}"#;

#[kernel(cuda = SRC)]
pub unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]) {
    let _ = (a, x, y);
}

fn main() {}
