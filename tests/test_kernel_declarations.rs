//! Kernel declarations (`stream-core/src/kernel/declaration.rs`, compiled and loaded by
//! `kernel/module_cache.rs`, launched by `scope/launch.rs`; the `#[kernel]` macro in
//! `stream-macros`).
//!
//! Kernels declared in this file with `#[kernel]`, on a real GPU: from CUDA source
//! (compiled with NVRTC) and from hand-written PTX; CUDA source that does not compile,
//! a declared name the source does not define, and PTX the driver refuses; launch
//! shapes beyond the device's limits, and empty grids. One kernel declared here also
//! serves the proof that a kernel may overwrite the source of a pending download.
//!
//! Every test draws fresh non-zero random inputs, poisons its outputs before the GPU
//! runs, and compares with a CPU reference bit for bit. Bad input is an `Err` of the
//! right variant that leaves the outputs untouched.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{
    check_eq, check_error, ensure, expect_err, poisoned, stream, Element, Failed, Rng, TestResult,
};
use stream_core::{kernel, scope, Error, LaunchConfig, LaunchLimit};

gpu_tests::test_main! {
    gpu: [
        invalid_launch_shapes_are_invalid_launch_naming_the_limit,
        empty_grid_launch_is_ok_and_writes_nothing,
        declared_cuda_kernel_writes_exactly_its_view,
        cuda_syntax_error_is_kernel_compile_with_nvrtc_log,
        declared_name_missing_from_the_source_is_kernel_not_found,
        ptx_kernel_loads_and_adds_one,
        malformed_ptx_is_kernel_compile,
        kernel_overwriting_a_pending_download_source_leaves_the_download_old,
    ],
}

// ---------------------------------------------------------------------------------------
// Kernels declared in this file.

/// Two kernels in one source (one module), plus a name the source does not define.
const USER_SRC: &str = r#"
extern "C" __global__ void add_one_u32(unsigned* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < y_len) y[i] += 1u;
}

extern "C" __global__ void write_index_u32(unsigned offset, unsigned* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < y_len) y[i] = offset + (unsigned)i;
}
"#;

#[kernel(cuda = USER_SRC)]
/// `y[i] += 1` (wrapping).
unsafe fn add_one_u32(y: &mut [u32]);

#[kernel(cuda = USER_SRC)]
/// `y[i] = offset + i` (wrapping).
unsafe fn write_index_u32(offset: u32, y: &mut [u32]);

#[kernel(cuda = USER_SRC, name = "no_such_kernel")]
/// Declared, but `USER_SRC` has no `no_such_kernel`.
unsafe fn missing_kernel(y: &mut [u32]);

/// A syntax error on line 3: `=` with no right-hand side.
const BROKEN_SRC: &str = r#"
extern "C" __global__ void broken_kernel(unsigned* y, size_t y_len) {
    if (y_len > 0) y[0] = ;
}
"#;

#[kernel(cuda = BROKEN_SRC)]
/// Never compiles.
unsafe fn broken_kernel(y: &mut [u32]);

/// `add_one_u32` written by hand in PTX (the CUDA kernel above, as LLVM's NVPTX backend
/// emits it): one thread per element, `if (i < y_len) y[i] += 1`.
const ADD_ONE_PTX: &str = r#"
.version 8.0
.target sm_90
.address_size 64

.visible .entry add_one_u32(
    .param .u64 add_one_u32_param_0,
    .param .u64 add_one_u32_param_1
)
{
    .reg .pred  %p<2>;
    .reg .b32   %r<6>;
    .reg .b64   %rd<9>;

    ld.param.u64        %rd4, [add_one_u32_param_1];
    mov.u32             %r1, %ctaid.x;
    mov.u32             %r2, %ntid.x;
    mov.u32             %r3, %tid.x;
    cvt.u64.u32         %rd5, %r3;
    mul.wide.u32        %rd6, %r1, %r2;
    add.s64             %rd7, %rd6, %rd5;
    setp.ge.u64         %p1, %rd7, %rd4;
    @%p1 bra            DONE;
    ld.param.u64        %rd2, [add_one_u32_param_0];
    cvta.to.global.u64  %rd3, %rd2;
    shl.b64             %rd8, %rd7, 2;
    add.s64             %rd1, %rd3, %rd8;
    ld.global.u32       %r4, [%rd1];
    add.s32             %r5, %r4, 1;
    st.global.u32       [%rd1], %r5;
DONE:
    ret;
}
"#;

#[kernel(ptx = ADD_ONE_PTX, name = "add_one_u32")]
/// `y[i] += 1` (wrapping), from PTX.
unsafe fn add_one_u32_ptx(y: &mut [u32]);

/// Not PTX the driver accepts.
const MALFORMED_PTX: &str = r#"
.version 8.0
.target sm_90
.address_size 64

