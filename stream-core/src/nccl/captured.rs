//! The collectives as methods of [`Capture`]: recorded into the graph (NCCL supports
//! stream capture), run at each replay.
//!
//! They are checked and issued exactly as a scope's (`request.rs`'s `issue`, on the
//! capture's own scope, whose stream captures), so the memory argument is a capture's:
//! the buffers are branded by the capture, so they are the graph's own allocations or
//! memory it holds, valid at every replay. What a graph adds is the communicator: its
//! nodes name it, so the graph keeps it (`graph/collectives.rs`) and each replay checks
//! it and watches it.

use std::sync::{Arc, OnceLock};

use super::collective::collective_methods;
use super::group::{self, Group};
use super::ledger::{Agreement, Call};
use super::request::{issue_as, read, write, Operands, Request, Role};
use super::{Communicator, NcclElement, ReduceOp};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::{in_flight, Capture, Graph, GraphCommunicators};
use crate::memory::{DeviceMemory, DeviceMemoryMut};
use crate::scope::{Pending, Scope};

/// Collectives (NCCL) recorded into the graph, through a [`Communicator`] of the
/// capture's device: nothing runs now; each replay
/// ([`Scope::replay_with`](crate::Scope::replay_with)) runs them, on the replaying
/// scope's stream. Checked when recorded, as a scope's are (see
/// [`Scope::all_reduce`](crate::Scope::all_reduce)).
///
/// ```no_run
/// use stream_core::{nccl::{Communicator, Sum}, scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let comm = Communicator::for_devices(&[dev.clone()])?.remove(0);
/// let stream = dev.new_stream()?;
/// let mut grads = dev.upload_vec(&vec![1.0f32; 1 << 20])?;
/// let (mut step, ()) = dev.capture(&mut grads, |g, mut grads| {
///     // ... the step's kernels ...
///     g.all_reduce_in_place(&comm, &mut grads, Sum)?;
///     Ok::<_, Error>(())
/// })?;
/// for _ in 0..100 {
///     scope(&stream, |s| s.replay_with(&mut step, &[&comm]).map(drop))?; // one launch
/// }
/// # Ok(()) }
/// ```
///
/// Such a graph is replayed with [`Scope::replay_with`], which borrows its
/// communicators (as a scope's own collectives do) and watches them, so that the
/// replaying scope's end and its waits are bounded by their timeouts. Every rank replays
/// its graph as it would issue the collectives: the same number of times, in the same
/// order relative to its other collectives on the communicator. The graph keeps the
/// communicator alive (a [`Communicator`] dropped first is destroyed with the graph,
/// which can no longer be replayed then). Once the communicator is aborted (by a scope's
/// watch, or [`Communicator::abort`]) the graph's replays are refused; NCCL's abort
/// waits for every graph that captured on the communicator to be destroyed, so it runs
/// on a thread of its own and completes when they are dropped. A graph with collectives
/// is not [updated](crate::Graph::update): capture a new one.
///
/// # Which communicators
///
/// A scope's collective reaches a peer's buffers only while it runs, through NCCL's own
/// staging buffers across processes, and the ledger compares the calls of ranks of one
/// process, which NCCL may reach directly (see [Lengths that disagree across
/// ranks](super#lengths-that-disagree-across-ranks)). NCCL registers the buffers of
/// captured collectives with the peers (`NCCL_GRAPH_REGISTER`, on by default): each
/// plan then names the peers' buffers as they were at the capture, so a rank whose
/// lengths disagree, or that dropped the graph those buffers belong to, could be
/// written past or into freed memory. So a collective is recorded on a communicator of
/// one rank, or, with `NCCL_GRAPH_REGISTER=0` in the environment (set it before the
/// process starts: NCCL reads it once, when a collective is first captured, and so does
/// this crate, at the process's first captured collective), on any communicator;
/// otherwise the call is [`Error::GraphCommunicators`]
/// and nothing is recorded. Without registration NCCL moves the data as for a scope's
/// collectives: ranks of other processes whose lengths disagree wait for each other
/// until the timeout, and ranks of this process (threads of [`Communicator::join`])
/// have each replay's calls compared by the ledger before it is launched, as a scope's
/// are: a disagreement is [`Error::RanksDisagree`] there, and
/// the other ranks' replays end with it too instead of waiting.
///
/// Inside [`nccl::group`](super::group()) a capture records through the group's methods,
/// given the capture in place of a scope (see [`Group`]): how sends and receives that
/// must be paired are captured, and how one thread captures the communicators of
/// [`Communicator::for_devices`] (a capture per device, the group inside them all),
/// whose collectives a capture's own methods refuse (`GraphCommunicators`), as a scope's
/// refuse them outside a group. A capture's own collective inside a group, and a replay
/// of a graph with collectives there, are [`Error::NcclGroup`].
impl<'s> Capture<'s> {
    collective_methods!(record_collective, &,);
}

