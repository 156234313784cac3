//! CUDA contexts (`stream-core/src/driver/context.rs`, `PrimaryContext::bind`): every
//! synchronisation runs under its scope's own context, whatever the thread has current,
//! and every call of the library that binds a context gives the thread its previous
//! one back.
//!
//! A second context on one GPU is made with `cuCtxCreate` (a "foreign" context, as
//! another library would make one). The tests make it current inside scopes, and check
//! that downloads behind long kernels are complete when each scope, wait or join
//! returns, and which context is current after each call.
//!
//! * GPU tests are reported as ignored without a CUDA device (see `gpu_tests::run`).
//!   The two-GPU tests are registered only on a machine with at least two devices, and
//!   the binary says so on stderr when they are left out.

use cudarc::driver::{result, sys};
use gpu_tests::cudarc_side::create_context;
use gpu_tests::{
    check_eq, device, ensure, gpu_status, spin, Failed, GpuStatus, Rng, Test, TestFn, TestResult,
};
use stream_core::{interop, scope, Device, Error};

fn main() {
    let mut gpu: Vec<Test> = vec![
        (
            "a_foreign_context_made_current_inside_a_scope_still_ends_in_a_correct_synchronisation",
            a_foreign_context_made_current_inside_a_scope_still_ends_in_a_correct_synchronisation
                as TestFn,
        ),
        (
            "wait_and_fork_join_bind_their_own_context",
            wait_and_fork_join_bind_their_own_context,
        ),
        (
            "every_call_that_binds_a_context_gives_the_thread_its_previous_one_back",
            every_call_that_binds_a_context_gives_the_thread_its_previous_one_back,
        ),
        (
            "a_second_device_handle_dropped_inside_a_scope_leaves_the_scope_working",
            a_second_device_handle_dropped_inside_a_scope_leaves_the_scope_working,
        ),
    ];
    match gpu_status() {
        GpuStatus::Present(n) if *n >= 2 => gpu.extend([
            (
                "nested_scopes_on_two_devices_each_end_with_their_own_context",
                nested_scopes_on_two_devices_each_end_with_their_own_context as TestFn,
            ),
            (
                "the_other_devices_handle_dropped_inside_a_scope_leaves_the_scope_working",
                the_other_devices_handle_dropped_inside_a_scope_leaves_the_scope_working,
            ),
        ]),
        GpuStatus::Present(n) => eprintln!(
            "test_contexts: {n} CUDA device(s): the two-GPU tests \
             nested_scopes_on_two_devices_each_end_with_their_own_context and \
             the_other_devices_handle_dropped_inside_a_scope_leaves_the_scope_working are not \
             registered (run this binary on a machine with two GPUs to cover them)"
        ),
        GpuStatus::Absent(_) => {}
    }
    gpu_tests::run(&gpu, &[])
}

/// Cycles of the kernel that delays the downloads: about 100 ms on an H100 or H200, long
/// enough that a synchronisation of the wrong stream (or none) would return first.
const DELAY_CYCLES: u64 = 200_000_000;

/// Elements of the downloads (16 MiB of `u32`).
const ELEMENTS: usize = 4 << 20;

/// A non-primary context on device `ordinal`, made with `cuCtxCreate` and destroyed on
/// drop, as another library would make one. Not current after `new`.
struct ForeignContext(sys::CUcontext);

impl ForeignContext {
    fn new(ordinal: usize) -> Result<Self, Failed> {
        let (ctx, _) = create_context(ordinal)?;
        let made = ForeignContext(ctx);
        // `cuCtxCreate` pushed the new context: take it off this thread's stack again.
        made.pop()?;
        Ok(made)
    }

    /// Pushes it on this thread's context stack: it becomes current.
    fn push(&self) -> TestResult {
        // SAFETY: `self.0` is a live context (destroyed only by `drop`).
        unsafe { sys::cuCtxPushCurrent_v2(self.0) }
            .result()
            .map_err(|e| Failed::from(format!("cuCtxPushCurrent: {e:?}")))
    }

