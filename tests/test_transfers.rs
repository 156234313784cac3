//! Copies between host and device memory and between device buffers
//! (`stream-core/src/scope/transfer.rs`), and waiting for a download (`Pending`,
//! `scope/pending.rs`): round trips of pageable, pinned and stack memory; copies into,
//! out of and between sub-range views, at odd element offsets too; `Pending::wait`
//! and `Pending::is_ready`; and the refusal of copies between memory of different
//! lengths.
//!
//! Elsewhere: staged copies of pageable memory in `test_staging.rs`, `DeviceVec`
//! transfers in `test_device_vec.rs`, `fill`, `zero` and `alloc_zeroed` in
//! `test_fills.rs`.
//!
//! Every test draws fresh non-zero random data, poisons its outputs before the GPU
//! runs, and compares the result with a CPU reference element by element (bit-exact).
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::time::{Duration, Instant};

use gpu_tests::{
    check_eq, check_error, ensure, expect_err, poison, poisoned, round_trip_in, stream, Element,
    Rng, TestResult, BIG_BYTES,
};
use stream_core::{scope, Error, Stream};

gpu_tests::test_main! {
    gpu: [
        pageable_vec_round_trip_is_exact_u8 = pageable_vec_round_trip_is_exact::<u8>,
        pageable_vec_round_trip_is_exact_u16 = pageable_vec_round_trip_is_exact::<u16>,
        pageable_vec_round_trip_is_exact_u32 = pageable_vec_round_trip_is_exact::<u32>,
        pageable_vec_round_trip_is_exact_f32 = pageable_vec_round_trip_is_exact::<f32>,
        pageable_vec_round_trip_is_exact_f64 = pageable_vec_round_trip_is_exact::<f64>,
        pageable_vec_round_trip_is_exact_i64 = pageable_vec_round_trip_is_exact::<i64>,
        pinned_buffer_round_trip_is_exact_u8 = pinned_buffer_round_trip_is_exact::<u8>,
        pinned_buffer_round_trip_is_exact_u16 = pinned_buffer_round_trip_is_exact::<u16>,
        pinned_buffer_round_trip_is_exact_u32 = pinned_buffer_round_trip_is_exact::<u32>,
        pinned_buffer_round_trip_is_exact_f32 = pinned_buffer_round_trip_is_exact::<f32>,
        pinned_buffer_round_trip_is_exact_f64 = pinned_buffer_round_trip_is_exact::<f64>,
        pinned_buffer_round_trip_is_exact_i64 = pinned_buffer_round_trip_is_exact::<i64>,
        stack_array_round_trip_is_exact,
        pinned_sub_slices_round_trip_into_other_sub_slices,
        copy_to_device_overwrites_an_existing_buffer,
        copy_to_device_into_a_slice_mut_writes_only_that_range,
        split_at_mut_halves_uploaded_separately_download_as_the_whole,
        copy_device_copies_a_whole_buffer_even_if_the_source_is_dropped_at_once,
        copy_device_between_sub_ranges_leaves_neighbours_untouched,
        views_at_odd_element_offsets_are_aligned_for_every_element_size,
        wait_returns_the_downloaded_data_before_the_scope_ends,
        is_ready_eventually_reports_a_finished_download,
        copies_with_mismatched_lengths_are_length_mismatch_and_write_nothing,
    ],
}

/// Element counts of every round trip, besides [`big_len`].
const SIZES: [usize; 6] = [0, 1, 3, 1000, 4097, (1 << 20) + 7];

/// 256 MiB worth of `T`.
fn big_len<T>() -> usize {
    BIG_BYTES / std::mem::size_of::<T>()
}

fn sizes<T>() -> impl Iterator<Item = usize> {
    SIZES.into_iter().chain([big_len::<T>()])
}

/// Upload from a `Vec` and download into a poisoned `Vec`, checked after the scope (the
/// download's `Pending` is dropped: the scope's end must have completed it).
fn pageable_vec_round_trip_is_exact<T: Element>() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for len in sizes::<T>() {
        let input: Vec<T> = rng.vec(len);
        let mut output: Vec<T> = poisoned(len);
        scope(&stream, |s| -> TestResult {
            let x = s.upload(&input)?;
            ensure!(
                x.len() == len,
                "upload of {len} elements made a buffer of {}",
                x.len()
            );
            let _download = s.copy_to_host(&x, &mut output)?;
            Ok(())
        })?;
        let what = format!("Vec<{}> of {len} elements after upload + download", T::NAME);
        check_eq(&what, &input, &output)?;
    }
    Ok(())
}