/// A collective recorded by `capture`, which keeps its communicator for the graph.
#[inline(always)]
fn record_collective<'a, 's: 'a, T: NcclElement>(
    capture: &'s Capture<'s>,
    comm: &Communicator,
    request: Request<'a, 's, T>,
) -> Result<()> {
    capturable(comm)?;
    issue_as(
        capture.scope(),
        comm,
        request,
        None,
        Role::Captured(capture.state()),
    )
}

/// A collective `capture` records inside `group` (a [`Group`] method given the
/// capture): NCCL enqueues it into the capture's graph at the group's end, which comes
/// before the capture's own end, since the capture outlives the group (`'s: 'g`).
/// Checked as [`record_collective`] is, except that a group is where it belongs, also
/// for a communicator of [`Communicator::for_devices`] with siblings.
pub(super) fn record_in_group<'a, 's: 'a, T: NcclElement>(
    capture: &'s Capture<'s>,
    comm: &Communicator,
    request: Request<'a, 's, T>,
    group: &'a Group<'a, '_>,
) -> Result<()> {
    unregistered(comm)?;
    let role = Role::Captured(capture.state());
    issue_as(capture.scope(), comm, request, Some(group), role)?;
    super::group_target::recorded_into(capture.state().group_failure());
    Ok(())
}

/// Refuses a collective a capture cannot record through its own methods: one called
/// inside [`nccl::group`] (NCCL would issue it at the group's end, after the call's
/// borrows: the group's methods take the capture instead), one on a communicator of
/// [`Communicator::for_devices`] with siblings (driven only inside a group), and one
/// [`unregistered`] refuses.
///
/// [`nccl::group`]: super::group()
#[inline]
fn capturable(comm: &Communicator) -> Result<()> {
    group::refuse_inside(
        "a capture's own collective was called inside nccl::group, which would issue it \
         only at the group's end, after the call's borrows: inside a group, give the \
         capture to the group's method (grp.all_reduce(g, &comm, ...)), which borrows the \
         buffers until the group's end",
    )?;
    if comm.grouped_only() {
        return Err(Error::GraphCommunicators {
            reason: "communicators made together by Communicator::for_devices are driven \
                     by one thread inside nccl::group: open a capture on each device, the \
                     group inside them all, and give each device's capture to the group's \
                     methods (grp.all_reduce(g0, &comms[0], ...))",
        });
    }
    unregistered(comm)
}

/// Refuses a collective on a communicator whose peers could reach this rank's buffers in
/// a replay with lengths this rank did not agree to (see the impl block's docs): one of
/// several ranks while NCCL may register captured buffers ([`registration_off`] is
/// `false`).
#[inline]
fn unregistered(comm: &Communicator) -> Result<()> {
    // Read before the size's shortcut: the first captured collective of any
    // communicator fixes the reading, as it fixes NCCL's.
    if registration_off() || comm.size() == 1 {
        return Ok(());
    }
    Err(Error::GraphCommunicators {
        reason: "NCCL registers the buffers of captured collectives with the peers \
                 (NCCL_GRAPH_REGISTER, on by default), so that a rank whose lengths \
                 disagree, or that dropped its graph, could write past this rank's \
                 buffers or into freed memory: set NCCL_GRAPH_REGISTER=0 in every \
                 rank's environment before it starts (it is read once, at the process's \
                 first captured collective)",
    })
}

/// `true` when `NCCL_GRAPH_REGISTER` was `0` at this process's first captured collective.
/// NCCL reads the variable once, when it first captures a collective (its
/// `NCCL_PARAM(GraphRegister)`, read only for a capturing plan), which is inside that
/// same first capture, right after this reading: read once here too, a variable changed
/// later (`std::env::set_var` is safe before the 2024 edition) cannot make this crate
/// believe registration is off while NCCL keeps it on.
fn registration_off() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    *OFF.get_or_init(|| std::env::var_os(GRAPH_REGISTER).is_some_and(|value| value == "0"))
}