    /// Pops the current context, which must be this one.
    fn pop(&self) -> TestResult {
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `popped` is a live out-pointer.
        unsafe { sys::cuCtxPopCurrent_v2(&raw mut popped) }
            .result()
            .map_err(|e| Failed::from(format!("cuCtxPopCurrent: {e:?}")))?;
        ensure!(
            popped == self.0,
            "popped context {popped:?} is not the foreign context {:?}",
            self.0
        );
        Ok(())
    }

    /// `Ok` when it is the thread's current context.
    fn expect_current(&self, after: &str) -> TestResult {
        let current = current_context()?;
        ensure!(
            current == Some(self.0),
            "after {after}, the current context is {current:?}, not the foreign context {:?} \
             the thread had before",
            self.0
        );
        Ok(())
    }
}

impl Drop for ForeignContext {
    fn drop(&mut self) {
        // SAFETY: created by `cuCtxCreate` in `new`, destroyed once, here.
        let _ = unsafe { sys::cuCtxDestroy_v2(self.0) };
    }
}

fn current_context() -> Result<Option<sys::CUcontext>, Failed> {
    result::ctx::get_current().map_err(|e| Failed::from(format!("cuCtxGetCurrent: {e:?}")))
}

/// The primary context of `dev`, as the library binds it.
fn primary_context(dev: &Device) -> Result<sys::CUcontext, Failed> {
    let _bound = interop::bind(dev)?;
    current_context()?.ok_or_else(|| Failed::from("interop::bind left no context current"))
}

/// A scope queues a long kernel, then a download behind it, then makes a foreign context
/// current and returns. Its final synchronisation binds the scope's own context: when
/// `scope` returns, the download is complete, and the foreign context is current again.
fn a_foreign_context_made_current_inside_a_scope_still_ends_in_a_correct_synchronisation(
) -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let foreign = ForeignContext::new(dev.ordinal())?;
    let input: Vec<u32> = Rng::new().vec(ELEMENTS);
    let mut out = dev.alloc_pinned::<u32>(ELEMENTS)?;
    out.fill(u32::MAX);
    let mut pushed_inside = false;
    scope(&stream, |s| -> TestResult {
        let x = s.upload(&input)?;
        spin(s, DELAY_CYCLES)?;
        let _download = s.copy_to_host(&x, &mut out)?;
        foreign.push()?;
        pushed_inside = true;
        foreign.expect_current("pushing it inside the scope")?;
        Ok(())
    })?;
    ensure!(pushed_inside, "the scope's closure did not run");
    check_eq(
        "download behind a long kernel, scope ended under a foreign context",
        &input,
        &out,
    )?;
    foreign.expect_current("the scope's end")?;
    foreign.pop()
}

/// `Pending::wait` and a fork's join, each reached with a foreign context current: the
/// wait returns only once its download landed, and the parent's later download sees the
/// child's work.
fn wait_and_fork_join_bind_their_own_context() -> TestResult {
    let dev = device()?;
    let (a, b) = (dev.new_stream()?, dev.new_stream()?);
    let foreign = ForeignContext::new(dev.ordinal())?;
    let mut rng = Rng::new();
    let input: Vec<u32> = rng.vec(ELEMENTS);
    let mut first = dev.alloc_pinned::<u32>(ELEMENTS)?;
    let mut second = dev.alloc_pinned::<u32>(ELEMENTS)?;
    first.fill(u32::MAX);
    second.fill(u32::MAX);
    let mut waited_ok = Err(Failed::from("the scope's closure did not run"));
    scope(&a, |s| -> TestResult {
        let x = s.upload(&input)?;
        spin(s, DELAY_CYCLES)?;
        let pending = s.copy_to_host(&x, &mut first)?;
        foreign.push()?;
        let landed = pending.wait()?;
        waited_ok = check_eq(
            "download returned by wait under a foreign context",
            &input,
            landed,
        );
        foreign.expect_current("Pending::wait")?;
        let mut y = s.alloc::<u32>(ELEMENTS)?;
        s.fork(&b, (&x, &mut y), |c, (x, mut y)| -> Result<(), Error> {
            spin(c, DELAY_CYCLES)?;
            c.copy_device(&x, &mut y)
        })?;
        foreign.expect_current("the fork's join")?;
        let _download = s.copy_to_host(&y, &mut second)?;
        foreign.pop()?;
        Ok(())
    })?;
    waited_ok?;
    check_eq(
        "download ordered after a fork joined under a foreign context",
        &input,
        &second,
    )
}

