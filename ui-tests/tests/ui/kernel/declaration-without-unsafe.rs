//! Declaring a kernel with `fn` instead of `unsafe fn`.
//!
//! Nothing checks that the CUDA code matches the Rust signature; `unsafe` is where the
//! declaration's author makes that promise, once, so that every launch can be safe.
use stream_core::kernel;

const SRC: &str = r#"
extern "C" __global__ void axpy_f32(float a, const float* x, size_t x_len, float* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < x_len && i < y_len) y[i] = a * x[i] + y[i];
}"#;

#[kernel(cuda = SRC)]
pub fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);

fn main() {}
