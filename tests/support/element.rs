//! [`Element`]: the element types the tests move around, with their poison value,
//! random non-zero values and bit-exact comparison.

use stream_core::DeviceRepr;

use crate::rng::Rng;

/// An element type of the tests: a `DeviceRepr` number with a poison sentinel, a
/// generator of random non-zero values, and bit-exact equality (so `NaN` poison is
/// never "equal" by accident and `-0.0 != 0.0`).
pub trait Element: DeviceRepr + std::fmt::Debug {
    /// The type's name, for messages.
    const NAME: &'static str;
    /// Written into outputs before a test runs, so unwritten elements are caught:
    /// `0xDEADBEEF`-style patterns for integers, a NaN with a `DEAD` payload for floats.
    const POISON: Self;
    /// Zero (all bits clear).
    const ZERO: Self;
    /// A random value: never zero, never [`POISON`](Self::POISON), finite (normal) for
    /// floats, with every other bit random.
    fn random(rng: &mut Rng) -> Self;
    /// Overwrites `out` with values as [`random`](Self::random) draws them (faster for
    /// small integers, which take several values from one 64-bit draw).
    fn fill_random(rng: &mut Rng, out: &mut [Self]) {
        out.iter_mut().for_each(|x| *x = Self::random(rng));
    }
    /// The value's bits, zero-extended, for messages and comparison.
    fn bits(self) -> u128;
    /// Bit-exact equality.
    fn same(a: Self, b: Self) -> bool {
        a.bits() == b.bits()
    }
    /// Bit-exact equality of two slices (a `memcmp` for integers).
    fn all_same(a: &[Self], b: &[Self]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| Self::same(x, y))
    }
    /// `value (0xbits)`, for messages.
    fn describe(self) -> String {
        format!(
            "{self:?} ({:#0width$x})",
            self.bits(),
            width = 2 + 2 * std::mem::size_of::<Self>()
        )
    }
}

macro_rules! int_element {
    ($($t:ty as $bits:ty => $poison:expr),* $(,)?) => {$(
        impl Element for $t {
            const NAME: &'static str = stringify!($t);
            const POISON: Self = $poison;
            const ZERO: Self = 0;
            fn random(rng: &mut Rng) -> Self {
                let v = if std::mem::size_of::<$t>() > 8 {
                    rng.next_u128() as $t
                } else {
                    rng.next_u64() as $t
                };
                if v == 0 || v == Self::POISON { 1 } else { v }
            }
            fn fill_random(rng: &mut Rng, out: &mut [Self]) {
                const PER_DRAW: usize = 8 / std::mem::size_of::<$t>();
                if PER_DRAW < 2 {
                    out.iter_mut().for_each(|x| *x = Self::random(rng));
                    return;
                }
                for chunk in out.chunks_mut(PER_DRAW) {
                    let mut word = rng.next_u64();
                    for x in chunk {
                        let v = word as $t;
                        *x = if v == 0 || v == Self::POISON { 1 } else { v };
                        word >>= 8 * std::mem::size_of::<$t>() % 64;
                    }
                }
            }
            fn bits(self) -> u128 {
                u128::from(self as $bits)
            }
            fn all_same(a: &[Self], b: &[Self]) -> bool {
                a == b
            }
        }
    )*};
}

int_element!(
    u8 as u8 => 0xDB,
    u16 as u16 => 0xDEAD,
    u32 as u32 => 0xDEAD_BEEF,
    u64 as u64 => 0xDEAD_BEEF_DEAD_BEEF,
    u128 as u128 => 0xDEAD_BEEF_DEAD_BEEF_DEAD_BEEF_DEAD_BEEF,
    i8 as u8 => 0xDBu8 as i8,
    i16 as u16 => 0xDEADu16 as i16,
    i32 as u32 => 0xDEAD_BEEFu32 as i32,
    i64 as u64 => 0xDEAD_BEEF_DEAD_BEEFu64 as i64,
);

macro_rules! float_element {
    ($($name:literal: $t:ty, $bits:ty, $poison:expr, $exp_shift:expr, $exp_mask:expr, $exp_one:expr);* $(;)?) => {$(
        impl Element for $t {
            const NAME: &'static str = $name;
            const POISON: Self = <$t>::from_bits($poison);
            const ZERO: Self = <$t>::from_bits(0);
            fn random(rng: &mut Rng) -> Self {
                let mut bits = rng.next_u64() as $bits;
                let exponent = (bits >> $exp_shift) & $exp_mask;
                if exponent == 0 || exponent == $exp_mask {
                    // Zero, subnormal, infinite or NaN: move into [1, 2), keeping the
                    // sign and mantissa bits random.
                    bits = (bits & !($exp_mask << $exp_shift)) | ($exp_one << $exp_shift);
                }
                <$t>::from_bits(bits)
            }
            fn bits(self) -> u128 {
                u128::from(self.to_bits())
            }
        }
    )*};
}

float_element!(
    "f32": f32, u32, 0x7FDE_ADBE, 23, 0xFF, 0x7F;
    "f64": f64, u64, 0x7FFD_EADB_EEFD_EADB, 52, 0x7FF, 0x3FF;
    "f16": half::f16, u16, 0x7EAD, 10, 0x1F, 0xF;
    "bf16": half::bf16, u16, 0x7FDE, 7, 0xFF, 0x7F;
);
