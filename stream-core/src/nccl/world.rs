//! [`World`]: this process's place among the ranks a launcher started (`torchrun`,
//! Slurm's `srun`, the `mpirun` of Open MPI, MPICH, Intel MPI or MVAPICH2, HPE Cray
//! PALS's `mpiexec`, Flux's `flux run`), read from the environment, and the communicator
//! of all of them.

use std::time::Duration;

use super::{rendezvous, slurm, Communicator, UniqueId};
use crate::device::Device;
use crate::driver::nccl::has_split;
use crate::error::{Error, LaunchEnvironment, Result};

/// Which launcher's variables described the world. More may be read in later versions
/// (a `match` needs a wildcard arm).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Launcher {
    /// `torchrun` (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, with `TORCHELASTIC_RUN_ID`).
    Torchrun,
    /// `RANK`, `WORLD_SIZE` and `LOCAL_RANK` set by hand or by another launcher.
    Environment,
    /// Open MPI's `mpirun` (`OMPI_COMM_WORLD_RANK`, `_SIZE`, `_LOCAL_RANK`). Export
    /// `MASTER_ADDR` and `MASTER_PORT` (`-x`). Bound to one core each, as Open MPI binds
    /// two ranks by default, NCCL's connection setup shares that core with the rank's
    /// thread: the first collective took 5x longer on two H100s (later ones did not
    /// change; PyTorch's alike); `--bind-to none` or `numa` avoids it.
    OpenMpi,
    /// Hydra, the `mpiexec` (and `mpirun`) of MPICH and Intel MPI (`PMI_RANK`,
    /// `PMI_SIZE`, `MPI_LOCALRANKID`, `MPI_LOCALNRANKS`). Export `MASTER_ADDR` and
    /// `MASTER_PORT` (`-genv`). Recognised by `PMI_RANK`, except beside `SLURM_PROCID`
    /// without `MPI_LOCALRANKID`: `srun --mpi=pmi2` sets `PMI_RANK` too, and is read as
    /// [`Launcher::Slurm`].
    Hydra,
    /// MVAPICH2's `mpirun_rsh` and `mpiexec` (`MV2_COMM_WORLD_RANK`, `_SIZE`,
    /// `_LOCAL_RANK`, `_LOCAL_SIZE`). Export `MASTER_ADDR` and `MASTER_PORT`.
    Mvapich,
    /// HPE Cray PALS's `mpiexec` (PBS on HPE Cray systems), through Cray PMI's variables
    /// (`PMI_RANK`, `PMI_SIZE`, `PMI_LOCAL_RANK`, `PMI_LOCAL_SIZE`). Export `MASTER_ADDR`
    /// and `MASTER_PORT` (`--env`). Recognised by `PMI_RANK` with `PMI_LOCAL_RANK` outside
    /// a Slurm step (under `srun`, Slurm's own variables are read).
    Pals,
    /// Flux's `flux run` and `flux submit` (`FLUX_TASK_RANK`, `FLUX_JOB_SIZE`,
    /// `FLUX_TASK_LOCAL_ID`; no local size). Export `MASTER_ADDR` and `MASTER_PORT`
    /// (`--env`). Read before `PMI_RANK` (Flux sets it for MPI's bootstrap) and before
    /// Slurm's variables (a Flux instance started by `srun` passes Slurm's on to its jobs).
    Flux,
    /// Slurm's `srun` (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`). Without
    /// `MASTER_ADDR`, rank 0's host is the first node of `SLURM_STEP_NODELIST` (where
    /// Slurm's block and cyclic distributions place task 0); without `MASTER_PORT`, the
    /// port is `20000 + SLURM_JOB_ID % 10000`. Export them where that does not hold.
    Slurm,
}

/// How the ranks meet to share the communicator's [`UniqueId`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Meeting {
    /// One rank: nothing to share.
    Alone,
    /// NCCL's own bootstrap at `NCCL_COMM_ID`: every rank derives the same id from it.
    NcclCommId,
    /// Rank 0 listens on `port` and the others reach it at `address` (`host:port`).
    Tcp { address: String, port: u16 },
}

