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
            /// Through `round_to_odd_f32` (below), not `half`'s own `from_f64`: that one drops
            /// the low 32 bits of the `f64` before rounding, so a value just above a tie
            /// rounds down (`-0.89697266 * 1.1611328` to `f16` gave `0xbc2a`; the
            /// correctly rounded result, the GPU's, is `0xbc2b`).
            fn from_f64(v: f64) -> Self {
                <$t>::from_f32(round_to_odd_f32(v))
            }
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
        }
    )*};
}
// 10 and 7 stored mantissa bits: u = 2^-11 and 2^-8.
half_real!(half::f16: 11, half::bf16: 8);

/// `v` rounded to `f32` toward the neighbour whose last bit is odd when it is not exact
/// ("round to odd"): rounding that `f32` again, to nearest, into a format of at most 22
/// significant bits (`f16`: 11, `bf16`: 8) is then the single correct rounding of `v`,
/// because the odd last bit keeps "above the tie" from becoming "on the tie".
pub fn round_to_odd_f32(v: f64) -> f32 {
    let nearest = v as f32;
    if !nearest.is_finite() || f64::from(nearest) == v || nearest.to_bits() & 1 == 1 {
        return nearest;
    }
    // Inexact with an even last bit: the other neighbour of `v`, one ulp toward it, is odd.
    let away_from_zero = f64::from(nearest).abs() < v.abs();
    let bits = nearest.to_bits();
    f32::from_bits(if away_from_zero { bits + 1 } else { bits - 1 })
}

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
/// `kernels/cuda/reduce.cuh`: `p = min(ceil(n / 256), 1024)` blocks of 256 threads; a
/// thread has `t = ceil(n / (256 p))` terms or one fewer, which it adds into four running
/// sums in turn (`t / 4` terms each, the `t % 4` left over into the first) and adds the
/// four in a tree of depth 2; a block adds its 256 threads in a tree of depth 8, then one
/// block adds the `p` partials, `ceil(p / 256)` per thread in sequence and again a tree
/// of depth 8.
pub fn summation_height(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let partials = n.div_ceil(256).min(1024);
    let thread = |t: usize| t / 4 + t % 4 + 2;
    let terms = n.div_ceil(256 * partials);
    thread(terms).max(thread(terms - 1)) + 8 + partials.div_ceil(256) + 8
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// The correctly rounded `T` of `v`, found by comparing `v` with its two neighbours
    /// (the differences are exact: the three values are within a factor of two).
    fn nearest<T: Real>(v: f64, below: T, above: T, even: fn(T) -> bool) -> T {
        let (lo, hi) = (below.to_f64(), above.to_f64());
        let (down, up) = ((v - lo).abs(), (hi - v).abs());
        if down < up || (down == up && even(below)) {
            below
        } else {
            above
        }
    }

    #[test]
    fn the_product_half_rounded_wrongly_rounds_correctly_now() {
        let (a, x) = (f16::from_bits(0xbb2d), f16::from_bits(0x3ca5));
        let product = a.to_f64() * x.to_f64();
        assert_eq!(<f16 as Real>::from_f64(product).to_bits(), 0xbc2b);
    }

    #[test]
    fn halves_from_f64_round_to_nearest_even_between_every_pair_of_neighbours() {
        let mut rng = Rng::with_seed(29);
        for _ in 0..200_000 {
            // A value between two adjacent positive halves, often just beside their tie.
            let bits = (rng.next_u64() % 0x7bfe) as u16 + 1;
            let (lo, hi) = (f16::from_bits(bits), f16::from_bits(bits + 1));
            let mid = (lo.to_f64() + hi.to_f64()) / 2.0;
            let offset = (rng.next_u64() % 9) as i64 - 4;
            let v = mid + offset as f64 * mid * f64::EPSILON;
            let want = nearest(v, lo, hi, |h: f16| h.to_bits() & 1 == 0);
            assert_eq!(<f16 as Real>::from_f64(v), want, "f16 of {v:e}");
            assert_eq!(<f16 as Real>::from_f64(-v), -want, "f16 of {:e}", -v);

            let bits = (rng.next_u64() % 0x7f7e) as u16 + 1;
            let (lo, hi) = (bf16::from_bits(bits), bf16::from_bits(bits + 1));
            let mid = (lo.to_f64() + hi.to_f64()) / 2.0;
            let v = mid + offset as f64 * mid * f64::EPSILON;
            let want = nearest(v, lo, hi, |h: bf16| h.to_bits() & 1 == 0);
            assert_eq!(<bf16 as Real>::from_f64(v), want, "bf16 of {v:e}");
        }
    }
}
