//! The messages of `#[kernel]`, one helper per mistake.

use proc_macro2::Span;
use quote::ToTokens;
use syn::{Error, Ident};

use super::reworded;

/// How the attribute is written in messages.
const ATTR: &str = "#[kernel]";

/// Every argument, quoted by the messages about arguments.
const USAGE: &str =
    "expected `cuda = SOURCE` or `ptx = PTX`, optionally with `name = \"cuda_name\"`, \
     `crate = path`, the block (`block = 256`, `block = (32, 8)`, `block = (32, 8, 2)`, or \
     `max_threads = 512`) and the dynamic shared memory (`shared = BYTES` or \
     `shared = |(x, y, z)| BYTES`)";

/// A correct declaration, quoted by the messages that reject the item.
const EXAMPLE: &str = "`pub unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]);`";

/// The largest block dimension in x and y, and the most threads per block, of every
/// CUDA device (compute capability 2.0 and later).
pub(crate) const MAX_THREADS: u64 = 1024;

/// The largest block dimension in z of every CUDA device.
pub(crate) const MAX_BLOCK_Z: u64 = 64;

/// The most dynamic shared memory per block any CUDA device opts into: 227 KiB
/// (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN` of compute capability 8.0,
/// 9.0 and 10.0).
pub(crate) const MAX_SHARED_BYTES: u64 = 232_448;

/// The item is not a function signature (spanned where `syn` stopped).
pub(crate) fn not_a_declaration(span: Span) -> Error {
    Error::new(
        span,
        format!("{ATTR} applies to a kernel signature without a body, e.g. {EXAMPLE}"),
    )
}

/// The declaration has a body (spanned on its `{`).
pub(crate) fn body(open_brace: Span) -> Error {
    not_a_declaration(open_brace)
}

/// No `cuda = ...` or `ptx = ...` (spanned on the kernel's name, or on the attribute
/// when there is no name to point at).
pub(crate) fn missing_code(ident: Option<&Ident>) -> Error {
    Error::new(
        ident.map_or_else(Span::call_site, Ident::span),
        format!("{ATTR} needs the kernel's code: {USAGE}"),
    )
}

/// A second `cuda`/`ptx` (spanned on its key).
pub(crate) fn duplicate_code(key: &Ident) -> Error {
    Error::new(
        key.span(),
        format!("{ATTR} takes one of `cuda = ...` or `ptx = ...`, once: remove this one"),
    )
}

/// An argument given twice (spanned on the second key).
pub(crate) fn duplicate(key: &Ident) -> Error {
    Error::new(
        key.span(),
        format!("{ATTR} takes `{key} = ...` at most once: remove this one"),
    )
}

/// `block` together with `max_threads` (spanned on the later key).
pub(crate) fn block_and_max_threads(key: &Ident) -> Error {
    Error::new(
        key.span(),
        format!(
            "{ATTR} takes `block = ...` or `max_threads = ...`, not both: `block` admits exactly \
             one block shape, `max_threads` any block of up to that many threads; remove one"
        ),
    )
}

/// An argument name the attribute does not know (spanned on it).
pub(crate) fn unknown_argument(key: &Ident) -> Error {
    Error::new(
        key.span(),
        format!("{ATTR} does not take an argument `{key}`: {USAGE}"),
    )
}

/// Something other than a name where an argument starts (spanned on it).
pub(crate) fn expected_key(token: impl ToTokens) -> Error {
    Error::new_spanned(
        token,
        format!("{ATTR} expects arguments written `name = value`: {USAGE}"),
    )
}

/// No `=` after an argument's name (spanned on what follows it).
pub(crate) fn expected_eq(key: &Ident, span: Span) -> Error {
    Error::new(
        span,
        format!("{ATTR} expects `=` after `{key}`: write `{key} = ...`; {USAGE}"),
    )
}

/// Nothing after `key =` (spanned on the `=`).
pub(crate) fn missing_value(key: &Ident, eq: Span) -> Error {
    Error::new(
        eq,
        format!("{ATTR} expects a value after `{key} =`: {USAGE}"),
    )
}

/// The value of `key` does not parse (spanned where `syn` stopped).
pub(crate) fn value_syntax(key: &Ident, error: Error) -> Error {
    reworded(
        error,
        &format!("{ATTR} could not parse the value of `{key}` ({USAGE})"),
    )
}

