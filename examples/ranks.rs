//! What the `expert_parallel` and `pipeline_parallel` examples share: one function run
//! per rank, either as one rank of a launcher's job (`torchrun`, `srun`, `mpirun`) or,
//! when the program is started alone, on a thread per visible GPU of this process, all
//! joined through one NCCL id; and the exit status.

use stream_core::nccl::{self, Communicator, UniqueId, World};
use stream_core::{Device, Error, Result};

/// Runs `rank` on this process's rank, or on every visible GPU's, and exits with status
/// 1 unless each returned `Ok(true)` (its results matched), printing the error of one
/// that failed, and saying so when the machine has no GPU. `name` starts each line.
pub fn run(name: &str, rank: impl Fn(&Device, &Communicator) -> Result<bool> + Sync) {
    let outcome = match World::launched() {
        Ok(Some(world)) => launched(&world, &rank),
        Ok(None) => one_process(name, &rank),
        Err(e) => Err(e),
    };
    match outcome {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("{name}: {e}");
            if matches!(e, Error::NoDriver | Error::NoDevice { .. }) {
                eprintln!(
                    "{name}: this example needs an NVIDIA GPU and its driver; none was found."
                );
            }
            std::process::exit(1);
        }
    }
}

/// One process per GPU, under a launcher: this process is one rank.
fn launched(world: &World, rank: &impl Fn(&Device, &Communicator) -> Result<bool>) -> Result<bool> {
    let device = world.device()?;
    let comm = world.communicator(&device)?;
    rank(&device, &comm)
}

/// One process over every visible GPU: a thread per GPU, one communicator each, joined
/// through one id.
fn one_process(
    name: &str,
    rank: &(impl Fn(&Device, &Communicator) -> Result<bool> + Sync),
) -> Result<bool> {
    let ranks = Device::count()?;
    if ranks == 0 {
        return Err(Error::NoDevice {
            ordinal: 0,
            count: 0,
        });
    }
    println!(
        "{name}: one process, {ranks} GPU(s), NCCL {:?}",
        nccl::version()?
    );
    let id = UniqueId::new()?;
    let results: Vec<Result<bool>> = std::thread::scope(|threads| {
        let handles: Vec<_> = (0..ranks)
            .map(|r| {
                threads.spawn(move || {
                    let device = Device::new(r)?;
                    let comm = Communicator::join(&device, &id, r, ranks)?;
                    rank(&device, &comm)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a rank's thread panicked"))
            .collect()
    });
    let mut all_ok = true;
    for ok in results {
        all_ok &= ok?;
    }
    Ok(all_ok)
}
