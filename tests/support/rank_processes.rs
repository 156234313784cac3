//! Ranks in processes of their own: this test binary started twice as a child, ranks 0
//! and 1 of a world of two, as a launcher would start them.

use std::net::TcpListener;
use std::time::Duration;

use libtest_mimic::Failed;

use crate::child::{run_self, ChildOutput};

/// A TCP port that was free a moment ago, with the port after it free too (under
/// `torchrun`, whose own store holds `MASTER_PORT`, the ranks meet at `MASTER_PORT + 1`).
/// Taken below Linux's ephemeral range (32768 and up), from which the system gives
/// every outgoing connection its local port: a port picked there (as binding port 0
/// does) was once the local port of torchrun's own connection to its store by the time
/// rank 0 listened on it ("Address already in use").
pub fn free_port() -> Result<u16, Failed> {
    let mut rng = crate::Rng::new();
    for _ in 0..200 {
        let port = 20_000 + rng.below(12_000) as u16;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 1) {
            return Ok(port);
        }
    }
    Err("no free pair of TCP ports in 20000..32001 after 200 tries".into())
}

/// Rank 1 of a world of two (as `RANK` variables set it) whose rank 0 never serves the
/// rendezvous at its free local port: its `communicator` would wait a minute.
pub fn lone_rank_of_two() -> Result<stream_core::nccl::World, Failed> {
    let port = free_port()?.to_string();
    let mut world = stream_core::nccl::World::from_vars(|name| match name {
        "RANK" => Some("1".into()),
        "WORLD_SIZE" => Some("2".into()),
        "LOCAL_RANK" => Some("1".into()),
        "MASTER_ADDR" => Some("127.0.0.1".into()),
        "MASTER_PORT" => Some(port.clone()),
        _ => None,
    })?;
    world.set_rendezvous_timeout(Duration::from_secs(60));
    Ok(world)
}

/// Runs this binary twice at once as child `mode` (the value of `child_env`), ranks 0
/// and 1 of a world of two meeting at a free local port (the `RANK` variables, as set
/// by hand, read by `nccl::World::from_env`), each with `extra(rank)` added to its
/// environment; their outputs, rank 0's first.
pub fn two_ranks(
    child_env: &'static str,
    mode: &'static str,
    extra: impl Fn(&'static str) -> Vec<(&'static str, Option<&'static str>)>,
) -> Result<[ChildOutput; 2], Failed> {
    let port = free_port()?.to_string();
    let spawn = |r: &'static str| {
        let mut env = vec![
            (child_env, Some(mode.to_owned())),
            ("RANK", Some(r.to_owned())),
            ("LOCAL_RANK", Some(r.to_owned())),
            ("WORLD_SIZE", Some("2".to_owned())),
            ("MASTER_ADDR", Some("127.0.0.1".to_owned())),
            ("MASTER_PORT", Some(port.clone())),
            ("TORCHELASTIC_RUN_ID", None),
        ];
        env.extend(extra(r).into_iter().map(|(k, v)| (k, v.map(str::to_owned))));
        std::thread::spawn(move || {
            let env: Vec<(&str, Option<&str>)> =
                env.iter().map(|(k, v)| (*k, v.as_deref())).collect();
            run_self(&format!("rank {r}"), &env, Duration::from_secs(120))
        })
    };
    let (zero, one) = (spawn("0"), spawn("1"));
    let zero = zero.join().map_err(|_| "rank 0's thread panicked")??;
    let one = one.join().map_err(|_| "rank 1's thread panicked")??;
    Ok([zero, one])
}