.visible .entry malformed_ptx(.param .u64 p0, .param .u64 p1)
{
    this is not an instruction;
}
"#;

#[kernel(ptx = MALFORMED_PTX)]
/// Never loads.
unsafe fn malformed_ptx(y: &mut [u32]);

// ---------------------------------------------------------------------------------------
// Launch shapes.

/// Launch shapes beyond the device's limits are `InvalidLaunch` naming the dimension,
/// the value, the limit (what it admits: at least 1 thread per dimension, at most the
/// device's maximum) and where the limit comes from; nothing runs, and a valid launch
/// afterwards in the same scope works. `add_one_u32` declares no shape, so only the
/// device's limits apply.
fn invalid_launch_shapes_are_invalid_launch_naming_the_limit() -> TestResult {
    let stream = stream()?;
    let dev = stream.device().clone();
    let mut rng = Rng::new();
    let input: Vec<u32> = rng.vec(64);
    let mut out = poisoned::<u32>(64);
    let grid = |g| LaunchConfig::new(g, (32, 1, 1));
    let block = |b| LaunchConfig::new((1, 1, 1), b);
    // `None`: at most a device limit below the value, which depends on the device.
    let cases = [
        (
            block((0, 1, 1)),
            "block.x",
            0,
            Some(LaunchLimit::AtLeast(1)),
            "at least one thread",
        ),
        (
            block((2048, 1, 1)),
            "block.x",
            2048,
            None,
            "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X",
        ),
        (
            block((1, 0, 1)),
            "block.y",
            0,
            Some(LaunchLimit::AtLeast(1)),
            "at least one thread",
        ),
        (
            block((1, 1, 65)),
            "block.z",
            65,
            None,
            "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z",
        ),
        (
            block((32, 32, 2)),
            "threads per block",
            2048,
            Some(LaunchLimit::AtMost(u64::from(dev.max_threads_per_block()))),
            "MAX_THREADS_PER_BLOCK",
        ),
        (
            grid((1, 70_000, 1)),
            "grid.y",
            70_000,
            None,
            "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y",
        ),
        (
            grid((1, 1, 70_000)),
            "grid.z",
            70_000,
            None,
            "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z",
        ),
        (
            grid((1, 1, 1)).with_shared_mem(1 << 30),
            "shared memory per block (dynamic + static)",
            1 << 30,
            Some(LaunchLimit::AtMost(u64::from(
                dev.max_shared_memory_per_block(),
            ))),
            "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
        ),
    ];
    scope(&stream, |s| -> TestResult {
        let mut y = s.upload(&input)?;
        for (config, dimension, value, limit, source) in cases {
            let what = format!("add_one_u32 with {config:?}");
            let e = expect_err(&what, add_one_u32(s, config, &mut y))?;
            let Error::InvalidLaunch(refusal) = &e else {
                return Err(Failed::from(format!(
                    "{what}: got {e:?}, expected InvalidLaunch"
                )));
            };
            let stream_core::error::InvalidLaunch {
                kernel,
                what: e_what,
                value: e_value,
                limit: e_limit,
                source_of_limit,
            } = &**refusal;
            ensure!(
                (*kernel, *e_what, *e_value) == ("add_one_u32", dimension, value),
                "{what}: got {e:?}, expected kernel add_one_u32, {dimension} = {value}"
            );
            let limit_ok = match limit {
                Some(limit) => limit == *e_limit,
                None => matches!(e_limit, LaunchLimit::AtMost(l) if *l < value),
            };
            ensure!(
                limit_ok,
                "{what}: the limit is {e_limit:?}, expected {limit:?} (None: at most a number below {value})"
            );
            ensure!(
                source_of_limit.contains(source),
                "{what}: the limit comes from {source_of_limit:?}, expected {source:?}"
            );
            let message = e.to_string();
            for part in [
                dimension,
                &format!("is {value}, but"),
                &format!("admits {e_limit}"),
                source,
                "add_one_u32",
                "nothing was launched",
            ] {
                ensure!(
                    message.contains(part),
                    "{what}: the message {message:?} does not contain {part:?}"
                );
            }
        }
        // Nothing ran; a valid launch still works.
        add_one_u32(s, LaunchConfig::for_elements(64, 32), &mut y)?;
        let _out = s.copy_to_host(&y, &mut out)?;
        Ok(())
    })?;
    let expected: Vec<u32> = input.iter().map(|v| v.wrapping_add(1)).collect();
    check_eq("y after refused launches and one add_one", &expected, &out)
}

