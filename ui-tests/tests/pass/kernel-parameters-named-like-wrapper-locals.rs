//! A `#[kernel]` declaration whose parameters are named after every parameter and
//! local of the generated wrapper (`s`, `config`, `kernel`, `args`, `parts_N`), the
//! wrapper's `static` (`__STREAM_CORE_KERNEL_`) and the locals of earlier versions
//! (`__x_parts`), before and after the slices they would have shadowed: the wrapper's
//! own names are hygienic, so each parameter reaches the kernel as the caller's value
//! (`tests/test_launch_shapes.rs` checks the values on a GPU).
use stream_core::{kernel, scope, Error, LaunchConfig, Stream};

const SRC: &str = r#"
extern "C" __global__ void named_like_locals(
    unsigned s, unsigned config, unsigned kernel, unsigned args, unsigned long long parts_0,
    unsigned long long __x_parts, const unsigned* x, size_t x_len, unsigned parts_1,
    unsigned* y, size_t y_len, unsigned __STREAM_CORE_KERNEL_) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < x_len && i < y_len) {
        y[i] = x[i] + s + config + kernel + args + (unsigned)parts_0 + (unsigned)__x_parts
             + parts_1 + __STREAM_CORE_KERNEL_;
    }
}
"#;

#[kernel(cuda = SRC, block = 256)]
#[allow(non_snake_case)]
#[allow(clippy::too_many_arguments)]
unsafe fn named_like_locals(
    s: u32,
    config: u32,
    kernel: u32,
    args: u32,
    parts_0: u64,
    __x_parts: u64,
    x: &[u32],
    parts_1: u32,
    y: &mut [u32],
    __STREAM_CORE_KERNEL_: u32,
);

fn run(stream: &Stream) -> Result<(), Error> {
    let input = vec![1u32; 256];
    let mut out = vec![0u32; 256];
    scope(stream, |scope_| {
        let x = scope_.upload(&input)?;
        let mut y = scope_.alloc_zeroed::<u32>(256)?;
        let config = LaunchConfig::for_elements(256, 256);
        named_like_locals(scope_, config, 1, 2, 3, 4, 5, 6, &x, 7, &mut y, 8)?;
        scope_.copy_to_host(&y, &mut out)?.wait()?;
        Ok(())
    })
}

fn main() {
    let _ = run;
}
