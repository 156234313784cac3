//! `fill`, `scale`, `axpy`: one grid-stride launch each.

use half::{bf16, f16};
use stream_core::{DeviceMemory, DeviceMemoryMut, DeviceRepr, Enqueue, Error, Result};

use crate::declarations as k;
use crate::{fill_grid, grid_stride};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for u32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// Element types `fill` supports: `f32`, `f64`, `u32`, `f16`, `bf16`. Sealed.
pub trait Element: DeviceRepr + sealed::Sealed {
    #[doc(hidden)]
    fn launch_fill<'s>(
        s: &'s impl Enqueue<'s>,
        y: &mut impl DeviceMemoryMut<'s, Self>,
        v: Self,
    ) -> Result<()>;
}

/// Floating-point element types the arithmetic kernels support: `f32`, `f64`, and the
/// half-precision `f16` and `bf16` (`half`'s), which `scale` and `axpy` compute in `f32`
/// and round once (to nearest, ties to even), and which `reduce_sum` and `dot` sum in
/// `f32`. Sealed.
pub trait Float: Element {
    /// What `reduce_sum` and `dot` accumulate in and return: the type itself for `f32`
    /// and `f64`, `f32` for `f16` and `bf16`.
    type Accumulator: DeviceRepr;
    #[doc(hidden)]
    fn launch_scale<'s>(
        s: &'s impl Enqueue<'s>,
        a: Self,
        x: &impl DeviceMemory<'s, Self>,
        y: &mut impl DeviceMemoryMut<'s, Self>,
    ) -> Result<()>;
    #[doc(hidden)]
    fn launch_axpy<'s>(
        s: &'s impl Enqueue<'s>,
        a: Self,
        x: &impl DeviceMemory<'s, Self>,
        y: &mut impl DeviceMemoryMut<'s, Self>,
    ) -> Result<()>;
    #[doc(hidden)]
    fn launch_sum_partials<'s>(
        s: &'s impl Enqueue<'s>,
        x: &impl DeviceMemory<'s, Self>,
        p: &mut impl DeviceMemoryMut<'s, Self::Accumulator>,
    ) -> Result<()>;
    #[doc(hidden)]
    fn launch_dot_partials<'s>(
        s: &'s impl Enqueue<'s>,
        x: &impl DeviceMemory<'s, Self>,
        y: &impl DeviceMemory<'s, Self>,
        p: &mut impl DeviceMemoryMut<'s, Self::Accumulator>,
    ) -> Result<()>;
    #[doc(hidden)]
    fn launch_final_sum<'s>(
        s: &'s impl Enqueue<'s>,
        p: &impl DeviceMemory<'s, Self::Accumulator>,
        out: &mut impl DeviceMemoryMut<'s, Self::Accumulator>,
    ) -> Result<()>;
}

macro_rules! element {
    ($t:ty, $fill:ident) => {
        impl Element for $t {
            fn launch_fill<'s>(
                s: &'s impl Enqueue<'s>,
                y: &mut impl DeviceMemoryMut<'s, Self>,
                v: Self,
            ) -> Result<()> {
                k::$fill(s, fill_grid::<Self>(y.len()), v, y)
            }
        }
    };
}
element!(f32, fill_f32);
element!(f64, fill_f64);
element!(u32, fill_u32);
element!(f16, fill_f16);
element!(bf16, fill_bf16);

macro_rules! float {
    ($t:ty => $acc:ty, $scale:ident, $axpy:ident, $sum:ident, $dot:ident, $final:ident) => {
        impl Float for $t {
            type Accumulator = $acc;
            fn launch_scale<'s>(
                s: &'s impl Enqueue<'s>,
                a: Self,
                x: &impl DeviceMemory<'s, Self>,
                y: &mut impl DeviceMemoryMut<'s, Self>,
            ) -> Result<()> {
                k::$scale(s, grid_stride(y.len()), a, x, y)
            }
            fn launch_axpy<'s>(
                s: &'s impl Enqueue<'s>,
                a: Self,
                x: &impl DeviceMemory<'s, Self>,
                y: &mut impl DeviceMemoryMut<'s, Self>,
            ) -> Result<()> {
                k::$axpy(s, grid_stride(y.len()), a, x, y)
            }
            fn launch_sum_partials<'s>(
                s: &'s impl Enqueue<'s>,
                x: &impl DeviceMemory<'s, Self>,
                p: &mut impl DeviceMemoryMut<'s, $acc>,
            ) -> Result<()> {
                k::$sum(s, crate::reduce::partials_config(p.len()), x, p)
            }
            fn launch_dot_partials<'s>(
                s: &'s impl Enqueue<'s>,
                x: &impl DeviceMemory<'s, Self>,
                y: &impl DeviceMemory<'s, Self>,
                p: &mut impl DeviceMemoryMut<'s, $acc>,
            ) -> Result<()> {
                k::$dot(s, crate::reduce::partials_config(p.len()), x, y, p)
            }
            fn launch_final_sum<'s>(
                s: &'s impl Enqueue<'s>,
                p: &impl DeviceMemory<'s, $acc>,
                out: &mut impl DeviceMemoryMut<'s, $acc>,
            ) -> Result<()> {
                k::$final(s, crate::reduce::partials_config(1), p, out)
            }
        }
    };
}
float!(
    f32 => f32,
    scale_f32,
    axpy_f32,
    sum_partials_f32,
    dot_partials_f32,
    final_sum_f32
);
float!(
    f64 => f64,
    scale_f64,
    axpy_f64,
    sum_partials_f64,
    dot_partials_f64,
    final_sum_f64
);
float!(
    f16 => f32,
    scale_f16,
    axpy_f16,
    sum_partials_f16,
    dot_partials_f16,
    final_sum_f32
);
float!(
    bf16 => f32,
    scale_bf16,
    axpy_bf16,
    sum_partials_bf16,
    dot_partials_bf16,
    final_sum_f32
);

/// Sets every element of `y` to `value`.
pub fn fill<'s, T: Element>(
    s: &'s impl Enqueue<'s>,
    y: &mut impl DeviceMemoryMut<'s, T>,
    value: T,
) -> Result<()> {
    T::launch_fill(s, y, value)
}

/// `y[i] = a * x[i]`. `x` and `y` must have the same length.
pub fn scale<'s, T: Float>(
    s: &'s impl Enqueue<'s>,
    a: T,
    x: &impl DeviceMemory<'s, T>,
    y: &mut impl DeviceMemoryMut<'s, T>,
) -> Result<()> {
    Error::check_lengths("scale", x.len(), y.len())?;
    T::launch_scale(s, a, x, y)
}

/// `y[i] = a * x[i] + y[i]`. `x` and `y` must have the same length.
pub fn axpy<'s, T: Float>(
    s: &'s impl Enqueue<'s>,
    a: T,
    x: &impl DeviceMemory<'s, T>,
    y: &mut impl DeviceMemoryMut<'s, T>,
) -> Result<()> {
    Error::check_lengths("axpy", x.len(), y.len())?;
    T::launch_axpy(s, a, x, y)
}
