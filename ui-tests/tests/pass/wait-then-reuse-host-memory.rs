//! `Pending::wait` hands the destination back as `&mut [T]` for the rest of the scope:
//! the host may write it and upload from it again.
use stream_core::{scope, Error, Stream};

fn run(stream: &Stream) -> Result<(), Error> {
    let input: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let mut staging = vec![0f32; 256];
    let mut out = vec![0f32; 256];
    scope(stream, |s| {
        let x = s.upload(&input)?;
        let host: &mut [f32] = s.copy_to_host(&x, &mut staging)?.wait()?;
        host.iter_mut().for_each(|v| *v *= 2.0);
        let y = s.upload(host)?;
        s.copy_to_host(&y, &mut out)?.wait()?;
        Ok::<_, Error>(())
    })?;
    println!("{}", staging[1] + out[1]);
    Ok(())
}

fn main() {
    let _ = run;
}
