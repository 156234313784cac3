//! Launching one of the `kernels` crate's declared kernels directly.
//!
//! `kernels::declarations::sum_partials_f32` was a public safe wrapper: launched with
//! 1024 threads per block, its `__shared__ float partial[256]` was written out of
//! bounds. Its declaration now admits only `block = 256`, and the module is private:
//! the crate's public functions (`kernels::reduce_sum`, ...) choose the launch shapes.
use stream_core::{scope, Error, LaunchConfig, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(4096)?;
        let mut partials = s.alloc_zeroed::<f32>(4)?;
        let config = LaunchConfig::new((1, 1, 1), (1024, 1, 1));
        kernels::declarations::sum_partials_f32(s, config, &x, &mut partials)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
