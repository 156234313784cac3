//! [`Ledger`]: the calls this process's ranks of one communicator make, compared before
//! they are issued, so that two ranks of one process never issue one collective (or one
//! send and its receive) with lengths that disagree.
//!
//! Why only ranks of one process: NCCL reaches another rank's buffers directly only
//! within a process (its `NCCL_P2P_DIRECT_DISABLE` documentation: "directly access user
//! buffers through P2P between GPUs of the same process"); across processes each rank's
//! kernels touch only its own buffers and NCCL's, with its own lengths (this crate
//! registers no user buffer with NCCL). So the ranks that could write into each other's
//! memory with a length the other did not agree to are exactly the ones a ledger sees.
//!
//! NCCL matches collectives by their order on the communicator, and a send with the
//! receive of the same pair of ranks by their order. The ledger numbers each member's
//! calls the same way; the first member to reach a number records its call, and every
//! other member compares its own with it before issuing. A call that disagrees is
//! refused, and so is every later call of every member of the ledger (their numbering
//! may no longer match NCCL's); the refused member stands in for the other's call
//! (`stand_in.rs`) so that it completes, and each member's scope reports the
//! disagreement at its end (the watch's verdict, `communicator.rs`).
//!
//! A member aborted ([`Ledger::aborted`]) ends the communicator for the others: no
//! collective can complete without it (NCCL lets a sibling's collective matched with an
//! aborted one return as if it had, see `Ledger::aborted`), so their later calls are
//! refused, and those already issued that wait for it are stranded (their scopes' ends
//! stop them). A member gone (its seat dropped) leaves its calls recorded: one may have
//! completed on its side first (a broadcast's root), so the others' matching calls are
//! compared and issued as before; a call of a number it never reached is refused, and
//! one already issued at such a number is stranded.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

mod numbering;

pub(crate) use crate::driver::nccl::Call;
use crate::driver::nccl::Collective;
use crate::error::{Error, RanksDisagree, Result};
use numbering::{Line, Map, Numbering, Waiting};

/// What a member does with its call, as [`Seat::agree`] decides.
#[derive(Debug)]
pub(crate) enum Agreement {
    /// Issue it.
    Issue,
    /// Do not issue it and return the error: the ledger is broken, and no other member
    /// issued a call of this number.
    Refuse(Error),
    /// Do not issue it, but issue the given call (another member's of the same number,
    /// which that member issued already) on scratch memory in its place, so that the
    /// other member's call completes instead of waiting forever (possibly inside NCCL,
    /// which sets up a collective's connections inside its first call); then return
    /// the error. The ledger is broken: every member's scope end reports it.
    StandIn(Call, Error),
}

#[cfg(test)]
impl Agreement {
    /// `Ok` for [`Issue`](Self::Issue), the error otherwise.
    fn issued(self) -> Result<()> {
        match self {
            Agreement::Issue => Ok(()),
            Agreement::Refuse(e) | Agreement::StandIn(_, e) => Err(e),
        }
    }
}

impl Call {
    /// `true` when NCCL would match `self` with `other` consistently: the same
    /// collective, element type and count; for a send and its receive, the same bytes.
    fn agrees_with(&self, other: &Call) -> bool {
        match self.collective {
            Collective::Send { .. } | Collective::Recv { .. } => {
                self.count.checked_mul(self.element_bytes)
                    == other.count.checked_mul(other.element_bytes)
            }
            _ => {
                self.collective == other.collective
                    && self.data_type == other.data_type
                    && self.count == other.count
            }
        }
    }

    /// The call that matches `self`, made by rank `rank`, on the rank it names: the
    /// receive of a send, the send of a receive, the same call otherwise.
    fn partner_of(self, rank: usize) -> Call {
        let peer = rank as i32;
        let collective = match self.collective {
            Collective::Send { .. } => Collective::Recv { peer },
            Collective::Recv { .. } => Collective::Send { peer },
            other => other,
        };
        Call { collective, ..self }
    }

