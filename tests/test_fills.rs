//! Setting device memory without a transfer (`stream-core/src/scope/fill.rs`, and
//! `alloc_zeroed` in `scope/alloc.rs`): `fill` with values of every width, on whole
//! buffers and on sub-range views, `zero`, and `alloc_zeroed` over reused memory.
//!
//! Every test draws fresh non-zero random data, poisons its outputs before the GPU
//! runs, and compares the result with a CPU reference element by element (bit-exact).
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use gpu_tests::{check_eq, poisoned, stream, Element, Rng, TestResult};
use stream_core::scope;

gpu_tests::test_main! {
    gpu: [
        fill_sets_every_element_and_only_the_sub_range_u8 = fill_u8,
        fill_sets_every_element_and_only_the_sub_range_u16 = fill_u16,
        fill_sets_every_element_and_only_the_sub_range_u32 = fill_u32,
        fill_sets_every_element_and_only_the_sub_range_f32 = fill_f32,
        fill_sets_every_element_and_only_the_sub_range_f64 = fill_f64,
        fill_sets_every_element_and_only_the_sub_range_u64 = fill_u64,
        fill_sets_every_element_and_only_the_sub_range_i64 = fill_i64,
        fill_sets_every_element_and_only_the_sub_range_u128 = fill_u128,
        zero_clears_every_element_and_only_the_sub_range_u8 = zero_clears_every_element_and_only_the_sub_range::<u8>,
        zero_clears_every_element_and_only_the_sub_range_u32 = zero_clears_every_element_and_only_the_sub_range::<u32>,
        zero_clears_every_element_and_only_the_sub_range_f64 = zero_clears_every_element_and_only_the_sub_range::<f64>,
        alloc_zeroed_is_zero_even_over_reused_poisoned_memory,
    ],
}

/// The largest length the fill tests use: 1 Mi + 7 elements, or 64 Ki + 7 under a
/// sanitizer (initcheck tracks every byte of every copy: the full size took 211 s of
/// its 300 there), still past a block of every fill kernel's grid.
fn large_len() -> usize {
    gpu_tests::load((1 << 20) + 7, (1 << 16) + 7)
}

/// Fills a random background's sub-range `[len/3, len - len/4)` with each value (the
/// neighbours must keep the background), and a whole poisoned buffer.
fn fill_sets_every_element_and_only_the_sub_range<T: Element>(fixed: &[T]) -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let values: Vec<T> = fixed.iter().copied().chain([rng.value()]).collect();
    for &value in &values {
        for len in [1, 3, 4097, large_len()] {
            let range = len / 3..len - len / 4;
            let background: Vec<T> = rng.vec(len);
            let mut expected_part = background.clone();
            expected_part[range.clone()].fill(value);
            let mut part = poisoned::<T>(len);
            let mut whole = poisoned::<T>(len);
            scope(&stream, |s| -> TestResult {
                let mut x = s.upload(&background)?;
                s.fill(&mut x.slice_mut(range.clone())?, value)?;
                let _part = s.copy_to_host(&x, &mut part)?;
                let mut y = s.alloc::<T>(len)?;
                s.fill(&mut y, T::POISON)?;
                s.fill(&mut y, value)?;
                let _whole = s.copy_to_host(&y, &mut whole)?;
                Ok(())
            })?;
            let v = value.describe();
            let what = format!("{len} elements of {} after fill({v}) of {range:?}", T::NAME);
            check_eq(&what, &expected_part, &part)?;
            let what = format!("{len} elements of {} after fill({v}) of all", T::NAME);
            check_eq(&what, &vec![value; len], &whole)?;
        }
    }
    Ok(())
}

fn fill_u8() -> TestResult {
    fill_sets_every_element_and_only_the_sub_range::<u8>(&[0xA5, 0xFF])
}

fn fill_u16() -> TestResult {
    fill_sets_every_element_and_only_the_sub_range::<u16>(&[0xA55A, 0x0102])
}

fn fill_u32() -> TestResult {
    fill_sets_every_element_and_only_the_sub_range::<u32>(&[0x0123_4567, 0xFFFF_FFFF])
}

fn fill_f32() -> TestResult {
    fill_sets_every_element_and_only_the_sub_range::<f32>(&[-1.5e-3, f32::MAX, -0.0])
}

fn fill_f64() -> TestResult {
    fill_sets_every_element_and_only_the_sub_range::<f64>(&[
        f64::from_bits(0x0123_4567_89AB_CDEF), // halves differ: one strided memset per word
        std::f64::consts::PI,                  // 0x400921FB_54442D18
        f64::from_bits(0x3FF0_0000_3FF0_0000), // equal halves: one 32-bit memset
        -0.0,
    ])
}

fn fill_u64() -> TestResult {
    fill_sets_every_element_and_only_the_sub_range::<u64>(&[
        0x0123_4567_89AB_CDEF,
        0x5555_AAAA_5555_AAAA,
        0x0000_0000_FFFF_FFFF,
    ])
}

fn fill_i64() -> TestResult {
    fill_sets_every_element_and_only_the_sub_range::<i64>(&[
        -0x0123_4567_89AB_CDEF,
        0x7766_5544_7766_5544,
        i64::MIN,
    ])
}

/// 16-byte values: four strided 32-bit memsets, or one when all words are equal.
fn fill_u128() -> TestResult {
    fill_sets_every_element_and_only_the_sub_range::<u128>(&[
        0x0123_4567_89AB_CDEF_FEDC_BA98_7654_3210,
        0x1111_1111_1111_1111_1111_1111_1111_1111,
        0x2222_2222_3333_3333_2222_2222_3333_3333,
    ])
}

/// `zero` on a sub-range of random data clears exactly that range, and on a whole
/// buffer every element.
fn zero_clears_every_element_and_only_the_sub_range<T: Element>() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let zero = T::ZERO;
    for len in [1, 3, 4097, large_len()] {
        let range = len / 4..len - len / 3;
        let input: Vec<T> = rng.vec(len);
        let mut expected = input.clone();
        expected[range.clone()].fill(zero);
        let mut part = poisoned::<T>(len);
        let mut whole = poisoned::<T>(len);
        scope(&stream, |s| -> TestResult {
            let mut x = s.upload(&input)?;
            s.zero(&mut x.slice_mut(range.clone())?)?;
            s.copy_to_host(&x, &mut part)?.wait()?;
            s.zero(&mut x)?;
            let _whole = s.copy_to_host(&x, &mut whole)?;
            Ok(())
        })?;
        check_eq(
            &format!("{len} random {} after zero of {range:?}", T::NAME),
            &expected,
            &part,
        )?;
        check_eq(
            &format!("{len} random {} after zero of all", T::NAME),
            &vec![zero; len],
            &whole,
        )?;
    }
    Ok(())
}

/// `alloc_zeroed` gives zeros even where the stream-ordered pool hands back memory a
/// freed buffer had filled with poison.
fn alloc_zeroed_is_zero_even_over_reused_poisoned_memory() -> TestResult {
    let stream = stream()?;
    let n = large_len();
    let mut output = poisoned::<u32>(n);
    scope(&stream, |s| -> TestResult {
        let mut junk = s.alloc::<u32>(n)?;
        s.fill(&mut junk, u32::POISON)?;
        drop(junk);
        let x = s.alloc_zeroed::<u32>(n)?;
        let _download = s.copy_to_host(&x, &mut output)?;
        Ok(())
    })?;
    check_eq("alloc_zeroed buffer", &vec![0u32; n], &output)
}
