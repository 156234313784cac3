//! Transfers between host and device memory, and device-to-device copies (setting
//! device memory without a transfer, `fill`, `zero` and `alloc_zeroed`, is tested in
//! `test_fills.rs`).
//!
//! Every test draws fresh non-zero random data, poisons its outputs before the GPU
//! runs, and compares the result with a CPU reference element by element (bit-exact).
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::time::{Duration, Instant};

use gpu_tests::{
    check_eq, device, ensure, poison, poisoned, stream, Element, Rng, TestResult, BIG_BYTES,
};
use stream_core::{scope, Stream};

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
        wait_returns_the_downloaded_data_before_the_scope_ends,
        is_ready_eventually_reports_a_finished_download,
        device_vec_is_written_and_read_across_scopes_on_two_streams,
        device_vec_alloc_vec_is_zeroed_and_upload_vec_round_trips,
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

/// `DeviceVec`: `upload_vec`, `alloc_vec`, then written through `attach` in a scope on
/// one stream and read through `attach_ref` in a scope on another stream, then read
/// back with `to_host_vec`.
fn device_vec_is_written_and_read_across_scopes_on_two_streams() -> TestResult {
    let first = stream()?;
    let second = first.device().new_stream()?;
    let dev = device()?;
    let mut rng = Rng::new();
    let (n, mid) = ((1 << 20) + 7, 300_001);
    let a: Vec<f64> = rng.vec(n);
    let b: Vec<f64> = rng.vec(n);
    let source = dev.upload_vec(&a)?;
    let mut target = dev.alloc_vec::<f64>(n)?;
    let mut expected = b.clone();
    expected[mid..].copy_from_slice(&a[mid..]);

    // Scope 1, stream 1: write `b`'s front and `source`'s back into `target`.
    scope(&first, |s| -> TestResult {
        let src = s.attach_ref(&source)?;
        let dst = s.attach(&mut target)?;
        ensure!(
            dst.len() == n,
            "attach gave a view of {} elements, not {n}",
            dst.len()
        );
        let (mut lo, mut hi) = dst.into_split_at_mut(mid)?;
        s.copy_to_device(&b[..mid], &mut lo)?;
        s.copy_device(&src.slice(mid..)?, &mut hi)?;
        Ok(())
    })?;

    // Scope 2, stream 2: read `target` (twice, through two read-only views).
    let mut out = poisoned::<f64>(n);
    let mut tail = poisoned::<f64>(n - mid);
    scope(&second, |s| -> TestResult {
        let t = s.attach_ref(&target)?;
        let t_again = s.attach_ref(&target)?;
        let _tail = s.copy_to_host(&t_again.slice(mid..)?, &mut tail)?;
        let host = s.copy_to_host(&t, &mut out)?.wait()?;
        check_eq(
            "attach_ref download inside the second scope",
            &expected,
            host,
        )
    })?;
    check_eq(
        "tail read through a second attach_ref view",
        &expected[mid..],
        &tail,
    )?;
    check_eq(
        "to_host_vec after both scopes",
        &expected,
        &target.to_host_vec()?,
    )?;
    check_eq("source DeviceVec, read only", &a, &source.to_host_vec()?)
}

/// `alloc_vec` reads back as zeros and `upload_vec` as its input, for several types and
/// sizes (including 0 and 256 MiB).
fn device_vec_alloc_vec_is_zeroed_and_upload_vec_round_trips() -> TestResult {
    let dev = device()?;
    let mut rng = Rng::new();
    for len in sizes::<u32>() {
        let zeros = dev.alloc_vec::<u32>(len)?;
        ensure!(
            zeros.len() == len,
            "alloc_vec({len}) has {} elements",
            zeros.len()
        );
        check_eq(
            &format!("alloc_vec::<u32>({len})"),
            &vec![0; len],
            &zeros.to_host_vec()?,
        )?;
        let input: Vec<u32> = rng.vec(len);
        let v = dev.upload_vec(&input)?;
        check_eq(
            &format!("upload_vec of {len} u32"),
            &input,
            &v.to_host_vec()?,
        )?;
    }
    let bytes: Vec<u8> = rng.vec(4097);
    check_eq(
        "upload_vec of 4097 u8",
        &bytes,
        &dev.upload_vec(&bytes)?.to_host_vec()?,
    )?;
    let floats: Vec<f64> = rng.vec(1000);
    check_eq(
        "upload_vec of 1000 f64",
        &floats,
        &dev.upload_vec(&floats)?.to_host_vec()?,
    )
}