/// The same with page-locked host memory on both sides (truly asynchronous DMA).
fn pinned_buffer_round_trip_is_exact<T: Element>() -> TestResult {
    let stream = stream()?;
    let dev = stream.device();
    let mut rng = Rng::new();
    for len in sizes::<T>() {
        let mut input = dev.alloc_pinned::<T>(len)?;
        ensure!(
            input.len() == len,
            "alloc_pinned({len}) gave {} elements",
            input.len()
        );
        rng.fill(&mut input);
        let mut output = dev.alloc_pinned::<T>(len)?;
        poison(&mut output);
        scope(&stream, |s| -> TestResult {
            let x = s.upload(&input)?;
            let _download = s.copy_to_host(&x, &mut output)?;
            Ok(())
        })?;
        let what = format!(
            "PinnedBuffer<{}> of {len} elements after upload + download",
            T::NAME
        );
        check_eq(&what, &input, &output)?;
    }
    Ok(())
}

fn stack_round_trip<T: Element, const N: usize>(stream: &Stream, rng: &mut Rng) -> TestResult {
    let input: [T; N] = std::array::from_fn(|_| rng.value());
    let mut output = [T::POISON; N];
    scope(stream, |s| -> TestResult {
        let x = s.upload(&input)?;
        s.copy_to_host(&x, &mut output)?.wait()?;
        Ok(())
    })?;
    check_eq(
        &format!("[{}; {N}] on the stack after upload + download", T::NAME),
        &input,
        &output,
    )
}

/// Arrays on the (test thread's) stack work as sources and destinations.
fn stack_array_round_trip_is_exact() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    macro_rules! each_size {
        ($($t:ty),*) => {$(
            stack_round_trip::<$t, 0>(&stream, &mut rng)?;
            stack_round_trip::<$t, 1>(&stream, &mut rng)?;
            stack_round_trip::<$t, 3>(&stream, &mut rng)?;
            stack_round_trip::<$t, 1000>(&stream, &mut rng)?;
            stack_round_trip::<$t, 4097>(&stream, &mut rng)?;
        )*};
    }
    each_size!(u8, u16, u32, f32, f64, i64);
    Ok(())
}

/// `&pinned[a..b]` is a source and `&mut pinned[c..d]` a destination, and the rest of
/// the pinned buffer is untouched.
fn pinned_sub_slices_round_trip_into_other_sub_slices() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = (1 << 20) + 7;
    let mut pinned = stream.device().alloc_pinned::<f32>(2 * n)?;
    rng.fill(&mut pinned[..n]);
    poison(&mut pinned[n..]);
    let mut expected = pinned.to_vec();
    expected.copy_within(5..n - 3, n + 3);
    {
        let (front, back) = pinned.split_at_mut(n);
        scope(&stream, |s| -> TestResult {
            let x = s.upload(&front[5..n - 3])?;
            s.copy_to_host(&x, &mut back[3..n - 5])?.wait()?;
            Ok(())
        })?;
    }
    check_eq(
        "pinned buffer after copying [5, n-3) to [n+3, 2n-5)",
        &expected,
        &pinned,
    )
}

/// A second `copy_to_device` into the same buffer replaces the first one's data, also
/// through a whole-buffer view.
fn copy_to_device_overwrites_an_existing_buffer() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = 3 * 4097;
    let (first, second, third): (Vec<u32>, Vec<u32>, Vec<u32>) =
        (rng.vec(n), rng.vec(n), rng.vec(n));
    let mut after_second = poisoned::<u32>(n);
    let mut after_third = poisoned::<u32>(n);
    scope(&stream, |s| -> TestResult {
        let mut x = s.alloc::<u32>(n)?;
        s.copy_to_device(&first, &mut x)?;
        s.copy_to_device(&second, &mut x)?;
        s.copy_to_host(&x, &mut after_second)?.wait()?;
        s.copy_to_device(&third, &mut x.as_slice_mut())?;
        let _download = s.copy_to_host(&x, &mut after_third)?;
        Ok(())
    })?;
    check_eq(
        "buffer after a second copy_to_device",
        &second,
        &after_second,
    )?;
    check_eq(
        "buffer after a third copy_to_device through as_slice_mut",
        &third,
        &after_third,
    )
}

