//! Quickstart: upload, download, and see the borrow checker keep host memory safe.
//!
//! Run with `cargo run --release --example quickstart`. It needs an NVIDIA GPU with its
//! driver; without one it says so and exits with status 1.

use stream_core::{scope, Device, Error};

fn main() {
    match run() {
        Ok(0) => println!("quickstart: all results correct"),
        Ok(wrong) => {
            eprintln!("quickstart: {wrong} results wrong");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("quickstart: {e}");
            if matches!(e, Error::NoDriver | Error::NoDevice { .. }) {
                eprintln!("quickstart: this example needs an NVIDIA GPU and its driver; none was found.");
            }
            std::process::exit(1);
        }
    }
}

/// Runs the example; returns how many results differ from the CPU's.
fn run() -> Result<usize, Error> {
    let dev = Device::new(0)?;
    let stream = dev.new_stream()?;
    println!("device 0: {}", dev.name()?);

    let n = 1 << 20;
    let input: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let mut out = vec![f32::NAN; n];

    scope(&stream, |s| {
        // Asynchronous upload: from here to the end of the scope `input` is read-only.
        let x = s.upload(&input)?;
        // Device-to-device copy into the second half of a larger buffer, then back.
        let mut y = s.alloc_zeroed::<f32>(2 * n)?;
        s.copy_device(&x, &mut y.slice_mut(n..)?)?;
        // Asynchronous download: `out` cannot be touched until `wait` hands it back.
        let pending = s.copy_to_host(&y.slice(n..)?, &mut out)?;
        let host = pending.wait()?;
        println!("first values after the round trip: {:?}", &host[..4]);
        Ok::<_, Error>(())
    })?; // the stream is synchronised here, on success, error or panic

    let wrong = out.iter().zip(&input).filter(|(a, b)| a != b).count();
    println!("{n} floats round-tripped, {wrong} wrong");
    Ok(wrong)
}
