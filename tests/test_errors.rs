//! Bad input is an `Err` of the one `Error` type (`stream-core/src/error.rs`) with the
//! variant and numbers that the bad-input table of the crate docs
//! (`stream-core/src/errors_doc.md`) gives, never a panic, and the scope, stream and
//! device keep working afterwards; zero-length work succeeds; every message says what
//! happened and what to do.
//!
//! This file holds the rows of that table that belong to no single module, in the
//! table's order: zero lengths, ranges, sizes that overflow, and the messages of errors
//! no test on one GPU can provoke (devices: `test_device_errors`). The other rows name a test in the file of
//! their module (`test_transfers`, `test_out_of_memory`, `test_pinned`, ...).
//!
//! GPU tests are reported as ignored without a CUDA device (see `gpu_tests::run`). Host
//! tests run everywhere. No test allocates more than a few GiB of host
//! memory, and none uses managed memory.

use std::hint::black_box;

use gpu_tests::tests;
use gpu_tests::{check_error, ensure, expect_err, stream, Test, TestResult};
use stream_core::{scope, Device, Error, LaunchLimit};

/// The tests in the order of the table in `errors_doc.md`.
fn main() {
    let gpu: Vec<Test> = tests![
        zero_length_alloc_upload_and_download_succeed,
        out_of_range_views_are_out_of_range,
        allocation_whose_byte_size_overflows_usize_is_size_overflow,
        every_error_message_says_what_happened_and_what_to_do,
    ];
    let host: Vec<Test> = tests![
        messages_of_errors_no_single_gpu_test_provokes_say_what_to_do,
        driver_error_message_says_restart_after_a_kernel_fault_and_check_arguments_otherwise,
    ];
    gpu_tests::run(&gpu, &host)
}

/// Empty allocations, uploads, downloads (ready at once), device copies, fills, views,
/// `DeviceVec`s and pinned buffers all succeed.
fn zero_length_alloc_upload_and_download_succeed() -> TestResult {
    let stream = stream()?;
    let dev = stream.device();
    let empty: [f32; 0] = [];
    let mut out: [f32; 0] = [];
    let mut out_again: Vec<f32> = Vec::new();
    let mut from_slice: [u32; 0] = [];
    let mut from_vec: Vec<f32> = Vec::new();
    let mut pinned_out = dev.alloc_pinned::<f32>(0)?;
    let pinned_in = dev.alloc_pinned::<f32>(0)?;
    ensure!(
        pinned_in.is_empty(),
        "alloc_pinned(0) has {} elements",
        pinned_in.len()
    );
    let mut vec = dev.alloc_vec::<f32>(0)?;
    let uploaded = dev.upload_vec::<f32>(&[])?;
    ensure!(
        vec.is_empty() && uploaded.is_empty(),
        "empty DeviceVecs are not empty"
    );
    ensure!(
        vec.to_host_vec()?.is_empty(),
        "to_host_vec of an empty DeviceVec is not empty"
    );
    scope(&stream, |s| -> TestResult {
        let mut a = s.alloc::<f32>(0)?;
        let b = s.alloc_zeroed::<f32>(0)?;
        let c = s.upload(&empty)?;
        ensure!(
            a.is_empty() && b.is_empty() && c.is_empty(),
            "empty buffers are not empty"
        );
        s.copy_to_device(&empty, &mut a)?;
        s.copy_device(&b, &mut a)?;
        s.fill(&mut a, 1.0)?;
        s.zero(&mut a)?;
        let done = s.copy_to_host(&c, &mut out)?;
        ensure!(done.is_ready()?, "an empty download is not ready at once");
        ensure!(
            done.wait()?.is_empty(),
            "an empty download handed back elements"
        );
        s.copy_to_host(&a, &mut out_again)?.wait()?;
        s.copy_to_device(&pinned_in, &mut a)?;
        s.copy_to_host(&a, &mut pinned_out)?.wait()?;

        let mut attached = s.attach(&mut vec)?;
        s.copy_to_device(&empty, &mut attached)?;
        s.copy_to_host(&s.attach_ref(&uploaded)?, &mut from_vec)?
            .wait()?;

        let x = s.alloc_zeroed::<u32>(10)?;
        let tail = x.slice(10..)?;
        ensure!(
            tail.is_empty(),
            "slice(10..) of 10 has {} elements",
            tail.len()
        );
        s.copy_to_host(&x.slice(3..3)?, &mut from_slice)?.wait()?;
        Ok(())
    })
}

