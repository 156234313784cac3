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
//!     ::stream_core::__private::scope(s, move |s| -> Result<()> {
//!         let x = s.upload(input)?;
//!         s.copy_to_host(&x, out)?;
//!         Ok(())
//!     })
//! }
//! ```
//!
//! Attributes, visibility, generics, the `where` clause, `unsafe` and every
//! other parameter are kept as written. The closure returns the function's
//! return type, so `?` and `return` in the body keep their meaning; when the
//! stream's final synchronisation fails, its error is converted into the
//! function's error type. Methods work too (`&self`, `&mut self`, `self`,
//! `self: Box<Self>`): the scope is then the first parameter after `self`.
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
/// fn add_one(s: &Scope, data: &mut [f32]) -> Result<()> {
///     let mut x = s.upload(data)?;
///     kernels::add_scalar(s, &mut x, 1.0)?;
///     s.copy_to_host(&x, data)?;
///     Ok(())
/// }
///
/// fn main() -> Result<()> {
///     let stream = Device::new(0)?.new_stream()?;
///     let mut data = vec![1.0f32; 1024];
///     add_one(&stream, &mut data)?; // the stream goes where the scope was
///     assert!(data.iter().all(|&x| x == 2.0));
///     Ok(())
/// }
/// ```
#[proc_macro_attribute]
pub fn gpu_scope(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::gpu_scope(args.into(), item.into())
        .unwrap_or_else(error::Rejected::into_compile_error)
        .into()
}
