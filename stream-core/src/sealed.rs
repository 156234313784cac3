//! The seals: traits only this crate implements, and the token only it can make, so that
//! no user type can claim to be device memory (a forged address would let safe code make
//! the GPU write anywhere) or something a fork may lend.

/// Implemented only inside this crate, by the types that are device memory. The token
/// keeps `raw` uncallable outside this crate.
pub trait Sealed {
    /// Address and length of the memory.
    fn raw(&self, _: Token) -> crate::memory::view::RawSlice;
}

/// Implemented only inside this crate, by what a fork may lend (see `Lend`).
pub trait Lendable {}

/// Only this crate can make one.
#[derive(Clone, Copy)]
pub struct Token(());

pub(crate) const TOKEN: Token = Token(());
