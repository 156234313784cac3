//! Reading the buffer of an in-place all_gather inside the group that issued it.
//!
//! The in-place forms of the group's methods borrow their one buffer exclusively until
//! the group's end, as the out-of-place forms borrow the receive buffer, so a copy of it
//! issued before NCCL has enqueued the gather does not compile.
use stream_core::nccl::{self, Communicator};
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(stream, |s| {
        let mut blocks = s.alloc_zeroed::<f32>(16)?;
        nccl::group(|g| {
            g.all_gather_in_place(s, comm, &mut blocks)?;
            s.copy_to_host(&blocks, &mut out)?.wait()?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
