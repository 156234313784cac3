//! The element-wise kernels and the reductions of the `kernels` crate on a real GPU
//! (`kernels/src/elementwise.rs`, `reduce.rs`, `declarations.rs`), their refusal of
//! mismatched lengths, and stream order between a kernel and the copies enqueued after
//! it on the scope's stream.
//!
//! Every test draws fresh non-zero random inputs, poisons its outputs before the GPU
//! runs, and compares with a CPU reference computed in `f64`: bit-exact where the GPU
//! result is exactly determined (fill, scale), and within a stated rounding-error bound
//! otherwise (axpy, reductions; see `gpu_tests::check_close`). Bad input is an `Err` of
//! the right variant that leaves the outputs untouched.
//!
//! The last test runs every public wrapper (transpose and SGEMM included) once, to show
//! that each launches at the shape its private declaration admits; launch shapes in
//! general are tested in `test_launch_shapes.rs`. Transpose and SGEMM are tested in
//! `test_gemm.rs`; kernels declared in a test with
//! `#[kernel]` in `test_kernel_declarations.rs`, which also holds the proof that a kernel
//! may overwrite the source of a pending download (it launches a kernel declared there).
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::time::{Duration, Instant};

use gpu_tests::{
    accurate_sum, check_close, check_eq, check_error, ensure, expect_err, poisoned, signed, stream,
    summation_height, Element, Real, Rng, TestResult,
};
use half::{bf16, f16};
use kernels::Float;
use stream_core::{scope, DeviceBuffer, Error, Scope};

gpu_tests::test_main! {
    gpu: [
        fill_sets_every_element_f32 = fill_sets_every_element::<f32>,
        fill_sets_every_element_f64 = fill_sets_every_element::<f64>,
        fill_sets_every_element_u32 = fill_sets_every_element::<u32>,
        fill_sets_every_element_f16 = fill_sets_every_element::<f16>,
        fill_sets_every_element_bf16 = fill_sets_every_element::<bf16>,
        fill_of_views_at_every_offset_writes_exactly_their_elements_f32 = fill_of_views_at_every_offset_writes_exactly_their_elements::<f32>,
        fill_of_views_at_every_offset_writes_exactly_their_elements_f64 = fill_of_views_at_every_offset_writes_exactly_their_elements::<f64>,
        fill_of_views_at_every_offset_writes_exactly_their_elements_f16 = fill_of_views_at_every_offset_writes_exactly_their_elements::<f16>,
        scale_is_exactly_the_rounded_product_f32 = scale_is_exactly_the_rounded_product::<f32>,
        scale_is_exactly_the_rounded_product_f64 = scale_is_exactly_the_rounded_product::<f64>,
        scale_is_exactly_the_rounded_product_f16 = scale_is_exactly_the_rounded_product::<f16>,
        scale_is_exactly_the_rounded_product_bf16 = scale_is_exactly_the_rounded_product::<bf16>,
        axpy_is_within_two_roundings_f32 = axpy_is_within_two_roundings::<f32>,
        axpy_is_within_two_roundings_f64 = axpy_is_within_two_roundings::<f64>,
        axpy_is_within_two_roundings_f16 = axpy_is_within_two_roundings::<f16>,
        axpy_is_within_two_roundings_bf16 = axpy_is_within_two_roundings::<bf16>,
        axpy_on_sub_range_views_leaves_neighbours_untouched,
        reduce_sum_is_within_its_bound_and_bit_reproducible_f32 = reduce_sum_is_within_its_bound_and_bit_reproducible::<f32>,
        reduce_sum_is_within_its_bound_and_bit_reproducible_f64 = reduce_sum_is_within_its_bound_and_bit_reproducible::<f64>,
        reduce_sum_is_within_its_bound_and_bit_reproducible_f16 = reduce_sum_is_within_its_bound_and_bit_reproducible::<f16>,
        reduce_sum_is_within_its_bound_and_bit_reproducible_bf16 = reduce_sum_is_within_its_bound_and_bit_reproducible::<bf16>,
        dot_is_within_its_bound_and_bit_reproducible_f32 = dot_is_within_its_bound_and_bit_reproducible::<f32>,
        dot_is_within_its_bound_and_bit_reproducible_f64 = dot_is_within_its_bound_and_bit_reproducible::<f64>,
        dot_is_within_its_bound_and_bit_reproducible_f16 = dot_is_within_its_bound_and_bit_reproducible::<f16>,
        dot_is_within_its_bound_and_bit_reproducible_bf16 = dot_is_within_its_bound_and_bit_reproducible::<bf16>,
        axpy_scale_and_dot_with_mismatched_lengths_are_length_mismatch_and_write_nothing,
        reduce_sum_and_dot_into_out_of_wrong_length_are_length_mismatch,
        copy_after_a_spinning_kernel_sees_its_write,
        public_kernel_wrappers_launch_at_their_declared_shapes,
    ],
}

