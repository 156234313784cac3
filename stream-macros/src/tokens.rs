//! Token helpers both attributes' argument parsers use to recover from a mistake and
//! go on to the next argument, so that all mistakes are reported at once.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::ParseStream;

/// The next token tree, for spanning an error on it without consuming it.
pub(crate) fn next_token(input: ParseStream) -> TokenStream {
    input
        .cursor()
        .token_tree()
        .map_or_else(TokenStream::new, |(tree, _)| tree.into_token_stream())
}

/// Consumes tokens up to (not including) the next top-level `,` and returns
/// them.
pub(crate) fn skip_argument(input: ParseStream) -> syn::Result<TokenStream> {
    input.step(|cursor| {
        let mut rest = *cursor;
        let mut skipped = TokenStream::new();
        while let Some((tree, next)) = rest.token_tree() {
            if matches!(&tree, TokenTree::Punct(punct) if punct.as_char() == ',') {
                break;
            }
            skipped.extend([tree]);
            rest = next;
        }
        Ok((skipped, rest))
    })
}
