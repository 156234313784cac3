//! The rendezvous of a launcher's ranks: rank 0 hands the NCCL [`UniqueId`] to every
//! other rank over TCP, with a deadline, and every failure (no listener, a rank that
//! never arrives, ranks that disagree on the world) is an [`Error::Rendezvous`].
//!
//! The exchange, per rank other than 0: connect to rank 0 (retrying until it listens),
//! send `MAGIC`, its rank and the world size (little-endian `u32`s); rank 0 answers
//! `0` and the id's bytes, or `1`, a `u16` length and why it refuses.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::UniqueId;
use crate::error::{Error, Rendezvous, Result};

/// What every rank's greeting starts with (the protocol's name and version).
const MAGIC: [u8; 8] = *b"SCNCCL01";

fn failed(address: &str, reason: impl Into<String>) -> Error {
    Error::from(Rendezvous {
        address: address.to_owned(),
        reason: reason.into(),
    })
}

/// Rank 0's side: listens on `port` (every interface) and answers every other rank of
/// a world of `size` with `id`; returns once all have it, or fails at `timeout` naming
/// the ranks that never arrived. `address` names rank 0 in errors.
pub(crate) fn serve(
    address: &str,
    port: u16,
    id: &UniqueId,
    size: usize,
    timeout: Duration,
) -> Result<()> {
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| {
        failed(
            address,
            format!(
                "rank 0 cannot listen on port {port}: {e}; start the ranks with another \
                     MASTER_PORT, or set STREAM_CORE_RENDEZVOUS_PORT to a free port for the \
                     rendezvous alone (under torchrun it is MASTER_PORT + 1 unless that is set)"
            ),
        )
    })?;
    serve_on(address, &listener, id, size, timeout)
}

/// [`serve`] on a listener already bound.
pub(crate) fn serve_on(
    address: &str,
    listener: &TcpListener,
    id: &UniqueId,
    size: usize,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    listener
        .set_nonblocking(true)
        .map_err(|e| failed(address, format!("rank 0's listener: {e}")))?;
    let mut arrived = vec![false; size];
    arrived[0] = true;
    while arrived.iter().any(|a| !a) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Some(rank) = greet(address, stream, id, size, &arrived, deadline)? {
                    arrived[rank] = true;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = (0..size)
                        .filter(|&r| !arrived[r])
                        .map(|r| r.to_string())
                        .collect();
                    return Err(failed(
                        address,
                        format!(
                            "rank(s) {} of {size} did not arrive within {timeout:?}",
                            missing.join(", ")
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(failed(address, format!("rank 0 could not accept: {e}"))),
        }
    }
    Ok(())
}

/// Answers one connection: `Some(rank)` once that rank has the id; `None` for a stray
/// connection that did not speak the protocol; `Err` for a rank that disagrees on the
/// world (it is told why, then this rank fails too).
fn greet(
    address: &str,
    mut stream: TcpStream,
    id: &UniqueId,
    size: usize,
    arrived: &[bool],
    deadline: Instant,
) -> Result<Option<usize>> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100));
    let setup = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(left.min(Duration::from_secs(10)))));
    let mut hello = [0u8; 16];
    if setup.is_err() || stream.read_exact(&mut hello).is_err() || hello[..8] != MAGIC {
        return Ok(None);
    }
    let rank = u32::from_le_bytes([hello[8], hello[9], hello[10], hello[11]]) as usize;
    let their_size = u32::from_le_bytes([hello[12], hello[13], hello[14], hello[15]]) as usize;
    let refusal = if their_size != size {
        Some(format!(
            "rank {rank} was started in a world of {their_size} ranks, rank 0 in one of {size}"
        ))
    } else if rank == 0 || rank >= size {
        Some(format!(
            "a rank announced itself as rank {rank}, not one of 1..{size}"
        ))
    } else if arrived[rank] {
        Some(format!("two processes announced themselves as rank {rank}"))
    } else {
        None
    };
    match refusal {
        None => {
            let mut answer = vec![0u8];
            answer.extend_from_slice(&id.to_bytes());
            stream
                .write_all(&answer)
                .map_err(|e| failed(address, format!("could not answer rank {rank}: {e}")))?;
            Ok(Some(rank))
        }
        Some(why) => {
            let text = why.as_bytes();
            let len = text.len().min(u16::MAX as usize);
            let mut answer = vec![1u8];
            answer.extend_from_slice(&(len as u16).to_le_bytes());
            answer.extend_from_slice(&text[..len]);
            let _ = stream.write_all(&answer);
            Err(failed(address, why))
        }
    }
}

