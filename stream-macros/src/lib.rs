//! The `#[gpu_scope]` and `#[kernel]` attributes of `stream_core`.
//!
//! Use them through `stream_core::gpu_scope` and `stream_core::kernel`; this crate
//! is an implementation detail and its generated code names only
//! `stream_core::__private`. The crate docs describe `#[gpu_scope]`; [`kernel`](macro@kernel)
//! describes `#[kernel]`, its launch shapes and its promise.
//!
//! Each macro is a folder (`gpu_scope/`, `kernel/`, `derive/`) of `parse.rs`,
//! `validate.rs` and `expand.rs`; `diagnostics/` holds every message.
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

mod derive;
mod diagnostics;
#[cfg(test)]
mod fuzz;
mod gpu_scope;
mod kernel;
mod tokens;

use proc_macro::TokenStream;

use diagnostics::Rejected;

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
    gpu_scope::gpu_scope(args.into(), item.into())
        .unwrap_or_else(Rejected::into_compile_error)
        .into()
}

/// Declares a CUDA kernel's Rust signature and the launch shapes it is safe for, once,
/// and generates a safe launch wrapper.
///
/// ```ignore
/// use stream_core::kernel;
///
/// const SOURCE: &str = r#"
/// extern "C" __global__ void __launch_bounds__(256)
/// block_sums_f32(const float* x, size_t x_len, float* sums, size_t sums_len) {
///     __shared__ float partial[256];
///     size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
///     partial[threadIdx.x] = i < x_len ? x[i] : 0.0f;
///     __syncthreads();
///     for (unsigned s = 128; s > 0; s >>= 1) {
///         if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
///         __syncthreads();
///     }
///     if (threadIdx.x == 0 && blockIdx.x < sums_len) sums[blockIdx.x] = partial[0];
/// }"#;
///
/// #[kernel(cuda = SOURCE, block = 256)]
/// pub unsafe fn block_sums_f32(x: &[f32], sums: &mut [f32]);
///
/// // generated: pub fn block_sums_f32<'s>(s: &'s impl Enqueue<'s>, config: LaunchConfig,
/// //     x: &impl DeviceMemory<'s, f32>, sums: &mut impl DeviceMemoryMut<'s, f32>) -> Result<()>
/// ```
///
/// # Parameters
///
/// Parameters are plain values (`DeviceRepr` types, passed by value), `&[T]` (device
/// memory the kernel reads) or `&mut [T]` (device memory the kernel writes). On the CUDA
/// side every slice is two parameters, a pointer and a `size_t` length. Any parameter
/// name works, `s` and `config` included: the wrapper's own parameters and locals are
/// hygienic and never capture or shadow a declared parameter.
///
/// # The promise
///
/// Writing `unsafe fn` is the declaration's one promise: the CUDA kernel has exactly
/// these parameters, stays within the lengths it is given, and writes only through
/// `&mut` slices, **for every launch shape the declaration admits**. Launching is safe.
///
/// # Launch shapes
///
/// The declaration states the launches it is safe for; the wrapper returns
/// `Error::InvalidLaunch`, naming the declaration, for any other `LaunchConfig`, before
/// the kernel is loaded or anything is launched:
///
/// - `block = 256`, `block = (32, 8)`, `block = (32, 8, 2)`: the only block admitted
///   (missing dimensions are 1). Integer literals only, so that the macro can check them.
/// - `max_threads = 512`: any block of at most that many threads (`x * y * z`), within
///   the device's limits. Not together with `block`.
/// - `shared = BYTES`: the dynamic shared memory (`LaunchConfig::shared_mem_bytes`) the
///   kernel needs, a constant `u32` expression (it goes in a `static`); or
///   `shared = |(x, y, z)| 4 * x * y * z`, a non-capturing closure (coerced to
///   `fn((u32, u32, u32)) -> u32`) that computes it from the block; it is called only
///   with blocks within the device's limits (at most 1024 threads), so `4 * x * y * z`
///   cannot overflow. A launch with *less* is refused; *more* is admitted, since the
///   kernel never touches bytes past what it needs (and the device's own limit is still
///   checked).
///
/// **A declaration without `block` or `max_threads` promises that the kernel is
/// memory-safe for every block the device accepts, and one without `shared` that it is
/// memory-safe with any dynamic shared memory, none included.** A kernel with a
/// fixed-size `__shared__` array indexed by `threadIdx`, or that assumes `blockDim`,
/// must declare its shape (and should carry a matching `__launch_bounds__`). The grid is
/// never restricted: whatever its shape, the kernel must stay within the lengths it is
/// given.
///
/// A shape no device can launch is a compile error at the offending token: a block
/// dimension of 0, `x` or `y` over 1024, `z` over 64, more than 1024 threads, a
/// `max_threads` of 0 or over 1024, and a literal `shared` over 232448 bytes (227 KiB,
/// the largest opt-in of any GPU).
///
/// # Other arguments
///
/// `cuda = EXPR` (CUDA C++ source, a `&'static str`, compiled with NVRTC for the device
/// on first use, once per process for devices of one compute capability) or
/// `ptx = EXPR` (PTX text); `name = "..."` when the CUDA name differs
/// from the Rust one; `crate = path` for re-exports of `stream_core`.
///
/// On error the wrapper is still emitted with the declared signature next to the
/// errors, so that call sites keep type-checking.
#[proc_macro_attribute]
pub fn kernel(args: TokenStream, item: TokenStream) -> TokenStream {
    kernel::kernel(args.into(), item.into())
        .unwrap_or_else(Rejected::into_compile_error)
        .into()
}

