//! Bad input not covered elsewhere: the rows of the bad-input table in the `stream_core`
//! crate docs (`stream-core/src/errors_doc.md`) that name this file. Each bad input is
//! an `Err` with the variant and numbers the table gives, never a panic, and the stream
//! or device keeps working afterwards.
//!
//! * GPU tests are reported as ignored without a CUDA device (see `gpu_tests::run`).
//!   The two-GPU test is registered only on a machine with at least two devices, and
//!   the binary says so on stderr when it is left out.
//! * Host tests (the messages of errors no test can provoke) run everywhere.

use std::time::Duration;

use gpu_tests::child::run_self;
use gpu_tests::{
    check_eq, check_error, ensure, expect_err, gpu_status, poisoned, stream, Element, Failed,
    GpuStatus, Rng, Test, TestFn, TestResult,
};
use stream_core::{kernel, scope, Device, Error, LaunchConfig, LaunchLimit};

/// The environment variable that makes this binary run one child mode.
const CHILD_ENV: &str = "STREAM_CORE_BAD_INPUT_CHILD";

fn main() {
    if let Ok(mode) = std::env::var(CHILD_ENV) {
        std::process::exit(child(&mode));
    }
    let mut gpu: Vec<Test> = vec![
        (
            "pinned_allocation_beyond_the_address_space_is_host_out_of_memory",
            pinned_allocation_beyond_the_address_space_is_host_out_of_memory as TestFn,
        ),
        (
            "launch_shapes_from_the_helpers_beyond_the_limits_are_invalid_launch",
            launch_shapes_from_the_helpers_beyond_the_limits_are_invalid_launch,
        ),
        (
            "views_at_odd_element_offsets_are_aligned_for_every_element_size",
            views_at_odd_element_offsets_are_aligned_for_every_element_size,
        ),
        (
            "no_visible_device_is_no_device_with_count_zero",
            no_visible_device_is_no_device_with_count_zero,
        ),
    ];
    match gpu_status() {
        GpuStatus::Present(n) if *n >= 2 => gpu.push((
            "memory_and_streams_of_another_device_are_device_mismatch",
            memory_and_streams_of_another_device_are_device_mismatch,
        )),
        GpuStatus::Present(n) => eprintln!(
            "test_bad_input: {n} CUDA device(s): the two-GPU test \
             memory_and_streams_of_another_device_are_device_mismatch is not registered \
             (run this binary on a machine with two GPUs to cover DeviceMismatch)"
        ),
        GpuStatus::Absent(_) => {}
    }
    let host: &[Test] = &[
        (
            "driver_error_message_says_restart_after_a_kernel_fault_and_check_arguments_otherwise",
            driver_error_message_says_restart_after_a_kernel_fault_and_check_arguments_otherwise,
        ),
        (
            "messages_of_errors_no_single_gpu_test_provokes_say_what_to_do",
            messages_of_errors_no_single_gpu_test_provokes_say_what_to_do,
        ),
    ];
    gpu_tests::run(&gpu, host)
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

/// Child modes: print observations as `key = value` lines; the exit code is 0.
fn child(mode: &str) -> i32 {
    match mode {
        "no_device" => {
            println!("count = {:?}", Device::count());
            match Device::new(0) {
                Ok(dev) => println!("new = opened {dev:?}"),
                Err(e) => {
                    println!("new = {e:?}");
                    println!("message = {e}");
                }
            }
            0
        }
        other => {
            println!("error = unknown child mode {other:?}");
            2
        }
    }
}

/// 1 PiB of page-locked memory cannot exist (it is beyond the address space of the
/// process): `alloc_pinned` is `HostOutOfMemory` with the request, and its message says
/// what to do; a small pinned buffer still works afterwards.
fn pinned_allocation_beyond_the_address_space_is_host_out_of_memory() -> TestResult {
    let stream = stream()?;
    let dev = stream.device();
    let request = 1usize << 50;
    let e = expect_err(
        "alloc_pinned::<u8>(1 PiB)",
        dev.alloc_pinned::<u8>(request).map(drop),
    )?;
    check_error(
        "alloc_pinned::<u8>(1 PiB)",
        &e,
        &Error::HostOutOfMemory { requested: request },
        &[&request.to_string(), "pinned", "ulimit -l"],
    )?;
    let input: Vec<u32> = Rng::new().vec(4097);
    let mut pinned = dev.alloc_pinned::<u32>(input.len())?;
    pinned.copy_from_slice(&input);
    let mut out = poisoned::<u32>(input.len());
    scope(&stream, |s| -> TestResult {
        let x = s.upload(&pinned)?;
        s.copy_to_host(&x, &mut out)?.wait()?;
        Ok(())
    })?;
    check_eq("pinned round trip after HostOutOfMemory", &input, &out)
}

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
            let Error::InvalidLaunch {
                kernel,
                what: e_what,
                value: e_value,
                limit,
                ..
            } = &e
            else {
                return Err(Failed::from(format!(
                    "{what}: got {e:?}, expected InvalidLaunch"
                )));
            };
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

/// Views are taken in elements, never bytes, so a view always starts at an element
/// boundary of an allocation (aligned to at least 256 bytes): an unaligned device range
/// cannot be expressed. Uploads into, fills of, and device copies between views at odd
/// element offsets (1, 3, 7 ...) of odd lengths are exact for 1-, 2-, 4-, 8- and 16-byte
/// elements.
fn views_at_odd_element_offsets_are_aligned_for_every_element_size() -> TestResult {
    odd_offsets::<u8>()?;
    odd_offsets::<u16>()?;
    odd_offsets::<u32>()?;
    odd_offsets::<u64>()?;
    odd_offsets::<u128>()?;
    odd_offsets::<f64>()
}

fn odd_offsets<T: Element>() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let len = 1031;
    for (upload_at, fill_at, copy_from, copy_to, n) in [
        (1, 3, 7, 501, 97),
        (3, 1, 11, 257, 129),
        (7, 5, 1, 731, 255),
    ] {
        let background: Vec<T> = rng.vec(len);
        let part: Vec<T> = rng.vec(n);
        let value: T = rng.value();
        let mut expected = background.clone();
        expected[upload_at..upload_at + n].copy_from_slice(&part);
        expected[fill_at + 2 * n..fill_at + 3 * n].fill(value);
        let copied = expected[copy_from..copy_from + n].to_vec();
        expected[copy_to..copy_to + n].copy_from_slice(&copied);
        let mut out = poisoned::<T>(len);
        scope(&stream, |s| -> TestResult {
            let mut x = s.upload(&background)?;
            s.copy_to_device(&part, &mut x.slice_mut(upload_at..upload_at + n)?)?;
            s.fill(&mut x.slice_mut(fill_at + 2 * n..fill_at + 3 * n)?, value)?;
            let mut y = s.alloc::<T>(n)?;
            s.copy_device(&x.slice(copy_from..copy_from + n)?, &mut y)?;
            s.copy_device(&y, &mut x.slice_mut(copy_to..copy_to + n)?)?;
            s.copy_to_host(&x, &mut out)?.wait()?;
            Ok(())
        })?;
        check_eq(
            &format!(
                "{len} {} after an upload at {upload_at}, a fill at {}, and a copy {copy_from} -> {copy_to}, each of {n}",
                T::NAME,
                fill_at + 2 * n
            ),
            &expected,
            &out,
        )?;
    }
    Ok(())
}

