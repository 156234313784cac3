//! `DeviceVec`, device memory that outlives scopes (`stream-core/src/memory/device_vec.rs`),
//! and its use inside scopes through `attach` and `attach_ref` (`scope/attach.rs`):
//! `alloc_vec` is zeroed, `upload_vec` and `to_host_vec` round-trip, and one vector is
//! written and read by scopes on several streams and threads in sequence, each use
//! seeing the previous one's writes.
//!
//! Long spinning kernels (`gpu_tests::spin`) are queued in front of the writes, so that
//! a missing dependency between two streams would show as wrong data.
//!
//! Every test draws fresh non-zero random data, poisons its outputs before the GPU
//! runs, and compares the result with a CPU reference element by element (bit-exact).
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{
    check_eq, device, ensure, panic_message, poisoned, spin, stream, Failed, Rng, TestResult,
    BIG_BYTES,
};
use stream_core::scope;

gpu_tests::test_main! {
    gpu: [
        device_vec_alloc_vec_is_zeroed_and_upload_vec_round_trips,
        device_vec_is_written_and_read_across_scopes_on_two_streams,
        device_vec_used_on_three_streams_and_two_threads_in_sequence,
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

/// About 50 ms of spinning on an H100/H200 (clocks near 2 GHz): long enough that a
/// missing dependency would let the other stream run first.
const SPIN: u64 = 100_000_000;

fn times(input: &[f32], factor: f32) -> Vec<f32> {
    input.iter().map(|v| v * factor).collect()
}

/// One `DeviceVec`, written behind a long kernel on stream A, then scaled on stream B,
/// then read on stream C from another thread, then moved to a fourth thread and read
/// there: each use sees the previous one's writes.
fn device_vec_used_on_three_streams_and_two_threads_in_sequence() -> TestResult {
    let a = stream()?;
    let b = a.device().new_stream()?;
    let c = a.device().new_stream()?;
    let dev = a.device().clone();
    let n = (1 << 20) + 3;
    let input: Vec<f32> = Rng::new().vec(n);
    let mut v = dev.alloc_vec::<f32>(n)?;
    scope(&a, |s| -> TestResult {
        let mut w = s.attach(&mut v)?;
        spin(s, SPIN)?;
        s.copy_to_device(&input, &mut w)?;
        Ok(())
    })?;
    scope(&b, |s| -> TestResult {
        let mut w = s.attach(&mut v)?;
        let mut tmp = s.alloc::<f32>(n)?;
        spin(s, SPIN)?;
        s.copy_device(&w, &mut tmp)?;
        kernels::scale(s, 2.0, &tmp, &mut w)?;
        Ok(())
    })?;
    let from_c = std::thread::scope(|t| {
        t.spawn(|| -> Result<Vec<f32>, Failed> {
            let mut out = poisoned::<f32>(n);
            scope(&c, |s| -> TestResult {
                let w = s.attach_ref(&v)?;
                s.copy_to_host(&w, &mut out)?.wait()?;
                Ok(())
            })?;
            Ok(out)
        })
        .join()
        .map_err(|p| Failed::from(format!("reader thread panicked: {}", panic_message(&*p))))
    })??;
    check_eq(
        "DeviceVec read on stream C, another thread",
        &times(&input, 2.0),
        &from_c,
    )?;
    let moved = std::thread::spawn(move || -> Result<Vec<f32>, String> {
        v.to_host_vec().map_err(|e| e.to_string())
    })
    .join()
    .map_err(|p| {
        Failed::from(format!(
            "thread owning the DeviceVec panicked: {}",
            panic_message(&*p)
        ))
    })?
    .map_err(Failed::from)?;
    check_eq(
        "DeviceVec moved to another thread",
        &times(&input, 2.0),
        &moved,
    )
}