    fn describe(&self) -> String {
        let (what, count, type_name) = (self.what, self.count, self.type_name);
        match self.collective {
            Collective::AllReduce(op)
            | Collective::Reduce(op, _)
            | Collective::ReduceScatter(op) => {
                format!("{what} ({}) of {count} × {type_name}", op.name())
            }
            _ => format!("{what} of {count} × {type_name}"),
        }
    }
}

#[derive(Default)]
struct State {
    /// Members registered (before NCCL's call that makes them) and not gone.
    registered: usize,
    /// The ranks of the registered members that know their rank.
    ranks: Vec<usize>,
    /// One entry per numbering: the one lookup a call makes.
    lines: Map<Numbering, Line>,
    /// The ledgers of communicators split from this one: (split number, color).
    children: Vec<(u64, u16, Weak<Ledger>)>,
    /// The first disagreement (or failed issue), after which every call is refused.
    broken: Option<Error>,
    /// A call some member issued will not complete: its partner neither issued its own
    /// nor stood in (inside a group, or the stand-in failed), or a member was aborted.
    stranded: bool,
    /// A member was aborted ([`Ledger::aborted`]): no call of any member is issued again.
    aborted: bool,
    /// The ranks of the members that left (their `Communicator` dropped). The calls each
    /// made before it left are matched as before; a call of a number it never reached
    /// (a collective, or a send or receive with it) is refused: it cannot complete.
    left: Vec<usize>,
}

impl State {
    /// `true` when `me`'s next call on `numbering` needs a member that left before it
    /// made the call of that number (a collective needs every member, a pair its two
    /// ends): that call cannot complete.
    fn needs_one_that_left(&self, numbering: Numbering, me: usize) -> bool {
        let Some(line) = self.lines.get(&numbering) else {
            return self.left.iter().any(|&r| numbering.needs(r));
        };
        let next = line.taken_by(me);
        self.left
            .iter()
            .any(|&r| numbering.needs(r) && line.taken_by(r) <= next)
    }

    /// Breaks the ledger with `error` unless it is broken already (the first cause is
    /// the one reported), and strands it: some member's issued call will not complete,
    /// so the members waiting for their calls stop them.
    fn strand_with(&mut self, error: impl FnOnce() -> Error) {
        if self.broken.is_none() {
            self.broken = Some(error());
        }
        self.stranded = true;
    }

    /// `true` when no call waits for another member's (what the tests check).
    #[cfg(test)]
    fn nothing_waits(&self) -> bool {
        self.lines.values().all(|line| line.waiting.is_empty())
    }
}

/// The shared record of one communicator's members in this process.
#[derive(Default)]
pub(crate) struct Ledger {
    state: Mutex<State>,
    published: Condvar,
}

