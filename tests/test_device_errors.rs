//! Bad input about devices is an `Err` naming what is wrong (rows "Driver and devices"
//! of the bad-input table, `stream-core/src/errors_doc.md`): no visible device, an
//! ordinal past the last, and memory, streams, library handles and timers of another
//! device, after each of which the scope keeps working.
//!
//! GPU tests are reported as ignored without a CUDA device (see `gpu_tests::run`); the
//! two-GPU test is registered only with two devices (stderr says when it is left out);
//! one test runs this binary again as a child process ([`CHILD_ENV`]) with every GPU
//! hidden.

use std::time::Duration;

use gpu_tests::child::run_self;
use gpu_tests::tests;
use gpu_tests::{
    check_eq, check_error, ensure, expect_err, gpu_status, poisoned, GpuStatus, Rng, Test,
    TestResult,
};
use stream_core::{scope, Device, Error, GpuTimer};

/// The environment variable that makes this binary run one child mode.
const CHILD_ENV: &str = "STREAM_CORE_DEVICE_ERRORS_CHILD";

/// The tests in the order of the table in `errors_doc.md`; the two-GPU test only where
/// there are two GPUs.
fn main() {
    if let Ok(mode) = std::env::var(CHILD_ENV) {
        std::process::exit(child(&mode));
    }
    let mut gpu: Vec<Test> = tests![
        no_visible_device_is_no_device_with_count_zero,
        device_new_with_an_absent_ordinal_is_no_device,
    ];
    match gpu_status() {
        GpuStatus::Present(n) if *n >= 2 => {
            gpu.extend(tests![
                memory_and_streams_of_another_device_are_device_mismatch
            ]);
        }
        GpuStatus::Present(n) => eprintln!(
            "test_device_errors: {n} CUDA device(s): the two-GPU test \
             memory_and_streams_of_another_device_are_device_mismatch is not registered \
             (run this binary on a machine with two GPUs to cover DeviceMismatch)"
        ),
        GpuStatus::Absent(_) => {}
    }
    gpu_tests::run(&gpu, &[])
}

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

/// `Device::new(99)` is `NoDevice { ordinal: 99, count }` with the real count.
fn device_new_with_an_absent_ordinal_is_no_device() -> TestResult {
    let count = Device::count()?;
    let e = expect_err("Device::new(99)", Device::new(99).map(drop))?;
    let expected = Error::NoDevice { ordinal: 99, count };
    check_error(
        "Device::new(99)",
        &e,
        &expected,
        &["99", &format!("below {count}")],
    )?;
    let e = expect_err("Device::new(count)", Device::new(count).map(drop))?;
    let expected = Error::NoDevice {
        ordinal: count,
        count,
    };
    check_error("Device::new(count)", &e, &expected, &[])
}

/// With two GPUs: attaching a `DeviceVec` of device 1 in a scope of device 0, forking a
/// scope of device 0 onto a stream of device 1, handing a buffer to a scope of another
/// device, and using a cuBLAS handle or starting or stopping a GPU timer of device 1 in
/// a scope of device 0 are each `DeviceMismatch` naming both ordinals; the scope keeps
/// working.
fn memory_and_streams_of_another_device_are_device_mismatch() -> TestResult {
    let (dev0, dev1) = (Device::new(0)?, Device::new(1)?);
    let (s0, s1) = (dev0.new_stream()?, dev1.new_stream()?);
    let other_vec = dev1.upload_vec(&[1u32; 16])?;
    let mut blas1 = kernels::Cublas::new(&dev1)?;
    let timer1 = GpuTimer::new(&dev1)?;
    let mismatch = |memory, stream| Error::DeviceMismatch { memory, stream };
    let input: Vec<u32> = Rng::new().vec(4097);
    let mut out = poisoned::<u32>(input.len());
    let mut inner_out = poisoned::<u32>(input.len());
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
        // A fork onto device 1's stream and a hand-off to its scope are no mismatch:
        // they cross devices (`test_peer`). Inside device 1's scope (its context bound),
        // device 0's scope keeps working.
        scope(&s1, |_t| -> TestResult {
            let x = s.upload(&input)?;
            let host = s.copy_to_host(&x, &mut inner_out)?.wait()?;
            check_eq(
                "device 0's round trip inside device 1's scope",
                &input,
                host,
            )
        })?;
        let (a, b) = (s.alloc_zeroed::<f32>(4)?, s.alloc_zeroed::<f32>(4)?);
        let mut c = s.alloc_zeroed::<f32>(4)?;
        let e = expect_err(
            "cuBLAS handle of device 1 in a scope of device 0",
            blas1.sgemm(s, 2, 2, 2, 1.0, &a, &b, 0.0, &mut c),
        )?;
        check_error("cublas sgemm", &e, &mismatch(1, 0), &[])?;
        let e = expect_err(
            "GPU timer of device 1 started in a scope of device 0",
            timer1.start(s),
        )?;
        check_error("timer start", &e, &mismatch(1, 0), &[])?;
        let e = expect_err(
            "GPU timer of device 1 stopped in a scope of device 0",
            timer1.stop(s),
        )?;
        check_error("timer stop", &e, &mismatch(1, 0), &[])?;
        let x = s.upload(&input)?;
        s.copy_to_host(&x, &mut out)?.wait()?;
        Ok(())
    })?;
    check_eq("round trip after five device mismatches", &input, &out)
}
