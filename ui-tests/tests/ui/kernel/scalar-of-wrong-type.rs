//! Passing an `f64` for a kernel's `f32` scalar parameter.
//!
//! The kernel reads exactly 4 bytes for `float a`; an 8-byte `double` in its place would
//! be read as garbage. The generated wrapper takes each scalar as the exact declared
//! type, with no implicit conversion: write `2.0f32` (or `2.0`).
use stream_core::{kernel, scope, Error, LaunchConfig, Stream};

const SRC: &str = r#"
extern "C" __global__ void axpy_f32(float a, const float* x, size_t x_len, float* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < x_len && i < y_len) y[i] = a * x[i] + y[i];
}"#;

#[kernel(cuda = SRC)]
unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(256)?;
        let mut y = s.alloc_zeroed::<f32>(256)?;
        axpy_f32(s, LaunchConfig::for_elements(256, 256), 2.0f64, &x, &mut y)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
