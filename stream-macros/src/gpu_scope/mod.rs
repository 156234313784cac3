//! `#[gpu_scope]`: runs a function's body inside a scope opened on the stream its
//! callers pass in the scope parameter's place.
//!
//! parse ([`parse`]) -> validate ([`validate`]) -> expand ([`expand`]); errors in the
//! arguments and in the item are reported together.

mod expand;
mod parse;
mod validate;

#[cfg(test)]
mod tests;

use proc_macro2::TokenStream;

use crate::diagnostics::Rejected;
use parse::{Args, ScopeFn};

/// Expands `#[gpu_scope(args)] item`.
///
/// On error the item is handed back unchanged next to the errors (see [`Rejected`]).
pub(crate) fn gpu_scope(args: TokenStream, item: TokenStream) -> Result<TokenStream, Rejected> {
    let args = syn::parse2::<Args>(args);
    let checked = syn::parse2::<ScopeFn>(item.clone())
        .and_then(|scope_fn| validate::gpu_scope_fn(&scope_fn).map(|param| (scope_fn, param)));
    match (args, checked) {
        (Ok(args), Ok((scope_fn, param))) => {
            Ok(expand::expand(args.krate.as_ref(), scope_fn, param))
        }
        (Err(mut error), Err(item_error)) => {
            error.combine(item_error);
            Err(Rejected::new(item, error))
        }
        (Err(error), Ok(_)) | (Ok(_), Err(error)) => Err(Rejected::new(item, error)),
    }
}