/// A grid with a zero dimension (`for_elements(0, 256)`, or `y` or `z` of 0) is an empty
/// problem: the launch is `Ok` and writes nothing, also on empty memory.
fn empty_grid_launch_is_ok_and_writes_nothing() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let input: Vec<u32> = rng.vec(300);
    let mut out = poisoned::<u32>(300);
    scope(&stream, |s| -> TestResult {
        let mut y = s.upload(&input)?;
        for config in [
            LaunchConfig::for_elements(0, 256),
            LaunchConfig::new((4, 0, 1), (256, 1, 1)),
            LaunchConfig::new((4, 1, 0), (256, 1, 1)),
        ] {
            add_one_u32(s, config, &mut y)?;
            write_index_u32(s, config, 7, &mut y)?;
        }
        let mut empty = s.alloc::<u32>(0)?;
        add_one_u32(s, LaunchConfig::for_elements(0, 256), &mut empty)?;
        let _out = s.copy_to_host(&y, &mut out)?;
        Ok(())
    })?;
    check_eq("y after empty-grid launches", &input, &out)
}

// ---------------------------------------------------------------------------------------
// Declared kernels: CUDA source, PTX, and what goes wrong with them.

/// Two kernels declared here from one CUDA string: `write_index_u32` into a sub-range
/// view writes `offset + i` there (the view's own address and length reach the kernel),
/// and `add_one_u32` on the whole buffer adds one everywhere.
fn declared_cuda_kernel_writes_exactly_its_view() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for n in [1, 257, 100_003] {
        let input: Vec<u32> = rng.vec(n);
        let offset: u32 = rng.value();
        let range = n / 3..n - n / 4;
        let mut expected = input.clone();
        for (i, v) in expected[range.clone()].iter_mut().enumerate() {
            *v = offset.wrapping_add(i as u32);
        }
        expected.iter_mut().for_each(|v| *v = v.wrapping_add(1));
        let mut out = poisoned::<u32>(n);
        scope(&stream, |s| -> TestResult {
            let mut y = s.upload(&input)?;
            let mut view = y.slice_mut(range.clone())?;
            write_index_u32(
                s,
                LaunchConfig::for_elements(view.len(), 128),
                offset,
                &mut view,
            )?;
            add_one_u32(s, LaunchConfig::for_elements(n, 256), &mut y)?;
            let _out = s.copy_to_host(&y, &mut out)?;
            Ok(())
        })?;
        check_eq(
            &format!("{n} u32 after write_index_u32 on {range:?} and add_one_u32"),
            &expected,
            &out,
        )?;
    }
    Ok(())
}

/// CUDA source that does not compile is `KernelCompile` for that kernel, carrying
/// NVRTC's log, which reports the error; the message says to fix the source.
fn cuda_syntax_error_is_kernel_compile_with_nvrtc_log() -> TestResult {
    let stream = stream()?;
    scope(&stream, |s| -> TestResult {
        let mut y = s.alloc_zeroed::<u32>(16)?;
        for attempt in ["first", "second"] {
            let what = format!("{attempt} launch of broken_kernel");
            let e = expect_err(
                &what,
                broken_kernel(s, LaunchConfig::for_elements(16, 32), &mut y),
            )?;
            let Error::KernelCompile(failure) = &e else {
                return Err(Failed::from(format!(
                    "{what}: got {e:?}, expected KernelCompile"
                )));
            };
            let stream_core::error::KernelCompile { kernel, log } = &**failure;
            ensure!(
                kernel == "broken_kernel",
                "{what}: the error names kernel {kernel:?}"
            );
            ensure!(
                log.contains("error") && log.contains("expected"),
                "{what}: NVRTC's log does not report the syntax error: {log:?}"
            );
            let message = e.to_string();
            ensure!(
                message.contains("broken_kernel")
                    && message.contains("fix its CUDA source")
                    && message.contains(log.as_str()),
                "{what}: the message {message:?} does not name the kernel, the fix and the log"
            );
        }
        Ok(())
    })
}

/// A declared name the module does not define is `KernelNotFound` naming it (the module
/// itself compiles: `add_one_u32` from the same source still works afterwards).
fn declared_name_missing_from_the_source_is_kernel_not_found() -> TestResult {
    let stream = stream()?;
    let mut out = poisoned::<u32>(16);
    scope(&stream, |s| -> TestResult {
        let mut y = s.alloc_zeroed::<u32>(16)?;
        let e = expect_err(
            "launch of missing_kernel",
            missing_kernel(s, LaunchConfig::for_elements(16, 32), &mut y),
        )?;
        let expected = Error::from(stream_core::error::KernelNotFound {
            kernel: "no_such_kernel".to_owned(),
        });
        check_error(
            "launch of missing_kernel",
            &e,
            &expected,
            &["no_such_kernel", "extern \"C\""],
        )?;
        add_one_u32(s, LaunchConfig::for_elements(16, 32), &mut y)?;
        let _out = s.copy_to_host(&y, &mut out)?;
        Ok(())
    })?;
    check_eq(
        "add_one_u32 after a missing kernel of the same source",
        &[1u32; 16],
        &out,
    )
}

