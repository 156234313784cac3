//! The expansion of `#[derive(DeviceRepr)]`: assertions that the type checker reports on
//! the user's tokens (each field type is `DeviceRepr`; a concrete struct has no padding),
//! then the `unsafe impl`s.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{Path, Type, WhereClause};

use super::validate::{Checked, Layout, StandIn};
use crate::diagnostics::derive as error;

/// The expansion of a struct that passed validation.
pub(crate) fn expand(checked: &Checked) -> TokenStream {
    let Checked {
        ident,
        generics,
        fields,
        krate,
        transparent,
        layout,
        cudarc,
    } = checked;
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let distinct = distinct(fields);
    // One assertion per distinct field type, spanned on the field's type: a type that
    // is not `DeviceRepr` (or a generic parameter without the bound) is reported there,
    // with `DeviceRepr`'s own message.
    let field_checks = distinct.iter().map(|ty| {
        quote_spanned! {ty.span()=>
            __stream_core_is_device_repr::<#ty>();
        }
    });
    let padding_check = match layout {
        Layout::Concrete => {
            let message = error::padding(ident);
            let sizes = fields
                .iter()
                .map(|ty| quote!(::core::mem::size_of::<#ty>()));
            quote_spanned! {ident.span()=>
                ::core::assert!(
                    ::core::mem::size_of::<#ident>() == 0usize #(+ #sizes)*,
                    #message
                );
            }
        }
        Layout::Uniform => TokenStream::new(),
    };
    let bounds = impl_bounds(where_clause, &distinct, layout, krate);
    let repr = if *transparent {
        "`#[repr(transparent)]`: it has the layout of its one non-zero-sized field"
    } else {
        "`#[repr(C)]`: its fields are laid out in declaration order, none overlapping"
    };
    let no_padding = match layout {
        Layout::Concrete => {
            "its size equals the sum of its fields' sizes (asserted at compile time above), \
             so no byte of it is padding"
        }
        Layout::Uniform => {
            "a generic struct is accepted only with fields of one type and no `align` (or \
             `#[repr(transparent)]`): each of `n` fields of a type whose size is a multiple of \
             its alignment starts where the previous one ends, and the struct's size is the \
             sum, so no byte of it is padding, whatever the parameters"
        }
    };
    let safety = format!(
        " SAFETY: `{ident}` is {repr}; every field type is `DeviceRepr` (asserted above, and \
         bounded here), so each is `Copy`, `Send`, `Sync`, `'static`, holds no pointer or \
         interior mutability, has no padding and accepts every bit pattern; {no_padding}. \
         Hence every bit pattern of `{ident}` is a valid value and it has no padding: \
         `DeviceRepr`'s contract. (cudarc's `DeviceRepr` and `ValidAsZeroBits`, implemented \
         with `#[device_repr(cudarc)]`, ask less: a type that CUDA can take by value, valid \
         when all bits are zero.)"
    );
    let private = quote!(#krate::__private);
    // `::cudarc` is the user's own dependency (the flag says it has one): this crate
    // re-exports nothing of cudarc, so that its trait never shows up in the compiler's
    // notes about `DeviceRepr`.
    let cudarc_impls = if *cudarc {
        quote! {
            #[doc = #safety]
            unsafe impl #impl_generics ::cudarc::driver::DeviceRepr for #ident #ty_generics #bounds {}
            #[doc = #safety]
            unsafe impl #impl_generics ::cudarc::driver::ValidAsZeroBits for #ident #ty_generics #bounds {}
        }
    } else {
        TokenStream::new()
    };
    // SAFETY (of the `unsafe impl`s below, restated in the doc attribute they carry,
    // since a token stream holds no comments): `DeviceRepr` needs `Copy + Send + Sync +
    // 'static`, no padding, no pointers or interior mutability, and every bit pattern
    // valid. `validate` accepted only `#[repr(C)]`/`#[repr(transparent)]` structs, with
    // no reference, pointer, `bool` or `char` field; the field assertions make the
    // compiler check that every field type is `DeviceRepr` (and the impls are bounded on
    // it), which gives the field-wise properties; the padding assertion (concrete
    // structs) or the uniform-layout rule (generic ones) rules out padding between and
    // after the fields. The supertraits are checked by the compiler on the impl.
    quote! {
        const _: () = {
            #[allow(dead_code, clippy::extra_unused_type_parameters)]
            fn __stream_core_fields_are_device_repr #impl_generics () #where_clause {
                fn __stream_core_is_device_repr<__T: #private::DeviceRepr>() {}
                #(#field_checks)*
            }
            #padding_check
        };
        #[doc = #safety]
        unsafe impl #impl_generics #private::DeviceRepr for #ident #ty_generics #bounds {}
        #cudarc_impls
    }
}

/// What stands in for a rejected struct next to its errors: the `unsafe impl` alone, so
/// that uses of the struct as an element type or kernel argument report nothing more.
/// Never compiled into a program: the `compile_error!`s beside it fail the build.
pub(crate) fn stand_in(stand_in: &StandIn) -> TokenStream {
    let StandIn {
        ident,
        generics,
        krate,
    } = stand_in;
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    quote! {
        #[doc = " Stands in while `#[derive(DeviceRepr)]` reports errors: the build fails."]
        unsafe impl #impl_generics #krate::__private::DeviceRepr for #ident #ty_generics #where_clause {}
    }
}

/// The field types, each once, in the order first declared.
fn distinct(fields: &[Type]) -> Vec<&Type> {
    let mut seen: Vec<String> = Vec::new();
    let mut distinct = Vec::new();
    for ty in fields {
        let key = ty.to_token_stream().to_string();
        if !seen.contains(&key) {
            seen.push(key);
            distinct.push(ty);
        }
    }
    distinct
}

/// The impls' `where` clause: the struct's own, and for a generic struct every field
/// type bounded by `DeviceRepr` (which the assertion requires the struct's own bounds to
/// imply; a concrete struct gets no such bounds, so a field that is not `DeviceRepr` is
/// reported once, by the assertion, not again as an unsatisfiable bound).
fn impl_bounds(
    where_clause: Option<&WhereClause>,
    distinct: &[&Type],
    layout: &Layout,
    krate: &Path,
) -> TokenStream {
    let own = where_clause.map(|clause| clause.predicates.iter().collect::<Vec<_>>());
    let own = own.unwrap_or_default();
    let fields: &[&Type] = match layout {
        Layout::Concrete => &[],
        Layout::Uniform => distinct,
    };
    if own.is_empty() && fields.is_empty() {
        return TokenStream::new();
    }
    quote! {
        where #(#own,)* #(#fields: #krate::__private::DeviceRepr,)*
    }
}
