//! Launch configurations (`stream-core/src/kernel/config.rs`): the shapes that the
//! helpers `LaunchConfig::for_elements` and `for_2d` make from bad input (a zero block,
//! more elements than a grid can cover) are refused at launch with
//! `Error::InvalidLaunch` naming the kernel, the dimension and the limit; nothing runs,
//! and a valid launch afterwards works.
//!
//! Shapes a `#[kernel]` declaration admits are tested in `test_launch_shapes.rs`, the
//! device's own limits in `test_kernel_declarations.rs`.
//!
//! The test draws fresh non-zero random inputs, poisons its outputs before the GPU
//! runs, and compares with a CPU reference bit for bit. Without a CUDA device it is
//! reported as ignored (see `gpu_tests::run`).

use gpu_tests::{check_eq, ensure, expect_err, poisoned, stream, Failed, Rng, TestResult};
use stream_core::{kernel, scope, Error, LaunchConfig, LaunchLimit};

gpu_tests::test_main! {
    gpu: [launch_shapes_from_the_helpers_beyond_the_limits_are_invalid_launch],
}

/// `fill_u32(v, y)`: `y[i] = v` for every element, in a grid-stride loop over every
/// thread of the grid, whatever its shape: each element is written by exactly one
/// thread for any block and grid, so the kernel is memory-safe for every shape the
/// device accepts, as its declaration (without a shape) promises.
const FILL_SRC: &str = r#"
extern "C" __global__ void fill_u32(unsigned v, unsigned* y, size_t y_len) {
    size_t threads_per_block = (size_t)blockDim.x * blockDim.y * blockDim.z;
    size_t block = ((size_t)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    size_t thread = ((size_t)threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    size_t stride = threads_per_block * gridDim.x * gridDim.y * gridDim.z;
    for (size_t i = block * threads_per_block + thread; i < y_len; i += stride) y[i] = v;
}
"#;

#[kernel(cuda = FILL_SRC)]
/// `y[i] = v` for every element, for any launch shape.
unsafe fn fill_u32(v: u32, y: &mut [u32]);

/// Shapes made by `LaunchConfig::for_elements` and `for_2d` from bad input: a block
/// size of 0 (`block.x` is 0), and more elements than a grid can cover (`grid.x` is
/// saturated to `u32::MAX`, over `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X`). Each launch is
/// `InvalidLaunch` naming the kernel, the dimension and the limit, nothing runs, and a
/// valid launch afterwards works.
fn launch_shapes_from_the_helpers_beyond_the_limits_are_invalid_launch() -> TestResult {
    let stream = stream()?;
    let input: Vec<u32> = Rng::new().vec(1000);
    let mut out = poisoned::<u32>(input.len());
    let cases: [(&str, LaunchConfig, &str, u64); 4] = [
        (
            "for_elements(1000, 0)",
            LaunchConfig::for_elements(1000, 0),
            "block.x",
            0,
        ),
        (
            "for_2d(100, 100, (32, 0))",
            LaunchConfig::for_2d(100, 100, (32, 0)),
            "block.y",
            0,
        ),
        (
            "for_elements(usize::MAX, 256)",
            LaunchConfig::for_elements(usize::MAX, 256),
            "grid.x",
            u64::from(u32::MAX),
        ),
        (
            "for_2d(usize::MAX, 1, (32, 1))",
            LaunchConfig::for_2d(usize::MAX, 1, (32, 1)),
            "grid.x",
            u64::from(u32::MAX),
        ),
    ];
    scope(&stream, |s| -> TestResult {
        let mut y = s.upload(&input)?;
        for (what, config, dimension, value) in cases {
            let e = expect_err(what, fill_u32(s, config, 7, &mut y))?;
            let Error::InvalidLaunch(refusal) = &e else {
                return Err(Failed::from(format!(
                    "{what}: got {e:?}, expected InvalidLaunch"
                )));
            };
            let stream_core::error::InvalidLaunch {
                kernel,
                what: e_what,
                value: e_value,
                limit,
                ..
            } = &**refusal;
            ensure!(
                (*kernel, *e_what, *e_value) == ("fill_u32", dimension, value),
                "{what}: got {e:?}, expected fill_u32 with {dimension} = {value}"
            );
            let limit_ok = if value == 0 {
                *limit == LaunchLimit::AtLeast(1)
            } else {
                matches!(limit, LaunchLimit::AtMost(l) if *l < value)
            };
            ensure!(
                limit_ok,
                "{what}: the limit is {limit:?}, expected at least 1 for 0, at most a number \
                 below {value} otherwise"
            );
            let message = e.to_string();
            for part in ["fill_u32", dimension, &value.to_string(), "LaunchConfig"] {
                ensure!(
                    message.contains(part),
                    "{what}: the message {message:?} does not contain {part:?}"
                );
            }
        }
        let _out = s.copy_to_host(&y, &mut out)?;
        Ok(())
    })?;
    check_eq("y after four refused launches", &input, &out)?;
    scope(&stream, |s| -> TestResult {
        let mut y = s.upload(&input)?;
        kernels::fill(s, &mut y, 7u32)?;
        s.copy_to_host(&y, &mut out)?.wait()?;
        Ok(())
    })?;
    check_eq(
        "a valid fill after the refused launches",
        &[7u32; 1000],
        &out,
    )
}