/// Element counts of the element-wise and reduction tests: empty, one, one more than a
/// block (256 threads), and more than one grid-stride pass (65536 blocks of 256). Under
/// a sanitizer the last is 64 Ki + 3 (initcheck did not finish 16 Mi + 3 in 200 s), which
/// leaves the grid-stride pass to the normal suite.
fn sizes() -> [usize; 4] {
    [0, 1, 257, gpu_tests::load((1 << 24) + 3, (1 << 16) + 3)]
}

// ---------------------------------------------------------------------------------------
// Element-wise kernels.

/// `fill` writes the value into every element, bit for bit, at every size.
fn fill_sets_every_element<T: Element + kernels::Element>() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for len in sizes() {
        let value: T = rng.value();
        let mut out = poisoned::<T>(len);
        scope(&stream, |s| -> TestResult {
            let mut y = s.alloc::<T>(len)?;
            s.fill(&mut y, T::POISON)?;
            kernels::fill(s, &mut y, value)?;
            let _download = s.copy_to_host(&y, &mut out)?;
            Ok(())
        })?;
        let what = format!("kernels::fill({}) of {len} {}", value.describe(), T::NAME);
        check_eq(&what, &vec![value; len], &out)?;
    }
    Ok(())
}

/// `fill` of a view at each offset from a 16-byte boundary and of lengths around its
/// 16-byte vectors writes exactly the view's elements: the head and tail it stores one
/// by one and the vectors between them, never a neighbour (each case fills a view of a
/// poisoned buffer and downloads the whole buffer).
fn fill_of_views_at_every_offset_writes_exactly_their_elements<T>() -> TestResult
where
    T: Element + kernels::Element,
{
    let stream = stream()?;
    let per_vector = 16 / std::mem::size_of::<T>();
    let value: T = Rng::new().value();
    let whole = 4 * per_vector + 1200;
    let lengths = [0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 33, 1030];
    for offset in 0..=per_vector {
        for len in lengths {
            let mut out = poisoned::<T>(whole);
            scope(&stream, |s| -> TestResult {
                let mut y = s.alloc::<T>(whole)?;
                s.fill(&mut y, T::POISON)?;
                kernels::fill(s, &mut y.slice_mut(offset..offset + len)?, value)?;
                let _download = s.copy_to_host(&y, &mut out)?;
                Ok(())
            })?;
            let mut expected = vec![T::POISON; whole];
            expected[offset..offset + len].fill(value);
            let what = format!(
                "{} after kernels::fill of [{offset}..{}]",
                T::NAME,
                offset + len
            );
            check_eq(&what, &expected, &out)?;
        }
    }
    Ok(())
}

