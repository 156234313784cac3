//! A factor on the GPU made and dropped inside a group after a grouped collective took it.
//!
//! The collective is enqueued only at the group's end and reads the factor when it runs,
//! so the factor must outlive the group, as the buffers must.
use stream_core::nccl::{self, Communicator};
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    scope(stream, |s| {
        let mut y = s.alloc_zeroed::<f32>(16)?;
        nccl::group(|g| {
            let factor = s.alloc_zeroed::<f32>(1)?;
            g.all_reduce_scaled_in_place(s, comm, &mut y, &factor)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
