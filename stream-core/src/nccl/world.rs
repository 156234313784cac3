//! [`World`]: this process's place among the ranks a launcher started (`torchrun`,
//! Slurm's `srun`, Open MPI's `mpirun`), read from the environment, and the
//! communicator of all of them.

use std::time::Duration;

use super::{rendezvous, slurm, Communicator, UniqueId};
use crate::device::Device;
use crate::driver::nccl::has_split;
use crate::error::{Error, LaunchEnvironment, Result};

/// Which launcher's variables described the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
/// set by hand), then `OMPI_COMM_WORLD_RANK`/`_SIZE`/`_LOCAL_RANK` (`mpirun`), then
/// `SLURM_PROCID`/`SLURM_NTASKS`/`SLURM_LOCALID` (`srun`). With more than one rank, they
/// meet at NCCL's `NCCL_COMM_ID` when it is set, else at `MASTER_ADDR`:`MASTER_PORT`,
/// where rank 0 listens (under `torchrun`, whose own store holds `MASTER_PORT`, at
/// `MASTER_PORT + 1`; `STREAM_CORE_RENDEZVOUS_PORT` overrides either; under `srun`,
/// missing ones are derived from the step's node list and the job's id, see
/// [`Launcher::Slurm`]). The meeting
/// waits `STREAM_CORE_RENDEZVOUS_TIMEOUT_S` seconds (default 300) for every rank.
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
    /// variable (`RANK`, `OMPI_COMM_WORLD_RANK`, `SLURM_PROCID`) is set: for programs
    /// that also run without a launcher. A launcher whose variables are incomplete (under
    /// `mpirun` without `MASTER_ADDR`, say) is still an [`Error::LaunchEnvironment`], so
    /// that a misconfigured job fails instead of running as independent processes.
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
                    "is not set, nor OMPI_COMM_WORLD_RANK or SLURM_PROCID: no launcher started \
                     this process; {START_WITH_A_LAUNCHER}"
                ),
            ));
        };
        let [rank_name, size_name, local_name, local_size_name] = names;
        let rank = number(rank_name)?
            .ok_or_else(|| bad(rank_name, format!("is missing; {START_WITH_A_LAUNCHER}")))?;
        let size = number(size_name)?.ok_or_else(|| {
            bad(
                size_name,
                format!("is missing ({rank_name} is set); {START_WITH_A_LAUNCHER}"),
            )
        })?;
        let local_rank = number(local_name)?.ok_or_else(|| {
            bad(
                local_name,
                format!(
                    "is missing ({rank_name} is set); it picks this rank's GPU; \
                     {START_WITH_A_LAUNCHER}"
                ),
            )
        })?;
        // Slurm writes e.g. "4(x2)" for SLURM_NTASKS_PER_NODE: a local size only when plain.
        let local_size = match launcher {
            Launcher::Slurm => lookup(local_size_name).and_then(|v| v.trim().parse().ok()),
            _ => number(local_size_name)?,
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
        if let Some(local_size) = local_size {
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
            local_size,
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
    /// bounded). Inside an [`nccl::group`](super::group) it is [`Error::NcclGroup`],
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

/// The launcher whose rank variable is set (first match: `RANK`, then
/// `OMPI_COMM_WORLD_RANK`, then `SLURM_PROCID`) and the names of its rank, size, local
/// rank and local size variables; `None` when none is set.
fn launcher_of(lookup: &impl Fn(&str) -> Option<String>) -> Option<(Launcher, [&'static str; 4])> {
    if lookup("RANK").is_some() {
        let launcher = match lookup("TORCHELASTIC_RUN_ID") {
            Some(_) => Launcher::Torchrun,
            None => Launcher::Environment,
        };
        Some((
            launcher,
            ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"],
        ))
    } else if lookup("OMPI_COMM_WORLD_RANK").is_some() {
        Some((
            Launcher::OpenMpi,
            [
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
            ],
        ))
    } else if lookup("SLURM_PROCID").is_some() {
        Some((
            Launcher::Slurm,
            [
                "SLURM_PROCID",
                "SLURM_NTASKS",
                "SLURM_LOCALID",
                "SLURM_NTASKS_PER_NODE",
            ],
        ))
    } else {
        None
    }
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
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn world(vars: &[(&str, &str)]) -> Result<World> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        World::from_vars(|name| map.get(name).cloned())
    }

    fn problem(vars: &[(&str, &str)]) -> String {
        world(vars).unwrap_err().to_string()
    }

    const TORCHRUN: [(&str, &str); 7] = [
        ("RANK", "3"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "4"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
        ("TORCHELASTIC_RUN_ID", "none"),
    ];

    #[test]
    fn torchrun_rank_size_local_rank_and_the_port_after_its_store() {
        let w = world(&TORCHRUN).unwrap();
        assert_eq!(
            (w.rank(), w.size(), w.local_rank(), w.local_size()),
            (3, 8, 1, Some(4))
        );
        assert_eq!(w.launcher(), Launcher::Torchrun);
        assert_eq!(
            w.meeting,
            Meeting::Tcp {
                address: "node0:29501".into(),
                port: 29501
            }
        );
    }

    #[test]
    fn by_hand_the_master_port_itself_and_an_override() {
        let vars = &TORCHRUN[..6];
        let w = world(vars).unwrap();
        assert_eq!(w.launcher(), Launcher::Environment);
        assert_eq!(
            w.meeting,
            Meeting::Tcp {
                address: "node0:29500".into(),
                port: 29500
            }
        );
        let mut more = vars.to_vec();
        more.push(("STREAM_CORE_RENDEZVOUS_PORT", "40000"));
        assert_eq!(
            world(&more).unwrap().meeting,
            Meeting::Tcp {
                address: "node0:40000".into(),
                port: 40000
            }
        );
    }

    #[test]
    fn open_mpi_and_slurm() {
        let w = world(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "6"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
            ("NCCL_COMM_ID", "10.0.0.1:5000"),
        ])
        .unwrap();
        assert_eq!(
            (w.rank(), w.size(), w.local_rank(), w.launcher()),
            (5, 6, 2, Launcher::OpenMpi)
        );
        assert_eq!(w.meeting, Meeting::NcclCommId);
        let w = world(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS_PER_NODE", "2(x1)"),
            ("MASTER_ADDR", "::1"),
            ("MASTER_PORT", "1234"),
        ])
        .unwrap();
        assert_eq!((w.launcher(), w.local_size()), (Launcher::Slurm, None));
        assert_eq!(
            w.meeting,
            Meeting::Tcp {
                address: "[::1]:1234".into(),
                port: 1234
            }
        );
    }

    #[test]
    fn under_srun_without_master_addr_rank_zero_is_the_steps_first_node() {
        let srun = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_JOB_ID", "31337"),
            ("SLURM_JOB_NODELIST", "gpu[01-08]"),
            ("SLURM_STEP_NODELIST", "gpu[03-04]"),
        ];
        assert_eq!(
            world(&srun).unwrap().meeting,
            Meeting::Tcp {
                address: "gpu03:21337".into(),
                port: 21337
            }
        );
        // What is exported wins, each on its own.
        let mut exported = srun.to_vec();
        exported.push(("MASTER_ADDR", "head"));
        assert_eq!(
            world(&exported).unwrap().meeting,
            Meeting::Tcp {
                address: "head:21337".into(),
                port: 21337
            }
        );
        exported.push(("MASTER_PORT", "29400"));
        assert_eq!(
            world(&exported).unwrap().meeting,
            Meeting::Tcp {
                address: "head:29400".into(),
                port: 29400
            }
        );
        // Nothing to derive them from: each missing one is named.
        let bare = &srun[..3];
        assert!(
            problem(bare).contains("SLURM_STEP_NODELIST"),
            "{}",
            problem(bare)
        );
        let mut no_job = bare.to_vec();
        no_job.push(("SLURM_NODELIST", "n1"));
        assert!(
            problem(&no_job).contains("SLURM_JOB_ID"),
            "{}",
            problem(&no_job)
        );
        let mut unreadable = bare.to_vec();
        unreadable.push(("SLURM_STEP_NODELIST", "gpu[01-"));
        assert!(problem(&unreadable).contains("MASTER_ADDR is missing"));
    }

    #[test]
    fn one_rank_needs_no_meeting_place() {
        let w = world(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")]).unwrap();
        assert_eq!(w.meeting, Meeting::Alone);
    }

    #[test]
    fn each_missing_or_contradictory_variable_is_named() {
        assert!(problem(&[]).contains("RANK is not set, nor OMPI_COMM_WORLD_RANK or SLURM_PROCID"));
        assert!(problem(&[("RANK", "0")]).contains("WORLD_SIZE is missing"));
        assert!(problem(&[("RANK", "0"), ("WORLD_SIZE", "2")]).contains("LOCAL_RANK is missing"));
        assert!(problem(&[("RANK", "x"), ("WORLD_SIZE", "2")])
            .contains("RANK is \"x\", not a non-negative"));
        assert!(
            problem(&[("RANK", "2"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")]).contains(
                "RANK and WORLD_SIZE contradict each other: rank 2 is not below the size 2"
            )
        );
        assert!(
            problem(&[("RANK", "0"), ("WORLD_SIZE", "0"), ("LOCAL_RANK", "0")])
                .contains("WORLD_SIZE is 0")
        );
        assert!(problem(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "2"),
            ("LOCAL_WORLD_SIZE", "2")
        ])
        .contains("LOCAL_RANK and LOCAL_WORLD_SIZE contradict each other"));
        assert!(problem(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("LOCAL_WORLD_SIZE", "3")
        ])
        .contains("LOCAL_WORLD_SIZE and WORLD_SIZE contradict each other"));
        assert!(
            problem(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")])
                .contains("MASTER_ADDR is missing")
        );
        assert!(problem(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "h")
        ])
        .contains("MASTER_PORT is missing"));
        assert!(problem(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "99999")
        ])
        .contains("MASTER_PORT is \"99999\", not a port number"));
        assert!(problem(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("LOCAL_RANK", "0"),
            ("STREAM_CORE_RENDEZVOUS_TIMEOUT_S", "-1")
        ])
        .contains("STREAM_CORE_RENDEZVOUS_TIMEOUT_S is \"-1\""));
    }

    fn launched(vars: &[(&str, &str)]) -> Result<Option<World>> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        World::launched_from_vars(|name| map.get(name).cloned())
    }

    #[test]
    fn launched_is_none_only_without_any_launcher() {
        assert!(launched(&[]).unwrap().is_none());
        // Variables of no launcher's rank do not count as a launcher.
        assert!(launched(&[("MASTER_ADDR", "h"), ("LOCAL_RANK", "0")])
            .unwrap()
            .is_none());
        let w = launched(&TORCHRUN).unwrap().unwrap();
        assert_eq!((w.rank(), w.launcher()), (3, Launcher::Torchrun));
        // mpirun without a meeting place: an error, not "no launcher" (each rank would
        // otherwise run the whole job on its own).
        let err = launched(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("MASTER_ADDR is missing"), "{err}");
        assert!(launched(&[("SLURM_PROCID", "x")])
            .unwrap_err()
            .to_string()
            .contains("SLURM_PROCID is \"x\""));
    }

    #[test]
    fn the_local_rank_picks_the_gpu_unless_one_gpu_is_given_to_the_rank() {
        // Every GPU visible: the local rank is the ordinal.
        assert_eq!(gpu_ordinal(1, "LOCAL_RANK", 2, false).unwrap(), 1);
        assert_eq!(gpu_ordinal(0, "LOCAL_RANK", 1, true).unwrap(), 0);
        // One GPU named in CUDA_VISIBLE_DEVICES: it is this rank's, whatever its local rank.
        assert_eq!(gpu_ordinal(3, "SLURM_LOCALID", 1, true).unwrap(), 0);
        // More ranks than visible GPUs otherwise: an error naming the variable.
        let err = gpu_ordinal(2, "LOCAL_RANK", 2, false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("LOCAL_RANK is 2 but this host has 2 visible GPUs"),
            "{err}"
        );
        let err = gpu_ordinal(1, "LOCAL_RANK", 1, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("1 visible GPU:"), "{err}");
        let err = gpu_ordinal(0, "OMPI_COMM_WORLD_LOCAL_RANK", 0, true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no visible GPU"), "{err}");
    }

    #[test]
    fn one_gpu_is_given_when_cuda_visible_devices_names_exactly_one() {
        let given = |v: Option<&str>| {
            one_gpu_given(&|name: &str| {
                (name == "CUDA_VISIBLE_DEVICES")
                    .then(|| v.map(str::to_owned))
                    .flatten()
            })
        };
        assert!(!given(None));
        assert!(given(Some("1")));
        assert!(given(Some("GPU-5e78c893-17bb-f19b-8b1a-a4bd2c52d80c")));
        assert!(given(Some(" 0 ,")));
        assert!(!given(Some("0,1")));
        assert!(!given(Some("")));
        let w = world(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1234"),
            ("CUDA_VISIBLE_DEVICES", "1"),
        ])
        .unwrap();
        assert!(w.one_gpu_given);
    }

    #[test]
    fn only_a_missing_launcher_or_variable_suggests_starting_one() {
        let suggests =
            |vars: &[(&str, &str)]| problem(vars).contains("start the program with torchrun");
        assert!(suggests(&[]));
        assert!(suggests(&[("RANK", "0")]));
        assert!(suggests(&[("RANK", "0"), ("WORLD_SIZE", "2")]));
        // Found a launcher; what is wrong has its own advice.
        let mpirun_without_address = [
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ];
        assert!(!suggests(&mpirun_without_address));
        assert!(problem(&mpirun_without_address).contains("under mpirun export them"));
        assert!(!suggests(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0")
        ]));
        let err = gpu_ordinal(2, "LOCAL_RANK", 2, false)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("start the program with torchrun"), "{err}");
    }
}
