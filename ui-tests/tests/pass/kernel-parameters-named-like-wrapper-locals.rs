//! A `#[kernel]` declaration whose parameters are named after every parameter and
//! local of the generated wrapper: its parameters `s` and `config`, its locals `kernel`,
//! `args` and `parts_N` (the device address and length of the slice at position N:
//! `parts_3` for `x`, `parts_5` for `y`, declared before and after them), its `static`
//! (`__STREAM_CORE_KERNEL_`), and the `__x_parts` local of earlier versions, which used
//! to shadow a scalar of that name with `x`'s device address. The wrapper's own names
//! are hygienic, so this compiles and each parameter reaches the kernel as the caller's
//! value (`tests/test_kernel_hygiene.rs` checks the values on a GPU).
use stream_core::{kernel, scope, Error, LaunchConfig, Stream};

const SRC: &str = r#"
extern "C" __global__ void __launch_bounds__(256)
named_like_locals(unsigned long long __x_parts, unsigned long long parts_3, unsigned s,
                  const unsigned* x, size_t x_len, unsigned config,
                  unsigned* y, size_t y_len, unsigned long long parts_5, unsigned kernel,
                  unsigned args, unsigned __STREAM_CORE_KERNEL_,
                  unsigned long long* scalars, size_t scalars_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < x_len && i < y_len) y[i] = x[i] + s;
    if (i == 0 && scalars_len >= 8) {
        scalars[0] = __x_parts;
        scalars[1] = parts_3;
        scalars[2] = s;
        scalars[3] = config;
        scalars[4] = parts_5;
        scalars[5] = kernel;
        scalars[6] = args;
        scalars[7] = __STREAM_CORE_KERNEL_;
    }
}
"#;

#[kernel(cuda = SRC, block = 256)]
#[allow(non_snake_case, clippy::too_many_arguments)]
unsafe fn named_like_locals(
    __x_parts: u64,
    parts_3: u64,
    s: u32,
    x: &[u32],
    config: u32,
    y: &mut [u32],
    parts_5: u64,
    kernel: u32,
    args: u32,
    __STREAM_CORE_KERNEL_: u32,
    scalars: &mut [u64],
);

fn run(stream: &Stream) -> Result<(), Error> {
    let input = vec![1u32; 256];
    let mut out = vec![0u32; 256];
    scope(stream, |scope_| {
        let x = scope_.upload(&input)?;
        let mut y = scope_.alloc_zeroed::<u32>(256)?;
        let mut scalars = scope_.alloc_zeroed::<u64>(8)?;
        let config = LaunchConfig::for_elements(256, 256);
        named_like_locals(scope_, config, 1, 2, 3, &x, 4, &mut y, 5, 6, 7, 8, &mut scalars)?;
        scope_.copy_to_host(&y, &mut out)?.wait()?;
        Ok(())
    })
}

fn main() {
    let _ = run;
}
