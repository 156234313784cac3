//! Diagnostics of every macro: how errors are collected and emitted, and one helper per
//! mistake (`gpu_scope`, `kernel`, `derive`), so that every message names the
//! attribute, says what is expected and lists the valid options (STYLE.md rule 5), and
//! every error is spanned on the token the user has to change (rule 4).

pub(crate) mod derive;
pub(crate) mod gpu_scope;
pub(crate) mod kernel;

use proc_macro2::{Span, TokenStream};
use syn::Error;

/// What an attribute emits when the user's code is wrong: Rust that keeps the rest of
/// the crate type-checking, together with everything wrong.
///
/// Emitting `#[gpu_scope]`'s item unchanged, or a `#[kernel]` wrapper with the declared
/// signature, next to the `compile_error!`s keeps IDEs and later diagnostics working on
/// the rest of the crate (tokio-macros, STYLE.md rule 3).
pub(crate) struct Rejected {
    emitted: TokenStream,
    error: Error,
}

impl Rejected {
    /// Rejects the input with `error`; `emitted` is what stands in for the expansion.
    pub(crate) fn new(emitted: TokenStream, error: Error) -> Self {
        Self { emitted, error }
    }

    /// The stand-in, followed by one `compile_error!` per error.
    pub(crate) fn into_compile_error(self) -> TokenStream {
        let mut tokens = self.emitted;
        tokens.extend(self.error.into_compile_error());
        tokens
    }

    /// All errors found, in source order.
    #[cfg(test)]
    pub(crate) fn error(&self) -> &Error {
        &self.error
    }
}

/// Collects independent errors so the user sees all of them at once.
#[derive(Default)]
pub(crate) struct Errors(Option<Error>);

impl Errors {
    /// Records one more error after the ones already collected.
    pub(crate) fn push(&mut self, error: Error) {
        match &mut self.0 {
            Some(first) => first.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Records the error of `result`, if any, and returns its value otherwise.
    pub(crate) fn check<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    /// `Ok(())` when nothing was collected, otherwise all errors combined.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }

    /// `Ok(value)` when nothing was collected, otherwise all errors combined.
    pub(crate) fn finish_with<T>(self, value: T) -> syn::Result<T> {
        self.finish().map(|()| value)
    }
}

/// `error` (a syntax error as `syn` words it) with every message prefixed by
/// `context`, which names the attribute and what it could not parse.
pub(crate) fn reworded(error: Error, context: &str) -> Error {
    let mut errors = Errors::default();
    for message in error {
        errors.push(Error::new(message.span(), format!("{context}: {message}")));
    }
    errors
        .finish()
        .err()
        .unwrap_or_else(|| Error::new(Span::call_site(), context.to_owned()))
}
