//! In a graph, the update recorded beside the urgent branch that sums the gradient.
//!
//! `fork_with_priority` lends the gradient to the branch as `fork` does: the capture's
//! own work recorded inside the closure runs concurrently with the branch, so it may
//! not read the gradient until the join.
use stream_core::nccl::{Communicator, Sum};
use stream_core::{Device, Error};

fn f(dev: &Device, comm: &Communicator) -> Result<(), Error> {
    let (_graph, ()) = dev.capture((), |g, ()| {
        let mut grad = g.alloc_zeroed::<f32>(16)?;
        let mut weights = g.alloc_zeroed::<f32>(16)?;
        g.fork_with_priority(-1, &mut grad, |c, mut lent| {
            c.all_reduce_in_place(comm, &mut lent, Sum)?;
            kernels::axpy(g, -0.1, &grad, &mut weights)
        })
    })?;
    Ok(())
}

fn main() {
    let _ = f;
}
