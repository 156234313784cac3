//! Passing a host `Vec` where a kernel expects device memory.
//!
//! The GPU cannot dereference a host address. Kernel arguments must be device memory
//! of the scope (`DeviceMemory` is sealed): upload the data first with
//! `let x = s.upload(&host)?;` and pass `&x`.
use stream_core::{kernel, scope, Error, LaunchConfig, Stream};

const SRC: &str = r#"
extern "C" __global__ void axpy_f32(float a, const float* x, size_t x_len, float* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < x_len && i < y_len) y[i] = a * x[i] + y[i];
}"#;

#[kernel(cuda = SRC)]
unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);

fn f(stream: &Stream) -> Result<(), Error> {
    let host = vec![1.0f32; 256];
    scope(stream, |s| {
        let mut y = s.alloc_zeroed::<f32>(256)?;
        axpy_f32(s, LaunchConfig::for_elements(256, 256), 2.0, &host, &mut y)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
