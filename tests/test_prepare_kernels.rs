//! `Device::prepare_kernels` (`stream-core/src/kernel/prepare.rs`): modules compiled and
//! loaded ahead of their kernels' first launches, side by side; a source that does not
//! compile reported by its index while the others stay loaded; nothing, a repeat, and
//! threads preparing one source at once; a device made again at an ordinal, devices of
//! one ordinal taking turns to launch, and devices made one after another (each kernel
//! keeps its function for the first live device of an ordinal that launched it). The
//! `kernels` crate's groups of modules (`kernels::modules`) are what its first test
//! prepares.
//!
//! This binary holds only these tests, so the `kernels` crate's modules are compiled
//! here (by `prepare_kernels`), not found loaded. The first test prints how long the
//! preparation took and how long the first launches after it took. Without a CUDA
//! device the tests are reported as ignored (see `gpu_tests::run`).

use std::sync::Barrier;
use std::time::Instant;

use gpu_tests::{check_eq, device, ensure, expect_err, poisoned, stream, Failed, TestResult};
use half::f16;
use stream_core::{kernel, scope, Error, KernelSource, LaunchConfig};

gpu_tests::test_main! {
    gpu: [
        prepared_modules_serve_their_first_launches_exactly,
        a_source_that_fails_is_reported_by_its_index_and_the_others_stay_loaded,
        preparing_nothing_again_and_from_threads_at_once_is_ok,
        ptx_with_a_nul_byte_is_kernel_compile_at_prepare,
        a_device_made_again_prepares_and_launches_through_its_own_cache,
        devices_of_one_ordinal_taking_turns_each_launch_their_own_function,
    ],
}

/// A module of one kernel, prepared by the tests below before its first launch.
const ADD_SRC: &str = r#"
extern "C" __global__ void add_u32(unsigned v, unsigned* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < y_len) y[i] += v;
}
"#;

#[kernel(cuda = ADD_SRC, block = 256)]
/// `y[i] += v` (wrapping).
unsafe fn add_u32(v: u32, y: &mut [u32]);

/// Another module of one kernel, prepared by several threads at once.
const TIMES_SRC: &str = r#"
extern "C" __global__ void times_u32(unsigned v, unsigned* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < y_len) y[i] *= v;
}
"#;

#[kernel(cuda = TIMES_SRC, block = 256)]
/// `y[i] *= v` (wrapping).
unsafe fn times_u32(v: u32, y: &mut [u32]);

/// A kernel that only [`devices_of_one_ordinal_taking_turns_each_launch_their_own_function`]
/// launches, so that the devices it makes one after another are the only ones to keep
/// its fast path.
const XOR_SRC: &str = r#"
extern "C" __global__ void xor_u32(unsigned v, unsigned* y, size_t y_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < y_len) y[i] ^= v;
}
"#;

#[kernel(cuda = XOR_SRC, block = 256)]
/// `y[i] ^= v`.
unsafe fn xor_u32(v: u32, y: &mut [u32]);

/// A syntax error on line 3: `=` with no right-hand side.
const BROKEN_SRC: &str = r#"
extern "C" __global__ void broken(unsigned* y, size_t y_len) {
    if (y_len > 0) y[0] = ;
}
"#;

/// Elements of the launches below: more than one block, not a multiple of one.
const LEN: usize = 1000;

/// `add_u32(v)` then `times_u32(t)` (when given) on `LEN` elements `i`, checked exactly.
fn add_then_times(v: u32, t: Option<u32>) -> TestResult {
    add_then_times_on(&stream()?, v, t)
}

/// [`add_then_times`] on `stream`.
fn add_then_times_on(stream: &stream_core::Stream, v: u32, t: Option<u32>) -> TestResult {
    let input: Vec<u32> = (0..LEN as u32).collect();
    let mut out = poisoned::<u32>(LEN);
    scope(stream, |s| -> TestResult {
        let mut y = s.upload(&input)?;
        add_u32(s, LaunchConfig::for_elements(LEN, 256), v, &mut y)?;
        if let Some(t) = t {
            times_u32(s, LaunchConfig::for_elements(LEN, 256), t, &mut y)?;
        }
        let _out = s.copy_to_host(&y, &mut out)?;
        Ok(())
    })?;
    let expected: Vec<u32> = input.iter().map(|i| (i + v) * t.unwrap_or(1)).collect();
    check_eq("add_u32 then times_u32", &expected, &out)
}