/// `scale` is one correctly rounded multiplication per element, so the GPU must match
/// `(a * x) as T` computed in `f64` bit for bit (for `f32` the product of two `f32` is
/// exact in `f64`, and rounding it to `f32` is the single rounding the GPU does; for
/// `f16` and `bf16` the GPU's `f32` product is exact too, and rounding it is the one
/// rounding).
fn scale_is_exactly_the_rounded_product<T: Real>() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for len in sizes() {
        let a = signed::<T>(&mut rng, 1)[0];
        let x: Vec<T> = signed(&mut rng, len);
        let expected: Vec<T> = x
            .iter()
            .map(|&xi| T::from_f64(a.to_f64() * xi.to_f64()))
            .collect();
        let mut out = poisoned::<T>(len);
        scope(&stream, |s| -> TestResult {
            let dx = s.upload(&x)?;
            let mut y = s.alloc::<T>(len)?;
            s.fill(&mut y, T::POISON)?;
            kernels::scale(s, a, &dx, &mut y)?;
            let _download = s.copy_to_host(&y, &mut out)?;
            Ok(())
        })?;
        check_eq(
            &format!("kernels::scale of {len} {}", T::NAME),
            &expected,
            &out,
        )?;
    }
    Ok(())
}

/// `axpy` is a multiplication and an addition (or one fused multiply-add), so
/// `|got - (a x + y)| <= 2 u (|a x| + |y|)`; the reference `a x + y` is exact to
/// `f64` rounding (`f32`) or a correctly rounded `mul_add` (`f64`, error `<= u |a x + y|`),
/// so the check allows `3 u (|a x| + |y|)`.
fn axpy_is_within_two_roundings<T: Real>() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for len in sizes() {
        let a = signed::<T>(&mut rng, 1)[0].to_f64();
        let x: Vec<T> = signed(&mut rng, len);
        let y: Vec<T> = signed(&mut rng, len);
        let mut out = poisoned::<T>(len);
        scope(&stream, |s| -> TestResult {
            let dx = s.upload(&x)?;
            let mut dy = s.upload(&y)?;
            kernels::axpy(s, T::from_f64(a), &dx, &mut dy)?;
            let _download = s.copy_to_host(&dy, &mut out)?;
            Ok(())
        })?;
        check_close(&format!("kernels::axpy of {len} {}", T::NAME), &out, |i| {
            let (xi, yi) = (x[i].to_f64(), y[i].to_f64());
            let exact = a.mul_add(xi, yi);
            (exact, 3.0 * T::U * ((a * xi).abs() + yi.abs()))
        })?;
    }
    Ok(())
}

/// Kernels receive a view's own address and length: `axpy` on `y[100..1100]` with `x`
/// a sub-range of another buffer changes exactly those elements (compared bit for bit
/// with the same kernel run on whole buffers of that size).
fn axpy_on_sub_range_views_leaves_neighbours_untouched() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = 4097;
    let (range, from) = (100..1100, 2000..3000);
    let x: Vec<f32> = signed(&mut rng, n);
    let y: Vec<f32> = signed(&mut rng, n);
    let mut whole = poisoned::<f32>(range.len());
    let mut out = poisoned::<f32>(n);
    scope(&stream, |s| -> TestResult {
        let dx = s.upload(&x)?;
        let mut dy = s.upload(&y)?;
        kernels::axpy(
            s,
            1.5,
            &dx.slice(from.clone())?,
            &mut dy.slice_mut(range.clone())?,
        )?;
        let _download = s.copy_to_host(&dy, &mut out)?;
        // The same computation on whole buffers holding just those elements.
        let sx = s.upload(&x[from.clone()])?;
        let mut sy = s.upload(&y[range.clone()])?;
        kernels::axpy(s, 1.5, &sx, &mut sy)?;
        let _whole = s.copy_to_host(&sy, &mut whole)?;
        Ok(())
    })?;
    let mut expected = y.clone();
    expected[range.clone()].copy_from_slice(&whole);
    check_eq(
        "y after axpy on y[100..1100] with x[2000..3000]",
        &expected,
        &out,
    )
}

// ---------------------------------------------------------------------------------------
// Reductions.

