//! A scope opened inside a group, whose buffer a grouped collective takes.
//!
//! The collective is enqueued only at the group's end, after this scope has ended
//! (synchronised its stream, freed its memory); and what the group keeps for it until
//! then (a stand-in's scratch memory) must not outlive the scope either. A grouped
//! collective's scope outlives the group (`'s: 'g`).
use stream_core::nccl::{self, Communicator, Sum};
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    nccl::group(|g| {
        scope(stream, |s| {
            let mut y = s.alloc_zeroed::<f32>(16)?;
            g.all_reduce_in_place(s, comm, &mut y, Sum)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
