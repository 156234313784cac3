//! [`Communicator::split`] and [`Communicator::split_all`]: new communicators out of the
//! ranks of one (`ncclCommSplit`), each member keeping its place in the ledger of its
//! new communicator's members in this process.

use std::sync::Arc;

use super::Communicator;
use crate::driver::nccl_comm::RawComm;
use crate::error::{Error, Result};

impl Communicator {
    /// This member's part in splitting its communicator (`ncclCommSplit`): every rank
    /// calls it, and the ranks that pass the same `color` form a new communicator,
    /// ranked in their order here; with `None` a rank takes part and joins none (and
    /// gets `None`). The way to make the groups of tensor- or pipeline-parallel
    /// training out of the world's communicator: with `color = rank / tp`, the ranks of
    /// one tensor-parallel group share a color.
    ///
    /// Blocks until every rank of this communicator has called it, as
    /// [`join`](Self::join) does. The new communicator has this one's
    /// [timeout](Self::timeout). [`Error::CommunicatorAborted`] for an aborted one;
    /// [`Error::NcclGroup`] for a member of [`for_devices`](Self::for_devices) with
    /// siblings (one thread drives them: use [`split_all`](Self::split_all)), or inside
    /// an [`nccl::group`](fn@crate::nccl::group); [`Error::Library`] with NCCL before 2.18.
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// use stream_core::nccl::World;
    /// let world = World::from_env()?;
    /// let device = world.device()?;
    /// let comm = world.communicator(&device)?;
    /// let tp = 2; // tensor-parallel group size
    /// let color = u16::try_from(comm.rank() / tp).expect("fewer than 65536 groups");
    /// let tp_comm = comm.split(Some(color))?.expect("every rank has a color");
    /// assert_eq!((tp_comm.rank(), tp_comm.size()), (comm.rank() % tp, tp));
    /// # Ok(()) }
    /// ```
    pub fn split(&self, color: Option<u16>) -> Result<Option<Communicator>> {
        if self.grouped_only {
            return Err(Error::NcclGroup {
                reason: "a communicator of Communicator::for_devices with siblings is split \
                         with all of them at once, by Communicator::split_all: this thread \
                         drives them all",
            });
        }
        let mut split = Communicator::split_members(&[self], &[color], false)?;
        Ok(split.pop().flatten())
    }

    /// [`split`](Self::split) for every member of a communicator of
    /// [`for_devices`](Self::for_devices), which this thread drives: member `i` passes
    /// `colors[i]`. The new communicators whose members are all here (all of them) are
    /// driven by this thread too, so their collectives are grouped as their parent's.
    ///
    /// [`Error::LengthMismatch`] unless there is one color per member;
    /// [`Error::NcclGroup`] unless `members` are every member of one communicator that
    /// this process made together (NCCL would wait for the missing ones forever).
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// use stream_core::{nccl::Communicator, Device};
    /// let devices = [Device::new(0)?, Device::new(1)?];
    /// let comms = Communicator::for_devices(&devices)?;
    /// // Two communicators of one rank each.
    /// let alone = Communicator::split_all(&comms, &[Some(0), Some(1)])?;
    /// assert!(alone.iter().all(|c| c.as_ref().is_some_and(|c| c.size() == 1)));
    /// # Ok(()) }
    /// ```
    pub fn split_all(
        members: &[Communicator],
        colors: &[Option<u16>],
    ) -> Result<Vec<Option<Communicator>>> {
        Error::check_lengths("Communicator::split_all", members.len(), colors.len())?;
        let Some(first) = members.first() else {
            return Err(Error::InvalidRank { rank: 0, size: 0 });
        };
        let whole = members.len() == first.size
            && members.iter().enumerate().all(|(i, m)| {
                Arc::ptr_eq(&m.clique, &first.clique) && m.rank == i && m.size == first.size
            });
        if !whole {
            return Err(Error::NcclGroup {
                reason: "Communicator::split_all takes every member of one communicator made \
                         by this process, in rank order (a rank left out would never arrive)",
            });
        }
        let members: Vec<&Communicator> = members.iter().collect();
        Communicator::split_members(&members, colors, true)
    }

    /// Splits `members` (see [`RawComm::split`]), keyed by their ranks; `together`: the
    /// new communicators are driven by this thread alone.
    fn split_members(
        members: &[&Communicator],
        colors: &[Option<u16>],
        together: bool,
    ) -> Result<Vec<Option<Communicator>>> {
        crate::nccl::group::refuse_inside(
            "a communicator cannot be split inside nccl::group: the split groups its own \
             calls, so split before or after the group",
        )?;
        // A split waits inside NCCL for every rank: for good, if one of this process
        // was aborted or has left.
        for seat in members.iter().filter_map(|m| m.seat.as_ref()) {
            seat.ledger().refuse_split()?;
        }
        let raws: Vec<&RawComm> = members.iter().map(|m| &m.raw).collect();
        let keys = members
            .iter()
            .map(|m| {
                i32::try_from(m.rank).map_err(|_| Error::InvalidRank {
                    rank: m.rank,
                    size: m.size,
                })
            })
            .collect::<Result<Vec<i32>>>()?;
        // Each member's part of its new communicator's ledger, taken before the split
        // (see `join`).
        let registrations: Vec<_> = members
            .iter()
            .zip(colors)
            .map(|(m, color)| m.seat.as_ref().and_then(|seat| seat.split(*color)))
            .collect();
        let made = RawComm::split(&raws, colors, &keys)?;
        // One clique per new communicator: the members of one color.
        let mut cliques: Vec<(u16, Arc<()>)> = Vec::new();
        let mut clique_of = |color: u16| {
            if let Some((_, clique)) = cliques.iter().find(|(c, _)| *c == color) {
                return Arc::clone(clique);
            }
            let clique = Arc::new(());
            cliques.push((color, Arc::clone(&clique)));
            clique
        };
        // Every member of this thread knows its new rank before any waits for its
        // siblings (for `split_all`, all of them are here).
        let seated: Vec<_> = made
            .iter()
            .zip(registrations)
            .map(|(new, registration)| match (new, registration) {
                (Some((_, rank, _)), Some(r)) => Some(r.publish(*rank)),
                _ => None,
            })
            .collect();
        made.into_iter()
            .zip(members)
            .zip(colors)
            .zip(seated)
            .map(|(((new, parent), color), seat)| {
                let Some((raw, rank, size)) = new else {
                    return Ok(None);
                };
                let seat = match seat {
                    Some(seat) => seat.with_siblings(parent.timeout())?,
                    None => None,
                };
                let clique = clique_of(color.unwrap_or_default());
                let comm = Communicator::made(
                    raw,
                    &parent.device,
                    rank,
                    size,
                    together && size > 1,
                    clique,
                    seat,
                );
                comm.set_timeout(parent.timeout());
                Ok(Some(comm))
            })
            .collect()
    }
}