/// `copy_to_device` into `x.slice_mut(a..b)` (and a sub-range of that view) writes
/// exactly that range; the neighbours keep the background `fill` value.
fn copy_to_device_into_a_slice_mut_writes_only_that_range() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = 10_007;
    let (outer, inner) = (1_001..7_003, 2_000..2_999);
    let background: f64 = rng.value();
    let part: Vec<f64> = rng.vec(outer.len());
    let nested: Vec<f64> = rng.vec(inner.len() - 100);
    let mut expected = vec![background; n];
    expected[outer.clone()].copy_from_slice(&part);
    let nested_at = outer.start + inner.start + 50;
    expected[nested_at..nested_at + nested.len()].copy_from_slice(&nested);
    let mut output = poisoned::<f64>(n);
    scope(&stream, |s| -> TestResult {
        let mut x = s.alloc::<f64>(n)?;
        s.fill(&mut x, background)?;
        let mut sub = x.slice_mut(outer.clone())?;
        ensure!(
            sub.len() == outer.len(),
            "slice_mut({outer:?}) has {} elements",
            sub.len()
        );
        s.copy_to_device(&part, &mut sub)?;
        let mut sub_sub = sub.slice_mut(inner.start + 50..inner.end - 50)?;
        s.copy_to_device(&nested, &mut sub_sub)?;
        let _download = s.copy_to_host(&x, &mut output)?;
        Ok(())
    })?;
    check_eq(
        "buffer after copy_to_device into sub-ranges",
        &expected,
        &output,
    )
}

/// The two halves of `split_at_mut` take separate uploads; the whole buffer then reads
/// back as the concatenation (also for `mid` 0 and `len`).
fn split_at_mut_halves_uploaded_separately_download_as_the_whole() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for (n, mid) in [
        (4097, 2048),
        (4097, 0),
        (4097, 4097),
        ((1 << 20) + 7, 333_333),
    ] {
        let input: Vec<u16> = rng.vec(n);
        let mut output = poisoned::<u16>(n);
        scope(&stream, |s| -> TestResult {
            let mut x = s.alloc::<u16>(n)?;
            let (mut lo, mut hi) = x.split_at_mut(mid)?;
            ensure!(
                (lo.len(), hi.len()) == (mid, n - mid),
                "split_at_mut({mid}) of {n} gave halves of {} and {}",
                lo.len(),
                hi.len()
            );
            s.copy_to_device(&input[mid..], &mut hi)?;
            s.copy_to_device(&input[..mid], &mut lo)?;
            s.copy_to_host(&x, &mut output)?.wait()?;
            Ok(())
        })?;
        check_eq(
            &format!("{n} elements uploaded as halves split at {mid}"),
            &input,
            &output,
        )?;
    }
    Ok(())
}

/// `copy_device` copies all of a buffer; dropping the source right after enqueueing
/// the copy is fine (its free is stream-ordered after the copy).
fn copy_device_copies_a_whole_buffer_even_if_the_source_is_dropped_at_once() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = (1 << 20) + 7;
    let input: Vec<i64> = rng.vec(n);
    let mut output = poisoned::<i64>(n);
    scope(&stream, |s| -> TestResult {
        let a = s.upload(&input)?;
        let mut b = s.alloc::<i64>(n)?;
        s.fill(&mut b, i64::POISON)?;
        s.copy_device(&a, &mut b)?;
        drop(a);
        // Reuse the freed memory at once: it must not disturb the copy.
        let mut c = s.alloc::<i64>(n)?;
        s.fill(&mut c, i64::POISON)?;
        let _download = s.copy_to_host(&b, &mut output)?;
        Ok(())
    })?;
    check_eq(
        "buffer after copy_device from a dropped source",
        &input,
        &output,
    )
}

