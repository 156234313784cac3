// A kernel's launch goes through a scope or a graph capture, whose brand ties the
// launch's memory to its stream. A type of the user's own cannot stand in for one:
// `Enqueue` and the launch entry's `LaunchTarget` are sealed (and two of `Enqueue`'s
// methods take a token only the crate can name), so a forged target that would run the
// kernel on memory of no scope does not compile.
use stream_core::{DeviceBuffer, DeviceMemory, DeviceMemoryMut, DeviceRepr, Enqueue, Result};

struct Forged;

impl<'s> Enqueue<'s> for Forged {
    fn alloc<T: DeviceRepr>(&'s self, _len: usize) -> Result<DeviceBuffer<'s, T>> {
        unimplemented!()
    }
    fn alloc_zeroed<T: DeviceRepr>(&'s self, _len: usize) -> Result<DeviceBuffer<'s, T>> {
        unimplemented!()
    }
    fn zero<T: DeviceRepr>(&'s self, _dst: &mut impl DeviceMemoryMut<'s, T>) -> Result<()> {
        Ok(())
    }
    fn fill<T: DeviceRepr>(&'s self, _dst: &mut impl DeviceMemoryMut<'s, T>, _v: T) -> Result<()> {
        Ok(())
    }
    fn copy_device<T: DeviceRepr>(
        &'s self,
        _src: &impl DeviceMemory<'s, T>,
        _dst: &mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        Ok(())
    }
    fn ensure_same_device(&self, _memory: &stream_core::Device) -> Result<()> {
        Ok(())
    }
}

fn main() {}
