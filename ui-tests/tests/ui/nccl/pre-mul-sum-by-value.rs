//! A `PreMulSum` passed by value.
//!
//! It owns NCCL's operation (destroyed when dropped), so a collective borrows it:
//! `&scale`, which also lets one be made once and used for every step.
use stream_core::nccl::Communicator;
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    let scale = comm.pre_mul_sum(0.5f32)?;
    scope(stream, |s| {
        let mut x = s.alloc_zeroed::<f32>(16)?;
        s.all_reduce_in_place(comm, &mut x, scale)
    })
}

fn main() {
    let _ = f;
}
