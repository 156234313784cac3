//! A communicator used from two threads at once.
//!
//! NCCL's calls on one communicator must not run concurrently; `Communicator` is `Send`
//! but not `Sync`.
use stream_core::nccl::Communicator;

fn f(comm: &Communicator) {
    std::thread::scope(|t| {
        t.spawn(|| comm.rank());
        t.spawn(|| comm.rank());
    });
}

fn main() {
    let _ = f;
}
