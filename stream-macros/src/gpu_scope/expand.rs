//! The expansion of `#[gpu_scope]`.
//!
//! ```text
//! #[gpu_scope]
//! pub fn step(s: &Scope, input: &[f32]) -> Result<()> { body }
//! ```
//! becomes
//! ```text
//! pub fn step(s: &::stream_core::__private::Stream, input: &[f32]) -> Result<()> {
//!     #[allow(unused_imports)]
//!     use Scope as _; // keeps the user's `use stream_core::Scope;` in use
//!     ::stream_core::__private::scope(s, move |s| -> Result<()> { body })
//! }
//! ```

use std::mem;

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::{self, VisitMut};
use syn::{FnArg, Pat, PatIdent, ReturnType, Type, TypeInfer, TypeReference};

use super::parse::ScopeFn;
use super::validate::ScopeParam;

/// The stream parameter's name when the scope's pattern is not a plain name
/// (`_`, `mut s`, ...). Mixed-site hygiene keeps it out of the user's reach.
const HIDDEN_STREAM: &str = "__gpu_scope_stream";

/// Generates the function that opens the scope around the user's body.
pub(crate) fn expand(
    krate: Option<&syn::Path>,
    scope_fn: ScopeFn,
    param: ScopeParam,
) -> TokenStream {
    let ScopeFn {
        attrs,
        vis,
        mut sig,
        body,
    } = scope_fn;

    // `s: &'a Scope<'s, 'env>` becomes `s: &'a Stream` in the signature, and
    // the closure's parameter takes the user's pattern and attributes.
    let stream_ty = {
        let scope_span = param.scope_span;
        let krate = crate_path(krate, scope_span);
        quote_spanned!(scope_span=> #krate::__private::Stream)
    };
    let mut closure_param = quote!(_);
    let mut stream = Ident::new(HIDDEN_STREAM, Span::mixed_site());
    let mut stream_arg = stream.clone();
    if let Some(FnArg::Typed(typed)) = sig.inputs.iter_mut().nth(param.index) {
        if let Some(name) = plain_name(&typed.pat) {
            stream = name.clone();
            // The macro passes the stream on, not the user: lints about
            // using the binding (`_s` used) must not fire on the user's name.
            stream_arg = name.clone();
            stream_arg.set_span(Span::call_site().located_at(name.span()));
        }
        let stream_pat = Pat::Ident(PatIdent {
            attrs: Vec::new(),
            by_ref: None,
            mutability: None,
            ident: stream.clone(),
            subpat: None,
        });
        let pat = mem::replace(&mut *typed.pat, stream_pat);
        let param_attrs = mem::take(&mut typed.attrs);
        closure_param = quote!(#(#param_attrs)* #pat);
        *typed.ty = Type::Reference(TypeReference {
            and_token: param.and_token,
            lifetime: param.lifetime,
            mutability: None,
            elem: Box::new(Type::Verbatim(stream_ty)),
        });
    }

    // The closure returns what the function returns, so `?` and `return`
    // in the body keep their meaning. `impl Trait` is not allowed in a
    // closure's return type: `_` lets the compiler infer the same type.
    let (closure_output, call_span) = match &sig.output {
        ReturnType::Type(arrow, ty) => {
            let mut ty = (**ty).clone();
            InferImplTrait.visit_type_mut(&mut ty);
            (quote!(#arrow #ty), ty.span())
        }
        ReturnType::Default => (TokenStream::new(), Span::call_site()),
    };
    let inner_attrs = body.inner_attrs;
    let stmts = body.stmts;
    let mut closure_body = TokenStream::new();
    body.brace
        .surround(&mut closure_body, |tokens| tokens.extend(stmts));

    let krate = crate_path(krate, call_span);
    // Spanned on the return type, so that `E: From<Error>` failures point at
    // the `Result` the user can change.
    let call = quote_spanned! {call_span=>
        #krate::__private::scope(#stream_arg, move |#closure_param| #closure_output #closure_body)
    };

    // The scope type no longer appears in the signature: naming it here keeps
    // the user's `use stream_core::Scope;` from being reported unused.
    let use_scope = param.scope_path.map(|path| {
        quote! {
            #[allow(unused_imports)]
            use #path as _;
        }
    });

    quote! {
        #(#attrs)*
        #vis #sig {
            #(#inner_attrs)*
            #use_scope
            #call
        }
    }
}

/// The path of the crate generated code names: the `crate = path` argument,
/// or `::stream_core` spanned at `span`.
fn crate_path(krate: Option<&syn::Path>, span: Span) -> TokenStream {
    krate.map_or_else(
        || quote_spanned!(span=> ::stream_core),
        ToTokens::to_token_stream,
    )
}

/// The name bound by `pat` when it is a plain `name` (no `mut`, `ref` or
/// sub-pattern), which the stream parameter can then reuse.
fn plain_name(pat: &Pat) -> Option<&Ident> {
    match pat {
        Pat::Ident(PatIdent {
            by_ref: None,
            mutability: None,
            subpat: None,
            ident,
            ..
        }) => Some(ident),
        _ => None,
    }
}

/// Replaces every `impl Trait` in a type with `_`.
struct InferImplTrait;

impl VisitMut for InferImplTrait {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::ImplTrait(impl_trait) = ty {
            *ty = Type::Infer(TypeInfer {
                underscore_token: syn::Token![_](impl_trait.impl_token.span),
            });
        } else {
            visit_mut::visit_type_mut(self, ty);
        }
    }
}
