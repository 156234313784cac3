//! [`Communicator::barrier`]: the host of every rank waits until every rank has reached
//! it (`torch.distributed.barrier`), as an all-reduce of one byte on a stream of its
//! own (both made at the first barrier and kept by the communicator), so it is bounded
//! as any collective is.

use std::sync::PoisonError;

use super::communicator::BarrierParts;
use super::request::refuse_own_collective;
use super::{Communicator, Sum};
use crate::error::Result;
use crate::scope::scope;

impl Communicator {
    /// Returns once every rank of this communicator has called `barrier`: what a job
    /// does before rank 0 writes a checkpoint the others will read, or after it.
    ///
    /// It waits for the ranks, not for their GPUs' other work: what a rank issued
    /// before, on its own streams, is waited for by the scopes it issued it in. It is
    /// one all-reduce of one byte, on a stream kept for it, in a scope of its own, so a
    /// rank that never arrives ends it as a dead peer ends any collective: after the
    /// communicator's [`timeout`](Self::timeout), with
    /// [`Error::CollectiveTimedOut`](crate::Error::CollectiveTimedOut) and the
    /// communicator aborted (unless it is the communicator's first collective, whose
    /// connections NCCL sets up inside the call: see the [`nccl`](super) module docs).
    ///
    /// Refused as the scope's own collectives are: inside an
    /// [`nccl::group`](fn@super::group) and on a communicator one thread drives beside
    /// others ([`for_devices`](Self::for_devices)), both
    /// [`Error::NcclGroup`](crate::Error::NcclGroup); and after an abort,
    /// [`Error::CommunicatorAborted`](crate::Error::CommunicatorAborted).
    ///
    /// ```no_run
    /// use stream_core::nccl::World;
    /// # fn main() -> stream_core::Result<()> {
    /// let world = World::from_env()?;
    /// let comm = world.communicator(&world.device()?)?;
    /// if world.rank() == 0 {
    ///     // write the checkpoint
    /// }
    /// comm.barrier()?; // every rank reads it only after rank 0 wrote it
    /// # Ok(()) }
    /// ```
    pub fn barrier(&self) -> Result<()> {
        // Refused before its stream and token are made, which a refused first barrier
        // would otherwise keep for nothing (the scope's collective refuses again below).
        refuse_own_collective(self)?;
        let mut parts = self.barrier.lock().unwrap_or_else(PoisonError::into_inner);
        let BarrierParts { stream, token } = match &mut *parts {
            Some(parts) => parts,
            empty => empty.insert(BarrierParts {
                stream: self.device().new_stream()?,
                token: self.device().alloc_vec::<u8>(1)?,
            }),
        };
        // The token's value does not matter (a sum of zeros, unspecified after an abort).
        scope(stream, |s| {
            let mut token = s.attach(token)?;
            s.all_reduce_in_place(self, &mut token, Sum)
        })
    }
}
