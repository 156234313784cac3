//! What a program sees on a machine without a GPU (`stream-core/src/device/mod.rs`,
//! `Device::new` and `Device::count`): `Device::new` returns an error that says a GPU
//! or its driver is needed, never a panic. Runs everywhere (not ignored): on a GPU
//! machine it checks instead that the device opens.

use gpu_tests::{ensure, Failed, TestResult};
use stream_core::{Device, Error};

gpu_tests::test_main! {
    gpu: [],
    host: [
        device_new_fails_with_a_clear_error_without_a_gpu_and_opens_with_one,
        device_count_is_the_same_every_time,
    ],
}

/// Without a driver `Device::new(0)` is `NoDriver`, with a driver but no device it is
/// `NoDevice { ordinal: 0, count: 0 }`, and both messages say a GPU (or its driver) is
/// needed. With `n > 0` devices, device 0 opens and device `n` is `NoDevice`.
fn device_new_fails_with_a_clear_error_without_a_gpu_and_opens_with_one() -> TestResult {
    let says_what_is_needed = |message: &str| {
        let lower = message.to_lowercase();
        lower.contains("gpu") || lower.contains("driver")
    };
    match Device::count() {
        Ok(0) | Err(Error::NoDriver) => {
            let count = Device::count();
            let e = match Device::new(0) {
                Ok(dev) => {
                    return Err(format!(
                        "Device::new(0) opened {dev:?} although Device::count() is {count:?}"
                    )
                    .into())
                }
                Err(e) => e,
            };
            let expected = match count {
                Ok(_) => Error::NoDevice {
                    ordinal: 0,
                    count: 0,
                },
                Err(_) => Error::NoDriver,
            };
            ensure!(
                e == expected,
                "Device::new(0) returned {e:?}, expected {expected:?}"
            );
            let message = e.to_string();
            ensure!(
                says_what_is_needed(&message),
                "the message of Device::new(0) without a GPU does not say a GPU or driver is needed: {message:?}"
            );
        }
        Ok(n) => {
            let dev = Device::new(0)
                .map_err(|e| Failed::from(format!("Device::new(0) with {n} device(s): {e}")))?;
            ensure!(
                dev.ordinal() == 0,
                "Device::new(0) opened ordinal {}",
                dev.ordinal()
            );
            dev.new_stream()?;
            match Device::new(n) {
                Err(Error::NoDevice { ordinal, count }) if (ordinal, count) == (n, n) => {}
                Err(e) => {
                    return Err(
                        format!("Device::new({n}) with {n} device(s) returned {e:?}").into(),
                    )
                }
                Ok(_) => {
                    return Err(
                        format!("Device::new({n}) opened a device past the {n} reported").into(),
                    )
                }
            }
        }
        Err(e) => {
            // A driver that loads but fails (e.g. too old): `new` must fail too, clearly.
            let message = match Device::new(0) {
                Ok(dev) => {
                    return Err(format!(
                        "Device::count() failed with {e:?} but Device::new(0) opened {dev:?}"
                    )
                    .into())
                }
                Err(new_error) => new_error.to_string(),
            };
            ensure!(
                !message.is_empty(),
                "Device::new(0) failed with an empty message"
            );
        }
    }
    Ok(())
}

/// `Device::count()` gives the same answer on repeated calls (the driver is loaded and
/// initialised once; a missing driver stays missing).
fn device_count_is_the_same_every_time() -> TestResult {
    let first = Device::count();
    for _ in 0..3 {
        let again = Device::count();
        ensure!(
            again == first,
            "Device::count() was {first:?}, then {again:?}"
        );
    }
    Ok(())
}