/// A token where the `,` between two arguments should be (spanned on it).
pub(crate) fn expected_comma(token: impl ToTokens) -> Error {
    Error::new_spanned(
        token,
        format!("{ATTR} expects its arguments separated by `,`: {USAGE}"),
    )
}

/// How `block` is written, quoted by its messages.
const BLOCK_FORMS: &str = "`block = 256`, `block = (32, 8)` or `block = (32, 8, 2)`";

/// `block = EXPR` that is not integer literals (spanned on the value).
pub(crate) fn block_not_literal(value: impl ToTokens) -> Error {
    Error::new_spanned(
        value,
        format!(
            "{ATTR} `block` takes integer literals, so that the macro can check the shape: \
             write {BLOCK_FORMS}"
        ),
    )
}

/// `block = (a, b, c, d)` (spanned on the value).
pub(crate) fn block_too_many_dimensions(value: impl ToTokens) -> Error {
    Error::new_spanned(
        value,
        format!("{ATTR} `block` has at most three dimensions, x, y and z: write {BLOCK_FORMS}"),
    )
}

/// A block dimension of 0 (spanned on it).
pub(crate) fn block_dimension_zero(literal: impl ToTokens, axis: char) -> Error {
    Error::new_spanned(
        literal,
        format!(
            "{ATTR} `block` dimension {axis} is 0, but a block has at least one thread in each \
             dimension: write 1 or more"
        ),
    )
}

/// A block dimension above what any device takes (spanned on it).
pub(crate) fn block_dimension_too_large(
    literal: impl ToTokens,
    axis: char,
    value: u64,
    max: u64,
) -> Error {
    Error::new_spanned(
        literal,
        format!(
            "{ATTR} `block` dimension {axis} is {value}, but no CUDA device launches more than \
             {max} threads in {axis}: write at most {max}"
        ),
    )
}

/// A block of more threads than any device takes (spanned on the value).
pub(crate) fn block_too_many_threads(value: impl ToTokens, threads: u64) -> Error {
    Error::new_spanned(
        value,
        format!(
            "{ATTR} `block` has {threads} threads (x * y * z), but no CUDA device launches more \
             than {MAX_THREADS} threads per block: make x * y * z at most {MAX_THREADS}"
        ),
    )
}

/// `max_threads = EXPR` that is not an integer literal (spanned on the value).
pub(crate) fn max_threads_not_literal(value: impl ToTokens) -> Error {
    Error::new_spanned(
        value,
        format!(
            "{ATTR} `max_threads` takes an integer literal, so that the macro can check it: \
             write e.g. `max_threads = 512`"
        ),
    )
}

/// `max_threads = 0` (spanned on it).
pub(crate) fn max_threads_zero(literal: impl ToTokens) -> Error {
    Error::new_spanned(
        literal,
        format!(
            "{ATTR} `max_threads` is 0, but a block has at least one thread: write 1 to \
             {MAX_THREADS}"
        ),
    )
}

/// `max_threads` above what any device takes (spanned on it).
pub(crate) fn max_threads_too_large(literal: impl ToTokens, value: u64) -> Error {
    Error::new_spanned(
        literal,
        format!(
            "{ATTR} `max_threads` is {value}, but no CUDA device launches more than \
             {MAX_THREADS} threads per block: write at most {MAX_THREADS}"
        ),
    )
}

/// An integer literal with a suffix other than `u32` (spanned on it).
pub(crate) fn literal_suffix(literal: impl ToTokens, key: &Ident, suffix: &str) -> Error {
    Error::new_spanned(
        literal,
        format!("{ATTR} `{key}` takes `u32` values: remove the `{suffix}` suffix (or write `u32`)"),
    )
}

/// A literal `shared` above what any device opts into (spanned on it).
pub(crate) fn shared_too_large(literal: impl ToTokens, value: u64) -> Error {
    Error::new_spanned(
        literal,
        format!(
            "{ATTR} `shared` is {value} bytes, but no CUDA device gives a block more than \
             {MAX_SHARED_BYTES} bytes (227 KiB) of dynamic shared memory: write at most \
             {MAX_SHARED_BYTES}"
        ),
    )
}

