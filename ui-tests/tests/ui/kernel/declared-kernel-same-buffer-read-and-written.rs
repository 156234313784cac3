//! Passing one buffer to a `#[kernel]`-declared kernel as both its input (`&[T]`) and
//! its output (`&mut [T]`).
//!
//! Threads would read elements that other threads are writing. The generated wrapper
//! takes what the kernel reads as `&` and what it writes as `&mut`, so the borrow
//! checker rules out the aliasing. Read from a copy (`s.copy_device`) or write a kernel
//! that updates in place through one `&mut [T]` argument.
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
        let mut y = s.alloc_zeroed::<f32>(256)?;
        axpy_f32(s, LaunchConfig::for_elements(256, 256), 2.0, &y, &mut y)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