/// This process's place in a distributed job: its rank, the number of ranks, its rank
/// on this host (which picks its GPU), and how the ranks meet.
///
/// Variables read, first match wins: `RANK`/`WORLD_SIZE`/`LOCAL_RANK` (`torchrun`, or
/// set by hand), then `OMPI_COMM_WORLD_RANK`/`_SIZE`/`_LOCAL_RANK` (Open MPI's
/// `mpirun`), `MV2_COMM_WORLD_RANK`/`_SIZE`/`_LOCAL_RANK` (MVAPICH2's),
/// `FLUX_TASK_RANK`/`FLUX_JOB_SIZE`/`FLUX_TASK_LOCAL_ID` (Flux's),
/// `PMI_RANK`/`PMI_SIZE`/`MPI_LOCALRANKID` (MPICH's and Intel MPI's; see
/// [`Launcher::Hydra`] for `srun --mpi=pmi2`), `PMI_RANK`/`PMI_SIZE`/`PMI_LOCAL_RANK`
/// (HPE Cray PALS's), then
/// `SLURM_PROCID`/`SLURM_NTASKS`/`SLURM_LOCALID` (`srun`; an MPI launcher started
/// inside a Slurm allocation inherits the allocation's `SLURM_PROCID`, so the MPI
/// launchers come first). With more than one rank, they meet at NCCL's `NCCL_COMM_ID`
/// when it is set, else at `MASTER_ADDR`:`MASTER_PORT`, where rank 0 listens (under
/// `torchrun`, whose own store holds `MASTER_PORT`, at `MASTER_PORT + 1`;
/// `STREAM_CORE_RENDEZVOUS_PORT` overrides either; under `srun`, missing ones are
/// derived from the step's node list and the job's id, see [`Launcher::Slurm`]). The
/// meeting waits `STREAM_CORE_RENDEZVOUS_TIMEOUT_S` seconds (default 300) for every
/// rank.
///
/// ```no_run
/// # fn main() -> stream_core::Result<()> {
/// let world = stream_core::nccl::World::from_env()?;
/// println!("rank {} of {}", world.rank(), world.size());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct World {
    rank: usize,
    size: usize,
    local_rank: usize,
    local_size: Option<usize>,
    launcher: Launcher,
    local_rank_variable: &'static str,
    /// `CUDA_VISIBLE_DEVICES` names exactly one GPU: the launcher (or a wrapper script)
    /// gave this rank its own.
    one_gpu_given: bool,
    meeting: Meeting,
    timeout: Duration,
}

/// Default for how long the ranks wait for each other.
const DEFAULT_RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(300);

/// What to do when no launcher, or only part of one, described the world.
const START_WITH_A_LAUNCHER: &str = "start the program with torchrun (--no-python), srun or \
     mpirun, or set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT yourself";

fn bad(variable: &str, problem: impl Into<String>) -> Error {
    Error::from(LaunchEnvironment {
        variable: variable.to_owned(),
        problem: problem.into(),
    })
}

impl World {
    /// The world the launcher's environment describes, or
    /// [`Error::LaunchEnvironment`] naming the variable that is missing, not a number,
    /// or contradicts another.
    pub fn from_env() -> Result<World> {
        World::from_vars(|name| std::env::var(name).ok())
    }