/// With a foreign context current, each library call that binds the device's context
/// (opening a device or stream, pinned and `DeviceVec` memory, statistics, queries,
/// cuBLAS handles, drops, a whole scope, `interop::bind`) leaves the foreign context
/// current; inside a scope, the scope's context stays current after each of them.
fn every_call_that_binds_a_context_gives_the_thread_its_previous_one_back() -> TestResult {
    let dev = device()?;
    let primary = primary_context(&dev)?;
    let foreign = ForeignContext::new(dev.ordinal())?;
    let data: Vec<f32> = Rng::new().vec(1 << 16);
    foreign.push()?;
    let outcome = (|| -> TestResult {
        let second = Device::new(dev.ordinal())?;
        foreign.expect_current("Device::new")?;
        let stream = dev.new_stream()?;
        foreign.expect_current("Device::new_stream")?;
        let pinned = dev.alloc_pinned::<f32>(1 << 16)?;
        foreign.expect_current("Device::alloc_pinned")?;
        let vec = dev.upload_vec(&data)?;
        foreign.expect_current("Device::upload_vec")?;
        let zeros = dev.alloc_vec::<f32>(1 << 10)?;
        foreign.expect_current("Device::alloc_vec")?;
        check_eq(
            "to_host_vec under a foreign context",
            &data,
            &vec.to_host_vec()?,
        )?;
        foreign.expect_current("DeviceVec::to_host_vec")?;
        stream.is_idle()?;
        foreign.expect_current("Stream::is_idle")?;
        dev.memory_info()?;
        dev.memory_stats()?;
        dev.trim_memory(usize::MAX)?;
        foreign.expect_current("memory_info, memory_stats, trim_memory")?;
        let blas = kernels::Cublas::new(&dev)?;
        foreign.expect_current("Cublas::new")?;
        drop(blas);
        drop((zeros, vec, pinned));
        foreign.expect_current("dropping a Cublas, DeviceVecs and a PinnedBuffer")?;
        {
            let bound = interop::bind(&dev)?;
            ensure!(
                current_context()? == Some(primary),
                "interop::bind did not make the device's context current"
            );
            drop(bound);
        }
        foreign.expect_current("interop::bind's guard")?;
        let mut out = vec![0f32; data.len()];
        scope(&stream, |s| -> TestResult {
            let expect_primary = |after: &str| -> TestResult {
                let current = current_context()?;
                ensure!(
                    current == Some(primary),
                    "inside a scope, after {after}, the current context is {current:?}, not the \
                     scope's {primary:?}"
                );
                Ok(())
            };
            expect_primary("opening the scope")?;
            let third = Device::new(dev.ordinal())?;
            let more = third.alloc_pinned::<u8>(4096)?;
            expect_primary("Device::new and alloc_pinned inside the scope")?;
            drop(more);
            drop(third);
            expect_primary("dropping another Device handle inside the scope")?;
            let x = s.upload(&data)?;
            kernels::scale(s, 1.0, &x, &mut s.alloc::<f32>(data.len())?)?;
            expect_primary("a kernel's first launch (module load)")?;
            s.copy_to_host(&x, &mut out)?.wait()?;
            expect_primary("Pending::wait")?;
            Ok(())
        })?;
        foreign.expect_current("a whole scope")?;
        check_eq(
            "round trip in a scope opened under a foreign context",
            &data,
            &out,
        )?;
        drop(stream);
        drop(second);
        foreign.expect_current("dropping a Stream and a second Device handle")
    })();
    let popped = foreign.pop();
    outcome?;
    popped
}

