//! `fill`, `scale`, `axpy`: one grid-stride launch each.

use stream_core::{DeviceMemory, DeviceMemoryMut, DeviceRepr, Enqueue, Error, Result};

use crate::declarations as k;
use crate::grid_stride;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for u32 {}
}

/// Element types `fill` supports: `f32`, `f64`, `u32`. Sealed.
pub trait Element: DeviceRepr + sealed::Sealed {
    #[doc(hidden)]
    fn launch_fill<'s>(
        s: &'s impl Enqueue<'s>,
        y: &mut impl DeviceMemoryMut<'s, Self>,
        v: Self,
    ) -> Result<()>;
}

/// Floating-point element types the arithmetic kernels support: `f32`, `f64`. Sealed.
pub trait Float: Element {
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
        p: &mut impl DeviceMemoryMut<'s, Self>,
    ) -> Result<()>;
    #[doc(hidden)]
    fn launch_dot_partials<'s>(
        s: &'s impl Enqueue<'s>,
        x: &impl DeviceMemory<'s, Self>,
        y: &impl DeviceMemory<'s, Self>,
        p: &mut impl DeviceMemoryMut<'s, Self>,
    ) -> Result<()>;
    #[doc(hidden)]
    fn launch_final_sum<'s>(
        s: &'s impl Enqueue<'s>,
        p: &impl DeviceMemory<'s, Self>,
        out: &mut impl DeviceMemoryMut<'s, Self>,
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
                k::$fill(s, grid_stride(y.len()), v, y)
            }
        }
    };
}
element!(f32, fill_f32);
element!(f64, fill_f64);
element!(u32, fill_u32);

macro_rules! float {
    ($t:ty, $scale:ident, $axpy:ident, $sum:ident, $dot:ident, $final:ident) => {
        impl Float for $t {
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
                p: &mut impl DeviceMemoryMut<'s, Self>,
            ) -> Result<()> {
                k::$sum(s, crate::reduce::partials_config(p.len()), x, p)
            }
            fn launch_dot_partials<'s>(
                s: &'s impl Enqueue<'s>,
                x: &impl DeviceMemory<'s, Self>,
                y: &impl DeviceMemory<'s, Self>,
                p: &mut impl DeviceMemoryMut<'s, Self>,
            ) -> Result<()> {
                k::$dot(s, crate::reduce::partials_config(p.len()), x, y, p)
            }
            fn launch_final_sum<'s>(
                s: &'s impl Enqueue<'s>,
                p: &impl DeviceMemory<'s, Self>,
                out: &mut impl DeviceMemoryMut<'s, Self>,
            ) -> Result<()> {
                k::$final(s, crate::reduce::partials_config(1), p, out)
            }
        }
    };
}
float!(
    f32,
    scale_f32,
    axpy_f32,
    sum_partials_f32,
    dot_partials_f32,
    final_sum_f32
);
float!(
    f64,
    scale_f64,
    axpy_f64,
    sum_partials_f64,
    dot_partials_f64,
    final_sum_f64
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
