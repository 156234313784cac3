//! Where a launch's host time goes (the enqueue rows of case 1): rows without a target,
//! printed after the one-stream enqueue row.
//!
//! * **the library's part alone**: batches with an empty grid, which the library checks
//!   in full (declared shape, device and function limits, the kernel's lookup, the
//!   argument array) and then does not enqueue, against whole raw launches.
//! * **a second `Device` of the ordinal**: launches through a `Device::new` of the same
//!   ordinal made while the first lives (as a program that opens the device in two
//!   places does), against whole raw launches; the one-stream enqueue row above is the
//!   first device's.
//! * **a `Device` made again**: launches of a kernel (`cuda::made_again::tiny_u32`)
//!   through a `Device::new` made after another device that launched it was dropped.
//! * **the shared-memory attribute**: raw launches of a function that carries the
//!   attribute the library sets on every function it loads (dynamic shared memory up to
//!   the opt-in limit, set once at load so that launches never change attributes),
//!   against the plain function's.
//! * With `BENCH_LAUNCH_DIAG=1`, **the driver's side**: raw launches on one and on two
//!   of the library's streams (a scope, and a scope and its fork), against raw launches
//!   on raw streams; and the library's part alone on two streams. Opt-in: exposing a
//!   stream's handle makes later scopes on it ask the driver whether it is captured.

use cudarc::driver::{result, sys};
use std::time::Instant;

use stream_core::{scope, Device, DeviceVec, Stream};

use super::{check_count, Ours, Raw};
use crate::cuda::{self, TINY_CONFIG};
use crate::env::Env;
use crate::error::{Context, Error, Result};
use crate::measurement::Measurement;
use crate::raw::{RawFunction, RawModule};
use crate::report::{Report, Row};
use crate::sampling::Plan;

/// Pushes the diagnosis rows for batches of `launches`, named by `row`.
pub(super) fn run(
    env: &Env,
    rep: &mut Report,
    plan: Plan,
    launches: usize,
    row: &dyn Fn(&str) -> Row,
) -> Result<()> {
    let mut ours1 = Ours::new(env, 1)?;
    let mut raw1 = Raw::new(env, 1)?;
    let attributed = AttributedTiny::load(env)?;
    let mut raw1_attributed = Raw::new(env, 1)?.with_function(attributed.function);
    let parts = Measurement::new()
        .ours("ours, empty grid", || ours1.sample_empty(launches))
        .raw("raw, 1 stream", || raw1.sample(launches, false))
        .into_row(
            plan,
            row("1 stream: the library's part alone (an empty grid: every check, no driver call) against a whole raw launch"),
        )?;
    rep.push(parts);
    let second = Device::new(env.dev.ordinal())?;
    let second_streams = [second.new_stream()?];
    let mut ours_second = Ours::on(&second, &second_streams)?;
    let made_again = Measurement::new()
        .ours("ours, a second Device", || ours_second.sample(launches, false))
        .raw("raw, 1 stream", || raw1.sample(launches, false))
        .into_row(
            plan,
            row("1 stream, through a second Device of the same ordinal (Device::new again while the first lives) against raw launches"),
        )?;
    rep.push(made_again);
    ours_second.check()?;
    let mut again = MadeAgain::new(env.dev.ordinal())?;
    let again_row = Measurement::new()
        .ours("ours, a Device made again", || again.sample(launches))
        .raw("raw, 1 stream", || raw1.sample(launches, false))
        .into_row(
            plan,
            row("1 stream, through a Device made again (after one that launched the kernel was dropped) against raw launches"),
        )?;
    rep.push(again_row);
    again.check()?;
    let with_attribute = Measurement::new()
        .ours("raw, opt-in shared memory attribute", || {
            raw1_attributed.sample(launches, false)
        })
        .raw("raw, 1 stream", || raw1.sample(launches, false))
        .into_row(
            plan,
            row("1 stream: raw launches of a function with the library's shared-memory attribute (MAX_DYNAMIC_SHARED_SIZE_BYTES at the opt-in limit) against the plain function's"),
        )?;
    rep.push(with_attribute);
    raw1.check()?;
    raw1_attributed.check()?;
    if std::env::var_os("BENCH_LAUNCH_DIAG").is_some() {
        drivers_side(env, rep, plan, launches, row)?;
    }
    Ok(())
}

