//! [`NcclElement`]: the element types NCCL moves and reduces, and the typed reductions
//! ([`Sum`], [`Prod`], [`Max`], [`Min`], [`Avg`]; [`PreMulSum`](super::PreMulSum) has
//! a file of its own) with the element types each admits.

use super::Communicator;
use crate::driver::nccl::{DataType, RedOp, Reduction};
use crate::error::Result;
use crate::memory::DeviceRepr;
use crate::sealed;

/// An element type NCCL moves and reduces: `f32`, `f64`, `i8`, `u8`, `i32`, `u32`,
/// `i64`, `u64`, and with the `half` feature (on by default) `half::f16` and
/// `half::bf16`. Sealed: NCCL knows only its own types.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an element type NCCL can move or reduce",
    note = "NCCL collectives take f32, f64, f16, bf16, i8, u8, i32, u32, i64 or u64 elements"
)]
pub trait NcclElement: DeviceRepr + sealed::NcclType {
    /// NCCL's name for the type.
    #[doc(hidden)]
    const DATA_TYPE: DataType;
}

macro_rules! nccl_element {
    ($($t:ty => $dt:ident),* $(,)?) => {$(
        impl sealed::NcclType for $t {}
        impl NcclElement for $t {
            const DATA_TYPE: DataType = DataType::$dt;
        }
    )*};
}
nccl_element!(
    f32 => ncclFloat32,
    f64 => ncclFloat64,
    i8 => ncclInt8,
    u8 => ncclUint8,
    i32 => ncclInt32,
    u32 => ncclUint32,
    i64 => ncclInt64,
    u64 => ncclUint64,
);
#[cfg(feature = "half")]
nccl_element!(half::f16 => ncclFloat16, half::bf16 => ncclBfloat16);

/// A reduction that elements of type `T` admit. Sealed.
///
/// Every [`NcclElement`] admits [`Sum`], [`Prod`], [`Max`] and [`Min`], and the sum of
/// each rank's elements times a factor of its own, made on the communicator with
/// [`Communicator::pre_mul_sum`](super::Communicator::pre_mul_sum) (passed by
/// reference: `&scale`); [`Avg`] only the floating-point ones: the average of integers
/// is not an integer, and which rounding a program means is its own choice (reduce with
/// [`Sum`] and divide as meant).
///
/// ```compile_fail,E0277
/// # use stream_core::{nccl::{Avg, Communicator}, DeviceBuffer, Scope};
/// # fn f<'s>(s: &'s Scope<'s, '_>, comm: &Communicator, x: &mut DeviceBuffer<'s, u32>) {
/// s.all_reduce_in_place(comm, x, Avg); // error: `Avg` cannot reduce `u32`
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot reduce elements of type `{T}`",
    label = "not a reduction of `{T}`",
    note = "`Sum`, `Prod`, `Max` and `Min` reduce every NCCL element type; `Avg` only \
            floating-point ones (the average of integers is not an integer: reduce with `Sum` \
            and divide with the rounding you mean); a `PreMulSum` is passed by reference \
            (`&op`), to reductions of the element type it was made for"
)]
pub trait ReduceOp<T: NcclElement>: Copy + sealed::NcclOp {}

macro_rules! reduce_op {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name;
        impl sealed::NcclOp for $name {
            #[inline(always)]
            fn reduction(&self, _: &Communicator, _: sealed::Token) -> Result<Reduction> {
                Ok(Reduction::Builtin(RedOp::$op))
            }
        }
    )*};
}
reduce_op!(
    /// The sum of the ranks' elements.
    Sum => ncclSum,
    /// The product of the ranks' elements.
    Prod => ncclProd,
    /// The largest of the ranks' elements.
    Max => ncclMax,
    /// The smallest of the ranks' elements.
    Min => ncclMin,
    /// The mean of the ranks' elements (floating-point elements only).
    Avg => ncclAvg,
);

impl<T: NcclElement> ReduceOp<T> for Sum {}
impl<T: NcclElement> ReduceOp<T> for Prod {}
impl<T: NcclElement> ReduceOp<T> for Max {}
impl<T: NcclElement> ReduceOp<T> for Min {}
impl ReduceOp<f32> for Avg {}
impl ReduceOp<f64> for Avg {}
#[cfg(feature = "half")]
impl ReduceOp<half::f16> for Avg {}
#[cfg(feature = "half")]
impl ReduceOp<half::bf16> for Avg {}
