//! The operations a soak worker draws from. Each runs on the worker's own streams,
//! checks every result it produces against the CPU (bit for bit: the arithmetic uses
//! small integers, which every operation order and `f32`/`f64` fused multiply-add
//! computes exactly), and returns the bytes it moved.

use gpu_tests::{check_eq, ensure, Element, Failed, Rng};
use stream_core::{scope, Device, DeviceBuffer, DeviceVec, Pending, Stream};

use crate::host::Host;
use crate::kernel_ops::{kernels_any, pipeline};
use crate::module_ops;

/// Bytes one operation moved, by direction.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Moved {
    pub(crate) h2d: u64,
    pub(crate) d2h: u64,
    pub(crate) d2d: u64,
}

impl Moved {
    pub(crate) fn up<T>(mut self, len: usize) -> Self {
        self.h2d += bytes::<T>(len);
        self
    }
    pub(crate) fn down<T>(mut self, len: usize) -> Self {
        self.d2h += bytes::<T>(len);
        self
    }
    pub(crate) fn device<T>(mut self, len: usize) -> Self {
        self.d2d += bytes::<T>(len);
        self
    }
}

fn bytes<T>(len: usize) -> u64 {
    (len * std::mem::size_of::<T>()) as u64
}

pub(crate) type OpResult = Result<Moved, Failed>;
pub(crate) type Op = fn(&mut Worker<'_>) -> OpResult;

/// Every operation, by name; workers pick one uniformly at random.
pub(crate) const OPS: [(&str, Op); 14] = [
    ("round_trip", round_trip_any),
    ("kernels", kernels_any),
    ("pipeline", pipeline),
    ("fork_join", fork_join),
    ("hand_off", hand_off),
    ("device_vec", device_vec),
    ("shared_read", shared_read),
    ("churn", churn),
    ("pending", pending_many),
    ("graph_replay", module_ops::graph_replay),
    ("managed", module_ops::managed),
    ("futures", module_ops::futures),
    ("cudarc", module_ops::cudarc_slices),
    ("sgemm", module_ops::sgemm),
];

/// Read-only device memory every worker attaches at the same time, and its host copy.
pub(crate) struct Shared {
    pub(crate) vec: DeviceVec<f64>,
    pub(crate) host: Vec<f64>,
    /// Where the owned-buffer futures run (two worker threads of its own).
    pub(crate) runtime: tokio::runtime::Runtime,
    /// The cudarc stream of the `cudarc` operations, made before any worker starts and
    /// alive for the whole run: cudarc synchronises the whole device when an
    /// event-tracking context makes its first stream, which would invalidate the graph
    /// captures of other workers (`Error::GraphCaptureInvalidated`; the soak's first run
    /// found it, `test_graph_errors` keeps it).
    pub(crate) cudarc_stream: std::sync::Arc<cudarc::driver::CudaStream>,
}

/// One worker thread's state: its own streams, generator, and long-lived `DeviceVec`
/// with the CPU's copy of what it must hold.
pub(crate) struct Worker<'a> {
    pub(crate) dev: Device,
    pub(crate) streams: [Stream; 3],
    pub(crate) rng: Rng,
    /// The largest transfer, in bytes.
    pub(crate) max_bytes: usize,
    pub(crate) shared: &'a Shared,
    pub(crate) vec: DeviceVec<f64>,
    pub(crate) mirror: Vec<f64>,
    /// The worker's captured graph, once `graph_replay` has made one.
    pub(crate) graph: Option<module_ops::Replayable>,
    /// The worker's cuBLAS handle, once `sgemm` has made one.
    pub(crate) blas: Option<kernels::Cublas>,
}

impl Worker<'_> {
    /// The most elements of `T` in one transfer.
    pub(crate) fn max<T>(&self) -> usize {
        (self.max_bytes / std::mem::size_of::<T>()).max(1)
    }
}