/// Reversed and too-long ranges, and split points past the end, are `OutOfRange` with
/// the range and the length, on buffers, writable views and read-only views alike; the
/// edges (`len..len`, `split_at_mut(len)`) are fine.
fn out_of_range_views_are_out_of_range() -> TestResult {
    let stream = stream()?;
    let dev = stream.device();
    let len = 10;
    // Through `black_box`, so clippy does not reject the deliberately reversed range.
    let (five, three, past) = (black_box(5), black_box(3), black_box(len + 1));
    let vec = dev.alloc_vec::<u32>(len)?;
    scope(&stream, |s| -> TestResult {
        let mut x = s.alloc_zeroed::<u32>(len)?;
        let range = |start, end| Error::from(stream_core::error::OutOfRange { start, end, len });
        let cases: [(&str, stream_core::Result<()>, Error); 5] = [
            ("slice(5..3)", x.slice(five..three).map(drop), range(5, 3)),
            ("slice(0..len+1)", x.slice(0..past).map(drop), range(0, 11)),
            ("slice(3..=len)", x.slice(3..=len).map(drop), range(3, 11)),
            (
                "slice(..=usize::MAX)",
                x.slice(..=usize::MAX).map(drop),
                range(0, usize::MAX),
            ),
            (
                "slice_mut(5..3)",
                x.slice_mut(five..three).map(drop),
                range(5, 3),
            ),
        ];
        for (what, result, expected) in cases {
            check_error(
                what,
                &expect_err(what, result)?,
                &expected,
                &["out of bounds"],
            )?;
        }
        let e = expect_err("split_at_mut(len+1)", x.split_at_mut(past).map(drop))?;
        check_error(
            "split_at_mut(len+1)",
            &e,
            &range(0, 11),
            &["0..11", "10 elements"],
        )?;

        let mut view = x.slice_mut(..)?;
        let e = expect_err(
            "view.slice_mut(0..len+1)",
            view.slice_mut(0..past).map(drop),
        )?;
        check_error("view.slice_mut(0..len+1)", &e, &range(0, 11), &[])?;
        let e = expect_err(
            "view.split_at_mut(len+1)",
            view.split_at_mut(past).map(drop),
        )?;
        check_error("view.split_at_mut(len+1)", &e, &range(0, 11), &[])?;
        let shorter = view.slice_mut(2..)?;
        let e = expect_err(
            "8-element view.into_split_at_mut(9)",
            shorter.into_split_at_mut(9).map(drop),
        )?;
        check_error(
            "8-element view.into_split_at_mut(9)",
            &e,
            &Error::from(stream_core::error::OutOfRange {
                start: 0,
                end: 9,
                len: 8,
            }),
            &[],
        )?;

        let attached = s.attach_ref(&vec)?;
        let e = expect_err(
            "attach_ref view.slice(5..3)",
            attached.slice(five..three).map(drop),
        )?;
        check_error("attach_ref view.slice(5..3)", &e, &range(5, 3), &[])?;
        let e = expect_err(
            "attach_ref view.split_at(len+1)",
            attached.split_at(past).map(drop),
        )?;
        check_error("attach_ref view.split_at(len+1)", &e, &range(0, 11), &[])?;

        ensure!(
            x.slice(len..len)?.is_empty(),
            "slice(len..len) is not empty"
        );
        let (lo, hi) = x.split_at_mut(len)?;
        ensure!(
            (lo.len(), hi.len()) == (len, 0),
            "split_at_mut(len) gave {} and {}",
            lo.len(),
            hi.len()
        );
        Ok(())
    })
}

/// Element counts whose byte size overflows `usize` are `SizeOverflow`, before any
/// driver call (for device, `DeviceVec` and pinned allocations alike).
fn allocation_whose_byte_size_overflows_usize_is_size_overflow() -> TestResult {
    let stream = stream()?;
    let dev = stream.device();
    let overflow = |len, elem_size| Error::SizeOverflow { len, elem_size };
    let half = usize::MAX / 2 + 1;
    scope(&stream, |s| -> TestResult {
        let cases: [(&str, stream_core::Result<()>, Error); 3] = [
            (
                "alloc::<u64>(usize::MAX)",
                s.alloc::<u64>(usize::MAX).map(drop),
                overflow(usize::MAX, 8),
            ),
            (
                "alloc_zeroed::<u64>(usize::MAX)",
                s.alloc_zeroed::<u64>(usize::MAX).map(drop),
                overflow(usize::MAX, 8),
            ),
            (
                "alloc::<u16>(usize::MAX / 2 + 1)",
                s.alloc::<u16>(half).map(drop),
                overflow(half, 2),
            ),
        ];
        for (what, result, expected) in cases {
            check_error(
                what,
                &expect_err(what, result)?,
                &expected,
                &["size overflow"],
            )?;
        }
        Ok(())
    })?;
    let e = expect_err(
        "alloc_vec::<u64>(usize::MAX)",
        dev.alloc_vec::<u64>(usize::MAX).map(drop),
    )?;
    check_error(
        "alloc_vec::<u64>(usize::MAX)",
        &e,
        &overflow(usize::MAX, 8),
        &[],
    )?;
    let e = expect_err(
        "alloc_pinned::<u64>(usize::MAX)",
        dev.alloc_pinned::<u64>(usize::MAX).map(drop),
    )?;
    check_error(
        "alloc_pinned::<u64>(usize::MAX)",
        &e,
        &overflow(usize::MAX, 8),
        &[],
    )
}

