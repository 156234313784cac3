//! The kernels of the `kernels` crate and kernels declared here with `#[kernel]`, on a
//! real GPU.
//!
//! Every test draws fresh non-zero random inputs, poisons its outputs before the GPU
//! runs, and compares with a CPU reference computed in `f64`: bit-exact where the GPU
//! result is exactly determined (fill, scale, transpose, the hand-written kernels), and
//! within a stated rounding-error bound otherwise (axpy, reductions, SGEMM). Bad input is
//! an `Err` of the right variant that leaves the outputs untouched.
//!
//! Without a CUDA device these tests are reported as ignored (see `gpu_tests::run`).

use std::time::{Duration, Instant};

use gpu_tests::{
    check_eq, check_error, device, ensure, expect_err, poisoned, stream, Element, Failed, Rng,
    TestResult,
};
use kernels::{Cublas, Float};
use stream_core::{
    kernel, scope, DeviceBuffer, DeviceMemory, DeviceMemoryMut, Error, LaunchConfig, Scope,
};

gpu_tests::test_main! {
    gpu: [
        fill_sets_every_element_f32 = fill_sets_every_element::<f32>,
        fill_sets_every_element_f64 = fill_sets_every_element::<f64>,
        fill_sets_every_element_u32 = fill_sets_every_element::<u32>,
        scale_is_exactly_the_rounded_product_f32 = scale_is_exactly_the_rounded_product::<f32>,
        scale_is_exactly_the_rounded_product_f64 = scale_is_exactly_the_rounded_product::<f64>,
        axpy_is_within_two_roundings_f32 = axpy_is_within_two_roundings::<f32>,
        axpy_is_within_two_roundings_f64 = axpy_is_within_two_roundings::<f64>,
        axpy_on_sub_range_views_leaves_neighbours_untouched,
        reduce_sum_is_within_its_bound_and_bit_reproducible_f32 = reduce_sum_is_within_its_bound_and_bit_reproducible::<f32>,
        reduce_sum_is_within_its_bound_and_bit_reproducible_f64 = reduce_sum_is_within_its_bound_and_bit_reproducible::<f64>,
        dot_is_within_its_bound_and_bit_reproducible_f32 = dot_is_within_its_bound_and_bit_reproducible::<f32>,
        dot_is_within_its_bound_and_bit_reproducible_f64 = dot_is_within_its_bound_and_bit_reproducible::<f64>,
        transpose_is_exact,
        sgemm_tiled_matches_the_reference_for_beta_zero_and_half,
        cublas_sgemm_matches_the_reference_for_beta_zero_and_half,
        sgemm_tiled_with_k_zero_scales_c_by_beta,
        cublas_sgemm_with_k_zero_scales_c_by_beta,
        axpy_scale_and_dot_with_mismatched_lengths_are_length_mismatch_and_write_nothing,
        reduce_sum_and_dot_into_out_of_wrong_length_are_length_mismatch,
        transpose_with_wrong_sizes_is_shape_mismatch_and_writes_nothing,
        sgemm_with_wrong_sizes_is_shape_mismatch_naming_the_operand,
        invalid_launch_shapes_are_invalid_launch_naming_the_limit,
        empty_grid_launch_is_ok_and_writes_nothing,
        declared_cuda_kernel_writes_exactly_its_view,
        cuda_syntax_error_is_kernel_compile_with_nvrtc_log,
        declared_name_missing_from_the_source_is_kernel_not_found,
        ptx_kernel_loads_and_adds_one,
        malformed_ptx_is_kernel_compile,
        copy_after_a_spinning_kernel_sees_its_write,
        kernel_overwriting_a_pending_download_source_leaves_the_download_old,
    ],
    host: [
        summation_height_counts_every_level_of_the_reduction,
        accurate_sum_is_exact_where_plain_summation_is_not,
        gemm_reference_matches_a_plain_triple_loop,
        check_close_rejects_nan_and_names_the_poison,
    ],
}