/// Every module of the `kernels` crate prepared at once; then the first launches of an
/// f32 fill, reduction, transpose and SGEMM and an f16 fill are exact.
fn prepared_modules_serve_their_first_launches_exactly() -> TestResult {
    let dev = device()?;
    let began = Instant::now();
    dev.prepare_kernels(kernels::modules::ALL)?;
    let prepared = began.elapsed();

    let (rows, cols) = (70usize, 130usize);
    let matrix: Vec<f32> = (0..rows * cols).map(|i| (i % 97) as f32).collect();
    let (mut filled, mut half_filled) = (poisoned::<f32>(LEN), poisoned::<f16>(LEN));
    let (mut sum, mut transposed) = ([f32::NAN], poisoned::<f32>(rows * cols));
    let mut product = poisoned::<f32>(rows * rows);
    let stream = dev.new_stream()?;
    let began = Instant::now();
    scope(&stream, |s| -> TestResult {
        let mut y = s.alloc::<f32>(LEN)?;
        kernels::fill(s, &mut y, 3.0f32)?;
        let mut h = s.alloc::<f16>(LEN)?;
        kernels::fill(s, &mut h, f16::from_f32(0.5))?;
        let mut total = s.alloc::<f32>(1)?;
        kernels::reduce_sum(s, &y, &mut total)?;
        let a = s.upload(&matrix)?;
        let mut at = s.alloc::<f32>(rows * cols)?;
        kernels::transpose(s, &a, rows as u32, cols as u32, &mut at)?;
        // (rows x cols) * (cols x rows): the matrix times its transpose.
        let mut c = s.alloc::<f32>(rows * rows)?;
        let (m, k) = (rows as u32, cols as u32);
        kernels::sgemm_tiled(s, m, m, k, 1.0, &a, &at, 0.0, &mut c)?;
        // Read after the scope, which waits for them.
        let _filled = s.copy_to_host(&y, &mut filled)?;
        let _half = s.copy_to_host(&h, &mut half_filled)?;
        let _sum = s.copy_to_host(&total, &mut sum)?;
        let _transposed = s.copy_to_host(&at, &mut transposed)?;
        let _product = s.copy_to_host(&c, &mut product)?;
        Ok(())
    })?;
    let launched = began.elapsed();

    check_eq("fill 3.0 (f32)", &[3.0f32; LEN], &filled)?;
    check_eq("fill 0.5 (f16)", &[f16::from_f32(0.5); LEN], &half_filled)?;
    ensure!(
        sum[0] == 3.0 * LEN as f32,
        "reduce_sum is {}, not 3000",
        sum[0]
    );
    let expected: Vec<f32> = (0..cols * rows)
        .map(|i| matrix[(i % rows) * cols + i / rows])
        .collect();
    check_eq("transpose", &expected, &transposed)?;
    // Integers below 97, 130 terms: every dot product is exact in f32.
    let dot = |r: usize, q: usize| -> f32 {
        (0..cols)
            .map(|j| matrix[r * cols + j] * matrix[q * cols + j])
            .sum()
    };
    let expected: Vec<f32> = (0..rows * rows).map(|i| dot(i / rows, i % rows)).collect();
    check_eq(
        "sgemm_tiled of the matrix and its transpose",
        &expected,
        &product,
    )?;
    eprintln!(
        "test_prepare_kernels: prepare_kernels(kernels::modules::ALL) ({} modules) took {} ms; \
         the first launches after it (fill f32 and f16, reduce_sum, transpose, sgemm_tiled, \
         with their copies) {} ms",
        kernels::modules::ALL.len(),
        prepared.as_millis(),
        launched.as_millis()
    );
    Ok(())
}

/// Sources 0 and 2 compile, 1 does not: the error is source 1's `KernelCompile` with
/// NVRTC's log, and source 0's kernel launches afterwards.
fn a_source_that_fails_is_reported_by_its_index_and_the_others_stay_loaded() -> TestResult {
    let dev = device()?;
    let sources = [
        KernelSource::Cuda(ADD_SRC),
        KernelSource::Cuda(BROKEN_SRC),
        KernelSource::Cuda(TIMES_SRC),
    ];
    let e = expect_err(
        "prepare_kernels with a broken source",
        dev.prepare_kernels(&sources),
    )?;
    match &e {
        Error::KernelCompile(compile) => {
            ensure!(
                compile.kernel == "source 1 of Device::prepare_kernels",
                "the error names `{}`, not source 1",
                compile.kernel
            );
            ensure!(!compile.log.is_empty(), "the error carries no NVRTC log");
        }
        other => return Err(format!("expected KernelCompile, got {other:?}").into()),
    }
    let text = e.to_string();
    ensure!(
        text.contains("fix its CUDA source"),
        "the message says: {text}"
    );
    add_then_times(5, Some(3))
}

