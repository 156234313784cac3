//! `#[kernel]`: declares a CUDA kernel's Rust signature and admitted launch shapes once
//! and generates a safe launch wrapper for it.
//!
//! parse ([`parse`]) -> validate ([`validate`]) -> expand ([`expand`]); errors in the
//! arguments and in the declaration are reported together.

mod expand;
mod parse;
mod validate;

#[cfg(test)]
mod tests;

use proc_macro2::TokenStream;

use crate::diagnostics::Rejected;
use parse::{Args, KernelFn};

/// Expands `#[kernel(args)] item`.
///
/// On error, the errors come with a stand-in that has the wrapper's signature, as far as
/// the declaration gives one (see [`expand::stand_in`]), so that call sites keep
/// type-checking; nothing stands in for an item that is not a function signature.
pub(crate) fn kernel(args: TokenStream, item: TokenStream) -> Result<TokenStream, Rejected> {
    let args = syn::parse2::<Args>(args);
    let krate = args.as_ref().ok().and_then(Args::krate).cloned();
    let item = syn::parse2::<KernelFn>(item);
    let checked = validate::declaration(
        args.and_then(validate::args),
        item.as_ref().map_err(Clone::clone),
    );
    match checked {
        Ok(declaration) => Ok(expand::expand(&declaration)),
        Err(error) => {
            let stand_in = item
                .as_ref()
                .map(|item| expand::stand_in(krate.as_ref(), item))
                .unwrap_or_default();
            Err(Rejected::new(stand_in, error))
        }
    }
}
