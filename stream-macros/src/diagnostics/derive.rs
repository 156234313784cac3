//! The messages of `#[derive(DeviceRepr)]`, one helper per mistake. Mistakes only the
//! type checker can see (a field type that is not `DeviceRepr`, a generic parameter
//! without the bound, padding) are reported by assertions in the expansion, spanned on
//! the field or the struct; their wording is `DeviceRepr`'s own `on_unimplemented` note
//! and [`padding`].

use proc_macro2::Span;
use quote::ToTokens;
use syn::{Error, Ident, Lifetime};

/// How the derive is written in messages.
const DERIVE: &str = "#[derive(DeviceRepr)]";

/// What a derivable struct looks like, quoted by the messages that reject the item.
const EXAMPLE: &str =
    "`#[derive(Clone, Copy, DeviceRepr)] #[repr(C)] struct Particle { position: [f32; 3], mass: f32 }`";

/// The element types a field may have, quoted by the messages about fields.
const FIELD_TYPES: &str = "fields hold plain numbers (u8..u128, i8..i128, usize, isize, f32, \
    f64), arrays of them, or other structs that derive `DeviceRepr`";

/// An enum or a union (spanned on its keyword).
pub(crate) fn not_a_struct(keyword: Span, kind: &str) -> Error {
    let why = if kind == "enum" {
        "an enum's discriminant has invalid bit patterns, and a `DeviceRepr` type must accept \
         every bit pattern"
    } else {
        "a union's fields cannot be checked one by one"
    };
    Error::new(
        keyword,
        format!("{DERIVE} applies to structs only, not to {kind}s: {why}; write a struct, e.g. {EXAMPLE}"),
    )
}

/// No `#[repr(C)]` or `#[repr(transparent)]` (spanned on the struct's name).
pub(crate) fn missing_repr(ident: &Ident) -> Error {
    Error::new(
        ident.span(),
        format!(
            "{DERIVE} needs `#[repr(C)]` or `#[repr(transparent)]` on `{ident}`: Rust's default \
             layout may reorder fields, and the GPU code reads them in declaration order; add \
             `#[repr(C)]`"
        ),
    )
}

/// A struct without fields (spanned on its name).
pub(crate) fn no_fields(ident: &Ident) -> Error {
    Error::new(
        ident.span(),
        format!(
            "{DERIVE} needs at least one field in `{ident}`: a zero-sized type has no C \
             counterpart that a kernel could take; {FIELD_TYPES}"
        ),
    )
}

/// A lifetime parameter (spanned on it).
pub(crate) fn lifetime_parameter(lifetime: &Lifetime) -> Error {
    Error::new_spanned(
        lifetime,
        format!(
            "{DERIVE} does not take lifetime parameters: a `DeviceRepr` type is copied byte for \
             byte to the GPU and holds no references; remove `{lifetime}`"
        ),
    )
}

/// A reference field (spanned on its type).
pub(crate) fn reference_field(ty: impl ToTokens) -> Error {
    Error::new_spanned(
        ty,
        format!(
            "{DERIVE} does not accept a reference field: a reference is a host address, \
             meaningless on the GPU; pass the data as device memory (a `&[T]` kernel parameter) \
             instead; {FIELD_TYPES}"
        ),
    )
}

/// A raw pointer or function pointer field (spanned on its type).
pub(crate) fn pointer_field(ty: impl ToTokens) -> Error {
    Error::new_spanned(
        ty,
        format!(
            "{DERIVE} does not accept a pointer field: a pointer copied to the GPU could make a \
             kernel read or write any address; pass the memory as a `&[T]` or `&mut [T]` kernel \
             parameter instead; {FIELD_TYPES}"
        ),
    )
}

/// A `bool` or `char` field (spanned on its type).
pub(crate) fn invalid_bit_patterns(ty: impl ToTokens, name: &str, instead: &str) -> Error {
    Error::new_spanned(
        ty,
        format!(
            "{DERIVE} does not accept a `{name}` field: not every bit pattern is a valid `{name}`, \
             and device memory can hold any bytes; use `{instead}` instead"
        ),
    )
}

/// A generic struct whose padding cannot be ruled out before its parameters are known
/// (spanned on the first type or const parameter).
pub(crate) fn generic_layout(param: impl ToTokens) -> Error {
    Error::new_spanned(
        param,
        format!(
            "{DERIVE} cannot prove that this generic struct has no padding for every choice of \
             its parameters: a generic struct needs all its fields of one type (e.g. \
             `struct Vec3<T: DeviceRepr> {{ x: T, y: T, z: T }}`) or `#[repr(transparent)]`; \
             write the struct for concrete types instead"
        ),
    )
}

/// `align(N)` on a generic struct (spanned on `align`).
pub(crate) fn generic_align(align: &Ident) -> Error {
    Error::new(
        align.span(),
        format!(
            "{DERIVE} does not accept `repr(align(..))` on a generic struct: the alignment may \
             add trailing padding for some parameters; remove `align`, or write the struct for \
             concrete types (where the size check sees the padding)"
        ),
    )
}

/// An argument of `#[device_repr(..)]` other than `crate = path` and `cudarc` (spanned
/// on it).
pub(crate) fn unknown_argument(span: Span) -> Error {
    Error::new(
        span,
        format!(
            "{DERIVE} takes only `#[device_repr(crate = path)]`, for crates that re-export \
             `stream_core` (e.g. `#[device_repr(crate = my_lib::gpu)]`), and \
             `#[device_repr(cudarc)]`, which also implements cudarc's `DeviceRepr` and \
             `ValidAsZeroBits`"
        ),
    )
}

/// An argument given twice (spanned on the second).
pub(crate) fn duplicate_argument(span: Span, written: &str) -> Error {
    Error::new(
        span,
        format!("{DERIVE} takes `#[device_repr({written})]` at most once: remove this one"),
    )
}

/// The message of the padding assertion, which fails at compile time on the struct's
/// name: `ident`'s size is more than the sum of its fields'.
pub(crate) fn padding(ident: &Ident) -> String {
    format!(
        "{DERIVE}: `{ident}` has padding bytes (its size is more than the sum of its fields' \
         sizes), which a DeviceRepr type must not have: padding is uninitialised memory that \
         copies would read; order the fields from the largest alignment to the smallest, or add \
         explicit fields (e.g. `_pad: [u8; 3]`) where the padding was"
    )
}