/// With every GPU hidden (`CUDA_VISIBLE_DEVICES=-1`, in a child process, since the
/// driver reads it once), the driver loads but sees no device: `Device::count()` is
/// `Ok(0)` and `Device::new(0)` is `NoDevice { ordinal: 0, count: 0 }`, whose message
/// says that a GPU is needed.
fn no_visible_device_is_no_device_with_count_zero() -> TestResult {
    let run = run_self(
        "Device::new with CUDA_VISIBLE_DEVICES=-1",
        &[
            (CHILD_ENV, Some("no_device")),
            ("CUDA_VISIBLE_DEVICES", Some("-1")),
        ],
        Duration::from_secs(60),
    )?;
    ensure!(run.status.success(), "the child failed.\n{run}");
    run.expect("count", "Ok(0)")?;
    run.expect("new", "NoDevice { ordinal: 0, count: 0 }")?;
    let message = run.value("message")?;
    ensure!(
        message.contains("no CUDA device 0") && message.contains("NVIDIA GPU"),
        "the message {message:?} does not say that there is no device and a GPU is needed"
    );
    Ok(())
}

/// With two GPUs: attaching a `DeviceVec` of device 1 in a scope of device 0, forking a
/// scope of device 0 onto a stream of device 1, handing a buffer to a scope of another
/// device, and using a cuBLAS handle of device 1 in a scope of device 0 are each
/// `DeviceMismatch` naming both ordinals; the scope keeps working.
fn memory_and_streams_of_another_device_are_device_mismatch() -> TestResult {
    let (dev0, dev1) = (Device::new(0)?, Device::new(1)?);
    let (s0, s1) = (dev0.new_stream()?, dev1.new_stream()?);
    let other_vec = dev1.upload_vec(&[1u32; 16])?;
    let mut blas1 = kernels::Cublas::new(&dev1)?;
    let mismatch = |memory, stream| Error::DeviceMismatch { memory, stream };
    let input: Vec<u32> = Rng::new().vec(4097);
    let mut out = poisoned::<u32>(input.len());
    scope(&s0, |s| -> TestResult {
        let e = expect_err(
            "attach_ref of device 1's DeviceVec",
            s.attach_ref(&other_vec).map(drop),
        )?;
        check_error(
            "attach_ref",
            &e,
            &mismatch(1, 0),
            &["device mismatch", "1", "0"],
        )?;
        let forked = s.fork(&s1, (), |_, ()| Ok::<_, Error>(()));
        let e = expect_err("fork onto device 1's stream", forked)?;
        check_error("fork", &e, &mismatch(0, 1), &[])?;
        // Allocated before the inner scope binds device 1's context: only the hand-off
        // (which fails before any driver call) happens inside it.
        let x = s.alloc::<u32>(16)?;
        scope(&s1, |t| -> TestResult {
            let e = expect_err("hand_off to device 1's scope", s.hand_off(x, t).map(drop))?;
            check_error("hand_off", &e, &mismatch(0, 1), &[])?;
            Ok(())
        })?;
        let (a, b) = (s.alloc_zeroed::<f32>(4)?, s.alloc_zeroed::<f32>(4)?);
        let mut c = s.alloc_zeroed::<f32>(4)?;
        let e = expect_err(
            "cuBLAS handle of device 1 in a scope of device 0",
            blas1.sgemm(s, 2, 2, 2, 1.0, &a, &b, 0.0, &mut c),
        )?;
        check_error("cublas sgemm", &e, &mismatch(1, 0), &[])?;
        let x = s.upload(&input)?;
        s.copy_to_host(&x, &mut out)?.wait()?;
        Ok(())
    })?;
    check_eq("round trip after four device mismatches", &input, &out)
}

