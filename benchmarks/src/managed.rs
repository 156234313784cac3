//! Case 8: managed memory (issue 16). One in-place kernel over 1 GiB of data that lives
//! on the host (64 MiB with `--quick`), three ways, measured in the same rounds, all
//! with this library:
//!
//! * **explicit pinned copies**: a `PinnedBuffer` uploaded into an attached `DeviceVec`,
//!   the kernel, the download back into the pinned buffer, `wait`;
//! * **managed, demand-paged**: a `ManagedVec` attached and the kernel run on it with no
//!   prefetch: the GPU faults the pages in, and the host's reads after the scope fault
//!   them back;
//! * **managed, prefetched**: `prefetch_to_device`, the kernel, `prefetch_to_host` and
//!   `wait`;
//! * **managed, host-resident** (not one of issue 16's rows): advised to stay in host
//!   memory (`PreferredLocation(Host)`) and to be mapped by the device
//!   (`AccessedBy(Device)`), so that the kernel reads and writes it over the bus where it
//!   lives and nothing migrates either way.
//!
//! Each sample gives two figures: **end-to-end**, host time from the scope's start until
//! the host has read one element of every 4 KiB page of the result after the scope (what
//! makes the demand-paged data come back; cheap for the others), reported as GB/s of the
//! data processed; and **kernel only**, GPU time between two events around the kernel
//! alone (after the upload or the prefetch in stream order, so the demand-paged figure
//! includes its page faults). Issue 16's targets: prefetched end-to-end at least 0.9x
//! explicit pinned copies', and above demand paging's, in the median and in every
//! round. Afterwards every buffer must hold its pattern plus the number of kernels run.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::time::Instant;

use stream_core::{
    kernel, scope, DeviceVec, GpuTimer, LaunchConfig, ManagedAdvice, ManagedLocation, ManagedVec,
    PinnedBuffer, Stream,
};

use crate::env::{Env, MIB};
use crate::error::{Context, Error, Result};
use crate::report::{Better, Report, Row, Source};
use crate::sampling::Rounds;
use crate::sampling::{interleaved, Sampler, Stats};

/// Issue 16: prefetched end-to-end / explicit pinned copies' end-to-end, as throughput.
const PREFETCHED_OVER_EXPLICIT: f64 = 0.9;
/// Issue 16: prefetched end-to-end must beat demand paging.
const PREFETCHED_OVER_DEMAND: f64 = 1.0;

/// Elements of `u32` in one 4 KiB page: the host reads one of each.
const PAGE_ELEMENTS: usize = 4096 / 4;

pub(crate) const SOURCE: &str = r#"
extern "C" __global__ void __launch_bounds__(256)
add_one_in_place_u32(unsigned* y, size_t y_len) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < y_len;
         i += (size_t)gridDim.x * blockDim.x) {
        y[i] += 1u;
    }
}
"#;

#[kernel(cuda = SOURCE, block = 256)]
/// `y[i] += 1` in place, grid-stride.
pub(crate) unsafe fn add_one_in_place_u32(y: &mut [u32]);

/// Grid-stride shape over `n` elements: 256 threads, at most 2^16 blocks.
pub(crate) fn config(n: usize) -> LaunchConfig {
    LaunchConfig::for_elements(n.min((1 << 16) * 256), 256)
}

/// The value every buffer starts with at element `i`.
fn pattern(i: usize) -> u32 {
    (i % 8191) as u32 * 3 + 1
}

/// Reads one element of every 4 KiB page of `host` (and the last one).
fn touch_pages(host: &[u32]) -> u64 {
    let mut sum = 0u64;
    for i in (0..host.len()).step_by(PAGE_ELEMENTS) {
        sum = sum.wrapping_add(u64::from(host[i]));
    }
    if let Some(&last) = host.last() {
        sum = sum.wrapping_add(u64::from(last));
    }
    std::hint::black_box(sum)
}