/// A length in `0..=max`: zero one time in twenty, `max` one time in twenty, else
/// log-uniform (as many small as large transfers).
pub(crate) fn random_len(rng: &mut Rng, max: usize) -> usize {
    if max == 0 {
        return 0;
    }
    match rng.below(20) {
        0 => 0,
        1 => max,
        _ => {
            let bits = (usize::BITS - max.leading_zeros()) as usize;
            let cap = (1usize << rng.below(bits + 1)).min(max).max(1);
            1 + rng.below(cap)
        }
    }
}

/// A random sub-range of `0..len` (possibly empty).
pub(crate) fn random_range(rng: &mut Rng, len: usize) -> std::ops::Range<usize> {
    let a = rng.below(len + 1);
    let b = rng.below(len + 1);
    a.min(b)..a.max(b)
}

/// `len` integers in `-bound..=bound`, as `f32`.
pub(crate) fn ints_f32(rng: &mut Rng, len: usize, bound: i32) -> Vec<f32> {
    (0..len).map(|_| int(rng, bound) as f32).collect()
}

/// `len` integers in `-bound..=bound`, as `f64`.
pub(crate) fn ints_f64(rng: &mut Rng, len: usize, bound: i32) -> Vec<f64> {
    (0..len).map(|_| f64::from(int(rng, bound))).collect()
}

pub(crate) fn int(rng: &mut Rng, bound: i32) -> i32 {
    rng.below(2 * bound as usize + 1) as i32 - bound
}

// ---------------------------------------------------------------------------------------

fn round_trip_any(w: &mut Worker<'_>) -> OpResult {
    match w.rng.below(7) {
        0 => round_trip::<u8>(w),
        1 => round_trip::<u16>(w),
        2 => round_trip::<u32>(w),
        3 => round_trip::<u64>(w),
        4 => round_trip::<u128>(w),
        5 => round_trip::<f32>(w),
        _ => round_trip::<f64>(w),
    }
}

/// Host (pageable or pinned) to a sub-range of a padded device buffer and back into
/// host memory of either kind, waited for in the scope or left to its end.
fn round_trip<T: Element>(w: &mut Worker<'_>) -> OpResult {
    let max_len = w.max::<T>();
    let len = random_len(&mut w.rng, max_len);
    let rng = &mut w.rng;
    let src = Host::<T>::random(&w.dev, rng, len)?;
    let mut dst = Host::<T>::poisoned(&w.dev, rng, len)?;
    let front = if rng.below(2) == 0 { 0 } else { rng.below(64) };
    let back = if rng.below(2) == 0 { 0 } else { rng.below(64) };
    let wait_inside = rng.below(2) == 0;
    let stream = &w.streams[rng.below(3)];
    let what = format!(
        "round trip of {len} {} ({} -> device at offset {front} -> {})",
        T::NAME,
        src.kind(),
        dst.kind()
    );
    let mut inside = Ok(());
    scope(stream, |s| -> Result<(), Failed> {
        let mut x = s.alloc::<T>(front + len + back)?;
        s.copy_to_device(&src[..], &mut x.slice_mut(front..front + len)?)?;
        let pending = s.copy_to_host(&x.slice(front..front + len)?, &mut dst[..])?;
        if wait_inside {
            inside = check_eq(&format!("{what}, read after wait"), &src, pending.wait()?);
        }
        Ok(())
    })?;
    inside?;
    check_eq(&what, &src, &dst)?;
    Ok(Moved::default().up::<T>(len).down::<T>(len))
}

