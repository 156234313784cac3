//! `#[kernel]` hygiene (the expansion in `stream-macros/src/kernel/`) on a real GPU: a
//! declaration whose parameters are named after everything the generated wrapper binds
//! (its parameters `s` and `config`, its locals `kernel`, `args` and `parts_N`, its
//! `static`, and the `__x_parts` locals of earlier versions, which used to shadow a
//! scalar of that name with a device pointer) hands the kernel exactly the caller's
//! values. Its compile-only twin is
//! `ui-tests/tests/pass/kernel-parameters-named-like-wrapper-locals.rs`.
//!
//! The test draws fresh non-zero random inputs, poisons its outputs before the GPU
//! runs, and compares with a CPU reference bit for bit.
//!
//! Without a CUDA device it is reported as ignored (see `gpu_tests::run`).

use gpu_tests::{check_eq, poisoned, stream, Element, Rng, TestResult};
use stream_core::{kernel, scope, LaunchConfig, Scope};

gpu_tests::test_main! {
    gpu: [kernel_parameters_named_like_wrapper_locals_receive_the_callers_values],
}

/// Thread 0 writes every scalar parameter to `scalars` (as 64 bits), and every thread
/// writes `y[i] = x[i] + s`. The parameters are named after the wrapper's own
/// parameters (`s`, `config`) and locals (`kernel`, `args`, and `parts_N` for the
/// slice at position N), its `static`, and the locals of earlier versions
/// (`__x_parts`), before and after the slices they would shadow.
const NAMED_SRC: &str = r#"
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

#[kernel(cuda = NAMED_SRC, block = 256)]
#[allow(non_snake_case, clippy::too_many_arguments)]
/// See [`NAMED_SRC`].
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

/// Parameters named like everything the wrapper binds reach the kernel as the caller's
/// values (not a device pointer or another parameter's value), and the slices as the
/// caller's memory.
fn kernel_parameters_named_like_wrapper_locals_receive_the_callers_values() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = 1000;
    let x: Vec<u32> = rng.vec(n);
    let wide: [u64; 3] = [rng.value(), rng.value(), rng.value()];
    let narrow: [u32; 5] = [
        rng.value(),
        rng.value(),
        rng.value(),
        rng.value(),
        rng.value(),
    ];
    let mut y = poisoned::<u32>(n);
    let mut scalars = poisoned::<u64>(8);
    scope(&stream, |scope_: &Scope<'_, '_>| -> TestResult {
        let dx = scope_.upload(&x)?;
        let mut dy = scope_.alloc::<u32>(n)?;
        scope_.fill(&mut dy, u32::POISON)?;
        let mut dscalars = scope_.alloc::<u64>(8)?;
        scope_.fill(&mut dscalars, u64::POISON)?;
        named_like_locals(
            scope_,
            LaunchConfig::for_elements(n, 256),
            wide[0],
            wide[1],
            narrow[0],
            &dx,
            narrow[1],
            &mut dy,
            wide[2],
            narrow[2],
            narrow[3],
            narrow[4],
            &mut dscalars,
        )?;
        let _y = scope_.copy_to_host(&dy, &mut y)?;
        let _scalars = scope_.copy_to_host(&dscalars, &mut scalars)?;
        Ok(())
    })?;
    let expected_scalars = [
        wide[0],
        wide[1],
        u64::from(narrow[0]),
        u64::from(narrow[1]),
        wide[2],
        u64::from(narrow[2]),
        u64::from(narrow[3]),
        u64::from(narrow[4]),
    ];
    check_eq(
        "scalars as the kernel received them (__x_parts, parts_3, s, config, parts_5, \
         kernel, args, __STREAM_CORE_KERNEL_)",
        &expected_scalars,
        &scalars,
    )?;
    let expected: Vec<u32> = x.iter().map(|v| v.wrapping_add(narrow[0])).collect();
    check_eq("y = x + s", &expected, &y)
}
