//! Quickstart: upload, run a kernel, download, and let the borrow checker keep host
//! memory safe while the GPU works asynchronously.
//!
//! Run with `cargo run --release --example quickstart`. It needs an NVIDIA GPU with its
//! driver; without one it says so and exits with status 1.

use stream_core::{scope, Device, Error};

fn main() {
    match run() {
        Ok(0) => println!("quickstart: all results match the CPU"),
        Ok(wrong) => {
            eprintln!("quickstart: {wrong} results differ from the CPU");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("quickstart: {e}");
            if matches!(e, Error::NoDriver | Error::NoDevice { .. }) {
                eprintln!(
                    "quickstart: this example needs an NVIDIA GPU and its driver; none was found."
                );
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
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.25).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let mut out = vec![f32::NAN; n];
    let mut total = [f32::NAN];

    scope(&stream, |s| {
        // Asynchronous uploads: until the scope ends, `x` and `y` are read-only.
        let dx = s.upload(&x)?;
        let mut dy = s.upload(&y)?;
        // A typed, safe launch on the scope's stream: dy = 2 * dx + dy.
        kernels::axpy(s, 2.0, &dx, &mut dy)?;
        let mut sum = s.alloc::<f32>(1)?;
        kernels::reduce_sum(s, &dy, &mut sum)?;
        // Asynchronous download: `out` cannot be touched until `wait` hands it back.
        let pending = s.copy_to_host(&dy, &mut out)?;
        // Not waited for here: the scope's final synchronisation covers it.
        let _sum_copy = s.copy_to_host(&sum, &mut total)?;
        let host = pending.wait()?;
        println!("first results: {:?}", &host[..4]);
        Ok::<_, Error>(())
    })?; // the stream is synchronised here, on success, error or panic

    let expected: Vec<f32> = x.iter().zip(&y).map(|(a, b)| 2.0 * a + b).collect();
    let wrong = out.iter().zip(&expected).filter(|(a, b)| a != b).count();
    let exact_sum: f64 = expected.iter().map(|&v| f64::from(v)).sum();
    let sum_ok = ((f64::from(total[0]) - exact_sum) / exact_sum).abs() < 1e-5;
    println!(
        "{n} elements, {wrong} wrong; sum {} (exact {exact_sum})",
        total[0]
    );
    Ok(wrong + usize::from(!sum_ok))
}