/// A fork onto a second stream with a read-only and a writable view lent (the child
/// computes `y = 2x` and downloads its own upload, through a nested fork onto a third
/// stream half of the time), sometimes a second fork that is handed a buffer by value;
/// then the parent computes `y += x` and downloads `y = 3x`.
fn fork_join(w: &mut Worker<'_>) -> OpResult {
    let max_n = w.max::<f32>();
    let n = random_len(&mut w.rng, max_n);
    let max_m = w.max::<u32>();
    let m = random_len(&mut w.rng, max_m);
    let rng = &mut w.rng;
    let x = ints_f32(rng, n, 1000);
    let child_data = Host::<u32>::random(&w.dev, rng, m)?;
    let mut child_out = Host::<u32>::poisoned(&w.dev, rng, m)?;
    let given_data = Host::<u32>::random(&w.dev, rng, m)?;
    let mut given_out = Host::<u32>::poisoned(&w.dev, rng, m)?;
    let mut out = Host::<f32>::poisoned(&w.dev, rng, n)?;
    let (nested, give) = (rng.below(2) == 0, rng.below(2) == 0);
    let [a, b, c3] = &w.streams;
    let child_dst: &mut [u32] = &mut child_out;
    let given_dst: &mut [u32] = &mut given_out;
    scope(a, |s| -> Result<(), Failed> {
        let dx = s.upload(&x)?;
        let mut dy = s.alloc::<f32>(n)?;
        s.fork(b, (&dx, &mut dy), |c, (vx, mut vy)| -> Result<(), Failed> {
            kernels::scale(c, 2.0f32, &vx, &mut vy)?;
            let own = c.upload(&child_data[..])?;
            if nested {
                c.fork(c3, own, |g, own| -> Result<(), Failed> {
                    let _download = g.copy_to_host(&own, child_dst)?;
                    Ok(())
                })?;
            } else {
                let _download = c.copy_to_host(&own, child_dst)?;
            }
            Ok(())
        })?;
        if give {
            let z = s.upload(&given_data[..])?;
            s.fork(c3, z, |c, z| -> Result<(), Failed> {
                let _download = c.copy_to_host(&z, given_dst)?;
                Ok(())
            })?;
        }
        kernels::axpy(s, 1.0f32, &dx, &mut dy)?;
        let _download = s.copy_to_host(&dy, &mut out[..])?;
        Ok(())
    })?;
    let expected: Vec<f32> = x.iter().map(|v| 3.0 * v).collect();
    check_eq(&format!("fork/join: y = 3x of {n} f32"), &expected, &out)?;
    check_eq(
        &format!(
            "fork/join: the child's own download of {m} u32 ({})",
            if nested { "nested fork" } else { "direct" }
        ),
        &child_data,
        &child_out,
    )?;
    let mut moved = Moved::default()
        .up::<f32>(n)
        .down::<f32>(n)
        .up::<u32>(m)
        .down::<u32>(m);
    if give {
        check_eq(
            &format!("fork/join: a buffer of {m} u32 given to a fork"),
            &given_data,
            &given_out,
        )?;
        moved = moved.up::<u32>(m).down::<u32>(m);
    }
    Ok(moved)
}

/// The parent uploads `x` and hands it to a forked child, which downloads it and hands
/// a buffer of its own back to the parent, which downloads that.
fn hand_off(w: &mut Worker<'_>) -> OpResult {
    let max_n = w.max::<u32>();
    let n = random_len(&mut w.rng, max_n);
    let rng = &mut w.rng;
    let there = Host::<u32>::random(&w.dev, rng, n)?;
    let back = Host::<u32>::random(&w.dev, rng, n)?;
    let mut there_out = Host::<u32>::poisoned(&w.dev, rng, n)?;
    let mut back_out = Host::<u32>::poisoned(&w.dev, rng, n)?;
    let (a, b) = (&w.streams[0], &w.streams[1 + rng.below(2)]);
    let there_dst: &mut [u32] = &mut there_out;
    scope(a, |s| -> Result<(), Failed> {
        let x = s.upload(&there[..])?;
        let returned: DeviceBuffer<'_, u32> = s.fork(b, (), |c, ()| -> Result<_, Failed> {
            let x = s.hand_off(x, c)?;
            let _download = c.copy_to_host(&x, there_dst)?;
            let mut z = c.alloc::<u32>(n)?;
            c.copy_to_device(&back[..], &mut z)?;
            Ok(c.hand_off(z, s)?)
        })?;
        let _download = s.copy_to_host(&returned, &mut back_out[..])?;
        Ok(())
    })?;
    check_eq(&format!("{n} u32 handed to a fork"), &there, &there_out)?;
    check_eq(
        &format!("{n} u32 handed back from a fork"),
        &back,
        &back_out,
    )?;
    Ok(Moved::default().up::<u32>(2 * n).down::<u32>(2 * n))
}

