//! Overwriting the send buffer of an all-to-all inside the group that issued it.
//!
//! `Group::all_to_all` issues its sends and receives only at the group's end, so it
//! borrows the send buffer (shared) and the receive buffer (exclusively) until then:
//! zeroing the tokens before NCCL has enqueued the exchange that reads them does not
//! compile.
use stream_core::nccl::{self, Communicator};
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    scope(stream, |s| {
        let mut tokens = s.alloc_zeroed::<u32>(16)?;
        let mut routed = s.alloc_zeroed::<u32>(16)?;
        nccl::group(|g| {
            g.all_to_all(s, comm, &tokens, &mut routed)?;
            s.zero(&mut tokens)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
