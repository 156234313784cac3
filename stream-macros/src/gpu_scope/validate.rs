//! The rules a `#[gpu_scope]` function must follow.
//!
//! Every rule is checked, and all broken ones are reported together, in
//! source order.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{FnArg, Lifetime, Path, PathArguments, ReturnType, Signature, Token, Type, TypePath};

use super::parse::ScopeFn;
use crate::diagnostics::gpu_scope as error;
use crate::diagnostics::Errors;

/// Where the scope parameter is and what its reference looks like.
pub(crate) struct ScopeParam {
    /// Its position in the signature's inputs, receiver included.
    pub(crate) index: usize,
    /// The `&` of `&Scope`, kept for its span.
    pub(crate) and_token: Token![&],
    /// The reference's own lifetime, `'a` in `&'a Scope<..>`, if named.
    pub(crate) lifetime: Option<Lifetime>,
    /// Where the user wrote `Scope`: the `Stream` that replaces it takes this
    /// span.
    pub(crate) scope_span: Span,
    /// The path the user named the scope type by, generic arguments removed;
    /// `None` when a `use` cannot name it (`Self::Scope`).
    pub(crate) scope_path: Option<Path>,
}

/// Checks `item` and finds its scope parameter.
pub(crate) fn gpu_scope_fn(item: &ScopeFn) -> syn::Result<ScopeParam> {
    let sig = &item.sig;
    let mut errors = Errors::default();
    if let Some(constness) = &sig.constness {
        errors.push(error::const_fn(constness));
    }
    if let Some(asyncness) = &sig.asyncness {
        errors.push(error::async_fn(asyncness));
    }
    if let Some(abi) = &sig.abi {
        if abi.name.as_ref().is_none_or(|name| name.value() != "Rust") {
            errors.push(error::foreign_abi(abi));
        }
    }
    let param = errors.check(scope_param(sig));
    if let Some(variadic) = &sig.variadic {
        errors.push(error::variadic(variadic));
    }
    errors.check(return_type(sig));
    errors.finish()?;
    // `check` recorded an error whenever `param` is `None`, so `finish`
    // returned it above; this fallback keeps the function panic-free anyway.
    param.ok_or_else(|| error::missing_scope_param(sig.paren_token.span.join()))
}

/// Finds the first non-receiver parameter and checks that it is `name: &Scope`.
fn scope_param(sig: &Signature) -> syn::Result<ScopeParam> {
    let mut typed = sig
        .inputs
        .iter()
        .enumerate()
        .filter_map(|(index, arg)| match arg {
            FnArg::Typed(param) => Some((index, param)),
            FnArg::Receiver(_) => None,
        });
    let Some((index, param)) = typed.next() else {
        return Err(error::missing_scope_param(sig.paren_token.span.join()));
    };
    match classify(&param.ty) {
        ScopeType::Shared(reference, path) => Ok(ScopeParam {
            index,
            and_token: reference.and_token,
            lifetime: reference.lifetime.clone(),
            scope_span: reference.elem.span(),
            scope_path: without_arguments(path),
        }),
        ScopeType::Mutable(mutability) => Err(error::scope_by_mut_ref(mutability)),
        ScopeType::ByValue => Err(error::scope_by_value(&param.ty)),
        ScopeType::Other => {
            let later = typed.any(|(_, param)| !matches!(classify(&param.ty), ScopeType::Other));
            Err(error::not_a_scope_param(param, later))
        }
    }
}

/// What a parameter's type says about it being the scope.
enum ScopeType<'a> {
    /// `&Scope<..>`: the scope, and the path naming it.
    Shared(&'a syn::TypeReference, &'a Path),
    /// `&mut Scope<..>`, with its `mut`.
    Mutable(&'a Token![mut]),
    /// `Scope<..>`.
    ByValue,
    /// Anything else.
    Other,
}

fn classify(ty: &Type) -> ScopeType<'_> {
    match ungroup(ty) {
        Type::Reference(reference) => match (
            path_ending_in(&reference.elem, "Scope"),
            &reference.mutability,
        ) {
            (Some(_), Some(mutability)) => ScopeType::Mutable(mutability),
            (Some(path), None) => ScopeType::Shared(reference, path),
            (None, _) => ScopeType::Other,
        },
        ty if path_ending_in(ty, "Scope").is_some() => ScopeType::ByValue,
        _ => ScopeType::Other,
    }
}

/// Checks that the function returns a path whose last segment is `Result`.
fn return_type(sig: &Signature) -> syn::Result<()> {
    match &sig.output {
        ReturnType::Default => Err(error::missing_return_type(&sig.ident)),
        ReturnType::Type(_, ty) if path_ending_in(ty, "Result").is_some() => Ok(()),
        ReturnType::Type(_, ty) => Err(error::not_a_result(ty)),
    }
}

/// The path of `ty` when it is a plain path (no `<T as Trait>::`) whose last
/// segment is `name`, with angle-bracketed generic arguments or none.
fn path_ending_in<'a>(ty: &'a Type, name: &str) -> Option<&'a Path> {
    match ungroup(ty) {
        Type::Path(TypePath { qself: None, path }) => path
            .segments
            .last()
            .is_some_and(|last| {
                last.ident == name && !matches!(last.arguments, PathArguments::Parenthesized(_))
            })
            .then_some(path),
        _ => None,
    }
}

/// `path` with every segment's generic arguments removed, as a `use` names
/// it, or `None` when it starts with `Self`, which a `use` cannot name.
fn without_arguments(path: &Path) -> Option<Path> {
    if path
        .segments
        .first()
        .is_some_and(|first| first.ident == "Self")
    {
        return None;
    }
    let mut path = path.clone();
    for segment in &mut path.segments {
        segment.arguments = PathArguments::None;
    }
    Some(path)
}

/// Looks through the invisible groups `macro_rules!` wraps `$ty`s in.
fn ungroup(mut ty: &Type) -> &Type {
    while let Type::Group(group) = ty {
        ty = &group.elem;
    }
    ty
}