/// A second `Device` handle of the scope's own GPU, opened and dropped inside a scope
/// (its pinned pool is freed then, a wait for the whole device the user asked for by
/// dropping it): the scope's context stays current, and its download behind a long
/// kernel is complete when the scope returns.
fn a_second_device_handle_dropped_inside_a_scope_leaves_the_scope_working() -> TestResult {
    let dev = device()?;
    let stream = dev.new_stream()?;
    let primary = primary_context(&dev)?;
    let input: Vec<u32> = Rng::new().vec(ELEMENTS);
    let mut out = dev.alloc_pinned::<u32>(ELEMENTS)?;
    out.fill(u32::MAX);
    scope(&stream, |s| -> TestResult {
        let x = s.upload(&input)?;
        spin(s, DELAY_CYCLES)?;
        let _download = s.copy_to_host(&x, &mut out)?;
        let second = Device::new(dev.ordinal())?;
        drop(second.alloc_pinned::<u32>(1 << 20)?);
        drop(second);
        let current = current_context()?;
        ensure!(
            current == Some(primary),
            "after dropping a second Device handle, the context is {current:?}, not the \
             scope's {primary:?}"
        );
        Ok(())
    })?;
    check_eq(
        "download after a Device handle was dropped inside its scope",
        &input,
        &out,
    )
}

/// A scope on device 0 with a scope on device 1 nested in it: each ends with its own
/// stream synchronised under its own context (both downloads, behind long kernels, are
/// complete when their scopes return), and the outer scope's context is current again
/// after the inner one.
fn nested_scopes_on_two_devices_each_end_with_their_own_context() -> TestResult {
    let (dev0, dev1) = (Device::new(0)?, Device::new(1)?);
    let (s0, s1) = (dev0.new_stream()?, dev1.new_stream()?);
    let (ctx0, ctx1) = (primary_context(&dev0)?, primary_context(&dev1)?);
    let mut rng = Rng::new();
    let (in0, in1): (Vec<u32>, Vec<u32>) = (rng.vec(ELEMENTS), rng.vec(ELEMENTS));
    let mut out0 = dev0.alloc_pinned::<u32>(ELEMENTS)?;
    let mut out1 = dev1.alloc_pinned::<u32>(ELEMENTS)?;
    out0.fill(u32::MAX);
    out1.fill(u32::MAX);
    scope(&s0, |outer| -> TestResult {
        let x0 = outer.upload(&in0)?;
        spin(outer, DELAY_CYCLES)?;
        let _d0 = outer.copy_to_host(&x0, &mut out0)?;
        scope(&s1, |inner| -> TestResult {
            ensure!(
                current_context()? == Some(ctx1),
                "the inner scope did not bind device 1's context"
            );
            let x1 = inner.upload(&in1)?;
            spin(inner, DELAY_CYCLES)?;
            let _d1 = inner.copy_to_host(&x1, &mut out1)?;
            Ok(())
        })?;
        check_eq(
            "device 1's download when its nested scope returned",
            &in1,
            &out1,
        )?;
        ensure!(
            current_context()? == Some(ctx0),
            "after the inner scope on device 1, the outer scope's context is not current"
        );
        Ok(())
    })?;
    check_eq("device 0's download when its scope returned", &in0, &out0)
}

/// Device 1's only handle, opened and dropped inside a scope on device 0 (its context is
/// released then): the scope keeps device 0's context current and ends correctly.
fn the_other_devices_handle_dropped_inside_a_scope_leaves_the_scope_working() -> TestResult {
    let dev0 = Device::new(0)?;
    let stream = dev0.new_stream()?;
    let ctx0 = primary_context(&dev0)?;
    let input: Vec<u32> = Rng::new().vec(ELEMENTS);
    let mut out = dev0.alloc_pinned::<u32>(ELEMENTS)?;
    out.fill(u32::MAX);
    scope(&stream, |s| -> TestResult {
        let x = s.upload(&input)?;
        spin(s, DELAY_CYCLES)?;
        let _download = s.copy_to_host(&x, &mut out)?;
        let dev1 = Device::new(1)?;
        let vec1 = dev1.upload_vec(&input[..1024])?;
        drop(vec1);
        drop(dev1);
        ensure!(
            current_context()? == Some(ctx0),
            "after dropping device 1's handle, device 0's context is not current"
        );
        Ok(())
    })?;
    check_eq(
        "download after device 1's handle was dropped inside the scope",
        &input,
        &out,
    )
}
