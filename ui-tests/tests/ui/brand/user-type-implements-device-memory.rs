//! A user type claiming to be device memory by implementing `DeviceMemory`.
//!
//! Its address could be anything, so safe code could make the GPU write anywhere
//! (safety rule 7: only concrete types cross the unsafe boundary). `DeviceMemory` and
//! `DeviceMemoryMut` are sealed: their supertrait cannot be named or implemented
//! outside stream_core.
use stream_core::DeviceMemory;

struct Forged;

impl<'s> DeviceMemory<'s, f32> for Forged {}

fn main() {
    let _ = Forged;
}