/// `copy_device` between sub-ranges of two buffers and between the halves of one
/// buffer writes exactly the destination range.
fn copy_device_between_sub_ranges_leaves_neighbours_untouched() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = 10_000;
    let source: Vec<u32> = rng.vec(n);
    let background: u32 = rng.value();
    let mut expected = vec![background; n];
    expected[5_000..7_000].copy_from_slice(&source[100..2_100]);
    expected[1_000..3_000].copy_from_slice(&source[100..2_100]);
    let mut output = poisoned::<u32>(n);
    scope(&stream, |s| -> TestResult {
        let src = s.upload(&source)?;
        let mut dst = s.alloc::<u32>(n)?;
        s.fill(&mut dst, background)?;
        s.copy_device(&src.slice(100..2_100)?, &mut dst.slice_mut(5_000..7_000)?)?;
        // Within one allocation: from the upper half back into the lower half.
        let (mut lo, hi) = dst.split_at_mut(5_000)?;
        s.copy_device(&hi.slice(0..2_000)?, &mut lo.slice_mut(1_000..3_000)?)?;
        let _download = s.copy_to_host(&dst, &mut output)?;
        Ok(())
    })?;
    check_eq(
        "destination after copy_device between sub-ranges",
        &expected,
        &output,
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

/// `Pending::wait` hands back host memory that already holds the downloaded data, in
/// the middle of the scope; the scope then goes on using it and the device.
fn wait_returns_the_downloaded_data_before_the_scope_ends() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = big_len::<f32>() / 4;
    let input: Vec<f32> = rng.vec(n);
    let negated: Vec<f32> = input.iter().map(|v| -v).collect();
    let mut pinned = stream.device().alloc_pinned::<f32>(n)?;
    poison(&mut pinned);
    let mut pageable = poisoned::<f32>(n);
    let mut last = poisoned::<f32>(n);
    scope(&stream, |s| -> TestResult {
        let x = s.upload(&input)?;
        let host = s.copy_to_host(&x, &mut pinned)?.wait()?;
        check_eq(
            "pinned download read right after wait, inside the scope",
            &input,
            host,
        )?;
        // Keep going: change the data on the host, send it back, and read it again.
        host.iter_mut().for_each(|v| *v = -*v);
        let y = s.upload(host)?;
        let back = s.copy_to_host(&y, &mut pageable)?.wait()?;
        check_eq(
            "pageable download read right after wait, inside the scope",
            &negated,
            back,
        )?;
        let mut z = s.alloc::<f32>(n)?;
        s.copy_device(&y, &mut z)?;
        let _download = s.copy_to_host(&z, &mut last)?;
        Ok(())
    })?;
    check_eq(
        "download issued after two waits in one scope",
        &negated,
        &last,
    )
}

/// `Pending::is_ready` turns true on its own (polled, no `wait`), and the data is then
/// complete; an empty download is ready at once.
fn is_ready_eventually_reports_a_finished_download() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = big_len::<u32>();
    let input: Vec<u32> = rng.vec(n);
    let mut pinned = stream.device().alloc_pinned::<u32>(n)?;
    poison(&mut pinned);
    let mut nothing: [u32; 0] = [];
    scope(&stream, |s| -> TestResult {
        let empty = s.alloc::<u32>(0)?;
        let done = s.copy_to_host(&empty, &mut nothing)?;
        ensure!(done.is_ready()?, "an empty download is not ready at once");
        let x = s.upload(&input)?;
        let pending = s.copy_to_host(&x, &mut pinned)?;
        let deadline = Instant::now() + Duration::from_secs(120);
        while !pending.is_ready()? {
            ensure!(
                Instant::now() < deadline,
                "is_ready() still false 120 s after a 256 MiB download was enqueued"
            );
            std::thread::sleep(Duration::from_micros(100));
        }
        let host = pending.wait()?;
        check_eq(
            "pinned download once is_ready() returned true",
            &input,
            host,
        )
    })
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
        let expected = Error::from(stream_core::error::LengthMismatch {
            what: "copy_to_device",
            source_len: 5,
            destination_len: 7,
        });
        check_error(
            "copy_to_device 5 -> 7",
            &e,
            &expected,
            &["5 != 7", "copy_to_device"],
        )?;

        let e = expect_err("copy_to_host 7 -> 5", s.copy_to_host(&seven, &mut five_out))?;
        let expected = Error::from(stream_core::error::LengthMismatch {
            what: "copy_to_host",
            source_len: 7,
            destination_len: 5,
        });
        check_error(
            "copy_to_host 7 -> 5",
            &e,
            &expected,
            &["7 != 5", "copy_to_host"],
        )?;

        let three = s.alloc_zeroed::<f32>(3)?;
        let mut four = s.alloc_zeroed::<f32>(4)?;
        let e = expect_err("copy_device 3 -> 4", s.copy_device(&three, &mut four))?;
        let expected = Error::from(stream_core::error::LengthMismatch {
            what: "copy_device",
            source_len: 3,
            destination_len: 4,
        });
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
                &e,
                Error::LengthMismatch(m) if (m.source_len, m.destination_len) == (2, 4)
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