    /// The world a launcher started this process in, or `None` when no launcher's rank
    /// variable (`RANK`, `OMPI_COMM_WORLD_RANK`, `MV2_COMM_WORLD_RANK`, `FLUX_TASK_RANK`,
    /// `PMI_RANK`, `SLURM_PROCID`) is set: for programs that also run without a launcher.
    /// A launcher whose variables are incomplete (under `mpirun` without `MASTER_ADDR`,
    /// say) is still an [`Error::LaunchEnvironment`], so that a misconfigured job fails
    /// instead of running as independent processes.
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// match stream_core::nccl::World::launched()? {
    ///     Some(world) => println!("rank {} of {}", world.rank(), world.size()),
    ///     None => println!("no launcher: one process drives every GPU"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn launched() -> Result<Option<World>> {
        World::launched_from_vars(|name| std::env::var(name).ok())
    }

    /// [`launched`](Self::launched) over any source of variables, as
    /// [`from_vars`](Self::from_vars).
    pub fn launched_from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<Option<World>> {
        if launcher_of(&lookup).is_none() {
            return Ok(None);
        }
        World::from_vars(lookup).map(Some)
    }

    /// [`from_env`](Self::from_env) over any source of variables (`lookup(name)` is the
    /// value of `name`, if set): for tests, and for programs that get them elsewhere.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Result<World> {
        let number =
            |name: &'static str| -> Result<Option<usize>> {
                match lookup(name) {
                    None => Ok(None),
                    Some(v) => v.trim().parse::<usize>().map(Some).map_err(|_| {
                        bad(name, format!("is {v:?}, not a non-negative whole number"))
                    }),
                }
            };
        let Some((launcher, names)) = launcher_of(&lookup) else {
            return Err(bad(
                "RANK",
                format!(
                    "is not set, nor OMPI_COMM_WORLD_RANK, MV2_COMM_WORLD_RANK, FLUX_TASK_RANK, \
                     PMI_RANK or SLURM_PROCID: no launcher started this process; \
                     {START_WITH_A_LAUNCHER}"
                ),
            ));
        };
        let Variables {
            rank: rank_name,
            size: size_name,
            local_rank: local_name,
            local_size: local_size_name,
        } = names;
        let rank = number(rank_name)?
            .ok_or_else(|| bad(rank_name, format!("is missing; {START_WITH_A_LAUNCHER}")))?;
        let size = number(size_name)?.ok_or_else(|| {
            bad(
                size_name,
                format!("is missing ({rank_name} is set); {START_WITH_A_LAUNCHER}"),
            )
        })?;
        let local_rank = number(local_name)?.ok_or_else(|| {
            // PMI_RANK alone: MPICH and Intel MPI set MPI_LOCALRANKID beside it, HPE
            // Cray PALS PMI_LOCAL_RANK.
            let or_pals = match launcher {
                Launcher::Hydra => " (nor PMI_LOCAL_RANK, which HPE Cray PALS sets)",
                _ => "",
            };
            bad(
                local_name,
                format!(
                    "is missing{or_pals} ({rank_name} is set); it picks this rank's GPU; \
                     {START_WITH_A_LAUNCHER}"
                ),
            )
        })?;
        if launcher == Launcher::Slurm {
            same_rank_as_pmi(&lookup, rank)?;
        }
        // Slurm writes e.g. "4(x2)" for SLURM_NTASKS_PER_NODE: a local size only when plain.
        let local_size = match (launcher, local_size_name) {
            (_, None) => None,
            (Launcher::Slurm, Some(name)) => lookup(name)
                .and_then(|v| v.trim().parse().ok())
                .map(|n| (n, name)),
            (_, Some(name)) => number(name)?.map(|n| (n, name)),
        };
        if size == 0 {
            return Err(bad(size_name, "is 0: a world has at least one rank"));
        }
        if rank >= size {
            return Err(bad(
                &format!("{rank_name} and {size_name}"),
                format!("contradict each other: rank {rank} is not below the size {size}"),
            ));
        }
        if let Some((local_size, local_size_name)) = local_size {
            if local_rank >= local_size {
                return Err(bad(
                    &format!("{local_name} and {local_size_name}"),
                    format!(
                        "contradict each other: local rank {local_rank} is not below {local_size}"
                    ),
                ));
            }
            if local_size > size {
                return Err(bad(
                    &format!("{local_size_name} and {size_name}"),
                    format!(
                        "contradict each other: {local_size} ranks on this host but {size} in all"
                    ),
                ));
            }
        }
        let meeting = meeting(&lookup, launcher, size)?;
        let timeout = match lookup("STREAM_CORE_RENDEZVOUS_TIMEOUT_S") {
            None => DEFAULT_RENDEZVOUS_TIMEOUT,
            Some(v) => match v.trim().parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 => Duration::from_secs_f64(s),
                _ => {
                    return Err(bad(
                        "STREAM_CORE_RENDEZVOUS_TIMEOUT_S",
                        format!("is {v:?}, not a positive number of seconds"),
                    ))
                }
            },
        };
        Ok(World {
            rank,
            size,
            local_rank,
            local_size: local_size.map(|(n, _)| n),
            launcher,
            local_rank_variable: local_name,
            one_gpu_given: one_gpu_given(&lookup),
            meeting,
            timeout,
        })
    }

    /// This process's rank, `0..size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// This process's rank among those on its host: the ordinal of its GPU.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// The number of ranks on this host, when the launcher says.
    pub fn local_size(&self) -> Option<usize> {
        self.local_size
    }

    /// The launcher whose variables were read.
    pub fn launcher(&self) -> Launcher {
        self.launcher
    }

    /// How long [`communicator`](Self::communicator) waits for every rank.
    pub fn rendezvous_timeout(&self) -> Duration {
        self.timeout
    }

    /// Sets [`rendezvous_timeout`](Self::rendezvous_timeout).
    pub fn set_rendezvous_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// This rank's GPU: the device whose ordinal is its local rank (among the devices
    /// `CUDA_VISIBLE_DEVICES` leaves visible), or the one visible device when
    /// `CUDA_VISIBLE_DEVICES` names exactly one: then the launcher gave each rank its own
    /// GPU (`srun --gpus-per-task=1`, or a wrapper that sets it from the local rank, as
    /// many `mpirun` scripts do). [`Error::LaunchEnvironment`] when the host has no such
    /// GPU (more ranks per host than GPUs, or none at all).
    pub fn device(&self) -> Result<Device> {
        let count = Device::count()?;
        Device::new(gpu_ordinal(
            self.local_rank,
            self.local_rank_variable,
            count,
            self.one_gpu_given,
        )?)
    }

    /// This rank's member of the communicator of every rank, on `device` (normally
    /// [`device`](Self::device)). Every rank calls it; it returns once all have joined,
    /// or fails when one does not arrive within
    /// [`rendezvous_timeout`](Self::rendezvous_timeout): [`Error::Rendezvous`] at the
    /// exchange of NCCL's id, [`Error::JoinTimedOut`] inside NCCL's own wait
    /// ([`Communicator::join_within`]; with NCCL older than 2.18 that wait is not
    /// bounded). Inside an [`nccl::group`](fn@super::group) it is [`Error::NcclGroup`],
    /// before the exchange (NCCL would make the communicator only at the group's end).
    pub fn communicator(&self, device: &Device) -> Result<Communicator> {
        // Before the exchange, so that a rank that asks inside a group fails at once
        // rather than after the other ranks have met it.
        super::communicator::refuse_inside_a_group()?;
        let id = match &self.meeting {
            Meeting::Alone | Meeting::NcclCommId => UniqueId::new()?,
            Meeting::Tcp { address, port } if self.rank == 0 => {
                let id = UniqueId::new()?;
                rendezvous::serve(address, *port, &id, self.size, self.timeout)?;
                id
            }
            Meeting::Tcp { address, .. } => {
                rendezvous::fetch(address, self.rank, self.size, self.timeout)?
            }
        };
        // The wait for every rank inside NCCL is bounded too, where NCCL can: `join_within`
        // needs 2.18's `ncclCommSplit`.
        if has_split()? {
            Communicator::join_within(device, &id, self.rank, self.size, self.timeout)
        } else {
            Communicator::join(device, &id, self.rank, self.size)
        }
    }
}

