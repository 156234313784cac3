//! The `#[gpu_scope]` attribute of `stream_core`.
//!
//! Use it through `stream_core::gpu_scope`; this crate is an implementation
//! detail and its generated code names only `stream_core::__private`.
//!
//! # What it does
//!
//! A function whose first parameter (after `self`) is a scope,
//!
//! ```ignore
//! use stream_core::{gpu_scope, Result, Scope};
//!
//! #[gpu_scope]
//! pub fn step(s: &Scope, input: &[f32], out: &mut [f32]) -> Result<()> {
//!     let x = s.upload(input)?;
//!     s.copy_to_host(&x, out)?;
//!     Ok(())
//! }
//! ```
//!
//! is rewritten so that its callers pass a `&Stream` in the scope's place and
//! the body runs inside `stream_core::scope` on that stream:
//!
//! ```ignore
//! pub fn step(s: &::stream_core::__private::Stream, input: &[f32], out: &mut [f32]) -> Result<()> {
//!     #[allow(unused_imports)]
//!     use Scope as _; // the signature no longer names it: keeps the import used
//!     ::stream_core::__private::scope(s, move |s| -> Result<()> {
//!         let x = s.upload(input)?;
//!         s.copy_to_host(&x, out)?;
//!         Ok(())
//!     })
//! }
//! ```
//!
//! Attributes, visibility, generics, the `where` clause, `unsafe` and every
//! other parameter are kept as written; inner attributes (`#![allow(..)]`)
//! stay on the function. The closure returns the function's return type
//! (with any `impl Trait` in it inferred), so `?` and `return` in the body
//! keep their meaning; when the stream's final synchronisation fails, its
//! error is converted into the function's error type. Methods work too
//! (`&self`, `&mut self`, `self`, `self: Box<Self>`): the scope is then the
//! first parameter after `self`. A scope parameter whose pattern is not a
//! plain name (`_`, `mut s`) keeps its pattern on the closure, and the stream
//! gets a hidden name. The body is not parsed by the macro, so a body that is
//! still being typed expands and the compiler reports its own syntax errors.
//!
//! Lifetimes named on the scope parameter (`s: &'s Scope<'s, '_>`) name the
//! stream's borrow after the rewrite; the scope's brand inside the body is a
//! fresh lifetime that cannot be named from the signature.
//!
//! # Argument
//!
//! `#[gpu_scope(crate = path)]` makes the generated code name
//! `path::__private` instead of `::stream_core::__private`, for crates that
//! re-export `stream_core` (e.g. `#[gpu_scope(crate = my_lib::gpu)]`). It is
//! the only argument.
//!
//! # Rejections
//!
//! Each is a compile error pointing at the offending token; all that apply are
//! reported at once, and the function is still emitted unchanged next to them
//! so the rest of the crate keeps type-checking in IDEs.
//!
//! - `async fn`: the scope synchronises its stream before returning;
//! - `const fn`, a foreign ABI such as `extern "C" fn`, a variadic `...`;
//! - no parameter after `self`, or a first one that is not `name: &Scope`
//!   (by value or `&mut Scope` included: all scope methods take `&self`);
//! - a missing return type, or one whose last path segment is not `Result`
//!   (`Result<T>`, `stream_core::Result<T>`, `std::result::Result<T, E>` and
//!   `anyhow::Result<T>` are accepted): the final synchronisation can fail;
//! - anything that is not a function with a body (a struct, a trait method
//!   declaration, ...);
//! - any argument other than one `crate = path`.
#![forbid(unsafe_code)]

mod error;
mod expand;
mod kernel;
mod parse;
mod validate;

#[cfg(test)]
mod tests;

use proc_macro::TokenStream;

/// Runs a function's body inside a GPU scope opened on a stream its callers
/// pass in the scope parameter's place.
///
/// The first parameter (after `self`) must be `name: &Scope` and the function
/// must return a `Result<T, E>` with `E: From<stream_core::Error>`. See the
/// [crate docs](crate) for the exact expansion, the `crate = path` argument
/// and what is rejected.
///
/// # Example
///
/// ```ignore
/// use stream_core::{gpu_scope, Device, Result, Scope};
///
/// #[gpu_scope]
/// fn round_trip(s: &Scope, input: &[f32], out: &mut [f32]) -> Result<()> {
///     let x = s.upload(input)?;
///     let _download = s.copy_to_host(&x, out)?; // completed by the scope's end
///     Ok(())
/// } // the scope ends here: the stream is synchronised, `out` is ready
///
/// fn main() -> Result<()> {
///     let stream = Device::new(0)?.new_stream()?;
///     let input = vec![1.0f32; 1024];
///     let mut out = vec![0.0f32; 1024];
///     round_trip(&stream, &input, &mut out)?; // the stream goes where the scope was
///     assert_eq!(input, out);
///     Ok(())
/// }
/// ```
#[proc_macro_attribute]
pub fn gpu_scope(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::gpu_scope(args.into(), item.into())
        .unwrap_or_else(error::Rejected::into_compile_error)
        .into()
}

/// Declares a CUDA kernel's Rust signature once and generates a safe launch wrapper.
///
/// ```ignore
/// use stream_core::kernel;
///
/// const SOURCE: &str = r#"
/// extern "C" __global__ void axpy_f32(float a, const float* x, size_t x_len, float* y, size_t y_len) {
///     size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
///     if (i < x_len && i < y_len) y[i] = a * x[i] + y[i];
/// }"#;
///
/// #[kernel(cuda = SOURCE)]
/// pub unsafe fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]);
///
/// // generated: pub fn axpy_f32<'s>(s: &'s Scope<'s, '_>, config: LaunchConfig,
/// //     a: f32, x: &impl DeviceMemory<'s, f32>, y: &mut impl DeviceMemoryMut<'s, f32>) -> Result<()>
/// ```
///
/// Parameters are plain values (`DeviceRepr` types, passed by value), `&[T]` (device
/// memory the kernel reads) or `&mut [T]` (device memory the kernel writes). On the CUDA
/// side every slice is two parameters, a pointer and a `size_t` length. Writing
/// `unsafe fn` is the declaration's one promise: the CUDA kernel has exactly these
/// parameters, stays within the lengths it is given, and writes only through `&mut`
/// slices. Launching is safe.
///
/// Arguments: `cuda = EXPR` (CUDA C++ source, a `&'static str`, compiled with NVRTC for
/// the device on first use) or `ptx = EXPR` (PTX text); `name = "..."` when the CUDA
/// name differs from the Rust one; `crate = path` for re-exports of `stream_core`.
#[proc_macro_attribute]
pub fn kernel(args: TokenStream, item: TokenStream) -> TokenStream {
    kernel::kernel(args.into(), item.into()).into()
}
