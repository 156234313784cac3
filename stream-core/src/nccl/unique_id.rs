//! [`UniqueId`]: the name of a communicator being made, which rank 0 makes and every
//! other rank receives (over the launcher's rendezvous, a file, MPI, anything).

use crate::driver::nccl::{RawUniqueId, UNIQUE_ID_BYTES};
use crate::error::Result;

/// The 128 bytes that name a communicator being made (NCCL's `ncclUniqueId`): one rank
/// makes it with [`UniqueId::new`], every rank passes the same id to
/// [`Communicator::join`](super::Communicator::join). It holds the address of rank 0's
/// bootstrap listener, so it is only meaningful while rank 0's process lives.
///
/// [`World::communicator`](super::World::communicator) makes and hands it out for
/// processes started by a launcher; threads of one process can share it directly (it is
/// `Copy`).
#[derive(Clone, Copy)]
pub struct UniqueId(pub(crate) RawUniqueId);

impl UniqueId {
    /// Bytes in an id.
    pub const BYTES: usize = UNIQUE_ID_BYTES;

    /// A new id (`ncclGetUniqueId`, which also starts NCCL's bootstrap listener in this
    /// process). [`Error::NcclNotFound`](crate::Error::NcclNotFound) when NCCL cannot be
    /// loaded.
    pub fn new() -> Result<Self> {
        RawUniqueId::new().map(UniqueId)
    }

    /// The id another rank made, from its [`to_bytes`](Self::to_bytes).
    pub fn from_bytes(bytes: [u8; UNIQUE_ID_BYTES]) -> Self {
        UniqueId(RawUniqueId::from_bytes(bytes))
    }

    /// The id's bytes, to send to the other ranks.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_BYTES] {
        self.0.to_bytes()
    }
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The bytes are an address and a magic number: not worth printing whole.
        f.debug_struct("UniqueId").finish_non_exhaustive()
    }
}