/// Under Slurm, a `PMI_RANK` that is not `SLURM_PROCID`: a launcher started inside the
/// allocation (which inherits its `SLURM_PROCID`) set it without a local rank this crate
/// reads, so Slurm's variables do not describe this process (`srun --mpi=pmi2` sets the
/// two alike).
fn same_rank_as_pmi(lookup: &impl Fn(&str) -> Option<String>, slurm_rank: usize) -> Result<()> {
    let Some(pmi_rank) = lookup("PMI_RANK") else {
        return Ok(());
    };
    if pmi_rank.trim().parse::<usize>().ok() == Some(slurm_rank) {
        return Ok(());
    }
    Err(bad(
        "PMI_RANK and SLURM_PROCID",
        format!(
            "contradict each other ({pmi_rank:?} and {slurm_rank}): an MPI launcher started \
             inside a Slurm allocation, whose SLURM_PROCID is not this process's rank, and it \
             set no local rank this crate reads (MPI_LOCALRANKID, PMI_LOCAL_RANK); start the \
             ranks with srun, or set RANK, WORLD_SIZE and LOCAL_RANK yourself"
        ),
    ))
}

/// The variables a launcher sets: this process's rank, the number of ranks, its rank on
/// this host, and the number of ranks on this host where the launcher sets one.
#[derive(Clone, Copy)]
struct Variables {
    rank: &'static str,
    size: &'static str,
    local_rank: &'static str,
    local_size: Option<&'static str>,
}

