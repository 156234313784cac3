//! A group's collective given a stream where the scope (or a graph capture) goes.
//!
//! The group's methods take what the collective is issued through: a scope, whose stream
//! runs it at the group's end and whose end waits for it, or a capture that records it.
//! A bare stream has neither.
use stream_core::nccl::{self, Communicator, Sum};
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    scope(stream, |s| {
        let mut y = s.alloc_zeroed::<f32>(16)?;
        nccl::group(|grp| grp.all_reduce_in_place(stream, comm, &mut y, Sum))
    })
}

fn main() {
    let _ = f;
}
