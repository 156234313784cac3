//! An NCCL group used from another thread.
//!
//! NCCL's groups belong to the thread that opened them: a collective issued by another
//! thread would not be part of the group, and would be enqueued while its borrows
//! assume the group's end.
use stream_core::nccl;
use stream_core::Error;

fn f() -> Result<(), Error> {
    nccl::group(|g| {
        std::thread::scope(|t| {
            t.spawn(|| {
                let _group = g;
            });
        });
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