/// Each launcher's [`Variables`].
const TORCHRUN: Variables = Variables {
    rank: "RANK",
    size: "WORLD_SIZE",
    local_rank: "LOCAL_RANK",
    local_size: Some("LOCAL_WORLD_SIZE"),
};
const OPEN_MPI: Variables = Variables {
    rank: "OMPI_COMM_WORLD_RANK",
    size: "OMPI_COMM_WORLD_SIZE",
    local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
    local_size: Some("OMPI_COMM_WORLD_LOCAL_SIZE"),
};
const MVAPICH: Variables = Variables {
    rank: "MV2_COMM_WORLD_RANK",
    size: "MV2_COMM_WORLD_SIZE",
    local_rank: "MV2_COMM_WORLD_LOCAL_RANK",
    local_size: Some("MV2_COMM_WORLD_LOCAL_SIZE"),
};
const FLUX: Variables = Variables {
    rank: "FLUX_TASK_RANK",
    size: "FLUX_JOB_SIZE",
    local_rank: "FLUX_TASK_LOCAL_ID",
    local_size: None,
};
const PALS: Variables = Variables {
    rank: "PMI_RANK",
    size: "PMI_SIZE",
    local_rank: "PMI_LOCAL_RANK",
    local_size: Some("PMI_LOCAL_SIZE"),
};
const HYDRA: Variables = Variables {
    rank: "PMI_RANK",
    size: "PMI_SIZE",
    local_rank: "MPI_LOCALRANKID",
    local_size: Some("MPI_LOCALNRANKS"),
};
const SLURM: Variables = Variables {
    rank: "SLURM_PROCID",
    size: "SLURM_NTASKS",
    local_rank: "SLURM_LOCALID",
    local_size: Some("SLURM_NTASKS_PER_NODE"),
};

/// The launcher whose rank variable is set (first match: `RANK`, then
/// `OMPI_COMM_WORLD_RANK`, `MV2_COMM_WORLD_RANK`, `FLUX_TASK_RANK`, `PMI_RANK` (Hydra's
/// with `MPI_LOCALRANKID`, PALS's with `PMI_LOCAL_RANK`; unless Slurm's PMI-2 set it:
/// see [`Launcher::Hydra`]), then `SLURM_PROCID`) and its variables; `None` when none is
/// set.
fn launcher_of(lookup: &impl Fn(&str) -> Option<String>) -> Option<(Launcher, Variables)> {
    let set = |name: &str| lookup(name).is_some();
    Some(if set("RANK") {
        match set("TORCHELASTIC_RUN_ID") {
            true => (Launcher::Torchrun, TORCHRUN),
            false => (Launcher::Environment, TORCHRUN),
        }
    } else if set("OMPI_COMM_WORLD_RANK") {
        (Launcher::OpenMpi, OPEN_MPI)
    } else if set("MV2_COMM_WORLD_RANK") {
        (Launcher::Mvapich, MVAPICH)
    } else if set("FLUX_TASK_RANK") {
        (Launcher::Flux, FLUX)
    } else if set("PMI_RANK") && (set("MPI_LOCALRANKID") || !set("SLURM_PROCID")) {
        match set("PMI_LOCAL_RANK") && !set("MPI_LOCALRANKID") {
            true => (Launcher::Pals, PALS),
            false => (Launcher::Hydra, HYDRA),
        }
    } else if set("SLURM_PROCID") {
        (Launcher::Slurm, SLURM)
    } else {
        return None;
    })
}

