//! The `#[kernel]` attribute: declares a CUDA kernel's Rust signature once and
//! generates a safe launch wrapper for it.
//!
//! parse -> validate (in `parse`, combined with `syn::Error::combine`) -> expand.

mod expand;
mod parse;

#[cfg(test)]
mod never_panics;
#[cfg(test)]
mod tests;

use proc_macro2::TokenStream;

/// Expands `#[kernel(args)] item`; on error returns the errors next to nothing
/// else: a bodiless `fn` left in the output would only add a second error.
pub(crate) fn kernel(args: TokenStream, item: TokenStream) -> TokenStream {
    parse::parse(args, item)
        .map(|decl| expand::expand(&decl))
        .unwrap_or_else(syn::Error::into_compile_error)
}
