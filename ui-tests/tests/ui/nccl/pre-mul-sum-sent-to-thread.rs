//! A `PreMulSum` used from another thread than its communicator's.
//!
//! NCCL's calls on one communicator (making, using and destroying its operations
//! among them) must not run concurrently; the `PreMulSum` borrows the communicator,
//! which is not `Sync`, so it stays on the thread that holds the communicator.
use stream_core::nccl::Communicator;

fn f(comm: &Communicator) -> stream_core::Result<()> {
    let mean = comm.pre_mul_sum(1.0f32)?;
    std::thread::scope(|t| {
        t.spawn(move || drop(mean));
    });
    Ok(())
}

fn main() {
    let _ = f;
}
