//! Passing a read-only `attach_ref` view of a `DeviceVec` as the `&mut [T]` argument of
//! a `#[kernel]`-declared kernel.
//!
//! `attach_ref` needs only `&DeviceVec`, so other scopes (on other streams) may read the
//! same memory at the same time; a kernel writing it would race them. Use
//! `s.attach(&mut vec)` for a writable view.
use stream_core::{kernel, scope, DeviceVec, Error, LaunchConfig, Stream};

const SRC: &str = r#"
extern "C" __global__ void axpy_f32(float a, const float* x, size_t x_len, float* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < x_len && i < y_len) y[i] = a * x[i] + y[i];
}"#;

#[kernel(cuda = SRC)]
unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);

fn f(stream: &Stream, weights: &DeviceVec<f32>) -> Result<(), Error> {
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(256)?;
        let mut w = s.attach_ref(weights)?;
        axpy_f32(s, LaunchConfig::for_elements(256, 256), 2.0, &x, &mut w)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
