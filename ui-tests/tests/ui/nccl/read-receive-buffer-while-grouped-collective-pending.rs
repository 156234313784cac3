//! Reading a collective's receive buffer inside the group that issued it.
//!
//! Inside `nccl::group`, NCCL enqueues the collective only at the group's end, so a copy
//! issued now would run before it. The group's methods borrow the receive buffer until
//! that end, so the read does not compile.
use stream_core::nccl::{self, Communicator, Sum};
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let mut y = s.alloc_zeroed::<f32>(16)?;
        nccl::group(|g| {
            g.all_reduce(s, comm, &x, &mut y, Sum)?;
            s.copy_to_host(&y, &mut out)?.wait()?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
