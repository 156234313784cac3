//! A buffer of one device's scope passed to another scope's collective.
//!
//! The buffer lives in the outer scope (device 0's stream) and is branded by it; the
//! inner scope's collective runs on another stream, possibly of another device, so the
//! brands differ and it does not compile.
use stream_core::nccl::{Communicator, Sum};
use stream_core::{scope, Error, Stream};

fn f(s0: &Stream, s1: &Stream, comm1: &Communicator) -> Result<(), Error> {
    scope(s0, |a| {
        let x = a.alloc_zeroed::<f32>(16)?;
        scope(s1, |b| {
            let mut y = b.alloc_zeroed::<f32>(16)?;
            b.all_reduce(comm1, &x, &mut y, Sum)
        })
    })
}

fn main() {
    let _ = f;
}
