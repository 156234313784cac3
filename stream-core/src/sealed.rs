//! The seals: traits only this crate implements, and the token only it can make, so that
//! no user type can claim to be device memory (a forged address would let safe code make
//! the GPU write anywhere) or something a fork may lend.

/// Implemented only inside this crate, by the types that are device memory. The token
/// keeps `raw` uncallable outside this crate.
pub trait Sealed {
    /// Address and length of the memory.
    fn raw(&self, _: Token) -> crate::memory::view::RawSlice;
}

/// Implemented only inside this crate, by what a fork may lend (see `Lend`).
pub trait Lendable {}

/// Only this crate can make one.
#[derive(Clone, Copy)]
pub struct Token(());

pub(crate) const TOKEN: Token = Token(());

/// Implemented only inside this crate, by what stream-ordered work is issued through (a
/// `Scope`, a graph `Capture`: see `Enqueue`).
pub trait Enqueuer {}

/// Implemented only inside this crate, by what a graph may hold (see `Hold`).
pub trait Holdable {}

/// Implemented only inside this crate, by views of pinned host memory a graph holds.
/// The token keeps `host_raw` uncallable outside this crate.
pub trait PinnedView {
    /// Address and length in bytes of the memory.
    fn host_raw(&self, _: Token) -> (*mut u8, usize);
}

/// Implemented only inside this crate, by the element types NCCL knows (see
/// `nccl::NcclElement`).
pub trait NcclType {}

/// Implemented only inside this crate, by the reductions of `nccl` (see
/// `nccl::ReduceOp`). The token keeps `reduction` uncallable outside this crate.
pub trait NcclOp {
    /// The reduction as a collective on `comm` names it: `Err` for one made on another
    /// communicator (`nccl::PreMulSum`).
    fn reduction(
        &self,
        comm: &crate::nccl::Communicator,
        _: Token,
    ) -> crate::Result<crate::driver::nccl::Reduction>;
}

/// Bounds that no type satisfies: methods a graph capture has for the reader of its
/// docs, and for the compiler's message when one is called, but that cannot be called.
pub mod unavailable {
    /// Not implemented by a recorded copy: see `Recorded::wait`.
    #[diagnostic::on_unimplemented(
        message = "a copy recorded into a graph has not run: there is nothing to wait for",
        label = "a capture records this copy; it runs each time the graph is replayed",
        note = "wait on the `Pending` that `Scope::replay` returns, then read what the graph \
                wrote through `Graph::held`"
    )]
    pub trait WaitOnReplay {}

    /// Not implemented by a capture: see `Capture::device`.
    #[diagnostic::on_unimplemented(
        message = "a graph capture hands out no `Device`: creating or reading a `DeviceVec` \
                   blocks the host, which a capture cannot record",
        label = "not available inside a graph capture",
        note = "create `DeviceVec`s before the capture and lend them to `Device::capture` \
                (`&v` to read, `&mut v` to write); read them once a replay is complete"
    )]
    pub trait DeviceOutsideCapture {}

    /// Not implemented by a capture: see `Capture::attach`.
    #[diagnostic::on_unimplemented(
        message = "a graph capture cannot attach a `DeviceVec`: the graph uses it at every \
                   replay, long after the capture",
        label = "not available inside a graph capture",
        note = "lend it to `Device::capture` instead, which lets the graph hold it for as long \
                as it exists: `dev.capture(&mut v, |g, v| ...)`, or `&v` for read-only use"
    )]
    pub trait LendToCapture {}
}
