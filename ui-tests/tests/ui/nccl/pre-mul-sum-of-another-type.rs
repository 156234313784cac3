//! A `PreMulSum` made for one element type, reducing another.
//!
//! NCCL makes the operation for one type (`ncclRedOpCreatePreMulSum`'s `datatype`)
//! and its factor is a value of that type; `PreMulSum<T>` reduces `T` only.
use stream_core::nccl::Communicator;
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    let half = comm.pre_mul_sum(0.5f32)?;
    scope(stream, |s| {
        let mut x = s.alloc_zeroed::<f64>(16)?;
        s.all_reduce_in_place(comm, &mut x, &half)
    })
}

fn main() {
    let _ = f;
}
