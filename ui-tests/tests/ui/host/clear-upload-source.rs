//! Clearing an upload's source (`input.clear()`) while the copy may still be reading it.
//!
//! `upload` borrows `input` shared for the whole scope (safety rule 3); any `&mut`
//! access, including one that shrinks or reallocates the `Vec`, must wait for its end.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut input = vec![1f32; 16];
    scope(stream, |s| {
        let _x = s.upload(&input)?;
        input.clear();
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
