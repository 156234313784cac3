//! [`DeviceRepr`]: which element types may live in device memory.

/// An element type that can be copied to and from the GPU byte for byte.
///
/// Host transfers move raw bytes by DMA, and freshly allocated device memory holds
/// whatever bytes were there before, so a `DeviceRepr` type must accept *every* bit
/// pattern. It is implemented for the primitive integers and floats (and `half::f16`
/// and `half::bf16` with the `half` feature, on by default) and for arrays of
/// `DeviceRepr` types, and `#[derive(DeviceRepr)]` implements it for a `#[repr(C)]` (or
/// `#[repr(transparent)]`) struct whose fields are all `DeviceRepr`, checking at compile
/// time that the struct has no padding (see [`derive@crate::DeviceRepr`]).
///
/// ```
/// fn takes<T: stream_core::DeviceRepr>() {}
/// takes::<f32>();
/// takes::<u64>();
/// takes::<[f32; 4]>();
///
/// #[derive(Clone, Copy, stream_core::DeviceRepr)]
/// #[repr(C)]
/// struct Particle {
///     position: [f32; 3],
///     mass: f32,
/// }
/// takes::<Particle>();
/// ```
///
/// `bool` is not `DeviceRepr` (only 0 and 1 are valid bytes):
///
/// ```compile_fail,E0277
/// fn takes<T: stream_core::DeviceRepr>() {}
/// takes::<bool>();
/// ```
///
/// # Safety
///
/// Implementors promise that the type is `Copy`, has no padding bytes, holds no
/// pointers or references that give it meaning beyond its bytes, has no interior
/// mutability, and that every bit pattern of `size_of::<Self>()` bytes is a valid
/// value. Device memory is then sound to read back even when the GPU never wrote it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be copied to or from the GPU",
    label = "`{Self}` is not a `DeviceRepr` element type",
    note = "device memory holds plain numbers (u8..u128, i8..i128, usize, isize, f32, f64, half's f16 and bf16), arrays of them, and `#[repr(C)]` structs of them that `#[derive(DeviceRepr)]`: types whose every bit pattern is valid"
)]
pub unsafe trait DeviceRepr: Copy + Send + Sync + 'static {}

macro_rules! device_repr {
    ($($t:ty),* $(,)?) => {$(
        // SAFETY: a primitive integer or float: no padding, no pointers, and every bit
        // pattern is a valid value (NaN payloads included for floats).
        unsafe impl DeviceRepr for $t {}
    )*};
}
device_repr!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64);

// SAFETY: `half::f16` and `half::bf16` are `#[repr(transparent)]` wrappers of a `u16`
// (the IEEE 754 binary16 and bfloat16 bits): no padding, no pointers, no interior
// mutability, and every bit pattern is a valid value (NaNs included).
#[cfg(feature = "half")]
unsafe impl DeviceRepr for half::f16 {}
// SAFETY: as `f16` above.
#[cfg(feature = "half")]
unsafe impl DeviceRepr for half::bf16 {}

// SAFETY: an array is its elements laid out one after another, each at a multiple of
// `size_of::<T>()` (which is a multiple of `T`'s alignment): no padding between or after
// them. It is `Copy`, holds no pointers and has no interior mutability when `T` has
// none, and every bit pattern is valid when every bit pattern of each element is.
unsafe impl<T: DeviceRepr, const N: usize> DeviceRepr for [T; N] {}

/// The bytes of a slice of `T`.
pub(crate) fn as_bytes<T: DeviceRepr>(slice: &[T]) -> &[u8] {
    // SAFETY: `T: DeviceRepr` has no padding, so all `size_of_val(slice)` bytes are
    // initialised; `u8` has alignment 1; the borrow is carried over.
    unsafe { std::slice::from_raw_parts(slice.as_ptr().cast(), std::mem::size_of_val(slice)) }
}

/// The bytes of a mutable slice of `T`.
pub(crate) fn as_bytes_mut<T: DeviceRepr>(slice: &mut [T]) -> &mut [u8] {
    let len = std::mem::size_of_val(slice);
    // SAFETY: as `as_bytes`; and every bit pattern is a valid `T` (`T: DeviceRepr`), so
    // any bytes written through the result leave valid `T`s behind.
    unsafe { std::slice::from_raw_parts_mut(slice.as_mut_ptr().cast(), len) }
}

/// The bytes of one `T` value.
pub(crate) fn value_bytes<T: DeviceRepr>(value: &T) -> &[u8] {
    as_bytes(std::slice::from_ref(value))
}