/// Whether `CUDA_VISIBLE_DEVICES` names exactly one device (an index, a UUID or a MIG
/// instance).
fn one_gpu_given(lookup: &impl Fn(&str) -> Option<String>) -> bool {
    lookup("CUDA_VISIBLE_DEVICES").is_some_and(|v| {
        v.split(',')
            .filter(|entry| !entry.trim().is_empty())
            .count()
            == 1
    })
}

/// The ordinal of the GPU of local rank `local_rank` (read from `variable`) among `count`
/// visible ones (see [`World::device`]).
fn gpu_ordinal(
    local_rank: usize,
    variable: &str,
    count: usize,
    one_gpu_given: bool,
) -> Result<usize> {
    if local_rank < count {
        return Ok(local_rank);
    }
    if one_gpu_given && count == 1 {
        return Ok(0);
    }
    let gpus = match count {
        0 => "no visible GPU".to_owned(),
        1 => "1 visible GPU".to_owned(),
        n => format!("{n} visible GPUs"),
    };
    Err(bad(
        variable,
        format!(
            "is {local_rank} but this host has {gpus}: start at most one rank per GPU on each \
             host (e.g. --nproc-per-node={count}), or make the GPUs visible \
             (CUDA_VISIBLE_DEVICES; one GPU named there is this rank's own)"
        ),
    ))
}

/// How the ranks of a world of `size` meet (see [`World`]).
fn meeting(
    lookup: &impl Fn(&str) -> Option<String>,
    launcher: Launcher,
    size: usize,
) -> Result<Meeting> {
    if size == 1 {
        return Ok(Meeting::Alone);
    }
    if lookup("NCCL_COMM_ID").is_some() {
        return Ok(Meeting::NcclCommId);
    }
    let slurm = launcher == Launcher::Slurm;
    let host = match lookup("MASTER_ADDR") {
        Some(host) => host,
        None if slurm => slurm::rank_zero_host(lookup).ok_or_else(|| {
            bad(
                "MASTER_ADDR",
                "is missing, and so are NCCL_COMM_ID and a node list Slurm would name rank \
                 0's host in (SLURM_STEP_NODELIST): export MASTER_ADDR and MASTER_PORT",
            )
        })?,
        None => {
            return Err(bad(
                "MASTER_ADDR",
                "is missing, and so is NCCL_COMM_ID: set MASTER_ADDR and MASTER_PORT to rank \
                 0's host and a free port (torchrun sets them; under mpirun export them)",
            ))
        }
    };
    let master_port: u16 = match lookup("MASTER_PORT") {
        Some(port) => port
            .trim()
            .parse()
            .map_err(|_| bad("MASTER_PORT", format!("is {port:?}, not a port number")))?,
        None if slurm => slurm::job_port(lookup).ok_or_else(|| {
            bad(
                "MASTER_PORT",
                "is missing, and so is a SLURM_JOB_ID to derive it from: export MASTER_PORT",
            )
        })?,
        None => return Err(bad("MASTER_PORT", "is missing (MASTER_ADDR is set)")),
    };
    let port = match lookup("STREAM_CORE_RENDEZVOUS_PORT") {
        Some(v) => v.trim().parse().map_err(|_| {
            bad(
                "STREAM_CORE_RENDEZVOUS_PORT",
                format!("is {v:?}, not a port number"),
            )
        })?,
        // torchrun's agent serves its own store on MASTER_PORT.
        None if launcher == Launcher::Torchrun => master_port.checked_add(1).ok_or_else(|| {
            bad(
                "MASTER_PORT",
                "is 65535: under torchrun the rendezvous uses the next port",
            )
        })?,
        None => master_port,
    };
    let host = host.trim();
    let address = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Ok(Meeting::Tcp { address, port })
}

#[cfg(test)]
mod tests;
