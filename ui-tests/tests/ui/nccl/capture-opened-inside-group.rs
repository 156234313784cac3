//! A graph capture opened inside a group, given to the group's collective.
//!
//! NCCL records the collective only at the group's end, after this capture has ended
//! (its graph made without it). A grouped collective's capture outlives the group
//! (`'s: 'g`): the group is opened inside the capture, never around it.
use stream_core::nccl::{self, Communicator, Sum};
use stream_core::{Device, DeviceVec, Error};

fn f(device: &Device, comm: &Communicator, x: &mut DeviceVec<f32>) -> Result<(), Error> {
    nccl::group(|grp| {
        device
            .capture(&mut *x, |g, mut x| grp.all_reduce_in_place(g, comm, &mut x, Sum))
            .map(drop)
    })
}

fn main() {
    let _ = f;
}