/// Another rank's side: reaches rank 0 at `address` (`host:port`), retrying until it
/// listens or `timeout` has passed, and returns the id it hands out.
pub(crate) fn fetch(
    address: &str,
    rank: usize,
    size: usize,
    timeout: Duration,
) -> Result<UniqueId> {
    let deadline = Instant::now() + timeout;
    let (rank32, size32) = match (u32::try_from(rank), u32::try_from(size)) {
        (Ok(r), Ok(s)) => (r, s),
        _ => {
            return Err(failed(
                address,
                format!("rank {rank} of {size} does not fit the protocol"),
            ))
        }
    };
    let mut last_error = String::from("no address");
    loop {
        let targets = address
            .to_socket_addrs()
            .map_err(|e| failed(address, format!("cannot resolve rank 0's address: {e}")))?;
        for target in targets {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match TcpStream::connect_timeout(&target, left.min(Duration::from_secs(5))) {
                Ok(stream) => return ask(address, stream, rank32, size32, deadline),
                Err(e) => last_error = e.to_string(),
            }
        }
        if Instant::now() >= deadline {
            return Err(failed(
                address,
                format!("rank {rank} could not reach rank 0 within {timeout:?} (last error: {last_error})"),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends the greeting on `stream` and reads rank 0's answer.
fn ask(
    address: &str,
    mut stream: TcpStream,
    rank: u32,
    size: u32,
    deadline: Instant,
) -> Result<UniqueId> {
    let io = |e: std::io::Error| {
        failed(
            address,
            format!("rank {rank} lost rank 0 during the exchange: {e}"),
        )
    };
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100));
    stream.set_read_timeout(Some(left)).map_err(io)?;
    let mut hello = MAGIC.to_vec();
    hello.extend_from_slice(&rank.to_le_bytes());
    hello.extend_from_slice(&size.to_le_bytes());
    stream.write_all(&hello).map_err(io)?;
    let mut status = [0u8; 1];
    stream.read_exact(&mut status).map_err(io)?;
    if status[0] == 0 {
        let mut bytes = [0u8; UniqueId::BYTES];
        stream.read_exact(&mut bytes).map_err(io)?;
        return Ok(UniqueId::from_bytes(bytes));
    }
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).map_err(io)?;
    let mut why = vec![0u8; u16::from_le_bytes(len) as usize];
    stream.read_exact(&mut why).map_err(io)?;
    Err(failed(
        address,
        format!(
            "rank 0 refused rank {rank}: {}",
            String::from_utf8_lossy(&why)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(byte: u8) -> UniqueId {
        UniqueId::from_bytes([byte; UniqueId::BYTES])
    }

    fn listener() -> (TcpListener, String) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        (listener, address)
    }

    #[test]
    fn every_rank_gets_rank_zeros_id() {
        let (listener, address) = listener();
        let size = 5;
        let clients: Vec<_> = (1..size)
            .map(|rank| {
                let address = address.clone();
                std::thread::spawn(move || fetch(&address, rank, size, Duration::from_secs(20)))
            })
            .collect();
        serve_on(
            &address,
            &listener,
            &id_of(7),
            size,
            Duration::from_secs(20),
        )
        .unwrap();
        for client in clients {
            assert_eq!(
                client.join().unwrap().unwrap().to_bytes(),
                [7u8; UniqueId::BYTES]
            );
        }
    }

    #[test]
    fn a_rank_that_never_arrives_is_named_at_the_deadline() {
        let (listener, address) = listener();
        let a = address.clone();
        let one = std::thread::spawn(move || fetch(&a, 1, 3, Duration::from_secs(20)));
        let err = serve_on(
            &address,
            &listener,
            &id_of(1),
            3,
            Duration::from_millis(500),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("rank(s) 2 of 3 did not arrive"), "{text}");
        assert!(one.join().unwrap().is_ok());
    }

    #[test]
    fn ranks_that_disagree_on_the_world_fail_on_both_sides() {
        let (listener, address) = listener();
        let a = address.clone();
        let client = std::thread::spawn(move || fetch(&a, 1, 4, Duration::from_secs(20)));
        let server =
            serve_on(&address, &listener, &id_of(1), 2, Duration::from_secs(20)).unwrap_err();
        assert!(
            server
                .to_string()
                .contains("world of 4 ranks, rank 0 in one of 2"),
            "{server}"
        );
        let client = client.join().unwrap().unwrap_err();
        assert!(
            client.to_string().contains("rank 0 refused rank 1"),
            "{client}"
        );
    }

    #[test]
    fn no_rank_zero_is_an_error_at_the_deadline_not_a_hang() {
        let (listener, address) = listener();
        drop(listener); // nobody listens there now
        let start = Instant::now();
        let err = fetch(&address, 1, 2, Duration::from_millis(400)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(matches!(err, Error::Rendezvous(_)), "{err}");
        assert!(err.to_string().contains("could not reach rank 0"), "{err}");
    }

    #[test]
    fn a_stray_connection_does_not_count_as_a_rank() {
        let (listener, address) = listener();
        let stray = TcpStream::connect(&address).unwrap();
        drop(stray);
        let a = address.clone();
        let client = std::thread::spawn(move || fetch(&a, 1, 2, Duration::from_secs(20)));
        serve_on(&address, &listener, &id_of(3), 2, Duration::from_secs(20)).unwrap();
        assert_eq!(client.join().unwrap().unwrap().to_bytes()[0], 3);
    }

    #[test]
    fn a_port_rank_zero_cannot_listen_on_names_the_way_out() {
        let taken = TcpListener::bind(("0.0.0.0", 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = serve("node0:1", port, &id_of(1), 2, Duration::from_millis(50))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("rank 0 cannot listen on port {port}")),
            "{err}"
        );
        assert!(err.contains("STREAM_CORE_RENDEZVOUS_PORT"), "{err}");
    }
}
