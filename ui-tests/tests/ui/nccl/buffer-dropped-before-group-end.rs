//! A buffer made and dropped inside a group after a grouped collective took it.
//!
//! The collective is enqueued only at the group's end, so the buffer must outlive the
//! group: its stream-ordered free would otherwise come first on the stream.
use stream_core::nccl::{self, Communicator, Sum};
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    scope(stream, |s| {
        nccl::group(|g| {
            let mut y = s.alloc_zeroed::<f32>(16)?;
            g.all_reduce_in_place(s, comm, &mut y, Sum)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
