//! The rules `#[derive(DeviceRepr)]` checks itself; all broken ones are reported
//! together. The rules the type checker sees better (every field type is `DeviceRepr`,
//! generic parameters carry the bound, no padding) are assertions of the expansion.

use quote::ToTokens;
use syn::{GenericParam, Generics, Ident, Path, Type};

use super::parse::{Item, Kind};
use crate::diagnostics::derive as error;
use crate::diagnostics::Errors;

/// How the struct is laid out, as far as the no-padding proof needs.
pub(crate) enum Layout {
    /// No type or const parameters: the expansion asserts that the size is the sum of
    /// the field sizes.
    Concrete,
    /// Generic, with fields of one type and no `align`: `n` fields of a type whose size
    /// is a multiple of its alignment leave no gap (`#[repr(C)]`), or one field
    /// (`#[repr(transparent)]`).
    Uniform,
}

/// A struct that may derive `DeviceRepr`.
pub(crate) struct Checked {
    pub(crate) ident: Ident,
    pub(crate) generics: Generics,
    pub(crate) fields: Vec<Type>,
    pub(crate) krate: Path,
    pub(crate) transparent: bool,
    pub(crate) layout: Layout,
    /// `#[device_repr(cudarc)]`: implement cudarc's element traits too.
    pub(crate) cudarc: bool,
}

/// What stands in for a rejected item: the struct's name and generics, when an
/// `unsafe impl` for it keeps later diagnostics quiet (see `expand::stand_in`).
pub(crate) struct StandIn {
    pub(crate) ident: Ident,
    pub(crate) generics: Generics,
    pub(crate) krate: Path,
}

/// A rejected item: every error, and what may stand in for it.
pub(crate) struct Refused {
    pub(crate) error: syn::Error,
    pub(crate) stand_in: Option<StandIn>,
}

/// The default path of the generated code's crate.
fn default_crate() -> Path {
    syn::parse_quote!(::stream_core)
}

/// Checks `item`: the checked struct, or every error with what may stand in for it.
pub(crate) fn item(item: Item) -> Result<Checked, Box<Refused>> {
    let mut errors = Errors::default();
    let args = errors.check(item.args).unwrap_or_default();
    let Item {
        kind,
        ident,
        generics,
        fields,
        repr,
        ..
    } = item;
    if let Kind::Other(keyword, kind) = kind {
        errors.push(error::not_a_struct(keyword, kind));
    } else {
        if !repr.c && !repr.transparent {
            errors.push(error::missing_repr(&ident));
        }
        if fields.is_empty() {
            errors.push(error::no_fields(&ident));
        }
    }
    for lifetime in generics.lifetimes() {
        errors.push(error::lifetime_parameter(&lifetime.lifetime));
    }
    for ty in &fields {
        check_field(ty, &mut errors);
    }
    let first_param = generics
        .params
        .iter()
        .find(|param| matches!(param, GenericParam::Type(_) | GenericParam::Const(_)));
    let layout = match first_param {
        None => Layout::Concrete,
        Some(param) => {
            if !repr.transparent && !all_one_type(&fields) {
                errors.push(error::generic_layout(param));
            }
            if let Some(align) = &repr.align {
                errors.push(error::generic_align(align));
            }
            Layout::Uniform
        }
    };
    let krate = args.krate.unwrap_or_else(default_crate);
    match errors.finish() {
        Ok(()) => Ok(Checked {
            ident,
            generics,
            fields,
            krate,
            transparent: repr.transparent,
            layout,
            cudarc: args.cudarc,
        }),
        Err(error) => {
            // An `unsafe impl` could add errors of its own for generic parameters (a
            // `DeviceRepr` type is `Copy`, `Send`, `Sync` and `'static`, which a parameter
            // need not be) and pointer fields (not `Send` or `Sync`): nothing stands in
            // then, nor for an enum or union.
            let quiet = matches!(kind, Kind::Struct)
                && generics.params.is_empty()
                && !fields.iter().any(holds_pointer);
            let stand_in = quiet.then(|| StandIn {
                ident,
                generics,
                krate,
            });
            Err(Box::new(Refused { error, stand_in }))
        }
    }
}

/// `true` when every field has the same type, token for token.
fn all_one_type(fields: &[Type]) -> bool {
    let mut types = fields.iter().map(|ty| ty.to_token_stream().to_string());
    match types.next() {
        Some(first) => types.all(|ty| ty == first),
        None => true,
    }
}

/// `true` for a raw or function pointer, also as an array's element.
fn holds_pointer(ty: &Type) -> bool {
    match ty {
        Type::Ptr(_) | Type::BareFn(_) => true,
        Type::Array(array) => holds_pointer(&array.elem),
        Type::Paren(inner) => holds_pointer(&inner.elem),
        Type::Group(inner) => holds_pointer(&inner.elem),
        _ => false,
    }
}

/// The field types the derive rejects by their syntax, with a message of their own:
/// references, pointers, `bool` and `char`, also as array elements. Any other type that
/// is not `DeviceRepr` is left to the expansion's assertion, which the type checker
/// reports on the field.
fn check_field(ty: &Type, errors: &mut Errors) {
    match ty {
        Type::Reference(_) => errors.push(error::reference_field(ty)),
        Type::Ptr(_) | Type::BareFn(_) => errors.push(error::pointer_field(ty)),
        Type::Array(array) => check_field(&array.elem, errors),
        Type::Paren(inner) => check_field(&inner.elem, errors),
        Type::Group(inner) => check_field(&inner.elem, errors),
        Type::Path(path) if path.qself.is_none() => {
            let Some(last) = path.path.segments.last() else {
                return;
            };
            if !last.arguments.is_none() {
                return;
            }
            if last.ident == "bool" {
                errors.push(error::invalid_bit_patterns(ty, "bool", "u8"));
            } else if last.ident == "char" {
                errors.push(error::invalid_bit_patterns(ty, "char", "u32"));
            }
        }
        _ => {}
    }
}