/// Derives `DeviceRepr` for a `#[repr(C)]` (or `#[repr(transparent)]`) struct whose
/// fields are all `DeviceRepr`, so that it can be an element of device memory
/// (`DeviceBuffer`, `DeviceVec`, copies) and a scalar kernel argument.
///
/// ```ignore
/// use stream_core::DeviceRepr;
///
/// #[derive(Clone, Copy, DeviceRepr)]
/// #[repr(C)]
/// pub struct Particle {
///     pub position: [f32; 3],
///     pub mass: f32,
/// }
/// ```
///
/// The derive checks `DeviceRepr`'s contract (every bit pattern valid, no padding) at
/// compile time; each of these is an error at the offending token:
///
/// - no `#[repr(C)]` or `#[repr(transparent)]` (at the struct's name): Rust's own
///   layout may reorder fields;
/// - a field that is a reference, a raw or function pointer, a `bool`, a `char` (also as
///   an array's element), or any other type that is not `DeviceRepr` (at the field's
///   type);
/// - a generic parameter without the `DeviceRepr` bound (at the field that uses it);
/// - padding: the struct's size is more than the sum of its fields' sizes (at the
///   struct's name), e.g. `{ a: u8, b: u32 }`; order fields from the largest alignment
///   down, or add explicit `_pad: [u8; N]` fields;
/// - an enum or a union, a struct without fields, lifetime parameters;
/// - a generic struct whose fields are not all of one type (and not
///   `#[repr(transparent)]`), or with `repr(align(..))`: its padding depends on its
///   parameters, so it cannot be ruled out when the struct is declared.
///
/// The struct must also be `Copy` (derive `Clone` and `Copy` next to it).
///
/// `#[device_repr(cudarc)]` also implements cudarc's `DeviceRepr` and `ValidAsZeroBits`
/// (through `::cudarc`, a dependency of the crate that derives), so that the struct works
/// in cudarc's copies and launches too (it replaces a hand-written `unsafe impl` of
/// them). `#[device_repr(crate = path)]` names a re-export of `stream_core` for the
/// generated code.
#[proc_macro_derive(DeviceRepr, attributes(device_repr))]
pub fn derive_device_repr(item: TokenStream) -> TokenStream {
    derive::device_repr(item.into())
        .unwrap_or_else(Rejected::into_compile_error)
        .into()
}
