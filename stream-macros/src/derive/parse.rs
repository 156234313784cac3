//! Parsing of the item `#[derive(DeviceRepr)]` is applied to: its kind, name, generics,
//! field types, `#[repr(..)]` and `#[device_repr(..)]` attributes. What they must
//! satisfy is checked in `validate`.

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Generics, Ident, Path, Type};

use crate::diagnostics::derive as error;
use crate::diagnostics::{reworded, Errors};

/// The context of `syn`'s own messages about a `#[device_repr(..)]` attribute.
const ATTR_SYNTAX: &str = "#[derive(DeviceRepr)] could not parse `#[device_repr(..)]`, which \
    takes `crate = path` and `cudarc`";

/// What kind of item it is.
pub(crate) enum Kind {
    /// A struct (the only kind that derives).
    Struct,
    /// An enum or a union: its keyword's span and `"enum"`/`"union"`.
    Other(Span, &'static str),
}

/// What the item's `#[repr(..)]` attributes say.
#[derive(Default)]
pub(crate) struct Repr {
    /// `repr(C)`.
    pub(crate) c: bool,
    /// `repr(transparent)`.
    pub(crate) transparent: bool,
    /// `repr(align(N))`, by its `align` token.
    pub(crate) align: Option<Ident>,
}

/// The item, as written.
pub(crate) struct Item {
    pub(crate) kind: Kind,
    pub(crate) ident: Ident,
    pub(crate) generics: Generics,
    /// The field types, in declaration order (none for an enum or union).
    pub(crate) fields: Vec<Type>,
    pub(crate) repr: Repr,
    /// The `#[device_repr(..)]` arguments, or the errors in them.
    pub(crate) args: syn::Result<Args>,
}

/// The arguments of the `#[device_repr(..)]` attributes.
#[derive(Default)]
pub(crate) struct Args {
    /// `crate = path`: where the generated code finds `stream_core`.
    pub(crate) krate: Option<Path>,
    /// `cudarc`: also implement cudarc's element traits (through `::cudarc`, which the
    /// user's crate depends on).
    pub(crate) cudarc: bool,
}

/// Parses the derive's input (which the compiler only ever gives as a struct, enum or
/// union).
pub(crate) fn item(input: TokenStream) -> syn::Result<Item> {
    let input: DeriveInput = syn::parse2(input)?;
    let (kind, fields) = match &input.data {
        Data::Struct(data) => (
            Kind::Struct,
            data.fields.iter().map(|field| field.ty.clone()).collect(),
        ),
        Data::Enum(data) => (Kind::Other(data.enum_token.span, "enum"), Vec::new()),
        Data::Union(data) => (Kind::Other(data.union_token.span, "union"), Vec::new()),
    };
    Ok(Item {
        kind,
        repr: repr(&input.attrs),
        args: args(&input.attrs),
        ident: input.ident,
        generics: input.generics,
        fields,
    })
}

/// What the `#[repr(..)]` attributes say. One the compiler would reject is read as far
/// as it goes: the compiler reports it itself.
fn repr(attrs: &[Attribute]) -> Repr {
    let mut repr = Repr::default();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("repr")) {
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("C") {
                repr.c = true;
            } else if meta.path.is_ident("transparent") {
                repr.transparent = true;
            } else if meta.path.is_ident("align") {
                repr.align = meta.path.get_ident().cloned();
            }
            if meta.input.peek(syn::token::Paren) {
                let content;
                syn::parenthesized!(content in meta.input);
                content.parse::<TokenStream>()?;
            }
            Ok(())
        });
    }
    repr
}

/// The arguments of the `#[device_repr(..)]` attributes, or all their errors.
fn args(attrs: &[Attribute]) -> syn::Result<Args> {
    let mut errors = Errors::default();
    let mut args = Args::default();
    for attr in attrs
        .iter()
        .filter(|attr| attr.path().is_ident("device_repr"))
    {
        let parsed = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("cudarc") {
                if args.cudarc {
                    errors.push(error::duplicate_argument(meta.path.span(), "cudarc"));
                }
                args.cudarc = true;
                return Ok(());
            }
            if !meta.path.is_ident("crate") {
                return Err(error::unknown_argument(meta.path.span()));
            }
            let path = meta.value()?.call(Path::parse_mod_style)?;
            if args.krate.is_some() {
                errors.push(error::duplicate_argument(meta.path.span(), "crate = path"));
            } else {
                args.krate = Some(path);
            }
            Ok(())
        });
        if let Err(e) = parsed {
            // The messages of `error::` already name the derive; `syn`'s do not.
            for message in e {
                if message.to_string().starts_with("#[derive(DeviceRepr)]") {
                    errors.push(message);
                } else {
                    errors.push(reworded(message, ATTR_SYNTAX));
                }
            }
        }
    }
    errors.finish_with(args)
}
