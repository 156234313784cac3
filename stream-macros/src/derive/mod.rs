//! `#[derive(DeviceRepr)]`: marks a `#[repr(C)]` (or `#[repr(transparent)]`) struct of
//! `DeviceRepr` fields as an element type of device memory and a kernel argument,
//! proving at compile time that it has no padding.
//!
//! parse ([`parse`]) -> validate ([`validate`]) -> expand ([`expand`]); every mistake
//! the derive sees is reported at once, and those only the type checker sees come from
//! assertions in the expansion, spanned on the user's tokens.

mod expand;
mod parse;
mod validate;

#[cfg(test)]
mod tests;

use proc_macro2::TokenStream;

use crate::diagnostics::Rejected;

/// Expands `#[derive(DeviceRepr)] item`.
///
/// On error, the errors come with a stand-in `unsafe impl` (see [`expand::stand_in`]),
/// so that uses of the struct elsewhere report nothing more; nothing stands in for an
/// enum, a union, a generic struct or one with a pointer field (the impl would add
/// errors of its own).
pub(crate) fn device_repr(item: TokenStream) -> Result<TokenStream, Rejected> {
    let item = parse::item(item).map_err(|error| Rejected::new(TokenStream::new(), error))?;
    match validate::item(item) {
        Ok(checked) => Ok(expand::expand(&checked)),
        Err(refused) => {
            let emitted = refused
                .stand_in
                .as_ref()
                .map(expand::stand_in)
                .unwrap_or_default();
            Err(Rejected::new(emitted, refused.error))
        }
    }
}
