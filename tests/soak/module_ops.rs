//! The soak's operations on what the library gained after the soak was written: graph
//! replays with updated scalars and fresh inputs (each worker's graph recaptured now and
//! then, so graphs are dropped while other threads replay theirs), managed memory moving
//! between the host and the device with prefetches and advice, owned-buffer futures on
//! a tokio runtime (some dropped before they resolve), cudarc slices converted both ways
//! and used through both libraries, and cuBLAS SGEMMs through one handle on two streams
//! at once. Every result is checked against the CPU.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use gpu_tests::cudarc_side::{converted, cudarc};
use gpu_tests::graph_kernels::{affine, affine_u32};
use gpu_tests::{check_close, check_eq, gemm_reference, poison, signed, Failed, Real};
use kernels::Cublas;
use stream_core::{
    scope, DeviceVec, Error, Graph, LaunchConfig, ManagedAdvice, ManagedLocation, PinnedBuffer,
    ScalarParam,
};

use crate::ops::{ints_f32, random_len, Moved, OpResult, Worker};

/// The most elements of a graph's input, and of a managed vec (16 MiB of `u32`).
const GRAPH_MAX: usize = 1 << 16;
const MANAGED_MAX: usize = 4 << 20;

/// A worker's captured graph: `y = a x + b` over `n` elements held in pinned buffers,
/// with handles to its two scalars.
pub(crate) struct Replayable {
    graph: Graph<(PinnedBuffer<u32>, PinnedBuffer<u32>)>,
    a: ScalarParam<u32>,
    b: ScalarParam<u32>,
    n: usize,
}

/// Replays the worker's graph one to four times on random streams of its own, each time
/// with new scalars and new inputs; captures it first (anew one time in sixteen,
/// dropping the old graph).
pub(crate) fn graph_replay(w: &mut Worker<'_>) -> OpResult {
    if w.graph.is_none() || w.rng.below(16) == 0 {
        w.graph = None;
        let n = 1 + w.rng.below(GRAPH_MAX);
        w.graph = Some(capture(w, n)?);
    }
    let Some(r) = w.graph.as_mut() else {
        return Err(Failed::from("graph_replay: no graph after capturing one"));
    };
    let replays = 1 + w.rng.below(4);
    for _ in 0..replays {
        let (a, b) = (w.rng.next_u32(), w.rng.next_u32());
        r.graph.set_scalar(r.a, a)?;
        r.graph.set_scalar(r.b, b)?;
        let inputs: Vec<u32> = w.rng.vec(r.n);
        {
            let (x, y) = r.graph.held_mut();
            x.copy_from_slice(&inputs);
            poison(y);
        }
        let stream = &w.streams[w.rng.below(3)];
        scope(stream, |s| s.replay(&mut r.graph).map(drop))?;
        check_eq(
            &format!("graph replay of y = {a} x + {b} over {} elements", r.n),
            &affine(a, b, &inputs),
            r.graph.held().1,
        )?;
    }
    Ok(Moved::default()
        .up::<u32>(r.n * replays)
        .down::<u32>(r.n * replays))
}

/// Captures `y = a x + b` over `n` elements: upload, kernel, download.
fn capture(w: &Worker<'_>, n: usize) -> Result<Replayable, Failed> {
    let held = (w.dev.alloc_pinned::<u32>(n)?, w.dev.alloc_pinned::<u32>(n)?);
    let config = LaunchConfig::for_elements(n, 256);
    let (graph, (a, b)) = w
        .dev
        .capture(held, |g, (x_host, mut y_host)| -> Result<_, Failed> {
            let x = g.upload(&x_host)?;
            let mut y = g.alloc::<u32>(n)?;
            affine_u32(g, config, 1, 0, &x, &mut y)?;
            let node = g.last_kernel()?;
            let handles = (node.scalar::<u32>("a")?, node.scalar::<u32>("b")?);
            g.copy_to_host(&y, &mut y_host)?;
            Ok(handles)
        })?;
    Ok(Replayable { graph, a, b, n })
}

