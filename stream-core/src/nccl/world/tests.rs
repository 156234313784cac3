//! The unit tests of `world.rs`.

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
    let none = problem(&[]);
    assert!(
        none.contains("RANK is not set, nor OMPI_COMM_WORLD_RANK, MV2_COMM_WORLD_RANK, ")
            && none.contains("FLUX_TASK_RANK, PMI_RANK or SLURM_PROCID"),
        "{none}"
    );
    assert!(problem(&[("RANK", "0")]).contains("WORLD_SIZE is missing"));
    assert!(problem(&[("RANK", "0"), ("WORLD_SIZE", "2")]).contains("LOCAL_RANK is missing"));
    assert!(problem(&[("RANK", "x"), ("WORLD_SIZE", "2")])
        .contains("RANK is \"x\", not a non-negative"));
    assert!(
        problem(&[("RANK", "2"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")])
            .contains("RANK and WORLD_SIZE contradict each other: rank 2 is not below the size 2")
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

const HYDRA: [(&str, &str); 6] = [
    ("PMI_RANK", "4"),
    ("PMI_SIZE", "5"),
    ("MPI_LOCALRANKID", "1"),
    ("MPI_LOCALNRANKS", "2"),
    ("MASTER_ADDR", "node0"),
    ("MASTER_PORT", "29500"),
];

#[test]
fn mpich_and_intel_mpi_through_hydra() {
    let w = world(&HYDRA).unwrap();
    assert_eq!(
        (w.rank(), w.size(), w.local_rank(), w.local_size()),
        (4, 5, 1, Some(2))
    );
    assert_eq!(w.launcher(), Launcher::Hydra);
    assert_eq!(
        w.meeting,
        Meeting::Tcp {
            address: "node0:29500".into(),
            port: 29500
        }
    );
    // Started inside a Slurm allocation, whose SLURM_PROCID (the batch step's, or the
    // Hydra proxy's on each node) is not the rank.
    let mut in_slurm = HYDRA.to_vec();
    in_slurm.extend([
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_LOCALID", "0"),
    ]);
    let w = world(&in_slurm).unwrap();
    assert_eq!((w.rank(), w.size(), w.launcher()), (4, 5, Launcher::Hydra));
    // A local rank past the host's count contradicts it.
    let mut past = HYDRA.to_vec();
    past[2] = ("MPI_LOCALRANKID", "2");
    let p = problem(&past);
    assert!(p.contains("MPI_LOCALRANKID and MPI_LOCALNRANKS"), "{p}");
    // PMI_RANK without the local rank Hydra sets beside it: an error naming it, not a
    // process that runs as if no launcher had started it.
    let p = problem(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")]);
    assert!(
        p.contains("MPI_LOCALRANKID") && p.contains("missing"),
        "{p}"
    );
    assert!(World::launched_from_vars(|n| (n == "PMI_RANK").then(|| "1".into())).is_err());
}

#[test]
fn slurm_pmi2_sets_pmi_rank_too_and_stays_slurm() {
    let w = world(&[
        ("PMI_RANK", "1"),
        ("PMI_SIZE", "2"),
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_LOCALID", "1"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
    ])
    .unwrap();
    assert_eq!(
        (w.rank(), w.size(), w.local_rank(), w.launcher()),
        (1, 2, 1, Launcher::Slurm)
    );
}

#[test]
fn mvapich2() {
    let mv2 = [
        ("MV2_COMM_WORLD_RANK", "2"),
        ("MV2_COMM_WORLD_SIZE", "4"),
        ("MV2_COMM_WORLD_LOCAL_RANK", "0"),
        ("MV2_COMM_WORLD_LOCAL_SIZE", "2"),
        ("NCCL_COMM_ID", "10.0.0.1:5000"),
    ];
    let w = world(&mv2).unwrap();
    assert_eq!(
        (w.rank(), w.size(), w.local_rank(), w.local_size()),
        (2, 4, 0, Some(2))
    );
    assert_eq!(
        (w.launcher(), &w.meeting),
        (Launcher::Mvapich, &Meeting::NcclCommId)
    );
    let p = problem(&mv2[..1]);
    assert!(
        p.contains("MV2_COMM_WORLD_SIZE") && p.contains("missing"),
        "{p}"
    );
}

/// HPE Cray PALS's `mpiexec` (Cray PMI's variables), with the meeting place exported.
const PALS: [(&str, &str); 6] = [
    ("PMI_RANK", "6"),
    ("PMI_SIZE", "8"),
    ("PMI_LOCAL_RANK", "2"),
    ("PMI_LOCAL_SIZE", "4"),
    ("MASTER_ADDR", "x3005c0s7b0n0"),
    ("MASTER_PORT", "29500"),
];

#[test]
fn hpe_cray_pals() {
    let w = world(&PALS).unwrap();
    assert_eq!(
        (w.rank(), w.size(), w.local_rank(), w.local_size()),
        (6, 8, 2, Some(4))
    );
    assert_eq!(w.launcher(), Launcher::Pals);
    assert_eq!(
        w.meeting,
        Meeting::Tcp {
            address: "x3005c0s7b0n0:29500".into(),
            port: 29500
        }
    );
    let mut past = PALS.to_vec();
    past[2] = ("PMI_LOCAL_RANK", "4");
    let p = problem(&past);
    assert!(p.contains("PMI_LOCAL_RANK and PMI_LOCAL_SIZE"), "{p}");
    let p = problem(&[PALS[0], PALS[2]]);
    assert!(p.contains("PMI_SIZE") && p.contains("missing"), "{p}");
    // Hydra's local rank beside it: Hydra's variables are read.
    let mut both = PALS.to_vec();
    both.push(("MPI_LOCALRANKID", "1"));
    assert_eq!(world(&both).unwrap().launcher(), Launcher::Hydra);
    // PMI_RANK with neither local rank: the error names both.
    let p = problem(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")]);
    assert!(
        p.contains("MPI_LOCALRANKID") && p.contains("PMI_LOCAL_RANK"),
        "{p}"
    );
}

/// Inside a Slurm step (`srun --mpi=cray_shasta` or `pmi2`), Slurm's variables are read,
/// and a `PMI_RANK` that is not `SLURM_PROCID` (an MPI launcher inside the allocation
/// that sets no local rank read here) is an error, not a world of wrong ranks.
#[test]
fn a_pmi_rank_beside_slurms_must_be_slurms() {
    let slurm = [
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_LOCALID", "1"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
    ];
    let mut srun = slurm.to_vec();
    srun.extend([
        ("PMI_RANK", "1"),
        ("PMI_SIZE", "2"),
        ("PMI_LOCAL_RANK", "1"),
    ]);
    let w = world(&srun).unwrap();
    assert_eq!((w.rank(), w.launcher()), (1, Launcher::Slurm));
    let mut inside = slurm.to_vec();
    inside[0] = ("SLURM_PROCID", "0");
    inside.extend([
        ("PMI_RANK", "5"),
        ("PMI_SIZE", "8"),
        ("PMI_LOCAL_RANK", "1"),
    ]);
    let p = problem(&inside);
    assert!(
        p.contains("PMI_RANK and SLURM_PROCID") && p.contains("contradict"),
        "{p}"
    );
}

/// Flux's `flux run` (its task variables; it sets `PMI_RANK` too, for MPI's bootstrap),
/// also from a Flux instance that `srun` started (whose Slurm variables its jobs inherit).
#[test]
fn flux() {
    let flux = [
        ("FLUX_TASK_RANK", "5"),
        ("FLUX_JOB_SIZE", "8"),
        ("FLUX_TASK_LOCAL_ID", "1"),
        ("FLUX_JOB_NNODES", "2"),
        ("PMI_RANK", "5"),
        ("PMI_SIZE", "8"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
    ];
    let w = world(&flux).unwrap();
    assert_eq!(
        (w.rank(), w.size(), w.local_rank(), w.local_size()),
        (5, 8, 1, None)
    );
    assert_eq!(w.launcher(), Launcher::Flux);
    let mut in_slurm = flux.to_vec();
    in_slurm.extend([
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_LOCALID", "0"),
    ]);
    let w = world(&in_slurm).unwrap();
    assert_eq!((w.rank(), w.size(), w.launcher()), (5, 8, Launcher::Flux));
    let p = problem(&flux[..2]);
    assert!(
        p.contains("FLUX_TASK_LOCAL_ID") && p.contains("missing"),
        "{p}"
    );
    let p = problem(&flux[..3]);
    assert!(p.contains("MASTER_ADDR"), "{p}");
}