/// Runs case 8.
pub fn run(env: &Env, rep: &mut Report) -> Result<()> {
    let cfg = env.cfg;
    let bytes = cfg.pick(1024 * MIB, 64 * MIB);
    let n = bytes / 4;
    let plan = cfg.plan(1, cfg.pick(3, 2));
    let stream = &env.streams[0];
    let mut explicit = Explicit::new(env, n)?;
    let mut demand = Managed::new(env, n, Mode::DemandPaged)?;
    let mut prefetched = Managed::new(env, n, Mode::Prefetched)?;
    let mut resident = Managed::new(env, n, Mode::HostResident)?;
    let kernel_times: [RefCell<Vec<f64>>; 4] = Default::default();
    let end_to_end = {
        let [k_explicit, k_demand, k_prefetched, k_resident] = &kernel_times;
        let mut samplers: Vec<Sampler<'_>> = vec![
            (
                "explicit pinned copies",
                Box::new(|| explicit.sample(stream, k_explicit)),
            ),
            (
                "managed, demand-paged",
                Box::new(|| demand.sample(stream, k_demand)),
            ),
            (
                "managed, prefetched",
                Box::new(|| prefetched.sample(stream, k_prefetched)),
            ),
            (
                "managed, host-resident",
                Box::new(|| resident.sample(stream, k_resident)),
            ),
        ];
        interleaved(plan, &mut samplers)?
    };
    let runs = (plan.warmup + plan.rounds * plan.samples) as u32;
    explicit.check(runs)?;
    demand.check(runs)?;
    prefetched.check(runs)?;
    resident.check(runs)?;

    let gbs: Vec<Rounds> = end_to_end
        .iter()
        .map(|t| t.map(|s| bytes as f64 / s / 1e9))
        .collect();
    let [e_explicit, e_demand, e_prefetched, e_resident] = &gbs[..] else {
        return Err(Error::msg("managed: expected four end-to-end results"));
    };
    let kernel: Vec<Rounds> = kernel_times
        .into_iter()
        .map(|t| {
            Rounds::from_samples(&t.into_inner(), plan, |round| Stats::new(round.to_vec()))
                .context("managed: kernel times")
        })
        .collect::<Result<_>>()?;
    let [k_explicit, k_demand, k_prefetched, k_resident] = &kernel[..] else {
        return Err(Error::msg("managed: expected four kernel results"));
    };
    let size = format!("{} MiB", bytes / MIB);
    let ms = |r: &Rounds| r.map(|s| s * 1e3);

    let row = Row::new(
        "managed",
        format!("{size} end-to-end: prefetched vs explicit pinned copies"),
        "GB/s",
        Better::Higher,
    )
    .figures(Some(e_prefetched.clone()), Some(e_explicit.clone()));
    rep.push(row.check_vs_raw(PREFETCHED_OVER_EXPLICIT, Source::Issue));

    let row = Row::new(
        "managed",
        format!("{size} end-to-end: prefetched vs demand-paged"),
        "GB/s",
        Better::Higher,
    )
    .figures(Some(e_prefetched.clone()), Some(e_demand.clone()));
    rep.push(row.check_vs_raw(PREFETCHED_OVER_DEMAND, Source::Issue));

    let row = Row::new(
        "managed",
        format!("{size} end-to-end: demand-paged vs explicit pinned copies"),
        "GB/s",
        Better::Higher,
    )
    .figures(Some(e_demand.clone()), Some(e_explicit.clone()));
    rep.push(row);

    let row = Row::new(
        "managed",
        format!(
            "{size} end-to-end: host-resident (mapped by the device) vs explicit pinned copies"
        ),
        "GB/s",
        Better::Higher,
    )
    .figures(Some(e_resident.clone()), Some(e_explicit.clone()));
    rep.push(row);

    for (name, managed) in [
        ("prefetched", k_prefetched),
        ("demand-paged", k_demand),
        ("host-resident", k_resident),
    ] {
        let row = Row::new(
            "managed",
            format!("{size} kernel only: {name} vs device memory"),
            "ms",
            Better::Lower,
        )
        .figures(Some(ms(managed)), Some(ms(k_explicit)));
        rep.push(row);
    }
    crate::managed_raw::run(env, rep)?;
    rep.note(
        "managed: ours is the managed variant the row names, raw the row's baseline (explicit pinned copies: upload into a DeviceVec, kernel, download); end-to-end is host time from the scope's start until the host has read one element per 4 KiB page after it, as GB/s of the data processed; kernel only is GPU time around the kernel (after the upload or prefetch)",
    );
    Ok(())
}

/// Explicit pinned copies: host data in a `PinnedBuffer`, device memory a `DeviceVec`.
struct Explicit {
    host: PinnedBuffer<u32>,
    device: DeviceVec<u32>,
    timer: GpuTimer,
}

