//! A `PreMulSum` kept after its communicator is dropped.
//!
//! NCCL's operation lives in the communicator (`ncclRedOpDestroy` needs it); the
//! `PreMulSum` borrows the communicator, so it cannot outlive it.
use stream_core::nccl::{Communicator, PreMulSum};
use stream_core::{Device, Error};

fn f(device: &Device) -> Result<PreMulSum<'static, f32>, Error> {
    let comm = Communicator::for_devices(&[device.clone()])?.remove(0);
    let mean = comm.pre_mul_sum(1.0f32)?;
    Ok(mean)
}

fn main() {
    let _ = f;
}