/// The variants a test on one GPU cannot provoke (no NVRTC, a capturing stream, a
/// cuBLAS failure, memory of another device), and the launch and compile errors, have
/// messages that say what happened and, after a `; ` or a `. `, what to do.
fn messages_of_errors_no_single_gpu_test_provokes_say_what_to_do() -> TestResult {
    let cases: [(Error, &[&str]); 8] = [
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
            // H100 and H200 pairs always have a peer path (NVLink): this error needs GPUs
            // without one.
            Error::PeerAccessUnavailable { device: 1, peer: 0 },
            &[
                "device 1",
                "memory of device 0",
                "no NVLink or PCIe peer-to-peer path",
                "copy through the host",
            ],
        ),
        (
            Error::from(stream_core::error::InvalidLaunch {
                kernel: "k",
                what: "block.x",
                value: 2048,
                limit: LaunchLimit::AtMost(1024),
                source_of_limit: "the device (CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)",
            }),
            &[
                "`k`",
                "block.x is 2048",
                "admits at most 1024",
                "MAX_BLOCK_DIM_X",
                "LaunchConfig",
            ],
        ),
        (
            Error::from(stream_core::error::InvalidLaunch {
                kernel: "k",
                what: "dynamic shared memory (bytes)",
                value: 0,
                limit: LaunchLimit::AtLeast(4096),
                source_of_limit: "`#[kernel(shared = 4096)]` on `k`",
            }),
            &[
                "`k`",
                "dynamic shared memory (bytes) is 0",
                "`#[kernel(shared = 4096)]` on `k` admits at least 4096",
                "nothing was launched",
                "LaunchConfig",
            ],
        ),
        (
            Error::from(stream_core::error::KernelCompile {
                kernel: "k".to_owned(),
                log: "error: expected an expression".to_owned(),
            }),
            &["`k`", "fix its CUDA source", "expected an expression"],
        ),
        (
            Error::from(stream_core::error::KernelNotFound {
                kernel: "k".to_owned(),
            }),
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

/// A driver error whose code is a kernel fault says the context is unusable and to
/// restart the process; any other driver error says to check the call's arguments.
fn driver_error_message_says_restart_after_a_kernel_fault_and_check_arguments_otherwise(
) -> TestResult {
    let driver = |code: u32, name: &str| {
        Error::from(stream_core::error::Driver {
            call: "cuStreamSynchronize",
            code,
            name: name.to_owned(),
            description: "what the driver says".to_owned(),
        })
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

/// Every variant's `Display` is non-empty and has a "; what to do" clause after what
/// happened, for errors made by real calls and for the variants no test provokes.
fn every_error_message_says_what_happened_and_what_to_do() -> TestResult {
    let stream = stream()?;
    let dev = stream.device();
    let total = dev.total_memory()?;
    let mut errors: Vec<(&str, Error)> = Vec::new();
    errors.push((
        "Device::new(99)",
        expect_err("Device::new(99)", Device::new(99).map(drop))?,
    ));
    let oom = dev.alloc_vec::<u8>(total.saturating_mul(2)).map(drop);
    errors.push(("alloc_vec out of memory", expect_err("alloc_vec", oom)?));
    let overflow = dev.alloc_vec::<u64>(usize::MAX).map(drop);
    errors.push((
        "alloc_vec size overflow",
        expect_err("alloc_vec", overflow)?,
    ));
    scope(&stream, |s| -> TestResult {
        let x = s.alloc_zeroed::<u8>(4)?;
        let mismatch = s.copy_to_device(&[1u8; 3], &mut s.alloc::<u8>(4)?);
        errors.push((
            "copy_to_device length mismatch",
            expect_err("copy_to_device", mismatch)?,
        ));
        let range = x.slice(black_box(5)..black_box(3)).map(drop);
        errors.push(("slice out of range", expect_err("slice", range)?));
        Ok(())
    })?;
    errors.extend([
        ("NoDriver", Error::NoDriver),
        (
            "HostOutOfMemory",
            Error::HostOutOfMemory { requested: 1 << 40 },
        ),
        (
            "DeviceMismatch",
            Error::DeviceMismatch {
                memory: 1,
                stream: 0,
            },
        ),
        ("StreamCapturing", Error::StreamCapturing),
        (
            "Driver",
            Error::from(stream_core::error::Driver {
                call: "cuStreamSynchronize",
                code: 700,
                name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
                description: "an illegal memory access was encountered".into(),
            }),
        ),
    ]);
    let unhelpful: Vec<String> = errors
        .iter()
        .filter_map(|(what, e)| {
            let message = e.to_string();
            let advice = message
                .rsplit_once("; ")
                .map(|(happened, todo)| (happened.trim(), todo.trim()));
            match advice {
                Some((happened, todo)) if !happened.is_empty() && !todo.is_empty() => None,
                _ => Some(format!("{what}: {message:?}")),
            }
        })
        .collect();
    ensure!(
        unhelpful.is_empty(),
        "these error messages do not say what to do (expected \"<what happened>; <what to do>\"):\n  {}",
        unhelpful.join("\n  ")
    );
    Ok(())
}
