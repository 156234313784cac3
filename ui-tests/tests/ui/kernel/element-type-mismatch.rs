//! Passing a `DeviceBuffer<f64>` for a kernel's `&[f32]` parameter.
//!
//! The kernel would read the doubles' bytes as floats, and twice as many of them as the
//! length it is given says exist. Memory arguments must hold the declared element type.
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
        let x = s.alloc_zeroed::<f64>(256)?;
        let mut y = s.alloc_zeroed::<f32>(256)?;
        axpy_f32(s, LaunchConfig::for_elements(256, 256), 2.0, &x, &mut y)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