/// A driver error whose code is a kernel fault says the context is unusable and to
/// restart the process; any other driver error says to check the call's arguments.
fn driver_error_message_says_restart_after_a_kernel_fault_and_check_arguments_otherwise(
) -> TestResult {
    let driver = |code: u32, name: &str| Error::Driver {
        call: "cuStreamSynchronize",
        code,
        name: name.to_owned(),
        description: "what the driver says".to_owned(),
    };
    for (code, name) in [
        (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
        (710, "CUDA_ERROR_ASSERT"),
        (715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
        (719, "CUDA_ERROR_LAUNCH_FAILED"),
    ] {
        let message = driver(code, name).to_string();
        for part in [
            name,
            "cuStreamSynchronize",
            "a kernel faulted",
            "unusable",
            "restart the process",
        ] {
            ensure!(
                message.contains(part),
                "{name}: the message {message:?} does not contain {part:?}"
            );
        }
    }
    let message = driver(1, "CUDA_ERROR_INVALID_VALUE").to_string();
    ensure!(
        message.contains("CUDA_ERROR_INVALID_VALUE")
            && message.contains("check the call's arguments")
            && !message.contains("a kernel faulted"),
        "CUDA_ERROR_INVALID_VALUE: the message {message:?} does not say to check the arguments"
    );
    Ok(())
}

/// The variants a test on one GPU cannot provoke (no NVRTC, a capturing stream, a
/// cuBLAS failure, memory of another device), and the launch and compile errors, have
/// messages that say what happened and, after a `; ` or a `. `, what to do.
fn messages_of_errors_no_single_gpu_test_provokes_say_what_to_do() -> TestResult {
    let cases: [(Error, &[&str]); 7] = [
        (
            Error::NvrtcNotFound,
            &["NVRTC", "could not be loaded", "install"],
        ),
        (
            Error::StreamCapturing,
            &["captured", "end the capture first or use another stream"],
        ),
        (
            Error::DeviceMismatch {
                memory: 1,
                stream: 0,
            },
            &[
                "device 1",
                "device 0",
                "make the memory on the stream's device",
            ],
        ),
        (
            Error::InvalidLaunch {
                kernel: "k",
                what: "block.x",
                value: 2048,
                limit: LaunchLimit::AtMost(1024),
                source_of_limit: "the device (CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)",
            },
            &[
                "`k`",
                "block.x is 2048",
                "admits at most 1024",
                "MAX_BLOCK_DIM_X",
                "LaunchConfig",
            ],
        ),
        (
            Error::InvalidLaunch {
                kernel: "k",
                what: "dynamic shared memory (bytes)",
                value: 0,
                limit: LaunchLimit::AtLeast(4096),
                source_of_limit: "`#[kernel(shared = 4096)]` on `k`",
            },
            &[
                "`k`",
                "dynamic shared memory (bytes) is 0",
                "`#[kernel(shared = 4096)]` on `k` admits at least 4096",
                "nothing was launched",
                "LaunchConfig",
            ],
        ),
        (
            Error::KernelCompile {
                kernel: "k".to_owned(),
                log: "error: expected an expression".to_owned(),
            },
            &["`k`", "fix its CUDA source", "expected an expression"],
        ),
        (
            Error::KernelNotFound {
                kernel: "k".to_owned(),
            },
            &["`k`", "extern \"C\" __global__"],
        ),
    ];
    for (error, parts) in cases {
        let message = error.to_string();
        for part in parts {
            ensure!(
                message.contains(part),
                "{error:?}: the message {message:?} does not contain {part:?}"
            );
        }
        ensure!(
            message.contains("; ") || message.contains(". "),
            "{error:?}: the message {message:?} has no clause saying what to do"
        );
    }
    Ok(())
}