/// The `BENCH_LAUNCH_DIAG` rows (see the module docs).
fn drivers_side(
    env: &Env,
    rep: &mut Report,
    plan: Plan,
    launches: usize,
    row: &dyn Fn(&str) -> Row,
) -> Result<()> {
    let (stream, forked) = (&env.streams[2], &env.streams[3]);
    let mut raw1 = Raw::new(env, 1)?;
    let mut raw2 = Raw::new(env, 2)?;
    let mut ours2 = Ours::new(env, 2)?;
    let mut raw1_on_ours = Raw::new(env, 1)?;
    let mut raw2_on_ours = Raw::new(env, 2)?;
    let on_ours = Measurement::new()
        .ours("raw launches, the library's stream", || {
            scope(stream, |s| {
                let handle = stream_core::interop::raw_stream(s);
                raw1_on_ours.sample_on(&[handle], launches)
            })
        })
        .raw("raw, 1 stream", || raw1.sample(launches, false))
        .into_row(
            plan,
            row("1 stream: raw launches on one of the library's streams, in a scope, against raw launches on a raw stream"),
        )?;
    rep.push(on_ours);
    let parts2 = Measurement::new()
        .ours("ours, empty grid, 2 streams", || {
            ours2.sample_empty(launches)
        })
        .raw("raw, 2 streams", || raw2.sample(launches, false))
        .into_row(
            plan,
            row("2 streams: the library's part alone (an empty grid) against whole raw launches"),
        )?;
    rep.push(parts2);
    let on_ours2 = Measurement::new()
        .ours("raw launches, two of the library's streams", || {
            scope(stream, |s| {
                s.fork(forked, (), |c, ()| {
                    let handles = [
                        stream_core::interop::raw_stream(s),
                        stream_core::interop::raw_stream(c),
                    ];
                    raw2_on_ours.sample_on(&handles, launches)
                })
            })
        })
        .raw("raw, 2 streams", || raw2.sample(launches, false))
        .into_row(
            plan,
            row("2 streams: raw launches on two of the library's streams (a scope and its fork) against raw launches on raw streams"),
        )?;
    rep.push(on_ours2);
    for raw in [&raw1, &raw2, &raw1_on_ours, &raw2_on_ours] {
        raw.check()?;
    }
    Ok(())
}

/// `tiny_u32` from a module of its own, with the attribute the library sets on every
/// function it loads: dynamic shared memory allowed up to the device's opt-in limit.
pub(crate) struct AttributedTiny {
    pub(crate) function: RawFunction,
    _module: RawModule,
}

impl AttributedTiny {
    pub(crate) fn load(env: &Env) -> Result<Self> {
        let cubin = cuda::compile_cubin(cuda::SOURCE, env.dev.compute_capability())?;
        let module = RawModule::load(&cubin)?;
        let function = module.function("tiny_u32")?;
        // SAFETY: the context is current (`Env` made it so); the attribute is an int.
        let optin = unsafe {
            result::device::get_attribute(
                result::device::get(env.dev.ordinal() as i32).context("cuDeviceGet")?,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )
        }
        .context("cuDeviceGetAttribute")?;
        // SAFETY: `function` is a live function of `module`; the attribute takes an int
        // (`tiny_u32` has no static shared memory, so the whole opt-in limit is dynamic).
        unsafe {
            result::function::set_function_attribute(
                function,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                optin,
            )
        }
        .context("cuFuncSetAttribute")?;
        Ok(AttributedTiny {
            function: RawFunction(function),
            _module: module,
        })
    }
}

/// A `Device` of the ordinal made after another one launched `made_again::tiny_u32` and
/// was dropped, with a stream and a counter.
struct MadeAgain {
    stream: Stream,
    counter: DeviceVec<u32>,
    launched: u64,
}

impl MadeAgain {
    fn new(ordinal: usize) -> Result<Self> {
        {
            let before = Device::new(ordinal)?;
            let mut counter = before.alloc_vec::<u32>(1)?;
            scope(&before.new_stream()?, |s| {
                cuda::made_again::tiny_u32(s, TINY_CONFIG, &mut s.attach(&mut counter)?)
            })?;
        }
        let dev = Device::new(ordinal)?;
        Ok(MadeAgain {
            stream: dev.new_stream()?,
            counter: dev.alloc_vec::<u32>(1)?,
            launched: 0,
        })
    }

    /// Host nanoseconds per launch of a batch of `launches` in one scope (the loop of
    /// `Ours`'s one-stream sample).
    fn sample(&mut self, launches: usize) -> Result<f64> {
        let mut ns = 0.0;
        scope(&self.stream, |s| {
            let mut y = s.attach(&mut self.counter)?;
            let t = Instant::now();
            for _ in 0..launches {
                cuda::made_again::tiny_u32(s, TINY_CONFIG, &mut y)?;
            }
            ns = t.elapsed().as_nanos() as f64 / launches as f64;
            Ok::<_, Error>(())
        })?;
        self.launched += launches as u64;
        Ok(ns)
    }

    fn check(&self) -> Result<()> {
        check_count(
            "ours, a Device made again",
            self.counter.to_host_vec()?.first().copied(),
            self.launched,
        )
    }
}