/// A managed vec written by the host, then one to three rounds of `y = a x + b` on the
/// device (prefetched there or demand-paged, prefetched back or not, under random
/// advice), each checked by the host's reads against the CPU.
pub(crate) fn managed(w: &mut Worker<'_>) -> OpResult {
    let n = 1 + w.rng.below(MANAGED_MAX);
    let mut data = w.dev.alloc_managed::<u32>(n)?;
    let mut mirror: Vec<u32> = w.rng.vec(n);
    data.host_mut()?.copy_from_slice(&mirror);
    match w.rng.below(4) {
        0 => data.advise(ManagedAdvice::PreferredLocation(ManagedLocation::Device(
            &w.dev,
        )))?,
        1 => data.advise(ManagedAdvice::PreferredLocation(ManagedLocation::Host))?,
        2 => data.advise(ManagedAdvice::ReadMostly)?,
        _ => {}
    }
    let rounds = 1 + w.rng.below(3);
    let config = LaunchConfig::for_elements(n, 256);
    for _ in 0..rounds {
        let (a, b) = (w.rng.next_u32(), w.rng.next_u32());
        let (to_device, to_host) = (w.rng.below(2) == 0, w.rng.below(2) == 0);
        let stream = &w.streams[w.rng.below(3)];
        scope(stream, |s| -> Result<(), Failed> {
            let mut view = s.attach_managed(&mut data)?;
            if to_device {
                s.prefetch_to_device(&view)?;
            }
            let mut y = s.alloc::<u32>(n)?;
            affine_u32(s, config, a, b, &view, &mut y)?;
            s.copy_device(&y, &mut view)?;
            if to_host {
                s.prefetch_to_host(view)?.wait()?;
            }
            Ok(())
        })?;
        mirror = affine(a, b, &mirror);
        check_eq(
            &format!("managed vec of {n} after y = {a} x + {b} (prefetched to the device {to_device}, to the host {to_host})"),
            &mirror,
            data.host()?,
        )?;
    }
    Ok(Moved::default().device::<u32>(2 * n * rounds))
}

/// On the shared tokio runtime: `upload_owned` of a `Vec` (one time in four first
/// polled once and dropped before it resolves, then made again), `download_owned` of the
/// result, and `run_owned` computing `2 x` over owned buffers; each checked.
pub(crate) fn futures(w: &mut Worker<'_>) -> OpResult {
    let max = w.max::<f32>();
    let n = random_len(&mut w.rng, max);
    let input = ints_f32(&mut w.rng, n, 1000);
    let drop_one = w.rng.below(4) == 0;
    let stream = &w.streams[w.rng.below(3)];
    w.shared.runtime.block_on(async {
        if drop_one {
            poll_once_and_drop(stream.upload_owned(input.clone())).await;
        }
        let (vec, back) = stream.upload_owned(input.clone()).await?;
        check_eq("the Vec upload_owned hands back", &input, &back)?;
        let (_, out) = stream.download_owned(vec, vec![f32::NAN; n]).await?;
        check_eq("upload_owned then download_owned", &input, &out)?;
        let (owned, ()) = stream
            .run_owned((input.clone(), vec![f32::NAN; n]), |s, (x, y)| {
                let dx = s.upload(&x[..])?;
                let mut dy = s.alloc::<f32>(dx.len())?;
                kernels::scale(s, 2.0f32, &dx, &mut dy)?;
                let _landed = s.copy_to_host(&dy, &mut y[..])?;
                Ok::<_, Error>(())
            })
            .await?;
        let doubled: Vec<f32> = input.iter().map(|v| 2.0 * v).collect();
        check_eq("run_owned: 2 x", &doubled, &owned.1)?;
        Ok::<_, Failed>(())
    })?;
    Ok(Moved::default().up::<f32>(2 * n).down::<f32>(2 * n))
}

