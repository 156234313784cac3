//! Names the tests that were running when the process dies of a fault (SIGSEGV, SIGBUS,
//! SIGILL, SIGFPE), which libtest cannot: a crash ends the binary before it prints the
//! results of the tests in flight, and with tests on several threads the last line
//! printed says nothing about which one faulted. The suite met such a crash once
//! (test_graph_errors, SIGSEGV); this is what makes the next one say where it was. It
//! named the soak that reproduced that one (the driver's `cuCtxSynchronize` beside
//! captures: `test_device_wide_waits.rs`'s docs).
//!
//! The handler writes the names with `write(2)` only (async-signal-safe), then puts back
//! the handler that was there before (the standard library's stack-overflow report, or
//! the default) and returns: the faulting instruction runs again and the process dies of
//! the same signal as it would have, with the same exit status. A signal another process
//! sent is sent again, to that previous handler.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

/// The signals of a fault; `SIGABRT` is left alone (the library aborts on purpose, and
/// says why, where memory could otherwise be freed under the GPU).
const FAULTS: [libc::c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE];

/// Slots for the names of the tests running now: a test takes a free slot for its run.
/// More tests at once than slots (libtest runs one a thread) go unnamed.
const SLOTS: usize = 64;

/// Each slot points at a leaked `&'static str` (one per test run: a few words), or is
/// null. A pointer, not the name's two words, so that the handler reads a name whole.
static RUNNING: [AtomicPtr<&'static str>; SLOTS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];

/// The handlers found when ours were installed, by index in [`FAULTS`].
static PREVIOUS: OnceLock<[libc::sigaction; FAULTS.len()]> = OnceLock::new();

/// Installs the handler for the fault signals, once per process.
pub(crate) fn install() {
    PREVIOUS.get_or_init(|| {
        std::array::from_fn(|i| {
            // SAFETY: `sigaction` is plain data; all zeroes is an empty mask, no flags
            // and the default handler, overwritten below.
            let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                on_fault;
            ours.sa_sigaction = handler as libc::sighandler_t;
            // On the thread's alternate stack (the standard library sets one up for
            // each thread it starts), so that a stack overflow can be reported too.
            ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            // SAFETY: as above.
            let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: both point at valid `sigaction`s; `on_fault` has the
            // `SA_SIGINFO` handler's signature and does only async-signal-safe work.
            unsafe { libc::sigaction(FAULTS[i], &raw const ours, &raw mut previous) };
            previous
        })
    });
}

/// A test's registration for the time it runs: the slot its name is in, cleared on drop.
pub(crate) struct Running(Option<usize>);

impl Running {
    /// Registers `name` as running on this thread until the result is dropped.
    pub(crate) fn enter(name: &'static str) -> Running {
        let name: *mut &'static str = Box::leak(Box::new(name));
        let slot = RUNNING.iter().position(|slot| {
            slot.compare_exchange(
                std::ptr::null_mut(),
                name,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
        });
        Running(slot)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(slot) = self.0 {
            // The leaked name stays (a handler may be reading it).
            RUNNING[slot].store(std::ptr::null_mut(), Ordering::Release);
        }
    }
}

/// The handler: writes the signal and the running tests' names to stderr, puts the
/// previous handler back and returns (see the module's docs).
extern "C" fn on_fault(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    write_stderr(b"\ngpu-tests: fatal signal ");
    write_stderr(signal_name(signal));
    write_stderr(b" while running:");
    for slot in &RUNNING {
        let name = slot.load(Ordering::Acquire);
        if !name.is_null() {
            // SAFETY: a non-null slot points at a leaked `&'static str`, never freed.
            let name: &'static str = unsafe { *name };
            write_stderr(b" ");
            write_stderr(name.as_bytes());
        }
    }
    write_stderr(b"\n");
    let index = FAULTS.iter().position(|&s| s == signal);
    let previous = match (index, PREVIOUS.get()) {
        (Some(index), Some(previous)) => previous[index],
        // A fault while the handlers were being installed: the default action.
        // SAFETY: all zeroes is the default handler (`SIG_DFL`), no flags, no mask.
        _ => unsafe { std::mem::zeroed() },
    };
    // SAFETY: a `sigaction` the kernel returned for this signal, or the default one;
    // without it the fault would come back here for ever.
    unsafe { libc::sigaction(signal, &raw const previous, std::ptr::null_mut()) };
    // A fault comes back by itself when the instruction runs again; a signal sent by a
    // process (`kill`, `raise`: a code of 0 or below) does not, so it is sent again, to
    // the previous handler (blocked until this one returns).
    // SAFETY: with `SA_SIGINFO` the kernel passes a valid `siginfo_t`.
    let sent = unsafe { (*info).si_code } <= 0;
    if sent {
        // SAFETY: `raise` is async-signal-safe.
        unsafe { libc::raise(signal) };
    }
}

fn signal_name(signal: libc::c_int) -> &'static [u8] {
    match signal {
        libc::SIGSEGV => b"SIGSEGV",
        libc::SIGBUS => b"SIGBUS",
        libc::SIGILL => b"SIGILL",
        libc::SIGFPE => b"SIGFPE",
        _ => b"(another)",
    }
}

fn write_stderr(bytes: &[u8]) {
    // SAFETY: `bytes` is valid for its length; `write` is async-signal-safe. A short or
    // failed write loses part of a diagnostic, nothing else.
    let _ = unsafe { libc::write(libc::STDERR_FILENO, bytes.as_ptr().cast(), bytes.len()) };
}