thread_local! {
    /// The ledgers of the calls made in the group open on this thread.
    static GROUPED: std::cell::RefCell<Vec<Weak<Ledger>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Notes that a call recorded in `ledger` waits for the open group's end (every call of
/// a member of one process inside a group).
fn note_grouped(ledger: &Arc<Ledger>) {
    GROUPED.with(|g| {
        let mut grouped = g.borrow_mut();
        if !grouped
            .iter()
            .any(|l| std::ptr::eq(l.as_ptr(), Arc::as_ptr(ledger)))
        {
            grouped.push(Arc::downgrade(ledger));
        }
    });
}

/// At the end of the group open on this thread: when NCCL's group end failed, the
/// calls the ledgers recorded in it may not have been issued, so their numbering may no
/// longer be NCCL's, and each of them is broken with `ended`'s error.
pub(crate) fn group_ended(ended: &Result<()>) {
    let Err(error) = ended else {
        // Emptied in place: the list keeps its capacity for the next group.
        GROUPED.with(|g| g.borrow_mut().clear());
        return;
    };
    let grouped = GROUPED.with(|g| std::mem::take(&mut *g.borrow_mut()));
    for ledger in grouped.iter().filter_map(Weak::upgrade) {
        ledger.lock().strand_with(|| error.clone());
    }
}

/// The ledgers of communicators joined by id, so that the members this process makes
/// with one id (one thread each) share one.
static JOINED: Mutex<Vec<Joined>> = Mutex::new(Vec::new());

/// A communicator's id and size, and its ledger while a member holds it.
type Joined = ([u8; 128], usize, Weak<Ledger>);

impl Ledger {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A seat for each of `size` members made together by one thread (ranks `0..size`),
    /// or none when there is only one.
    pub(crate) fn clique(size: usize) -> Vec<Option<Seat>> {
        if size < 2 {
            return (0..size).map(|_| None).collect();
        }
        let ledger = Arc::new(Ledger::default());
        (0..size)
            .map(|rank| Some(Registration::new(&ledger).publish(rank)))
            .collect()
    }

    /// A seat for rank `rank` of the communicator `id` names, taken before the member is
    /// made (so that every member of this process holds it once any is made).
    pub(crate) fn joined(id: [u8; 128], size: usize, rank: usize) -> Seat {
        let mut joined = JOINED.lock().unwrap_or_else(PoisonError::into_inner);
        joined.retain(|(_, _, l)| l.strong_count() > 0);
        let ledger = joined
            .iter()
            .find(|(i, s, _)| *i == id && *s == size)
            .and_then(|(_, _, l)| l.upgrade())
            .unwrap_or_else(|| {
                let ledger = Arc::new(Ledger::default());
                joined.push((id, size, Arc::downgrade(&ledger)));
                ledger
            });
        drop(joined);
        Registration::new(&ledger).publish(rank)
    }

    /// The disagreement that broke this ledger, if one did.
    pub(crate) fn broken(&self) -> Option<Error> {
        self.lock().broken.clone()
    }

    /// The disagreement, if a call some member issued was left without a partner (see
    /// [`Seat::strand`]): a member waiting for its calls stops them. Without one, every
    /// issued call completes (the stand-ins see to it), and stopping one early could
    /// strand its partner inside NCCL; the disagreement is then reported once the work
    /// has completed ([`broken`](Self::broken)).
    pub(crate) fn stranded(&self) -> Option<Error> {
        let state = self.lock();
        if state.stranded {
            state.broken.clone()
        } else {
            None
        }
    }

    /// Notes that a member was aborted (a timeout, a failure NCCL reported, or
    /// [`Communicator::abort`](super::Communicator::abort)), before NCCL's abort is
    /// made. The other members of this process cannot complete a collective without it,
    /// yet NCCL lets them believe they did: measured on 2x H200 (NCCL 2.28.3), a rank's
    /// all_reduce issued after its sibling thread's member timed out and was aborted
    /// returned at once, its buffer half zeros, half partial sums. So every later call
    /// of every member is refused, the calls still waiting on the GPU are stopped (the
    /// members' scopes abort them at their end: stranded), and those that completed are
    /// reported by their scope's end.
    pub(crate) fn aborted(&self) {
        let mut state = self.lock();
        state.aborted = true;
        state.strand_with(sibling_aborted);
    }

    /// [`Error::CommunicatorAborted`] when a member of this process was aborted
    /// ([`aborted`](Self::aborted)) or has left: a split, which waits inside NCCL for
    /// every rank, would wait for that member forever.
    pub(crate) fn refuse_split(&self) -> Result<()> {
        let state = self.lock();
        if state.aborted {
            return Err(sibling_aborted());
        }
        if !state.left.is_empty() {
            return Err(member_left());
        }
        Ok(())
    }
}

/// Why a member's call is refused once a member of this process was aborted.
#[cold]
fn sibling_aborted() -> Error {
    Error::CommunicatorAborted {
        reason: "a rank of this process was aborted (a timeout, a failure NCCL reported, or \
                 Communicator::abort), and no collective of the communicator can complete \
                 without it; one that returned meanwhile holds unspecified values",
    }
}

/// Why a member's call is refused once a member of this process it needs has left.
#[cold]
fn member_left() -> Error {
    Error::CommunicatorAborted {
        reason: "another rank of this process left it (its Communicator was dropped) \
                 before making the matching call, and this call cannot complete without it",
    }
}

/// A member registered with a ledger before NCCL made it; it becomes a [`Seat`] once
/// its rank is known, and leaves the ledger if dropped before.
pub(crate) struct Registration {
    ledger: Arc<Ledger>,
}

impl Registration {
    fn new(ledger: &Arc<Ledger>) -> Self {
        ledger.lock().registered += 1;
        Registration {
            ledger: Arc::clone(ledger),
        }
    }

    /// The member's seat as rank `rank`.
    pub(crate) fn publish(self, rank: usize) -> Seat {
        let ledger = Arc::clone(&self.ledger);
        std::mem::forget(self);
        ledger.lock().ranks.push(rank);
        ledger.published.notify_all();
        Seat { ledger, rank }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.ledger.lock().registered -= 1;
        self.ledger.published.notify_all();
    }
}

/// A member's place in its communicator's ledger.
pub(crate) struct Seat {
    ledger: Arc<Ledger>,
    rank: usize,
}

impl Seat {
    /// The ledger, for the member's watch.
    pub(crate) fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// Waits (at most `timeout`) until every member registered has its rank: the
    /// members of a split learn theirs only when NCCL's split returns, each on its
    /// thread. `Some(self)` when it has siblings, `None` when it is alone (nothing to
    /// compare), [`Error::CollectiveTimedOut`] when a sibling did not finish in time.
    pub(crate) fn with_siblings(self, timeout: Duration) -> Result<Option<Seat>> {
        let state = self.ledger.lock();
        let (state, waited) = self
            .ledger
            .published
            .wait_timeout_while(state, timeout, |s| s.ranks.len() < s.registered)
            .unwrap_or_else(PoisonError::into_inner);
        if waited.timed_out() && state.ranks.len() < state.registered {
            return Err(Error::CollectiveTimedOut { timeout });
        }
        if state.ranks.iter().filter(|&&r| r == self.rank).count() > 1 {
            return Err(Error::NcclGroup {
                reason: "two members of one communicator in this process hold the same rank \
                         (one UniqueId joined twice as one rank): each rank joins once",
            });
        }
        let alone = state.registered == 1;
        drop(state);
        Ok(if alone { None } else { Some(self) })
    }

    /// Checks `call`, this member's next one, against the other members' call of the
    /// same number, and records it if it is the first (see [`Agreement`]).
    pub(crate) fn agree(&self, call: Call) -> Agreement {
        let mut state = self.ledger.lock();
        if state.aborted {
            // No stand-in either: with a member aborted, no call of the communicator
            // can complete, and a stand-in's would run against what its abort freed.
            return Agreement::Refuse(state.broken.clone().unwrap_or_else(sibling_aborted));
        }
        let me = self.rank;
        let (numbering, complete) = match call.collective {
            Collective::Send { peer } | Collective::Recv { peer } => {
                // A pair with a rank of another process: NCCL reaches neither buffer
                // from the other side (see the module docs). A pair with this rank
                // itself is compared inside its group (`self_pairs.rs`).
                let peer = peer as usize;
                let of_this_process = state.ranks.contains(&peer) || state.left.contains(&peer);
                if peer == me || !of_this_process {
                    return match &state.broken {
                        Some(error) => Agreement::Refuse(error.clone()),
                        None => Agreement::Issue,
                    };
                }
                let (from, to) = match call.collective {
                    Collective::Send { .. } => (me, peer),
                    _ => (peer, me),
                };
                // A pair is complete with its two ends.
                (Numbering::Pair { from, to }, 2)
            }
            // A collective, complete with every member, those that left after making it
            // included.
            _ => (Numbering::Collectives, state.registered + state.left.len()),
        };
        if !state.left.is_empty() && state.needs_one_that_left(numbering, me) {
            return Agreement::Refuse(member_left());
        }
        if super::group::is_open() {
            note_grouped(&self.ledger);
        }
        let State { lines, broken, .. } = &mut *state;
        let line = lines.entry(numbering).or_default();
        let number = line.take(me);
        let Some(index) = line.find(number) else {
            // The first here. Once broken, nothing new is issued (and nothing recorded,
            // so the members after this one refuse too).
            if let Some(error) = broken {
                return Agreement::Refuse(error.clone());
            }
            if complete > 1 {
                line.waiting.push_back(Waiting {
                    number,
                    rank: me,
                    call,
                    arrivals: 1,
                });
            }
            return Agreement::Issue;
        };
        let waiting = &mut line.waiting[index];
        waiting.arrivals += 1;
        let first = (waiting.rank, waiting.call);
        if waiting.arrivals >= complete {
            line.waiting.remove(index);
        }
        if broken.is_none() && call.agrees_with(&first.1) {
            return Agreement::Issue;
        }
        // A member issued this number's call already: it completes only if this one
        // stands in for the refused call.
        let error = broken
            .get_or_insert_with(|| {
                Error::from(RanksDisagree {
                    position: match numbering {
                        Numbering::Pair { from, to } => {
                            format!("send number {number} from rank {from} to rank {to}")
                        }
                        _ => format!("collective number {number}"),
                    },
                    rank: me,
                    call: call.describe(),
                    other_rank: first.0,
                    other_call: first.1.describe(),
                })
            })
            .clone();
        Agreement::StandIn(first.1.partner_of(first.0), error)
    }

    /// Notes that the stand-in [`agree`](Self::agree) asked for was not issued: the other
    /// member's call will not complete.
    pub(crate) fn strand(&self) {
        self.ledger.lock().stranded = true;
    }

    /// Breaks the ledger with `error` (an issue that failed after [`agree`](Self::agree)
    /// recorded it: NCCL's numbering and the ledger's may differ from now on).
    pub(crate) fn break_with(&self, error: &Error) {
        self.ledger.lock().strand_with(|| error.clone());
    }

    /// The registration, before the split, of this member's part of the communicator
    /// that splitting it with `color` makes (none for `None`). Every member of this
    /// process that passes the same color in the same split shares one ledger.
    pub(crate) fn split(&self, color: Option<u16>) -> Option<Registration> {
        let mut state = self.ledger.lock();
        let number = state
            .lines
            .entry(Numbering::Splits)
            .or_default()
            .take(self.rank);
        let color = color?;
        state.children.retain(|(_, _, l)| l.strong_count() > 0);
        let existing = state
            .children
            .iter()
            .find(|(n, c, _)| *n == number && *c == color)
            .and_then(|(_, _, l)| l.upgrade());
        let child = existing.unwrap_or_else(|| {
            let child = Arc::new(Ledger::default());
            state.children.push((number, color, Arc::downgrade(&child)));
            child
        });
        drop(state);
        Some(Registration::new(&child))
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut state = self.ledger.lock();
        state.registered -= 1;
        let me = self.rank;
        if let Some(i) = state.ranks.iter().position(|&r| r == me) {
            state.ranks.swap_remove(i);
        }
        state.left.push(me);
        // The calls this member made stay, to be matched by the others' (one may have
        // completed on its side first: a broadcast's root, a send NCCL buffered). From
        // now on a call of a number it never reached is refused (`agree`); the calls
        // other members issued at such numbers wait for it forever.
        let mut stranded = false;
        for (numbering, line) in state.lines.iter_mut() {
            if numbering.needs(me) {
                let reached = line.taken_by(me);
                stranded |= line.waiting.iter().any(|w| w.number >= reached);
                line.waiting.retain(|w| w.number < reached);
            }
        }
        if stranded {
            state.strand_with(member_left);
        }
        drop(state);
        self.ledger.published.notify_all();
    }
}

#[cfg(test)]
mod tests;