/// NCCL's variable for the registration of captured buffers (`1` by default).
const GRAPH_REGISTER: &str = "NCCL_GRAPH_REGISTER";

impl<'s, 'env> Scope<'s, 'env> {
    /// [`replay`](Self::replay) of a graph with NCCL collectives: `comms` are the
    /// communicators they run on (every one of them; others are ignored), borrowed by
    /// this scope as its own collectives borrow theirs. The scope then watches them: its
    /// end and its waits (the returned `Pending`'s too) are bounded by their timeouts, as
    /// for a collective issued in the scope (see [`nccl`](super#when-a-peer-dies)). On a
    /// communicator with other ranks in this process, the replay's calls are first
    /// compared with theirs ([`Error::RanksDisagree`]
    /// otherwise, nothing launched).
    ///
    /// [`Error::GraphCommunicators`] when one of the
    /// graph's communicators is not in `comms`; [`Error::NcclGroup`]
    /// inside [`nccl::group`](super::group()) (the group's collectives would run after
    /// the replay's, in another order than they were called);
    /// [`Error::CommunicatorAborted`] once one was
    /// aborted (by a scope's watch, or [`Communicator::abort`]): its captured operations
    /// cannot run again. Nothing is launched then. A graph without collectives replays
    /// here too, as with `replay`.
    pub fn replay_with<H>(
        &'s self,
        graph: &'env mut Graph<H>,
        comms: &[&'s Communicator],
    ) -> Result<Pending<'s, &'env mut Graph<H>>> {
        let agreed = self.agree_graph(graph.device(), graph.communicators(), comms)?;
        self.launch_replay(graph)
            .inspect_err(|e| agreed.iter().for_each(|c| c.issue_failed(e)))
    }

    /// [`replay_again`](Self::replay_again) of a graph with NCCL collectives: another run
    /// right after the one `pending` waits for, without waiting on the host, given the
    /// communicators as for [`replay_with`](Self::replay_with) (and checked, agreed and
    /// watched the same way, each run's calls in turn).
    ///
    /// ```no_run
    /// # use stream_core::{nccl::Communicator, scope, Error, Graph, Stream};
    /// # fn f(stream: &Stream, graph: &mut Graph<()>, comm: &Communicator) -> Result<(), Error> {
    /// scope(stream, |s| {
    ///     let mut step = s.replay_with(graph, &[comm])?;
    ///     for _ in 1..100 {
    ///         step = s.replay_again_with(step, &[comm])?;
    ///     }
    ///     step.wait()?;
    ///     Ok(())
    /// })
    /// # }
    /// ```
    ///
    /// Errors as for `replay_with`; after one, the graph stays borrowed until the scope
    /// ends.
    pub fn replay_again_with<H>(
        &'s self,
        pending: Pending<'s, &'env mut Graph<H>>,
        comms: &[&'s Communicator],
    ) -> Result<Pending<'s, &'env mut Graph<H>>> {
        let graph = in_flight(pending);
        let agreed = self.agree_graph(graph.device(), graph.communicators(), comms)?;
        self.launch_again(graph)
            .inspect_err(|e| agreed.iter().for_each(|c| c.issue_failed(e)))
    }

    /// Before a run of a graph of `device` whose collectives are `kept`, given `comms`:
    /// the checks of [`replay_with`](Self::replay_with), then each kept communicator's
    /// calls agreed with the other ranks of this process and its watch registered;
    /// returns the communicators agreed (a failed launch must break their ledgers).
    fn agree_graph(
        &'s self,
        device: &Device,
        kept: &GraphCommunicators,
        comms: &[&'s Communicator],
    ) -> Result<Vec<&'s Communicator>> {
        // Before any agreement below: a refusal after it would strand the other ranks.
        self.device().ensure_same_device(device)?;
        if !kept.is_empty() && group::is_open() {
            return Err(replayed_inside_a_group());
        }
        kept.check_given(comms.iter().map(|comm| comm.raw().control()))?;
        let mut agreed: Vec<&Communicator> = Vec::with_capacity(comms.len());
        for (at, &comm) in comms.iter().enumerate() {
            let control = comm.raw().control();
            let listed_before = comms[..at]
                .iter()
                .any(|c| Arc::ptr_eq(c.raw().control(), control));
            let Some(calls) = kept.calls_on(control).filter(|_| !listed_before) else {
                continue;
            };
            // Ranks of this process compare the graph's calls, as they compare a scope's,
            // before anything is launched; calls agreed on another communicator that will
            // not run now leave their members stranded.
            if let Err(e) = comm.agree_replay(calls) {
                agreed.iter().for_each(|c| c.strand());
                return Err(e);
            }
            self.watch_collective(comm.watch());
            agreed.push(comm);
        }
        Ok(agreed)
    }
}

/// A replay of a graph with collectives inside [`nccl::group`](super::group()): the
/// launch would run before the group's own collectives, which NCCL issues only at the
/// group's end, while the ledger numbers the calls in the order they were made.
#[cold]
fn replayed_inside_a_group() -> Error {
    Error::NcclGroup {
        reason: "a graph with collectives was replayed inside nccl::group, whose own \
                 collectives NCCL issues only at the group's end, after the replay's: replay \
                 it outside the group",
    }
}

/// `agree(call)` for each of a graph's calls on one communicator, in order: `Ok` when
/// every one may be issued, otherwise the first refusal's error (the caller strands the
/// member: the calls agreed before it may have other members waiting for this replay).
/// A replay issues no stand-in: the other members' calls of a broken ledger end with
/// their scopes' watches, which see it stranded.
pub(crate) fn agree_each(calls: &[Call], agree: impl Fn(Call) -> Agreement) -> Result<()> {
    for &call in calls {
        match agree(call) {
            Agreement::Issue => {}
            Agreement::Refuse(e) | Agreement::StandIn(_, e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{agree_each, registration_off, GRAPH_REGISTER};
    use crate::driver::nccl::{Collective, DataType, RedOp, Reduction};
    use crate::nccl::ledger::{Call, Ledger};
    use crate::Error;

    /// The first reading of `NCCL_GRAPH_REGISTER` stands, as NCCL's does: a variable set
    /// afterwards (to the other value) changes nothing. No other test of this binary
    /// captures, so none depends on the reading.
    #[test]
    fn the_registration_variable_is_read_once() {
        let first = registration_off();
        let before = std::env::var_os(GRAPH_REGISTER);
        std::env::set_var(GRAPH_REGISTER, if first { "1" } else { "0" });
        let later = registration_off();
        match before {
            Some(value) => std::env::set_var(GRAPH_REGISTER, value),
            None => std::env::remove_var(GRAPH_REGISTER),
        }
        assert_eq!(later, first);
    }

    fn all_reduce(count: usize) -> Call {
        Call {
            what: "all_reduce",
            collective: Collective::AllReduce(Reduction::Builtin(RedOp::ncclSum)),
            data_type: DataType::ncclFloat32,
            type_name: "f32",
            count,
            element_bytes: 4,
        }
    }

    /// Two members' graphs of the same calls replay, over and over, each replay's calls
    /// compared in order (the empty one too: the ledger numbers it as NCCL would not
    /// see it on either rank).
    #[test]
    fn replays_of_graphs_that_agree_go_on() {
        let seats: Vec<_> = Ledger::clique(2).into_iter().flatten().collect();
        let calls = [all_reduce(1024), all_reduce(0), all_reduce(5)];
        for _ in 0..10 {
            for seat in &seats {
                agree_each(&calls, |call| seat.agree(call)).unwrap();
            }
        }
    }

    /// Member 1's graph all-reduces twice the elements of member 0's: its replay is
    /// refused at that call with `RanksDisagree`, after member 0's was agreed.
    #[test]
    fn a_replay_that_disagrees_is_refused() {
        let seats: Vec<_> = Ledger::clique(2).into_iter().flatten().collect();
        agree_each(&[all_reduce(1024)], |call| seats[0].agree(call)).unwrap();
        let refused = agree_each(&[all_reduce(2048)], |call| seats[1].agree(call));
        assert!(
            matches!(refused, Err(Error::RanksDisagree(_))),
            "{refused:?}"
        );
    }
}