/// The worker's long-lived `DeviceVec`, attached on a random stream: a random upload,
/// `axpy` with the shared read-only vector, or fill; then a random range is checked,
/// and one time in eight the whole vector through `to_host_vec`.
fn device_vec(w: &mut Worker<'_>) -> OpResult {
    let len = w.mirror.len();
    let rng = &mut w.rng;
    let range = random_range(rng, len);
    let check = random_range(rng, len);
    let action = rng.below(3);
    let data = ints_f64(rng, range.len(), 1000);
    let a = [-1.0, 1.0][rng.below(2)];
    let value = f64::from(int(rng, 1000));
    let mut moved = Moved::default().down::<f64>(check.len());
    match action {
        0 => {
            w.mirror[range.clone()].copy_from_slice(&data);
            moved = moved.up::<f64>(data.len());
        }
        1 => {
            let shared = &w.shared.host[..len];
            w.mirror
                .iter_mut()
                .zip(shared)
                .for_each(|(m, x)| *m += a * x);
        }
        _ => w.mirror[range.clone()].fill(value),
    }
    let expected = w.mirror[check.clone()].to_vec();
    let mut out = Host::<f64>::poisoned(&w.dev, rng, check.len())?;
    let stream = &w.streams[rng.below(3)];
    let whole = rng.below(8) == 0;
    let shared = &w.shared.vec;
    let vec = &mut w.vec;
    scope(stream, |s| -> Result<(), Failed> {
        let mut v = s.attach(vec)?;
        match action {
            0 => s.copy_to_device(&data, &mut v.slice_mut(range.clone())?)?,
            1 => {
                let x = s.attach_ref(shared)?;
                kernels::axpy(s, a, &x.slice(..len)?, &mut v)?;
            }
            _ => kernels::fill(s, &mut v.slice_mut(range.clone())?, value)?,
        }
        let got = s
            .copy_to_host(&v.slice(check.clone())?, &mut out[..])?
            .wait()?;
        check_eq(
            &format!("DeviceVec of {len} f64: range {check:?} after action {action}"),
            &expected,
            got,
        )?;
        Ok(())
    })?;
    if whole {
        check_eq(
            &format!("DeviceVec of {len} f64 through to_host_vec"),
            &w.mirror,
            &w.vec.to_host_vec()?,
        )?;
        moved = moved.down::<f64>(len);
    }
    Ok(moved)
}

/// A random range of the shared read-only `DeviceVec`, attached by every worker at once.
fn shared_read(w: &mut Worker<'_>) -> OpResult {
    let rng = &mut w.rng;
    let range = random_range(rng, w.shared.host.len());
    let mut out = Host::<f64>::poisoned(&w.dev, rng, range.len())?;
    let stream = &w.streams[rng.below(3)];
    let shared = &w.shared.vec;
    scope(stream, |s| -> Result<(), Failed> {
        let v = s.attach_ref(shared)?;
        let _download = s.copy_to_host(&v.slice(range.clone())?, &mut out[..])?;
        Ok(())
    })?;
    check_eq(
        &format!("shared DeviceVec range {range:?}"),
        &w.shared.host[range.clone()],
        &out,
    )?;
    Ok(Moved::default().down::<f64>(range.len()))
}