/// A kernel loaded from hand-written PTX (`.target sm_90`) adds one to each element. On
/// a device older than compute capability 9.0 the driver cannot JIT sm_90 PTX, and the
/// launch must then be `KernelCompile` saying the PTX could not be loaded.
fn ptx_kernel_loads_and_adds_one() -> TestResult {
    let stream = stream()?;
    let (major, minor) = stream.device().compute_capability();
    let mut rng = Rng::new();
    for n in [0, 1, 257, 100_003] {
        let mut input: Vec<u32> = rng.vec(n);
        if let Some(last) = input.last_mut() {
            *last = u32::MAX; // wraps to 0
        }
        let mut out = poisoned::<u32>(n);
        let launched = scope(
            &stream,
            |s| -> stream_core::Result<stream_core::Result<()>> {
                let mut y = s.upload(&input)?;
                let launched = add_one_u32_ptx(s, LaunchConfig::for_elements(n, 256), &mut y);
                let _out = s.copy_to_host(&y, &mut out)?;
                Ok(launched)
            },
        )?;
        if major < 9 {
            let e = expect_err("PTX for sm_90 on an older device", launched)?;
            ensure!(
                matches!(&e, Error::KernelCompile(failure) if failure.log.contains("PTX")),
                "PTX for sm_90 on compute capability {major}.{minor}: got {e:?}, expected KernelCompile"
            );
            return Ok(());
        }
        launched?;
        let expected: Vec<u32> = input.iter().map(|v| v.wrapping_add(1)).collect();
        check_eq(
            &format!("{n} u32 after the PTX add_one_u32"),
            &expected,
            &out,
        )?;
    }
    Ok(())
}

/// PTX the driver rejects is `KernelCompile` for that kernel, saying the PTX could not
/// be loaded (with the driver's error).
fn malformed_ptx_is_kernel_compile() -> TestResult {
    let stream = stream()?;
    scope(&stream, |s| -> TestResult {
        let mut y = s.alloc_zeroed::<u32>(16)?;
        let e = expect_err(
            "launch of malformed_ptx",
            malformed_ptx(s, LaunchConfig::for_elements(16, 32), &mut y),
        )?;
        let Error::KernelCompile(failure) = &e else {
            return Err(Failed::from(format!(
                "malformed PTX: got {e:?}, expected KernelCompile"
            )));
        };
        let stream_core::error::KernelCompile { kernel, log } = &**failure;
        ensure!(
            kernel == "malformed_ptx",
            "malformed PTX: the error names kernel {kernel:?}"
        );
        ensure!(
            log.contains("PTX") && log.contains("cuModuleLoadData"),
            "malformed PTX: the log {log:?} does not say the driver refused the PTX"
        );
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// Ordering on the scope's stream, with a kernel declared here.

/// A kernel may write the source of a download that is still pending: this is *not* a
/// compile error, by design. `copy_to_host` borrows its device source only for the call
/// (the host destination is what stays borrowed), and the copy was enqueued on the
/// scope's stream before the kernel, so the stream runs the kernel only after the copy
/// has read the buffer. (It cannot be a `ui-tests/tests/pass` program here; this is its
/// runtime proof.) The download holds the old values, the buffer the new ones.
fn kernel_overwriting_a_pending_download_source_leaves_the_download_old() -> TestResult {
    let stream = stream()?;
    let dev = stream.device().clone();
    let mut rng = Rng::new();
    let n = (1 << 24) + 3;
    let input: Vec<u32> = rng.vec(n);
    let new_value: u32 = rng.value();
    let mut old = dev.alloc_pinned::<u32>(n)?; // pinned: a truly asynchronous copy
    old.fill(u32::POISON);
    let mut incremented = dev.alloc_pinned::<u32>(n)?;
    incremented.fill(u32::POISON);
    let mut filled = poisoned::<u32>(n);
    scope(&stream, |s| -> TestResult {
        let mut x = s.upload(&input)?;
        let pending = s.copy_to_host(&x, &mut old)?;
        add_one_u32(s, LaunchConfig::for_elements(n, 256), &mut x)?;
        let pending_incremented = s.copy_to_host(&x, &mut incremented)?;
        kernels::fill(s, &mut x, new_value)?;
        let host = pending.wait()?;
        check_eq(
            "download pending while kernels overwrote its source",
            &input,
            host,
        )?;
        let expected: Vec<u32> = input.iter().map(|v| v.wrapping_add(1)).collect();
        check_eq(
            "download pending while fill overwrote its source",
            &expected,
            pending_incremented.wait()?,
        )?;
        let _filled = s.copy_to_host(&x, &mut filled)?;
        Ok(())
    })?;
    check_eq("the source after fill", &vec![new_value; n], &filled)
}