impl Explicit {
    fn new(env: &Env, n: usize) -> Result<Self> {
        let mut host = env.dev.alloc_pinned::<u32>(n)?;
        host.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = pattern(i));
        Ok(Explicit {
            host,
            device: env.dev.alloc_vec::<u32>(n)?,
            timer: GpuTimer::new(&env.dev)?,
        })
    }

    /// Upload, kernel, download, `wait`, the host's page reads: host seconds; the
    /// kernel's GPU seconds go to `kernel`.
    fn sample(&mut self, stream: &Stream, kernel: &RefCell<Vec<f64>>) -> Result<f64> {
        let Explicit {
            host,
            device,
            timer,
        } = self;
        let start = Instant::now();
        scope(stream, |s| {
            let mut d = s.attach(device)?;
            s.copy_to_device(&host[..], &mut d)?;
            timer.start(s)?;
            add_one_in_place_u32(s, config(d.len()), &mut d)?;
            timer.stop(s)?;
            Ok::<_, Error>(())
        })?;
        // The upload borrowed `host` until the scope's end: download in a second scope.
        scope(stream, |s| {
            let d = s.attach_ref(device)?;
            s.copy_to_host(&d, &mut host[..])?.wait()?;
            Ok::<_, Error>(())
        })?;
        touch_pages(host);
        let elapsed = start.elapsed().as_secs_f64();
        kernel.borrow_mut().push(timer.elapsed()?.as_secs_f64());
        Ok(elapsed)
    }

    /// Every element is its pattern plus `runs`.
    fn check(&self, runs: u32) -> Result<()> {
        check("explicit pinned copies", &self.host, runs)
    }
}

/// How a [`Managed`] sample moves the data.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// No prefetch, no hint: the GPU's and then the host's page faults migrate it.
    DemandPaged,
    /// Prefetched to the device before the kernel and back to the host after it.
    Prefetched,
    /// Kept in host memory and mapped by the device: nothing migrates.
    HostResident,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::DemandPaged => "managed, demand-paged",
            Mode::Prefetched => "managed, prefetched",
            Mode::HostResident => "managed, host-resident",
        }
    }
}

/// A `ManagedVec`, processed in one of the [`Mode`]s.
struct Managed {
    data: ManagedVec<u32>,
    mode: Mode,
    timer: GpuTimer,
}

impl Managed {
    fn new(env: &Env, n: usize, mode: Mode) -> Result<Self> {
        let mut data = env.dev.alloc_managed::<u32>(n)?;
        if mode == Mode::HostResident {
            data.advise(ManagedAdvice::PreferredLocation(ManagedLocation::Host))?;
            data.advise(ManagedAdvice::AccessedBy(ManagedLocation::Device(&env.dev)))?;
        }
        data.host_mut()?
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = pattern(i));
        Ok(Managed {
            data,
            mode,
            timer: GpuTimer::new(&env.dev)?,
        })
    }

    /// (Prefetch,) kernel, (prefetch back and `wait`,) the host's page reads after the
    /// scope: host seconds; the kernel's GPU seconds go to `kernel`.
    fn sample(&mut self, stream: &Stream, kernel: &RefCell<Vec<f64>>) -> Result<f64> {
        let Managed { data, mode, timer } = self;
        let prefetch = *mode == Mode::Prefetched;
        let start = Instant::now();
        scope(stream, |s| {
            let mut view = s.attach_managed(&mut *data)?;
            if prefetch {
                s.prefetch_to_device(&view)?;
            }
            timer.start(s)?;
            add_one_in_place_u32(s, config(view.len()), &mut view)?;
            timer.stop(s)?;
            if prefetch {
                s.prefetch_to_host(view)?.wait()?;
            }
            Ok::<_, Error>(())
        })?;
        touch_pages(data.host()?);
        let elapsed = start.elapsed().as_secs_f64();
        kernel.borrow_mut().push(timer.elapsed()?.as_secs_f64());
        Ok(elapsed)
    }

    fn check(&self, runs: u32) -> Result<()> {
        check(self.mode.name(), self.data.host()?, runs)
    }
}

/// Every 4099th element of `host` and the last are their pattern plus `runs`.
fn check(what: &str, host: &[u32], runs: u32) -> Result<()> {
    let last = host.len().saturating_sub(1);
    for i in (0..host.len()).step_by(4099).chain([last]) {
        let want = pattern(i).wrapping_add(runs);
        if host[i] != want {
            return Err(Error::msg(format!(
                "managed, {what}: element {i} is {} after {runs} kernels, expected {want}",
                host[i]
            )));
        }
    }
    Ok(())
}
