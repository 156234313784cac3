//! Everyday view and pinned-memory use that must keep compiling: a `DeviceSlice` is
//! `Copy` and used as a source twice, `into_split_at_mut` keeps both halves for a
//! device-to-device copy between them, and disjoint sub-slices of one `PinnedBuffer`
//! are an upload source and a download destination at once.
use stream_core::{scope, Error, Stream};

fn run(stream: &Stream) -> Result<(), Error> {
    let mut pinned = stream.device().alloc_pinned::<f32>(64)?;
    pinned
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = i as f32);
    let (front, back) = pinned.split_at_mut(32);
    scope(stream, |s| {
        let x = s.upload(&front[..16])?;
        let head = x.slice(..8)?;
        let copy = head;
        let mut y = s.alloc_zeroed::<f32>(16)?;
        let (mut lo, mut hi) = y.as_slice_mut().into_split_at_mut(8)?;
        s.copy_device(&head, &mut lo)?;
        s.copy_device(&copy, &mut hi)?;
        s.copy_device(&lo, &mut hi)?;
        s.copy_to_host(&y, &mut back[..16])?.wait()?;
        Ok::<_, Error>(())
    })?;
    pinned[0] = 1.0;
    Ok(())
}

fn main() {
    let _ = run;
}
