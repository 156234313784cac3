//! Launching a `#[kernel]`-declared kernel in an inner scope (stream `b`) on a buffer
//! of the outer scope (stream `a`).
//!
//! The launch would run on `b`, unordered with the buffer's allocation, earlier writes
//! and stream-ordered free on `a`. The generated wrapper takes the scope and every
//! memory argument with one brand `'s`, and brands of two scopes never unify.
use stream_core::{kernel, scope, Error, LaunchConfig, Stream};

const SRC: &str = r#"
extern "C" __global__ void axpy_f32(float a, const float* x, size_t x_len, float* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < x_len && i < y_len) y[i] = a * x[i] + y[i];
}"#;

#[kernel(cuda = SRC)]
unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);

fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
    scope(a, |s| {
        let mut y = s.alloc_zeroed::<f32>(256)?;
        scope(b, |t| {
            let x = t.alloc_zeroed::<f32>(256)?;
            axpy_f32(t, LaunchConfig::for_elements(256, 256), 2.0, &x, &mut y)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
