//! An all-to-all whose receive buffer is its send buffer.
//!
//! NCCL's all-to-all has no in-place form: a block another rank's data lands in may
//! still be unsent. `all_to_all` borrows the send buffer shared and the receive buffer
//! exclusively, so passing one buffer as both does not compile.
use stream_core::nccl::Communicator;
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    scope(stream, |s| {
        let mut tokens = s.alloc_zeroed::<u32>(16)?;
        s.all_to_all(comm, &tokens, &mut tokens)?;
        Ok(())
    })
}

fn main() {
    let _ = f;
}
