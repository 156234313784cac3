//! Bad input is an `Err` with the right variant and numbers, never a panic, and the
//! scope, stream and device keep working afterwards. Zero-length work succeeds.
//! Every error message says what happened and what to do.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).
//! No test allocates more than a few GiB of host memory, and none uses managed memory.

use std::hint::black_box;

use gpu_tests::{
    check_eq, check_error, device, ensure, expect_err, poisoned, round_trip_in, stream, Failed,
    Rng, TestResult,
};
use stream_core::{scope, Device, Error};

gpu_tests::test_main! {
    gpu: [
        copies_with_mismatched_lengths_are_length_mismatch_and_write_nothing,
        device_new_with_an_absent_ordinal_is_no_device,
        allocation_larger_than_the_card_is_out_of_memory_and_the_stream_keeps_working,
        device_vec_larger_than_the_card_is_out_of_memory_and_the_device_keeps_working,
        out_of_range_views_are_out_of_range,
        allocation_whose_byte_size_overflows_usize_is_size_overflow,
        zero_length_alloc_upload_and_download_succeed,
        every_error_message_says_what_happened_and_what_to_do,
    ],
}

/// `copy_to_device`, `copy_to_host` and `copy_device` between memory of different
/// lengths return `LengthMismatch` with both lengths (message `a != b`); the failed
/// download writes nothing, and the scope goes on working.
fn copies_with_mismatched_lengths_are_length_mismatch_and_write_nothing() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let five: Vec<f32> = rng.vec(5);
    let fresh: Vec<f32> = rng.vec(4097);
    let mut five_out = poisoned::<f32>(5);
    let mut fresh_out = poisoned::<f32>(4097);
    scope(&stream, |s| -> TestResult {
        let mut seven = s.alloc_zeroed::<f32>(7)?;
        let e = expect_err("copy_to_device 5 -> 7", s.copy_to_device(&five, &mut seven))?;
        let expected = Error::LengthMismatch {
            what: "copy_to_device",
            source_len: 5,
            destination_len: 7,
        };
        check_error(
            "copy_to_device 5 -> 7",
            &e,
            &expected,
            &["5 != 7", "copy_to_device"],
        )?;

        let e = expect_err("copy_to_host 7 -> 5", s.copy_to_host(&seven, &mut five_out))?;
        let expected = Error::LengthMismatch {
            what: "copy_to_host",
            source_len: 7,
            destination_len: 5,
        };
        check_error(
            "copy_to_host 7 -> 5",
            &e,
            &expected,
            &["7 != 5", "copy_to_host"],
        )?;

        let three = s.alloc_zeroed::<f32>(3)?;
        let mut four = s.alloc_zeroed::<f32>(4)?;
        let e = expect_err("copy_device 3 -> 4", s.copy_device(&three, &mut four))?;
        let expected = Error::LengthMismatch {
            what: "copy_device",
            source_len: 3,
            destination_len: 4,
        };
        check_error(
            "copy_device 3 -> 4",
            &e,
            &expected,
            &["3 != 4", "copy_device"],
        )?;
        let e = expect_err(
            "copy_device from a sub-range of 2 into 4",
            s.copy_device(&seven.slice(1..3)?, &mut four),
        )?;
        ensure!(
            matches!(
                e,
                Error::LengthMismatch {
                    source_len: 2,
                    destination_len: 4,
                    ..
                }
            ),
            "copy_device from a sub-range of 2 into 4: got {e:?}"
        );

        round_trip_in(
            s,
            &fresh,
            &mut fresh_out,
            "round trip after three length mismatches",
        )
    })?;
    check_eq(
        "host buffer of a refused download",
        &poisoned::<f32>(5),
        &five_out,
    )
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

/// Twice the card's memory cannot be allocated: `alloc` and `alloc_zeroed` return
/// `OutOfMemory` with the request and the device's numbers; the same scope and, later,
/// the same stream still round-trip data.
fn allocation_larger_than_the_card_is_out_of_memory_and_the_stream_keeps_working() -> TestResult {
    let stream = stream()?;
    let total = stream.device().total_memory()?;
    let request = total
        .checked_mul(2)
        .ok_or_else(|| Failed::from(format!("2 * total memory ({total}) overflows")))?;
    let mut rng = Rng::new();
    let (first, second): (Vec<f32>, Vec<f32>) = (rng.vec(1 << 20), rng.vec(1 << 20));
    let (mut first_out, mut second_out) = (poisoned::<f32>(1 << 20), poisoned::<f32>(1 << 20));
    scope(&stream, |s| -> TestResult {
        let words = request / 4;
        for (what, result, bytes) in [
            ("alloc::<u8>", s.alloc::<u8>(request).map(drop), request),
            (
                "alloc_zeroed::<u8>",
                s.alloc_zeroed::<u8>(request).map(drop),
                request,
            ),
            ("alloc::<u32>", s.alloc::<u32>(words).map(drop), words * 4),
        ] {
            let what = format!("{what} of {bytes} bytes");
            check_out_of_memory(&what, expect_err(&what, result)?, bytes)?;
        }
        round_trip_in(
            s,
            &first,
            &mut first_out,
            "round trip in the scope after out of memory",
        )
    })?;
    scope(&stream, |s| -> TestResult {
        round_trip_in(
            s,
            &second,
            &mut second_out,
            "round trip in a new scope after out of memory",
        )
    })
}

fn check_out_of_memory(what: &str, e: Error, request: usize) -> TestResult {
    let Error::OutOfMemory {
        requested,
        free,
        total,
    } = e
    else {
        return Err(Failed::from(format!(
            "{what}: got {e:?}, expected OutOfMemory"
        )));
    };
    ensure!(
        requested == request,
        "{what}: requested is {requested}, not {request}"
    );
    ensure!(
        total > 0 && free <= total,
        "{what}: implausible free {free} of total {total}"
    );
    ensure!(
        requested > total,
        "{what}: the request {requested} fits in total {total}"
    );
    let message = e.to_string();
    ensure!(
        message.contains(&request.to_string()),
        "{what}: the message {message:?} does not name the request"
    );
    Ok(())
}

/// `alloc_vec` of twice the card's memory is `OutOfMemory`; the device's other
/// `DeviceVec` helpers keep working.
fn device_vec_larger_than_the_card_is_out_of_memory_and_the_device_keeps_working() -> TestResult {
    let dev = device()?;
    let total = dev.total_memory()?;
    let request = total
        .checked_mul(2)
        .ok_or_else(|| Failed::from(format!("2 * total memory ({total}) overflows")))?;
    let result = dev.alloc_vec::<u8>(request).map(drop);
    check_out_of_memory("alloc_vec", expect_err("alloc_vec", result)?, request)?;
    let input: Vec<u64> = Rng::new().vec(4097);
    let v = dev.upload_vec(&input)?;
    check_eq("upload_vec after out of memory", &input, &v.to_host_vec()?)?;
    check_eq(
        "alloc_vec after out of memory",
        &[0u64; 100],
        &dev.alloc_vec::<u64>(100)?.to_host_vec()?,
    )
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
        let range = |start, end| Error::OutOfRange { start, end, len };
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
            &Error::OutOfRange {
                start: 0,
                end: 9,
                len: 8,
            },
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
            Error::Driver {
                call: "cuStreamSynchronize",
                code: 700,
                name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
                description: "an illegal memory access was encountered".into(),
            },
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
