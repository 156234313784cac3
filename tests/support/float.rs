//! Floating-point helpers of the arithmetic kernel tests: [`Real`] (`f32`, `f64`,
//! `f16` or `bf16` with its unit roundoff), [`signed`] inputs that never overflow, [`check_close`]
//! against a rounding-error bound, and the `f64` references [`accurate_sum`] and
//! [`summation_height`].

use kernels::Float;
use libtest_mimic::Failed;

use crate::element::Element;
use crate::rng::Rng;
use crate::TestResult;

/// `f32`, `f64`, `f16` or `bf16`: a test element the arithmetic kernels support.
pub trait Real: Element + Float {
    /// Unit roundoff `u = 2^-p` (half an ulp of 1): every correctly rounded operation
    /// has relative error at most `u`.
    const U: f64;
    /// `v` rounded to `Self` (exact for `f64`).
    fn from_f64(v: f64) -> Self;
    /// `self` as an `f64` (always exact).
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

macro_rules! half_real {
    ($($t:ty: $mantissa_bits:expr),*) => {$(
        impl Real for $t {
            const U: f64 = 1.0 / (1u64 << $mantissa_bits) as f64;
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
        }
    )*};
}
// 10 and 7 stored mantissa bits: u = 2^-11 and 2^-8.
half_real!(half::f16: 11, half::bf16: 8);

/// `len` values with random signs and magnitudes in `[0.5, 2)`: never zero, and no
/// overflow or underflow in any sum or product of the tests (`Rng::vec` draws random
/// exponents, fine for copies but not for arithmetic).
pub fn signed<T: Real>(rng: &mut Rng, len: usize) -> Vec<T> {
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
pub fn check_close<T: Real>(
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
pub fn accurate_sum(terms: impl Iterator<Item = f64>) -> f64 {
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
pub fn summation_height(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let partials = n.div_ceil(256).min(1024);
    n.div_ceil(256 * partials) + 8 + partials.div_ceil(256) + 8
}