/// An empty list, a source prepared twice, and eight threads preparing one source at
/// once all succeed, and the kernels launch.
fn preparing_nothing_again_and_from_threads_at_once_is_ok() -> TestResult {
    let dev = device()?;
    dev.prepare_kernels(&[])?;
    let start = Barrier::new(8);
    let outcomes: Vec<Result<(), String>> = std::thread::scope(|threads| {
        let running: Vec<_> = (0..8)
            .map(|_| {
                let (dev, start) = (&dev, &start);
                threads.spawn(move || {
                    start.wait();
                    dev.prepare_kernels(&[KernelSource::Cuda(TIMES_SRC)])
                })
            })
            .collect();
        running
            .into_iter()
            .map(|t| match t.join() {
                Ok(prepared) => prepared.map_err(|e| e.to_string()),
                Err(_) => Err("panicked".to_owned()),
            })
            .collect()
    });
    for (i, outcome) in outcomes.into_iter().enumerate() {
        outcome.map_err(|why| format!("thread {i}: {why}"))?;
    }
    dev.prepare_kernels(&[KernelSource::Cuda(ADD_SRC), KernelSource::Cuda(ADD_SRC)])?;
    add_then_times(7, Some(2))
}

/// PTX text with a NUL byte cannot be handed to the driver: `KernelCompile` at prepare.
fn ptx_with_a_nul_byte_is_kernel_compile_at_prepare() -> TestResult {
    let dev = device()?;
    let e = expect_err(
        "prepare_kernels of PTX with a NUL byte",
        dev.prepare_kernels(&[KernelSource::Ptx(".version 8.0\0")]),
    )?;
    match e {
        Error::KernelCompile(compile) => {
            ensure!(compile.log.contains("NUL"), "the log says: {}", compile.log);
            Ok(())
        }
        other => Err(format!("expected KernelCompile, got {other:?}").into()),
    }
}

/// A second `Device` of ordinal 0 (the tests' shared one holds the kernels' per-ordinal
/// fast path) has a module cache of its own: it prepares and launches there, repeatedly
/// (each launch after the first finds the kernel's function by its address), exactly.
fn a_device_made_again_prepares_and_launches_through_its_own_cache() -> TestResult {
    device()?.prepare_kernels(&[KernelSource::Cuda(ADD_SRC)])?;
    add_then_times(1, None)?;
    let again = stream_core::Device::new(0)?;
    again.prepare_kernels(&[KernelSource::Cuda(ADD_SRC), KernelSource::Cuda(TIMES_SRC)])?;
    let stream = again.new_stream()?;
    for v in 1..4 {
        add_then_times_on(&stream, v, Some(v + 1))?;
    }
    Ok(())
}

/// Devices of ordinal 0 alive side by side (the first to launch a kernel keeps its
/// per-ordinal fast path, the other looks the function up in its own cache), launching
/// in turns from one thread and from four at once; then devices made one after another,
/// each launching a kernel no other device launches (each keeps the fast path and
/// releases it as it is dropped, for the next): every result exact.
fn devices_of_one_ordinal_taking_turns_each_launch_their_own_function() -> TestResult {
    let second = stream_core::Device::new(0)?;
    let streams = [device()?.new_stream()?, second.new_stream()?];
    for round in 0..20u32 {
        add_then_times_on(&streams[round as usize % 2], round, Some(round % 3 + 1))?;
    }
    std::thread::scope(|threads| {
        let launching: Vec<_> = (0..4u32)
            .map(|i| {
                let stream = &streams[i as usize % 2];
                threads.spawn(move || -> TestResult {
                    for v in 0..50u32 {
                        add_then_times_on(stream, v + i, Some(2))?;
                    }
                    Ok(())
                })
            })
            .collect();
        launching.into_iter().try_for_each(|thread| {
            thread
                .join()
                .map_err(|_| Failed::from("a launching thread panicked"))?
        })
    })?;
    drop((streams, second));
    let input: Vec<u32> = (0..LEN as u32).collect();
    for made in 1..=3u32 {
        let again = stream_core::Device::new(0)?;
        let stream = again.new_stream()?;
        for launch in 0..4u32 {
            let v = made << 8 | launch;
            let mut out = poisoned::<u32>(LEN);
            scope(&stream, |s| -> TestResult {
                let mut y = s.upload(&input)?;
                xor_u32(s, LaunchConfig::for_elements(LEN, 256), v, &mut y)?;
                let _out = s.copy_to_host(&y, &mut out)?;
                Ok(())
            })?;
            let expected: Vec<u32> = input.iter().map(|i| i ^ v).collect();
            check_eq(
                &format!("xor_u32 on device {made} made again"),
                &expected,
                &out,
            )?;
        }
    }
    Ok(())
}
