//! [`process_cpu_seconds`]: the CPU time of every thread of this process so far, to
//! charge a server design with what all its threads burned (the executor's, the
//! completion thread's, the copy-out threads'), not only with its wall time.

#![allow(unsafe_code)] // one libc call, proof below

use crate::error::{Error, Result};

/// User + system CPU time of the whole process, in seconds (`CLOCK_PROCESS_CPUTIME_ID`:
/// threads that have exited included).
pub fn process_cpu_seconds() -> Result<f64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` into the valid, exclusively
    // borrowed `now`; the clock id is a constant every Linux kernel supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    if rc != 0 {
        return Err(Error::msg(format!(
            "clock_gettime(CLOCK_PROCESS_CPUTIME_ID) failed: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_loop_adds_cpu_time_and_a_sleep_adds_little() -> Result<()> {
        let start = process_cpu_seconds()?;
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 50 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let busy = process_cpu_seconds()? - start;
        assert!(busy >= 0.03, "50 ms of spinning counted {busy} s of CPU");
        let before_sleep = process_cpu_seconds()?;
        std::thread::sleep(std::time::Duration::from_millis(50));
        let slept = process_cpu_seconds()? - before_sleep;
        // Other test threads of this process may run meanwhile; a sleep alone adds none.
        assert!(
            slept < busy + 0.05,
            "a 50 ms sleep counted {slept} s of CPU"
        );
        Ok(())
    }
}
