//! The residency states of a `ManagedVec` that must compile: host access between
//! scopes, a read-only attach while the host reads, `prefetch_to_host` then `wait` and
//! host access inside the scope, sub-views handed back one at a time, views lent to a
//! fork, and a forgotten `Pending`.
use stream_core::{scope, Device, Error, ManagedVec, Stream};

fn run(stream: &Stream, other: &Stream) -> Result<f32, Error> {
    let dev: &Device = stream.device();
    let mut data: ManagedVec<f32> = dev.alloc_managed(1024)?;
    data.host_mut()?.fill(1.0);

    // Read-only: the host may read while the scope's work reads.
    let mut out = vec![0f32; 1024];
    scope(stream, |s| {
        let view = s.attach_managed_ref(&data)?;
        s.prefetch_to_device(&view)?;
        let first = data.host()?[0];
        let back = s.copy_to_host(&view, &mut out)?.wait()?;
        assert_eq!(back[0], first);
        Ok::<_, Error>(())
    })?;

    // Exclusive: the host gets it back inside the scope through the Pending.
    scope(stream, |s| {
        let mut view = s.attach_managed(&mut data)?;
        s.prefetch_to_device(&view)?;
        s.fill(&mut view, 2.0)?;
        let host: &mut [f32] = s.prefetch_to_host(view)?.wait()?;
        host[0] = 3.0;
        Ok::<_, Error>(())
    })?;

    // Parts: one goes back to the host while the other stays with the scope; a fork
    // prefetches while the parent computes; a forgotten Pending only keeps its part.
    scope(stream, |s| {
        let view = s.attach_managed(&mut data)?;
        let (mut lo, hi) = view.into_split_at_mut(512)?;
        s.fork(other, &hi, |c, hi| {
            c.prefetch_to_device(&hi)?;
            s.fill(&mut lo, 4.0)?;
            Ok::<_, Error>(())
        })?;
        let back = s.prefetch_to_host(lo)?.wait()?;
        back[0] = 5.0;
        std::mem::forget(s.prefetch_to_host(hi)?);
        Ok::<_, Error>(())
    })?;

    let sum = data.host()?.iter().sum();
    drop(data);
    Ok(sum)
}

fn main() {
    // Without a GPU, `Device::new` is an error and nothing runs.
    if let Ok(dev) = Device::new(0) {
        if let (Ok(a), Ok(b)) = (dev.new_stream(), dev.new_stream()) {
            let _ = run(&a, &b);
        }
    }
}
