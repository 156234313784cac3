//! The group handle taken out of `nccl::group`'s closure.
//!
//! After the closure the group has ended; a collective issued on a leaked handle would
//! be enqueued at once while borrowing its buffers as if the group were still open.
use stream_core::nccl::{self, Group};
use stream_core::Error;

fn f() -> Result<(), Error> {
    let mut leaked: Option<&Group<'_, '_>> = None;
    nccl::group(|g| {
        leaked = Some(g);
        Ok::<_, Error>(())
    })?;
    let _ = leaked;
    Ok(())
}

fn main() {
    let _ = f;
}