/// Polls `future` once (which starts its work) and drops it.
async fn poll_once_and_drop(future: impl Future) {
    let mut future = pin!(future);
    std::future::poll_fn(|cx| {
        let _ = future.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await;
}

/// Uploaded by cudarc on its stream (one for the whole run, see `Shared`), converted to a `DeviceVec` (no copy),
/// doubled in place by this library's kernel in a scope, converted back and read by
/// cudarc.
pub(crate) fn cudarc_slices(w: &mut Worker<'_>) -> OpResult {
    let max = w.max::<f32>();
    let n = random_len(&mut w.rng, max).max(1);
    let data = ints_f32(&mut w.rng, n, 1000);
    let theirs = &w.shared.cudarc_stream;
    let slice = cudarc("clone_htod", theirs.clone_htod(&data))?;
    let mut vec: DeviceVec<f32> =
        converted("a slice cudarc uploaded", DeviceVec::from_cudarc(slice))?;
    scope(&w.streams[w.rng.below(3)], |s| -> Result<(), Failed> {
        let mut x = s.attach(&mut vec)?;
        let mut y = s.alloc::<f32>(n)?;
        kernels::scale(s, 2.0f32, &x, &mut y)?;
        s.copy_device(&y, &mut x)?;
        Ok(())
    })?;
    let slice = vec.into_cudarc(theirs)?;
    let back = cudarc("clone_dtoh", theirs.clone_dtoh(&slice))?;
    let doubled: Vec<f32> = data.iter().map(|v| 2.0 * v).collect();
    check_eq("cudarc -> DeviceVec -> 2 x -> cudarc", &doubled, &back)?;
    Ok(Moved::default()
        .up::<f32>(n)
        .down::<f32>(n)
        .device::<f32>(2 * n))
}

/// Two SGEMMs of random shapes through the worker's one cuBLAS handle, issued back to
/// back on two streams (the parent's and a fork's), each within the rounding bound of a
/// double-precision reference.
pub(crate) fn sgemm(w: &mut Worker<'_>) -> OpResult {
    let (m, n, k) = (
        1 + w.rng.below(160),
        1 + w.rng.below(160),
        1 + w.rng.below(1024),
    );
    let inputs: Vec<(Vec<f32>, Vec<f32>)> = (0..2)
        .map(|_| (signed(&mut w.rng, m * k), signed(&mut w.rng, k * n)))
        .collect();
    if w.blas.is_none() {
        w.blas = Some(Cublas::new(&w.dev)?);
    }
    let Some(blas) = w.blas.as_mut() else {
        return Err(Failed::from("sgemm: no cuBLAS handle after making one"));
    };
    let (ui, ni, ki) = (m as u32, n as u32, k as u32);
    let mut out = [vec![f32::NAN; m * n], vec![f32::NAN; m * n]];
    let [first, second] = &mut out;
    let [parent, child, _] = &w.streams;
    scope(parent, |s| -> Result<(), Failed> {
        let (a0, b0) = (s.upload(&inputs[0].0)?, s.upload(&inputs[0].1)?);
        let (a1, b1) = (s.upload(&inputs[1].0)?, s.upload(&inputs[1].1)?);
        let mut c0 = s.alloc::<f32>(m * n)?;
        let mut c1 = s.alloc::<f32>(m * n)?;
        s.fork(child, (&a1, &b1, &mut c1), |c, (a1, b1, mut c1)| {
            blas.sgemm(s, ui, ni, ki, 1.0, &a0, &b0, 0.0, &mut c0)?;
            blas.sgemm(c, ui, ni, ki, 1.0, &a1, &b1, 0.0, &mut c1)
        })?;
        let _first = s.copy_to_host(&c0, first)?;
        let _second = s.copy_to_host(&c1, second)?;
        Ok(())
    })?;
    for (i, got) in out.iter().enumerate() {
        let (ab, abs) = gemm_reference((m, n, k), &inputs[i].0, &inputs[i].1);
        check_close(
            &format!("SGEMM {i} of {m}x{n}x{k} through one handle on two streams"),
            got,
            |j| (ab[j], (k + 3) as f64 * f32::U * abs[j]),
        )?;
    }
    let elements = 2 * (m * k + k * n);
    Ok(Moved::default().up::<f32>(elements).down::<f32>(2 * m * n))
}