/// `reduce_sum` of `n` values: `|got - sum| <= (h + 2) u sum |x|` with `h` the height of
/// the summation tree ([`summation_height`]; `h * u * sum |x|` is the classic bound for
/// any summation tree of height `h`, and `2 u` covers the reference). For the largest
/// `n`, `h = 39`: about `2.4e-6 * sum |x|` for `f32` (below the `1e-5` one would guess)
/// and `4.6e-15 * sum |x|` for `f64`. Sums of 0 and 1 terms are exact. Running it twice in
/// one scope and once on another stream gives the same bits.
fn reduce_sum_is_within_its_bound_and_bit_reproducible<T: Real>() -> TestResult
where
    T::Accumulator: Real,
{
    reduction_is_within_its_bound_and_bit_reproducible::<T>(false)
}

/// `dot` of `n` pairs: as `reduce_sum` with one more rounding per term (the product, or
/// none with a fused multiply-add) and one in the reference's products (`f64` only;
/// products of `f32` are exact in `f64`): `|got - dot| <= (h + 3) u sum |x y|`.
fn dot_is_within_its_bound_and_bit_reproducible<T: Real>() -> TestResult
where
    T::Accumulator: Real,
{
    reduction_is_within_its_bound_and_bit_reproducible::<T>(true)
}

/// `dot(x, y)` or `reduce_sum(x)` into `out`.
fn reduce<'s, T: Float>(
    dot: bool,
    s: &'s Scope<'s, '_>,
    x: &DeviceBuffer<'s, T>,
    y: &DeviceBuffer<'s, T>,
    out: &mut DeviceBuffer<'s, T::Accumulator>,
) -> stream_core::Result<()> {
    if dot {
        kernels::dot(s, x, y, out)
    } else {
        kernels::reduce_sum(s, x, out)
    }
}

