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

    /// Spinning advances the process's CPU clock by what it burns (spun until 30 ms are
    /// counted, however long a loaded machine takes to give them: on a 2-core CI machine
    /// with a build beside it, 50 ms of wall time gave 29 ms of CPU); a sleep advances it
    /// by no more than the other threads could burn meanwhile.
    #[test]
    fn a_busy_loop_adds_cpu_time_and_a_sleep_adds_little() -> Result<()> {
        let start = process_cpu_seconds()?;
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while process_cpu_seconds()? - start < 0.03 {
            assert!(
                t.elapsed().as_secs() < 10,
                "10 s of spinning counted {} s of CPU",
                process_cpu_seconds()? - start
            );
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let before_sleep = process_cpu_seconds()?;
        let t = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (slept, wall) = (
            process_cpu_seconds()? - before_sleep,
            t.elapsed().as_secs_f64(),
        );
        // Other test threads of this process may run meanwhile; this one adds none.
        assert!(
            slept <= wall * cores + 0.01,
            "a {wall} s sleep counted {slept} s of CPU on {cores} cores"
        );
        Ok(())
    }
}
