//! The optimizer step issued beside the gradient's all-reduce instead of after it.
//!
//! The gradient is lent to the fork whose child sums it: until the join, the parent's
//! stream is not ordered after the sum, so its kernel would read the rank's own
//! gradient, or a half-summed one. (DDP's classic race: step before the wait.)
use stream_core::nccl::{Communicator, Sum};
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, urgent: &Stream, comm: &Communicator) -> Result<(), Error> {
    scope(stream, |s| {
        let mut grad = s.alloc_zeroed::<f32>(16)?;
        let mut weights = s.alloc_zeroed::<f32>(16)?;
        s.fork(urgent, (&mut grad,), |c, (mut g,)| {
            c.all_reduce_in_place(comm, &mut g, Sum)?;
            kernels::axpy(s, -0.1, &grad, &mut weights)
        })
    })
}

fn main() {
    let _ = f;
}