/// The reduction's result is of `T`'s accumulator (`f32` for `f16` and `bf16`), whose
/// rounding the bound counts: the inputs are exact in it, and so are the products of
/// two of them.
fn reduction_is_within_its_bound_and_bit_reproducible<T: Real>(dot: bool) -> TestResult
where
    T::Accumulator: Real,
{
    let first = stream()?;
    let second = first.device().new_stream()?;
    let mut rng = Rng::new();
    let name = if dot { "dot" } else { "reduce_sum" };
    for n in sizes() {
        let x: Vec<T> = signed(&mut rng, n);
        let y: Vec<T> = signed(&mut rng, n);
        let terms = || {
            x.iter().zip(&y).map(|(&a, &b)| {
                if dot {
                    a.to_f64() * b.to_f64()
                } else {
                    a.to_f64()
                }
            })
        };
        let exact = accurate_sum(terms());
        let magnitude: f64 = terms().map(f64::abs).sum();
        let roundings = summation_height(n) + if dot { 3 } else { 2 };
        let tolerance = roundings as f64 * <T::Accumulator as Real>::U * magnitude * 1.01;

        let poison = <T::Accumulator as Element>::POISON;
        let (mut once, mut twice, mut elsewhere) = ([poison], [poison], [poison]);
        scope(&first, |s| -> TestResult {
            let (dx, dy) = (s.upload(&x)?, s.upload(&y)?);
            let mut a = s.alloc::<T::Accumulator>(1)?;
            let mut b = s.alloc::<T::Accumulator>(1)?;
            s.fill(&mut a, poison)?;
            s.fill(&mut b, poison)?;
            reduce(dot, s, &dx, &dy, &mut a)?;
            reduce(dot, s, &dx, &dy, &mut b)?;
            let _a = s.copy_to_host(&a, &mut once)?;
            let _b = s.copy_to_host(&b, &mut twice)?;
            Ok(())
        })?;
        scope(&second, |s| -> TestResult {
            let (dx, dy) = (s.upload(&x)?, s.upload(&y)?);
            let mut c = s.alloc::<T::Accumulator>(1)?;
            s.fill(&mut c, poison)?;
            reduce(dot, s, &dx, &dy, &mut c)?;
            let _c = s.copy_to_host(&c, &mut elsewhere)?;
            Ok(())
        })?;
        let what = format!("kernels::{name} of {n} {}", T::NAME);
        if n <= 1 {
            // At most one rounding (of the one product): 0, or one term plus zeros.
            let rounded = <T::Accumulator as Real>::from_f64(exact);
            ensure!(
                <T::Accumulator as Element>::same(once[0], rounded),
                "{what}: got {}, expected exactly {}",
                once[0].describe(),
                rounded.describe()
            );
        }
        check_close(&what, &once, |_| (exact, tolerance))?;
        check_eq(&format!("{what}, run a second time"), &once, &twice)?;
        check_eq(&format!("{what}, run on another stream"), &once, &elsewhere)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Bad input.

fn length_mismatch(what: &'static str, source_len: usize, destination_len: usize) -> Error {
    Error::from(stream_core::error::LengthMismatch {
        what,
        source_len,
        destination_len,
    })
}

/// `axpy`, `scale` and `dot` with `x` of 5 and `y` of 7 elements are `LengthMismatch`
/// (`5 != 7`) and leave `y` as it was.
fn axpy_scale_and_dot_with_mismatched_lengths_are_length_mismatch_and_write_nothing() -> TestResult
{
    let stream = stream()?;
    let mut rng = Rng::new();
    let (x5, y7): (Vec<f32>, Vec<f32>) = (signed(&mut rng, 5), signed(&mut rng, 7));
    let (x5d, y7d): (Vec<f64>, Vec<f64>) = (signed(&mut rng, 5), signed(&mut rng, 7));
    let (mut out, mut out_d) = (poisoned::<f32>(7), poisoned::<f64>(7));
    scope(&stream, |s| -> TestResult {
        let (x, mut y) = (s.upload(&x5)?, s.upload(&y7)?);
        let (xd, mut yd) = (s.upload(&x5d)?, s.upload(&y7d)?);
        let mut sum = s.alloc::<f32>(1)?;
        let cases = [
            ("axpy f32", kernels::axpy(s, 2.0, &x, &mut y), "axpy"),
            ("axpy f64", kernels::axpy(s, 2.0, &xd, &mut yd), "axpy"),
            ("scale f32", kernels::scale(s, 2.0, &x, &mut y), "scale"),
            ("scale f64", kernels::scale(s, 2.0, &xd, &mut yd), "scale"),
            ("dot f32", kernels::dot(s, &x, &y, &mut sum), "dot"),
        ];
        for (what, result, op) in cases {
            let e = expect_err(what, result)?;
            check_error(what, &e, &length_mismatch(op, 5, 7), &["5 != 7", op])?;
        }
        let _y = s.copy_to_host(&y, &mut out)?;
        let _yd = s.copy_to_host(&yd, &mut out_d)?;
        Ok(())
    })?;
    check_eq("f32 y after refused launches", &y7, &out)?;
    check_eq("f64 y after refused launches", &y7d, &out_d)
}

/// `reduce_sum` and `dot` into an `out` of 0 or 2 elements are `LengthMismatch` saying
/// `out` must hold one element; `out` keeps its poison.
fn reduce_sum_and_dot_into_out_of_wrong_length_are_length_mismatch() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let x: Vec<f64> = signed(&mut rng, 1000);
    let mut out = poisoned::<f64>(2);
    scope(&stream, |s| -> TestResult {
        let dx = s.upload(&x)?;
        let mut two = s.alloc::<f64>(2)?;
        s.fill(&mut two, f64::POISON)?;
        let mut none = s.alloc::<f64>(0)?;
        let sum_what = "reduce_sum (out must hold one element)";
        let dot_what = "dot (out must hold one element)";
        let cases = [
            (
                "reduce_sum into 2",
                kernels::reduce_sum(s, &dx, &mut two),
                sum_what,
                2,
            ),
            (
                "reduce_sum into 0",
                kernels::reduce_sum(s, &dx, &mut none),
                sum_what,
                0,
            ),
            (
                "dot into 2",
                kernels::dot(s, &dx, &dx, &mut two),
                dot_what,
                2,
            ),
            (
                "dot into 0",
                kernels::dot(s, &dx, &dx, &mut none),
                dot_what,
                0,
            ),
        ];
        for (what, result, op, len) in cases {
            let e = expect_err(what, result)?;
            let parts = [&format!("1 != {len}") as &str, "one element"];
            check_error(what, &e, &length_mismatch(op, 1, len), &parts)?;
        }
        let _out = s.copy_to_host(&two, &mut out)?;
        Ok(())
    })?;
    check_eq("out after refused reductions", &poisoned::<f64>(2), &out)
}

// ---------------------------------------------------------------------------------------
// Ordering on the scope's stream.

/// `spin_then_write_u32` busy-waits about 100M cycles (tens of milliseconds), then
/// writes its value; a device-to-device copy and a download enqueued after it on the
/// same stream see the value, with no event or host wait in between: stream order alone.
/// The wait must also have taken a while, or the kernel did not really spin.
fn copy_after_a_spinning_kernel_sees_its_write() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let value: u32 = rng.value();
    let (mut direct, mut copied) = ([u32::POISON], [u32::POISON]);
    let mut waited = Duration::ZERO;
    let mut warm_up = [0u32];
    scope(&stream, |s| -> TestResult {
        let mut flag = s.alloc::<u32>(1)?;
        s.fill(&mut flag, u32::POISON)?;
        let mut copy = s.alloc::<u32>(1)?;
        s.fill(&mut copy, u32::POISON)?;
        // Load (compile) the kernel first, so the timing below covers only the spin.
        gpu_tests::spin_then_write(s, 0, u32::POISON, &mut flag)?;
        s.copy_to_host(&flag, &mut warm_up)?.wait()?;

        let start = Instant::now();
        gpu_tests::spin_then_write(s, 100_000_000, value, &mut flag)?;
        s.copy_device(&flag, &mut copy)?;
        let pending = s.copy_to_host(&flag, &mut direct)?;
        let _copied = s.copy_to_host(&copy, &mut copied)?;
        let host = pending.wait()?;
        waited = start.elapsed();
        ensure!(
            host[0] == value,
            "download right after the spinning kernel: got {:#x}, expected {value:#x}",
            host[0]
        );
        Ok(())
    })?;
    ensure!(
        copied[0] == value,
        "copy_device after the spinning kernel, downloaded: got {:#x}, expected {value:#x}",
        copied[0]
    );
    ensure!(
        waited >= Duration::from_millis(10),
        "the download of a 100M-cycle kernel's output was ready after {waited:?}: the kernel did not spin"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Launch shapes.

/// Small random integers (1 to 8) as floats: every sum and product of the tests below
/// is an integer below 2^24, exact in `f32` whatever the summation order.
fn small<T: From<u8>>(rng: &mut Rng, len: usize) -> Vec<T> {
    (0..len)
        .map(|_| T::from(u8::try_from(rng.below(8) + 1).unwrap_or(1)))
        .collect()
}

/// `fill`, `scale`, `axpy`, `reduce_sum`, `dot`, `transpose` and `sgemm_tiled` choose
/// the shapes their private declarations admit: each runs (no `InvalidLaunch`) on sizes
/// that cover partial blocks, several grid-stride passes and the most partial sums, and
/// matches the CPU exactly (integer-valued inputs make every float result exact).
fn public_kernel_wrappers_launch_at_their_declared_shapes() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let n = (1 << 20) + 7;
    let value: u32 = rng.value();
    let x: Vec<f32> = small(&mut rng, n);
    let y: Vec<f32> = small(&mut rng, n);
    // Fewer elements for `dot`: products reach 64, and the sum must stay below 2^24.
    let dot_n = (1 << 17) + 3;
    let (rows, cols) = (100, 70);
    let matrix: Vec<f32> = rng.vec(rows * cols);
    let (m, k, nn) = (65, 17, 130);
    let a: Vec<f32> = small(&mut rng, m * k);
    let b: Vec<f32> = small(&mut rng, k * nn);
    let c: Vec<f32> = small(&mut rng, m * nn);
    let mut filled = poisoned::<u32>(n);
    let (mut scaled, mut axpy) = (poisoned::<f32>(n), poisoned::<f32>(n));
    let (mut sum, mut dot) = ([f32::POISON], [f32::POISON]);
    let mut transposed = poisoned::<f32>(rows * cols);
    let mut product = poisoned::<f32>(m * nn);
    scope(&stream, |s| -> TestResult {
        let mut dfill = s.alloc::<u32>(n)?;
        kernels::fill(s, &mut dfill, value)?;
        let dx = s.upload(&x)?;
        let mut dscaled = s.alloc::<f32>(n)?;
        kernels::scale(s, 3.0, &dx, &mut dscaled)?;
        let mut daxpy = s.upload(&y)?;
        kernels::axpy(s, 2.0, &dx, &mut daxpy)?;
        let mut dsum = s.alloc::<f32>(1)?;
        kernels::reduce_sum(s, &dx, &mut dsum)?;
        let dy = s.upload(&y)?;
        let mut ddot = s.alloc::<f32>(1)?;
        kernels::dot(s, &dx.slice(0..dot_n)?, &dy.slice(0..dot_n)?, &mut ddot)?;
        let dmatrix = s.upload(&matrix)?;
        let mut dt = s.alloc::<f32>(rows * cols)?;
        kernels::transpose(s, &dmatrix, rows as u32, cols as u32, &mut dt)?;
        let (da, db) = (s.upload(&a)?, s.upload(&b)?);
        let mut dc = s.upload(&c)?;
        kernels::sgemm_tiled(
            s, m as u32, nn as u32, k as u32, 2.0, &da, &db, 0.5, &mut dc,
        )?;
        let _f = s.copy_to_host(&dfill, &mut filled)?;
        let _s = s.copy_to_host(&dscaled, &mut scaled)?;
        let _a = s.copy_to_host(&daxpy, &mut axpy)?;
        let _r = s.copy_to_host(&dsum, &mut sum)?;
        let _d = s.copy_to_host(&ddot, &mut dot)?;
        let _t = s.copy_to_host(&dt, &mut transposed)?;
        let _p = s.copy_to_host(&dc, &mut product)?;
        Ok(())
    })?;
    check_eq("fill", &vec![value; n], &filled)?;
    let expected: Vec<f32> = x.iter().map(|v| 3.0 * v).collect();
    check_eq("scale by 3", &expected, &scaled)?;
    let expected: Vec<f32> = x.iter().zip(&y).map(|(a, b)| 2.0 * a + b).collect();
    check_eq("axpy with 2", &expected, &axpy)?;
    let exact_sum: f64 = x.iter().map(|&v| f64::from(v)).sum();
    ensure!(
        exact_sum < f64::from(1u32 << 24),
        "the sum {exact_sum} is not exact"
    );
    check_eq("reduce_sum", &[exact_sum as f32], &sum)?;
    let exact_dot: f64 = x[..dot_n]
        .iter()
        .zip(&y[..dot_n])
        .map(|(a, b)| f64::from(a * b))
        .sum();
    ensure!(
        exact_dot < f64::from(1u32 << 24),
        "the dot product {exact_dot} is not exact"
    );
    check_eq("dot", &[exact_dot as f32], &dot)?;
    let mut expected = vec![0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            expected[c * rows + r] = matrix[r * cols + c];
        }
    }
    check_eq("transpose of 100x70", &expected, &transposed)?;
    let expected: Vec<f32> = (0..m * nn)
        .map(|i| {
            let (row, col) = (i / nn, i % nn);
            let ab: f32 = (0..k).map(|l| a[row * k + l] * b[l * nn + col]).sum();
            2.0 * ab + 0.5 * c[i]
        })
        .collect();
    check_eq("sgemm_tiled 65x130x17", &expected, &product)?;
    Ok(())
}