/// Element counts of the element-wise and reduction tests: empty, one, one more than a
/// block (256 threads), and more than one grid-stride pass (65536 blocks of 256).
const SIZES: [usize; 4] = [0, 1, 257, (1 << 24) + 3];

/// SGEMM shapes `(m, n, k)`, none a multiple of the 64x64x16 tile.
const GEMM_SHAPES: [(usize, usize, usize); 4] =
    [(1, 1, 1), (65, 33, 17), (129, 257, 63), (1000, 999, 513)];

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
// Floating-point helpers.

/// `f32` or `f64`: a test element the arithmetic kernels support.
trait Real: Element + Float {
    /// Unit roundoff `u = 2^-p` (half an ulp of 1): every correctly rounded operation
    /// has relative error at most `u`.
    const U: f64;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl Real for f32 {
    const U: f64 = f32::EPSILON as f64 / 2.0;
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Real for f64 {
    const U: f64 = f64::EPSILON / 2.0;
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
}

/// `len` values with random signs and magnitudes in `[0.5, 2)`: never zero, and no
/// overflow or underflow in any sum or product of the tests (`Rng::vec` draws random
/// exponents, fine for copies but not for arithmetic).
fn signed<T: Real>(rng: &mut Rng, len: usize) -> Vec<T> {
    (0..len)
        .map(|_| {
            let bits = rng.next_u64();
            let magnitude = 0.5 + 1.5 * ((bits >> 11) as f64 / (1u64 << 53) as f64);
            T::from_f64(if bits & 1 == 1 { -magnitude } else { magnitude })
        })
        .collect()
}

/// `Ok` when `|got[i] - expected(i).0| <= expected(i).1` for every `i` (a NaN never
/// is); otherwise a failure naming the first offending index and how many there are.
fn check_close<T: Real>(
    what: &str,
    got: &[T],
    expected: impl Fn(usize) -> (f64, f64),
) -> TestResult {
    let mut first = None;
    let mut count = 0usize;
    for (i, &g) in got.iter().enumerate() {
        let (e, tol) = expected(i);
        let g = g.to_f64();
        if (g - e).abs() <= tol {
            continue; // a NaN never gets here
        }
        count += 1;
        first.get_or_insert((i, g, e, tol));
    }
    match first {
        None => Ok(()),
        Some((i, g, e, tol)) => Err(Failed::from(format!(
            "{what}: first error at index {i} of {len} ({ty}): got {g:e}, expected {e:e} \
             within {tol:e} (off by {diff:e}){poison}; {count} of {len} elements are off",
            len = got.len(),
            ty = T::NAME,
            diff = (g - e).abs(),
            poison = if T::same(got[i], T::POISON) {
                ", the poison value: never written"
            } else {
                ""
            },
        ))),
    }
}

/// The sum of `terms` with Neumaier's compensated summation: error at most about
/// `2 u |sum| + n u^2 sum |terms|` in `f64`, far below every bound checked here.
fn accurate_sum(terms: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut compensation) = (0.0f64, 0.0f64);
    for x in terms {
        let t = sum + x;
        compensation += if sum.abs() >= x.abs() {
            (sum - t) + x
        } else {
            (x - t) + sum
        };
        sum = t;
    }
    sum + compensation
}

/// The height of the summation tree of `reduce_sum`/`dot` for `n` elements: the most
/// roundings any one term goes through. Mirrors `kernels/src/reduce.rs` and
/// `kernels/cuda/reduce.cu`: `p = min(ceil(n / 256), 1024)` blocks of 256 threads; each
/// thread adds `ceil(n / (256 p))` terms in sequence, a block adds its 256 threads in a
/// tree of depth 8, then one block adds the `p` partials, `ceil(p / 256)` per thread in
/// sequence and again a tree of depth 8.
fn summation_height(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let partials = n.div_ceil(256).min(1024);
    n.div_ceil(256 * partials) + 8 + partials.div_ceil(256) + 8
}

// ---------------------------------------------------------------------------------------
// Element-wise kernels.

/// `fill` writes the value into every element, bit for bit, at every size.
fn fill_sets_every_element<T: Element + kernels::Element>() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for len in SIZES {
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

/// `scale` is one correctly rounded multiplication per element, so the GPU must match
/// `(a * x) as T` computed in `f64` bit for bit (for `f32` the product of two `f32` is
/// exact in `f64`, and rounding it to `f32` is the single rounding the GPU does).
fn scale_is_exactly_the_rounded_product<T: Real>() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for len in SIZES {
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
    for len in SIZES {
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
/// `n`, `h = 85`: about `5.1e-6 * sum |x|` for `f32` (below the `1e-5` one would guess)
/// and `1e-14 * sum |x|` for `f64`. Sums of 0 and 1 terms are exact. Running it twice in
/// one scope and once on another stream gives the same bits.
fn reduce_sum_is_within_its_bound_and_bit_reproducible<T: Real>() -> TestResult {
    reduction_is_within_its_bound_and_bit_reproducible::<T>(false)
}

/// `dot` of `n` pairs: as `reduce_sum` with one more rounding per term (the product, or
/// none with a fused multiply-add) and one in the reference's products (`f64` only;
/// products of `f32` are exact in `f64`): `|got - dot| <= (h + 3) u sum |x y|`.
fn dot_is_within_its_bound_and_bit_reproducible<T: Real>() -> TestResult {
    reduction_is_within_its_bound_and_bit_reproducible::<T>(true)
}

/// `dot(x, y)` or `reduce_sum(x)` into `out`.
fn reduce<'s, T: Float>(
    dot: bool,
    s: &'s Scope<'s, '_>,
    x: &DeviceBuffer<'s, T>,
    y: &DeviceBuffer<'s, T>,
    out: &mut DeviceBuffer<'s, T>,
) -> stream_core::Result<()> {
    if dot {
        kernels::dot(s, x, y, out)
    } else {
        kernels::reduce_sum(s, x, out)
    }
}

fn reduction_is_within_its_bound_and_bit_reproducible<T: Real>(dot: bool) -> TestResult {
    let first = stream()?;
    let second = first.device().new_stream()?;
    let mut rng = Rng::new();
    let name = if dot { "dot" } else { "reduce_sum" };
    for n in SIZES {
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
        let tolerance = roundings as f64 * T::U * magnitude * 1.01;

        let (mut once, mut twice, mut elsewhere) = ([T::POISON], [T::POISON], [T::POISON]);
        scope(&first, |s| -> TestResult {
            let (dx, dy) = (s.upload(&x)?, s.upload(&y)?);
            let mut a = s.alloc::<T>(1)?;
            let mut b = s.alloc::<T>(1)?;
            s.fill(&mut a, T::POISON)?;
            s.fill(&mut b, T::POISON)?;
            reduce(dot, s, &dx, &dy, &mut a)?;
            reduce(dot, s, &dx, &dy, &mut b)?;
            let _a = s.copy_to_host(&a, &mut once)?;
            let _b = s.copy_to_host(&b, &mut twice)?;
            Ok(())
        })?;
        scope(&second, |s| -> TestResult {
            let (dx, dy) = (s.upload(&x)?, s.upload(&y)?);
            let mut c = s.alloc::<T>(1)?;
            s.fill(&mut c, T::POISON)?;
            reduce(dot, s, &dx, &dy, &mut c)?;
            let _c = s.copy_to_host(&c, &mut elsewhere)?;
            Ok(())
        })?;
        let what = format!("kernels::{name} of {n} {}", T::NAME);
        if n <= 1 {
            // At most one rounding (of the one product): 0, or one term plus zeros.
            let rounded = T::from_f64(exact);
            ensure!(
                T::same(once[0], rounded),
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
// Transpose and SGEMM.

/// `transpose` moves every element to its mirrored place, bit for bit, for shapes that
/// are and are not multiples of its 32x32 tile, and for empty ones.
fn transpose_is_exact() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    for (rows, cols) in [(1, 1), (31, 33), (1000, 17), (4096, 4096), (0, 5), (5, 0)] {
        let input: Vec<f32> = rng.vec(rows * cols);
        let mut expected = vec![0f32; rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                expected[c * rows + r] = input[r * cols + c];
            }
        }
        let mut out = poisoned::<f32>(rows * cols);
        scope(&stream, |s| -> TestResult {
            let x = s.upload(&input)?;
            let mut t = s.alloc::<f32>(rows * cols)?;
            s.fill(&mut t, f32::POISON)?;
            kernels::transpose(s, &x, rows as u32, cols as u32, &mut t)?;
            let _download = s.copy_to_host(&t, &mut out)?;
            Ok(())
        })?;
        check_eq(&format!("transpose of {rows}x{cols}"), &expected, &out)?;
    }
    Ok(())
}

/// `A B` and `|A| |B|` (row-major, `m x k` times `k x n`) in `f64`, rows spread over
/// the host's cores.
fn gemm_reference((m, n, k): (usize, usize, usize), a: &[f32], b: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let mut ab = vec![0f64; m * n];
    let mut abs = vec![0f64; m * n];
    if m == 0 || n == 0 {
        return (ab, abs);
    }
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let rows_per_thread = m.div_ceil(threads);
    std::thread::scope(|t| {
        let chunks = ab
            .chunks_mut(rows_per_thread * n)
            .zip(abs.chunks_mut(rows_per_thread * n));
        for (chunk, (ab_rows, abs_rows)) in chunks.enumerate() {
            t.spawn(move || {
                let rows = ab_rows.chunks_mut(n).zip(abs_rows.chunks_mut(n));
                for (r, (ab_row, abs_row)) in rows.enumerate() {
                    let i = chunk * rows_per_thread + r;
                    for p in 0..k {
                        let aip = f64::from(a[i * k + p]);
                        let b_row = &b[p * n..(p + 1) * n];
                        for ((sum, sum_abs), &bpj) in
                            ab_row.iter_mut().zip(abs_row.iter_mut()).zip(b_row)
                        {
                            let product = aip * f64::from(bpj);
                            *sum += product;
                            *sum_abs += product.abs();
                        }
                    }
                }
            });
        }
    });
    (ab, abs)
}

/// `c = alpha a b + beta c` for `(m, n, k)` with `Cublas::sgemm` when a handle is given,
/// else with `kernels::sgemm_tiled`.
#[allow(clippy::too_many_arguments)] // the BLAS signature
fn gemm<'s>(
    blas: Option<&mut Cublas>,
    s: &'s Scope<'s, '_>,
    (m, n, k): (usize, usize, usize),
    alpha: f32,
    a: &impl DeviceMemory<'s, f32>,
    b: &impl DeviceMemory<'s, f32>,
    beta: f32,
    c: &mut impl DeviceMemoryMut<'s, f32>,
) -> stream_core::Result<()> {
    let (m, n, k) = (m as u32, n as u32, k as u32);
    match blas {
        None => kernels::sgemm_tiled(s, m, n, k, alpha, a, b, beta, c),
        Some(h) => h.sgemm(s, m, n, k, alpha, a, b, beta, c),
    }
}

/// Which SGEMM a test runs.
#[derive(Clone, Copy)]
enum Gemm {
    Tiled,
    Cublas,
}

/// Checks one SGEMM against the `f64` reference for every shape, with `beta = 0` and a
/// poisoned (NaN) `C`, which must not be read, and with `beta = 0.5` and a random `C`.
///
/// Bound per element: `|got - (alpha (A B)_ij + beta C_ij)| <= (k + 3) u (|alpha| (|A| |B|)_ij
/// + |beta C_ij|)`: any order of summing `k` products rounds each at most `k` times
/// (fused or not), plus the roundings of `alpha *`, `beta *` and the final `+`. With
/// `k = 513` that is about `3.1e-5` relative to `sum |a||b|`.
fn sgemm_matches_the_reference(which: Gemm) -> TestResult {
    let stream = stream()?;
    let mut blas = match which {
        Gemm::Cublas => Some(Cublas::new(&device()?)?),
        Gemm::Tiled => None,
    };
    let mut rng = Rng::new();
    for (m, n, k) in GEMM_SHAPES {
        let a: Vec<f32> = signed(&mut rng, m * k);
        let b: Vec<f32> = signed(&mut rng, k * n);
        let (ab, abs) = gemm_reference((m, n, k), &a, &b);
        let alpha = signed::<f32>(&mut rng, 1)[0];
        for beta in [0.0f32, 0.5] {
            let c: Vec<f32> = if beta == 0.0 {
                poisoned(m * n)
            } else {
                signed(&mut rng, m * n)
            };
            let mut out = poisoned::<f32>(m * n);
            scope(&stream, |s| -> TestResult {
                let (da, db) = (s.upload(&a)?, s.upload(&b)?);
                let mut dc = s.upload(&c)?;
                gemm(blas.as_mut(), s, (m, n, k), alpha, &da, &db, beta, &mut dc)?;
                let _download = s.copy_to_host(&dc, &mut out)?;
                Ok(())
            })?;
            let name = match which {
                Gemm::Tiled => "kernels::sgemm_tiled",
                Gemm::Cublas => "Cublas::sgemm",
            };
            let (alpha, beta) = (f64::from(alpha), f64::from(beta));
            check_close(
                &format!("{name} {m}x{n}x{k}, alpha {alpha}, beta {beta}"),
                &out,
                |i| {
                    let bc = if beta == 0.0 {
                        0.0
                    } else {
                        beta * f64::from(c[i])
                    };
                    let bound = (k + 3) as f64 * f32::U * (alpha.abs() * abs[i] + bc.abs());
                    (alpha * ab[i] + bc, bound)
                },
            )?;
        }
    }
    Ok(())
}

fn sgemm_tiled_matches_the_reference_for_beta_zero_and_half() -> TestResult {
    sgemm_matches_the_reference(Gemm::Tiled)
}

fn cublas_sgemm_matches_the_reference_for_beta_zero_and_half() -> TestResult {
    sgemm_matches_the_reference(Gemm::Cublas)
}

/// With `k = 0`, `A B` is an empty sum: `C = beta C` exactly (BLAS semantics), zeros for
/// `beta = 0` even over a NaN `C`.
fn sgemm_with_k_zero_scales_c_by_beta(which: Gemm) -> TestResult {
    let stream = stream()?;
    let mut blas = match which {
        Gemm::Cublas => Some(Cublas::new(&device()?)?),
        Gemm::Tiled => None,
    };
    let mut rng = Rng::new();
    let (m, n) = (37, 65);
    for beta in [0.0f32, 0.5, 1.0] {
        let c: Vec<f32> = if beta == 0.0 {
            poisoned(m * n)
        } else {
            signed(&mut rng, m * n)
        };
        let expected: Vec<f32> = c
            .iter()
            .map(|&v| if beta == 0.0 { 0.0 } else { beta * v })
            .collect();
        let mut out = poisoned::<f32>(m * n);
        scope(&stream, |s| -> TestResult {
            let (da, db) = (s.alloc::<f32>(0)?, s.alloc::<f32>(0)?);
            let mut dc = s.upload(&c)?;
            gemm(blas.as_mut(), s, (m, n, 0), 1.5, &da, &db, beta, &mut dc)?;
            let _download = s.copy_to_host(&dc, &mut out)?;
            Ok(())
        })?;
        check_close(&format!("sgemm {m}x{n}x0 with beta {beta}"), &out, |i| {
            (f64::from(expected[i]), 0.0)
        })?;
    }
    Ok(())
}

fn sgemm_tiled_with_k_zero_scales_c_by_beta() -> TestResult {
    sgemm_with_k_zero_scales_c_by_beta(Gemm::Tiled)
}

fn cublas_sgemm_with_k_zero_scales_c_by_beta() -> TestResult {
    sgemm_with_k_zero_scales_c_by_beta(Gemm::Cublas)
}

// ---------------------------------------------------------------------------------------
// Bad input.

fn length_mismatch(what: &'static str, source_len: usize, destination_len: usize) -> Error {
    Error::LengthMismatch {
        what,
        source_len,
        destination_len,
    }
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

/// `transpose` of a 3x4 matrix from 11 or 13 elements, or into 11 or 13, is
/// `ShapeMismatch` naming the operand; the output keeps its poison.
fn transpose_with_wrong_sizes_is_shape_mismatch_and_writes_nothing() -> TestResult {
    let stream = stream()?;
    let mut rng = Rng::new();
    let (x11, x12, x13): (Vec<f32>, Vec<f32>, Vec<f32>) = (rng.vec(11), rng.vec(12), rng.vec(13));
    let mut out = poisoned::<f32>(12);
    scope(&stream, |s| -> TestResult {
        let (d11, d12, d13) = (s.upload(&x11)?, s.upload(&x12)?, s.upload(&x13)?);
        let mut o12 = s.alloc::<f32>(12)?;
        s.fill(&mut o12, f32::POISON)?;
        let mut o11 = s.alloc::<f32>(11)?;
        let mut o13 = s.alloc::<f32>(13)?;
        let input = "transpose: input (rows * cols)";
        let output = "transpose: output (rows * cols)";
        let cases = [
            (
                "input of 11",
                kernels::transpose(s, &d11, 3, 4, &mut o12),
                input,
                11,
            ),
            (
                "input of 13",
                kernels::transpose(s, &d13, 3, 4, &mut o12),
                input,
                13,
            ),
            (
                "output of 11",
                kernels::transpose(s, &d12, 3, 4, &mut o11),
                output,
                11,
            ),
            (
                "output of 13",
                kernels::transpose(s, &d12, 3, 4, &mut o13),
                output,
                13,
            ),
        ];
        for (what, result, operand, actual) in cases {
            let e = expect_err(what, result)?;
            let expected = Error::ShapeMismatch {
                what: operand,
                expected: 12,
                actual,
            };
            check_error(what, &e, &expected, &[operand, "12", &actual.to_string()])?;
        }
        let _out = s.copy_to_host(&o12, &mut out)?;
        Ok(())
    })?;
    check_eq(
        "transpose output after refused launches",
        &poisoned::<f32>(12),
        &out,
    )
}

/// `sgemm_tiled` and `Cublas::sgemm` with `a`, `b` or `c` one element short of
/// `m*k`, `k*n`, `m*n` (for `m, n, k = 4, 3, 2`) are `ShapeMismatch` naming that
/// operand; `c` is left as it was.
fn sgemm_with_wrong_sizes_is_shape_mismatch_naming_the_operand() -> TestResult {
    let stream = stream()?;
    let mut blas = Cublas::new(&device()?)?;
    let mut rng = Rng::new();
    let (a, b, c): (Vec<f32>, Vec<f32>, Vec<f32>) = (
        signed(&mut rng, 8),
        signed(&mut rng, 6),
        signed(&mut rng, 12),
    );
    let mut out = poisoned::<f32>(12);
    scope(&stream, |s| -> TestResult {
        let (da, db, mut dc) = (s.upload(&a)?, s.upload(&b)?, s.upload(&c)?);
        let (short_a, short_b) = (da.slice(..7)?, db.slice(..5)?);
        for name in ["sgemm_tiled", "cublas sgemm"] {
            let cublas = name == "cublas sgemm";
            let shape = (4, 3, 2);
            let results = [
                (
                    "a (m * k)",
                    gemm(
                        cublas.then_some(&mut blas),
                        s,
                        shape,
                        1.0,
                        &short_a,
                        &db,
                        0.5,
                        &mut dc,
                    ),
                    8,
                    7,
                ),
                (
                    "b (k * n)",
                    gemm(
                        cublas.then_some(&mut blas),
                        s,
                        shape,
                        1.0,
                        &da,
                        &short_b,
                        0.5,
                        &mut dc,
                    ),
                    6,
                    5,
                ),
                (
                    "c (m * n)",
                    gemm(
                        cublas.then_some(&mut blas),
                        s,
                        shape,
                        1.0,
                        &da,
                        &db,
                        0.5,
                        &mut dc.slice_mut(..11)?,
                    ),
                    12,
                    11,
                ),
            ];
            for (operand, result, expected, actual) in results {
                let what = format!("{name} with {operand} of {actual}");
                let e = expect_err(&what, result)?;
                let Error::ShapeMismatch {
                    what: label,
                    expected: e_expected,
                    actual: e_actual,
                } = &e
                else {
                    return Err(Failed::from(format!(
                        "{what}: got {e:?}, expected ShapeMismatch"
                    )));
                };
                ensure!(
                    label.starts_with(name) && label.ends_with(operand),
                    "{what}: the error names {label:?}, not {name}'s {operand}"
                );
                ensure!(
                    (*e_expected, *e_actual) == (expected, actual),
                    "{what}: got expected {e_expected}, actual {e_actual}; wanted {expected}, {actual}"
                );
                let message = e.to_string();
                ensure!(
                    message.contains(operand) && message.contains(&actual.to_string()),
                    "{what}: the message {message:?} does not name both the operand and its size"
                );
            }
        }
        let _out = s.copy_to_host(&dc, &mut out)?;
        Ok(())
    })?;
    check_eq("c after refused SGEMMs", &c, &out)
}

/// Launch shapes beyond the device's limits are `InvalidLaunch` naming the dimension,
/// the value, the limit and where the limit comes from; nothing runs, and a valid launch
/// afterwards in the same scope works.
fn invalid_launch_shapes_are_invalid_launch_naming_the_limit() -> TestResult {
    let stream = stream()?;
    let dev = stream.device().clone();
    let mut rng = Rng::new();
    let input: Vec<u32> = rng.vec(64);
    let mut out = poisoned::<u32>(64);
    let grid = |g| LaunchConfig::new(g, (32, 1, 1));
    let block = |b| LaunchConfig::new((1, 1, 1), b);
    let cases = [
        (
            block((0, 1, 1)),
            "block.x",
            0,
            Some(1),
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
            Some(1),
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
            Some(u64::from(dev.max_threads_per_block())),
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
            Some(u64::from(dev.max_shared_memory_per_block())),
            "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
        ),
    ];
    scope(&stream, |s| -> TestResult {
        let mut y = s.upload(&input)?;
        for (config, dimension, value, limit, source) in cases {
            let what = format!("add_one_u32 with {config:?}");
            let e = expect_err(&what, add_one_u32(s, config, &mut y))?;
            let Error::InvalidLaunch {
                kernel,
                what: e_what,
                value: e_value,
                limit: e_limit,
                source_of_limit,
            } = &e
            else {
                return Err(Failed::from(format!(
                    "{what}: got {e:?}, expected InvalidLaunch"
                )));
            };
            ensure!(
                (*kernel, *e_what, *e_value) == ("add_one_u32", dimension, value),
                "{what}: got {e:?}, expected kernel add_one_u32, {dimension} = {value}"
            );
            ensure!(
                limit.is_none_or(|l| l == *e_limit) && (value == 0 || *e_limit < value),
                "{what}: the limit is {e_limit}, expected {limit:?} and below {value}"
            );
            ensure!(
                source_of_limit.contains(source),
                "{what}: the limit comes from {source_of_limit:?}, expected {source:?}"
            );
            let message = e.to_string();
            for part in [
                dimension,
                &value.to_string(),
                &e_limit.to_string(),
                source,
                "add_one_u32",
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
            let Error::KernelCompile { kernel, log } = &e else {
                return Err(Failed::from(format!(
                    "{what}: got {e:?}, expected KernelCompile"
                )));
            };
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
        let expected = Error::KernelNotFound {
            kernel: "no_such_kernel".to_owned(),
        };
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
                matches!(&e, Error::KernelCompile { log, .. } if log.contains("PTX")),
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
        let Error::KernelCompile { kernel, log } = &e else {
            return Err(Failed::from(format!(
                "malformed PTX: got {e:?}, expected KernelCompile"
            )));
        };
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
        kernels::declarations::spin_then_write_u32(
            s,
            LaunchConfig::for_elements(1, 32),
            0,
            u32::POISON,
            &mut flag,
        )?;
        s.copy_to_host(&flag, &mut warm_up)?.wait()?;

        let start = Instant::now();
        kernels::declarations::spin_then_write_u32(
            s,
            LaunchConfig::for_elements(1, 32),
            100_000_000,
            value,
            &mut flag,
        )?;
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

// ---------------------------------------------------------------------------------------
// Host tests of this file's reference helpers (they run without a GPU).

/// `summation_height` for the sizes the reductions are checked at.
fn summation_height_counts_every_level_of_the_reduction() -> TestResult {
    for (n, expected) in [(0, 0), (1, 18), (256, 18), (257, 18), ((1 << 24) + 3, 85)] {
        let h = summation_height(n);
        ensure!(
            h == expected,
            "summation_height({n}) is {h}, expected {expected}"
        );
    }
    Ok(())
}

/// `accurate_sum` recovers what plain left-to-right summation loses.
fn accurate_sum_is_exact_where_plain_summation_is_not() -> TestResult {
    let terms = [1e16, 1.0, -1e16, 3.0];
    let plain: f64 = terms.iter().sum();
    let accurate = accurate_sum(terms.into_iter());
    ensure!(
        plain != 4.0,
        "plain summation happened to be exact: {plain}"
    );
    ensure!(accurate == 4.0, "accurate_sum gave {accurate}, expected 4");
    Ok(())
}

/// The threaded `gemm_reference` equals a plain triple loop, including shapes with
/// fewer rows than threads and an empty `k`.
fn gemm_reference_matches_a_plain_triple_loop() -> TestResult {
    let mut rng = Rng::new();
    for (m, n, k) in [(1, 1, 1), (3, 5, 7), (65, 33, 17), (5, 7, 0), (0, 3, 2)] {
        let a: Vec<f32> = signed(&mut rng, m * k);
        let b: Vec<f32> = signed(&mut rng, k * n);
        let (ab, abs) = gemm_reference((m, n, k), &a, &b);
        ensure!(
            ab.len() == m * n && abs.len() == m * n,
            "{m}x{n}x{k}: wrong sizes"
        );
        for i in 0..m {
            for j in 0..n {
                let products = (0..k).map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]));
                let (sum, sum_abs) = products.fold((0.0, 0.0), |(s, t), x| (s + x, t + x.abs()));
                ensure!(
                    ab[i * n + j] == sum && abs[i * n + j] == sum_abs,
                    "{m}x{n}x{k} at ({i}, {j}): got ({}, {}), expected ({sum}, {sum_abs})",
                    ab[i * n + j],
                    abs[i * n + j]
                );
            }
        }
    }
    Ok(())
}

/// `check_close` fails on a NaN and on the poison, says so, and passes within tolerance.
fn check_close_rejects_nan_and_names_the_poison() -> TestResult {
    ensure!(
        check_close("ok", &[1.0f32, 2.0], |i| (i as f64 + 1.0, 0.0)).is_ok(),
        "exact values were rejected"
    );
    ensure!(
        check_close("ok", &[1.5f64], |_| (1.0, 0.5)).is_ok(),
        "a value at the tolerance was rejected"
    );
    let nan = check_close("nan", &[1.0f32, f32::NAN], |_| (1.0, 1e9));
    ensure!(nan.is_err(), "a NaN was accepted");
    let message = check_close("poison", &[f64::POISON, 2.0, 5.0], |_| (2.0, 0.5))
        .err()
        .and_then(|f| f.message().map(str::to_owned))
        .unwrap_or_default();
    ensure!(
        message.contains("index 0")
            && message.contains("never written")
            && message.contains("2 of 3"),
        "the message {message:?} does not name the first index, the poison and the count"
    );
    Ok(())
}