/// `shared = |a, b| ...`: a rule that does not take the block (spanned on its
/// parameters).
pub(crate) fn shared_rule_parameters(inputs: impl ToTokens) -> Error {
    Error::new_spanned(
        inputs,
        format!(
            "{ATTR} `shared = |block| BYTES` takes one parameter, the block `(x, y, z)` as \
             `(u32, u32, u32)`, and returns the bytes as `u32`: write e.g. \
             `shared = |(x, y, z)| 4 * x * y * z`"
        ),
    )
}

/// A declaration without `unsafe` (spanned on `fn`).
pub(crate) fn not_unsafe(fn_token: Span) -> Error {
    Error::new(
        fn_token,
        format!(
            "{ATTR} declarations must be `unsafe fn`: writing `unsafe` is your promise that the \
             CUDA kernel takes exactly these parameters (each slice as a pointer and a `size_t` \
             length), stays within those lengths, and writes only through `&mut` slices, for \
             every launch shape the declaration admits (`block`, `max_threads`, `shared`; \
             without them, every shape the device accepts)"
        ),
    )
}

/// `async` (spanned on it).
pub(crate) fn async_fn(span: Span) -> Error {
    Error::new(
        span,
        format!(
            "{ATTR} declarations cannot be `async`: a launch is enqueued at once, remove `async`"
        ),
    )
}

/// `const` (spanned on it).
pub(crate) fn const_fn(span: Span) -> Error {
    Error::new(
        span,
        format!(
            "{ATTR} declarations cannot be `const`: a launch happens at run time, remove `const`"
        ),
    )
}

/// `extern "C"` and other ABIs (spanned on it).
pub(crate) fn abi(abi: impl ToTokens) -> Error {
    Error::new_spanned(
        abi,
        format!(
            "{ATTR} declarations take no ABI: remove it (the CUDA side is `extern \"C\"`, the \
             wrapper a Rust function)"
        ),
    )
}

/// Generic parameters or a `where` clause (spanned on them).
pub(crate) fn generic(generics: impl ToTokens) -> Error {
    Error::new_spanned(
        generics,
        format!("{ATTR} declarations cannot be generic: declare one kernel per element type"),
    )
}

/// `...` (spanned on it).
pub(crate) fn variadic(variadic: impl ToTokens) -> Error {
    Error::new_spanned(
        variadic,
        format!("{ATTR} declarations cannot be variadic: remove the `...` parameter"),
    )
}

/// A return type (spanned on it).
pub(crate) fn return_type(ty: impl ToTokens) -> Error {
    Error::new_spanned(
        ty,
        format!(
            "{ATTR} declarations return nothing: a launch returns `Result<()>`, remove the \
             return type"
        ),
    )
}

/// `self` (spanned on it).
pub(crate) fn receiver(receiver: impl ToTokens) -> Error {
    Error::new_spanned(
        receiver,
        format!("{ATTR} declarations cannot take `self`: declare a free function"),
    )
}

/// A parameter pattern that is not a plain name (spanned on it).
pub(crate) fn pattern(pat: impl ToTokens) -> Error {
    Error::new_spanned(
        pat,
        format!("{ATTR} parameters must be plain names, e.g. `x: &[f32]`"),
    )
}

/// A reference to something other than a slice (spanned on the referenced type).
pub(crate) fn not_a_slice(ty: impl ToTokens) -> Error {
    Error::new_spanned(
        ty,
        format!("{ATTR} takes device memory as a slice: `&[T]` (read) or `&mut [T]` (written)"),
    )
}

/// A lifetime on a slice parameter (spanned on it).
pub(crate) fn lifetime(lifetime: impl ToTokens) -> Error {
    Error::new_spanned(
        lifetime,
        format!(
            "{ATTR} parameters take no lifetimes: the wrapper brands them with the scope's, \
             remove it"
        ),
    )
}

/// A raw pointer parameter (spanned on it).
pub(crate) fn raw_pointer(ty: impl ToTokens) -> Error {
    Error::new_spanned(
        ty,
        format!(
            "{ATTR} does not take raw pointers: use `&[T]` (read) or `&mut [T]` (written), \
             which pass a pointer and a length"
        ),
    )
}