/// One to eight stream-ordered allocations of random sizes, each zeroed or filled,
/// some dropped at random along the way; then a random range of a survivor is checked.
/// Also allocates and frees a few pinned buffers.
fn churn(w: &mut Worker<'_>) -> OpResult {
    let max = w.max::<u32>();
    let rng = &mut w.rng;
    for _ in 0..rng.below(3) {
        let len = random_len(rng, max);
        drop(Host::<u32>::random(&w.dev, rng, len)?);
    }
    let count = 1 + rng.below(8);
    // Plan: (length, fill value or 0 for alloc_zeroed, by the kernel?) and drops.
    let plan: Vec<(usize, u32, bool, Option<usize>)> = (0..count)
        .map(|i| {
            let len = random_len(rng, max / 4);
            let value = if rng.below(3) == 0 { 0 } else { rng.value() };
            let drop_one = if rng.below(3) == 0 {
                Some(rng.below(i + 1))
            } else {
                None
            };
            (len, value, rng.below(2) == 0, drop_one)
        })
        .collect();
    // Replay the drops on the CPU to know the survivors.
    let mut alive: Vec<usize> = Vec::new();
    for (i, &(_, _, _, drop_one)) in plan.iter().enumerate() {
        alive.push(i);
        if let Some(k) = drop_one {
            alive.swap_remove(k % alive.len());
        }
    }
    let probe = if alive.is_empty() {
        None
    } else {
        let slot = rng.below(alive.len());
        let (len, value, ..) = plan[alive[slot]];
        Some((slot, random_range(rng, len), value))
    };
    let mut out = vec![u32::POISON; probe.as_ref().map_or(0, |(_, r, _)| r.len())];
    let stream = &w.streams[rng.below(3)];
    scope(stream, |s| -> Result<(), Failed> {
        let mut bufs: Vec<DeviceBuffer<'_, u32>> = Vec::new();
        for &(len, value, kernel, drop_one) in &plan {
            let buf = if value == 0 {
                s.alloc_zeroed::<u32>(len)?
            } else {
                let mut buf = s.alloc::<u32>(len)?;
                if kernel {
                    kernels::fill(s, &mut buf, value)?;
                } else {
                    s.fill(&mut buf, value)?;
                }
                buf
            };
            bufs.push(buf);
            if let Some(k) = drop_one {
                let k = k % bufs.len();
                drop(bufs.swap_remove(k));
            }
        }
        ensure!(
            bufs.len() == alive.len(),
            "churn: {} buffers alive, the plan says {}",
            bufs.len(),
            alive.len()
        );
        if let Some((slot, range, _)) = &probe {
            let _download = s.copy_to_host(&bufs[*slot].slice(range.clone())?, &mut out)?;
        }
        Ok(())
    })?;
    if let Some((slot, range, value)) = probe {
        let len = plan[alive[slot]].0;
        check_eq(
            &format!("churn: range {range:?} of a buffer of {len} u32 set to {value:#x}"),
            &vec![value; range.len()],
            &out,
        )?;
    }
    Ok(Moved::default().down::<u32>(out.len()))
}

/// Two to six downloads pending at once, waited for in a random order (polling
/// `is_ready` half of the time) and checked right after each wait.
fn pending_many(w: &mut Worker<'_>) -> OpResult {
    let max = w.max::<u32>() / 4;
    let rng = &mut w.rng;
    let count = 2 + rng.below(5);
    let mut sources = Vec::new();
    let mut outs = Vec::new();
    for _ in 0..count {
        let len = random_len(rng, max);
        sources.push(Host::<u32>::random(&w.dev, rng, len)?);
        outs.push(Host::<u32>::poisoned(&w.dev, rng, len)?);
    }
    let mut order: Vec<usize> = (0..count).collect();
    for i in (1..count).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let poll = rng.below(2) == 0;
    let total: usize = sources.iter().map(|s| s.len()).sum();
    let stream = &w.streams[rng.below(3)];
    scope(stream, |s| -> Result<(), Failed> {
        let mut pendings: Vec<Option<Pending<'_, &mut [u32]>>> = Vec::new();
        for (src, out) in sources.iter().zip(outs.iter_mut()) {
            let x = s.upload(&src[..])?;
            pendings.push(Some(s.copy_to_host(&x, &mut out[..])?));
        }
        for &i in &order {
            let pending = pendings[i]
                .take()
                .ok_or_else(|| Failed::from("pending: waited twice"))?;
            if poll {
                pending.is_ready()?;
            }
            let got = pending.wait()?;
            check_eq(
                &format!("download {i} of {count} pending at once"),
                &sources[i],
                got,
            )?;
        }
        Ok(())
    })?;
    Ok(Moved::default().up::<u32>(total).down::<u32>(total))
}
