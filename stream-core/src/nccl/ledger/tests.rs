//! The unit tests of `ledger.rs`.

use super::{Agreement, Call, Ledger, Seat};
use crate::driver::nccl::{Collective, DataType, RedOp, Reduction};
use crate::driver::nccl_user_op::UserReduction;
use crate::Error;
use std::time::Duration;

fn call(collective: Collective, count: usize) -> Call {
    Call {
        what: "test",
        collective,
        data_type: DataType::ncclFloat32,
        type_name: "f32",
        count,
        element_bytes: 4,
    }
}

fn all_gather(count: usize) -> Call {
    call(Collective::AllGather, count)
}

#[test]
fn members_that_agree_go_on_and_nothing_waits() {
    let seats: Vec<_> = Ledger::clique(3).into_iter().flatten().collect();
    for round in 0..100 {
        for seat in &seats {
            seat.agree(all_gather(round)).issued().unwrap();
        }
    }
    assert!(seats[0].ledger.lock().nothing_waits());
}

#[test]
fn a_disagreeing_member_is_refused_and_so_is_every_later_call() {
    let seats: Vec<_> = Ledger::clique(2).into_iter().flatten().collect();
    seats[0].agree(all_gather(4096)).issued().unwrap();
    seats[0].agree(all_gather(7)).issued().unwrap();
    // Rank 1 stands in for rank 0's call of 4096 instead of issuing its own.
    let Agreement::StandIn(stand_in, err) = seats[1].agree(all_gather(4194304)) else {
        panic!("not a stand-in");
    };
    assert_eq!(stand_in.count, 4096);
    assert!(matches!(err, Error::RanksDisagree(..)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("4194304") && text.contains("4096"), "{text}");
    assert!(seats[0].ledger().broken().is_some());
    // Rank 1 stands in, so rank 0's call completes: nothing to stop early.
    assert!(seats[0].ledger().stranded().is_none());
    // Rank 0 issued its next call already: rank 1 stands in for it too, even though
    // it agrees. A call no one issued yet is refused.
    assert!(matches!(
        seats[1].agree(all_gather(7)),
        Agreement::StandIn(Call { count: 7, .. }, _)
    ));
    assert!(matches!(
        seats[0].agree(all_gather(1)),
        Agreement::Refuse(Error::RanksDisagree(..))
    ));
    assert!(matches!(
        seats[1].agree(all_gather(1)),
        Agreement::Refuse(..)
    ));
    // A stand-in that could not be issued leaves rank 0's call alone.
    seats[1].strand();
    assert!(seats[0].ledger().stranded().is_some());
}

#[test]
fn sends_meet_their_receives_in_order_and_compare_bytes() {
    let seats: Vec<_> = Ledger::clique(2).into_iter().flatten().collect();
    let send = |n| call(Collective::Send { peer: 1 }, n);
    let recv = |n| call(Collective::Recv { peer: 0 }, n);
    seats[0].agree(send(16)).issued().unwrap();
    seats[0].agree(send(32)).issued().unwrap();
    seats[1].agree(recv(16)).issued().unwrap();
    // 32 f32 are 128 bytes: as many u8 agree.
    let bytes = Call {
        element_bytes: 1,
        ..recv(128)
    };
    seats[1].agree(bytes).issued().unwrap();
    seats[1].agree(recv(8)).issued().unwrap();
    // The sender's stand-in for the receive of 8 is a send of 8 to rank 1.
    let Agreement::StandIn(stand_in, err) = seats[0].agree(send(9)) else {
        panic!("not a stand-in");
    };
    assert_eq!(stand_in.collective, Collective::Send { peer: 1 });
    assert_eq!(stand_in.count, 8);
    assert!(err.to_string().contains("send number 2"), "{err}");
}

#[test]
fn pairs_with_ranks_of_other_processes_are_not_recorded() {
    let seats: Vec<_> = Ledger::clique(2).into_iter().flatten().collect();
    // Rank 5 is not in this process.
    seats[0]
        .agree(call(Collective::Send { peer: 5 }, 3))
        .issued()
        .unwrap();
    assert!(seats[0].ledger.lock().nothing_waits());
}

#[test]
fn joined_members_share_a_ledger_and_a_lone_one_drops_its_seat() {
    let id = [7u8; 128];
    let a = Ledger::joined(id, 2, 0);
    let b = Ledger::joined(id, 2, 1);
    assert!(std::sync::Arc::ptr_eq(a.ledger(), b.ledger()));
    let other = Ledger::joined([8u8; 128], 2, 0);
    assert!(!std::sync::Arc::ptr_eq(a.ledger(), other.ledger()));
    assert!(other
        .with_siblings(Duration::from_millis(10))
        .unwrap()
        .is_none());
    let a = a.with_siblings(Duration::from_millis(10)).unwrap().unwrap();
    drop(b);
    // Rank 1 left: rank 0's collectives, which could not complete without it, are
    // refused.
    assert!(matches!(
        a.agree(all_gather(4)),
        Agreement::Refuse(Error::CommunicatorAborted { .. })
    ));
    assert!(a.ledger.lock().nothing_waits());
}

#[test]
fn a_failed_group_end_breaks_and_strands_the_ledgers_it_touched() {
    let touched: Vec<_> = Ledger::clique(2).into_iter().flatten().collect();
    let untouched: Vec<_> = Ledger::clique(2).into_iter().flatten().collect();
    // What `agree` notes for a call made inside an open group.
    super::note_grouped(touched[0].ledger());
    super::note_grouped(touched[1].ledger());
    super::group_ended(&Err(Error::NcclGroup { reason: "test" }));
    assert!(touched[0].ledger().stranded().is_some());
    assert!(untouched[0].ledger().broken().is_none());
    // A group that ended well breaks nothing, and the next group starts afresh.
    super::note_grouped(untouched[0].ledger());
    super::group_ended(&Ok(()));
    super::group_ended(&Err(Error::NcclGroup { reason: "test" }));
    assert!(untouched[0].ledger().broken().is_none());
}

#[test]
fn members_of_one_split_and_color_share_a_ledger() {
    let seats: Vec<_> = Ledger::clique(3).into_iter().flatten().collect();
    let regs: Vec<_> = [Some(0), Some(1), Some(0)]
        .into_iter()
        .zip(&seats)
        .map(|(c, s)| s.split(c).unwrap())
        .collect();
    assert!(std::sync::Arc::ptr_eq(&regs[0].ledger, &regs[2].ledger));
    assert!(!std::sync::Arc::ptr_eq(&regs[0].ledger, &regs[1].ledger));
    let mut regs = regs.into_iter();
    let (r0, r1, r2) = (
        regs.next().unwrap(),
        regs.next().unwrap(),
        regs.next().unwrap(),
    );
    let wait = Duration::from_millis(10);
    let lone = r1.publish(0).with_siblings(wait).unwrap();
    assert!(lone.is_none());
    let first = r0.publish(0);
    // Its sibling has not published its rank yet: the wait runs out.
    let timed_out = first.with_siblings(wait).map(|s| s.is_some());
    assert!(
        matches!(timed_out, Err(Error::CollectiveTimedOut { .. })),
        "{timed_out:?}"
    );
    let second = r2.publish(1).with_siblings(wait).unwrap();
    assert!(second.is_none(), "its sibling's seat was dropped");
    // The next split numbers apart from this one.
    assert!(seats[0].split(None).is_none());
}

#[test]
fn members_far_apart_meet_at_each_number() {
    let seats: Vec<_> = Ledger::clique(3).into_iter().flatten().collect();
    // Rank 0 runs 1000 collectives ahead, rank 1 follows it halfway, rank 2 all the way.
    for n in 0..1000 {
        seats[0].agree(all_gather(n)).issued().unwrap();
    }
    for n in 0..500 {
        seats[1].agree(all_gather(n)).issued().unwrap();
    }
    for n in 0..500 {
        seats[2].agree(all_gather(n)).issued().unwrap();
    }
    // Numbers 0..500 are complete; 500..1000 wait for ranks 1 and 2.
    assert_eq!(
        seats[0]
            .ledger
            .lock()
            .lines
            .values()
            .map(|l| l.waiting.len())
            .sum::<usize>(),
        500
    );
    seats[1].agree(all_gather(500)).issued().unwrap();
    // Rank 2 disagrees at number 501, which rank 0 made: it stands in for rank 0's.
    seats[2].agree(all_gather(500)).issued().unwrap();
    let Agreement::StandIn(stand_in, err) = seats[2].agree(all_gather(7)) else {
        panic!("not a stand-in");
    };
    assert_eq!(stand_in.count, 501);
    assert!(err.to_string().contains("collective number 501"), "{err}");
}

#[test]
fn a_member_ahead_on_sends_meets_the_receives_in_order() {
    let seats: Vec<_> = Ledger::clique(2).into_iter().flatten().collect();
    let send = |n| call(Collective::Send { peer: 1 }, n);
    let recv = |n| call(Collective::Recv { peer: 0 }, n);
    // The receiver is ahead this time, and the other direction runs beside it.
    for n in 1..=100 {
        seats[1].agree(recv(n)).issued().unwrap();
        seats[1]
            .agree(call(Collective::Send { peer: 0 }, n))
            .issued()
            .unwrap();
    }
    for n in 1..=100 {
        seats[0].agree(send(n)).issued().unwrap();
        seats[0]
            .agree(call(Collective::Recv { peer: 1 }, n))
            .issued()
            .unwrap();
    }
    assert!(seats[0].ledger.lock().nothing_waits());
    // Rank 1 leaves with a receive of its own waiting: it stays, and rank 0's matching
    // send is compared with it as before; a send past it is refused.
    seats[1].agree(recv(5)).issued().unwrap();
    let mut seats = seats;
    drop(seats.pop());
    assert!(seats[0].ledger().stranded().is_none());
    seats[0].agree(send(5)).issued().unwrap();
    assert!(seats[0].ledger.lock().nothing_waits());
    assert!(matches!(
        seats[0].agree(send(5)),
        Agreement::Refuse(Error::CommunicatorAborted { .. })
    ));
}

#[test]
fn an_aborted_member_stops_every_member() {
    let seats: Vec<_> = Ledger::clique(2).into_iter().flatten().collect();
    seats[0].agree(all_gather(8)).issued().unwrap();
    assert!(seats[0].ledger().refuse_split().is_ok());
    // Rank 0's member is aborted (its scope's timeout) with its call waiting for rank 1.
    seats[0].ledger().aborted();
    // Rank 1's matching call is refused, not stood in for: with a member aborted, no
    // call of the communicator completes, so none is issued.
    for seat in &seats {
        let refused = seat.agree(all_gather(8));
        assert!(
            matches!(&refused, Agreement::Refuse(Error::CommunicatorAborted { reason })
                if reason.contains("a rank of this process was aborted")),
            "{refused:?}"
        );
    }
    // A pair with a rank of another process is refused too.
    assert!(matches!(
        seats[1].agree(call(Collective::Send { peer: 7 }, 1)),
        Agreement::Refuse(Error::CommunicatorAborted { .. })
    ));
    // Calls already on the GPU are stopped by their scopes' ends, and a split refused.
    assert!(seats[1].ledger().stranded().is_some());
    assert!(seats[1].ledger().refuse_split().is_err());
}

#[test]
fn the_calls_a_member_made_before_it_left_are_still_matched() {
    // Rank 1's part of a scatter from it (a send to rank 0) and a broadcast from it can
    // complete on its side before rank 0 makes its own: its scope ends, and it leaves.
    // Found on 2x H200: rank 0's matching receive was refused ("left") before.
    let mut seats: Vec<_> = Ledger::clique(2).into_iter().flatten().collect();
    let broadcast = call(Collective::Broadcast { root: 1 }, 16);
    seats[1]
        .agree(call(Collective::Send { peer: 0 }, 16))
        .issued()
        .unwrap();
    seats[1].agree(broadcast).issued().unwrap();
    drop(seats.pop());
    assert!(seats[0].ledger().stranded().is_none());
    // Matched and compared as before (a disagreement would stand in: other tests).
    seats[0]
        .agree(call(Collective::Recv { peer: 1 }, 16))
        .issued()
        .unwrap();
    seats[0].agree(broadcast).issued().unwrap();
    assert!(seats[0].ledger.lock().nothing_waits());
    // Past what rank 1 made, nothing completes.
    for next in [
        call(Collective::Recv { peer: 1 }, 16),
        broadcast,
        all_gather(8),
    ] {
        assert!(matches!(
            seats[0].agree(next),
            Agreement::Refuse(Error::CommunicatorAborted { .. })
        ));
    }
}

#[test]
fn once_a_member_left_no_collective_is_issued_but_the_others_pairs_are() {
    let mut seats: Vec<_> = Ledger::clique(3).into_iter().flatten().collect();
    seats[0].agree(all_gather(8)).issued().unwrap();
    seats[1].agree(all_gather(8)).issued().unwrap();
    seats[2].agree(all_gather(8)).issued().unwrap();
    assert!(seats[0].ledger().refuse_split().is_ok());
    drop(seats.pop());
    // Nothing waited for rank 2: nothing to stop.
    assert!(seats[0].ledger().stranded().is_none());
    for seat in &seats {
        let refused = seat.agree(all_gather(8));
        assert!(
            matches!(&refused, Agreement::Refuse(Error::CommunicatorAborted { reason })
                if reason.contains("left")),
            "{refused:?}"
        );
    }
    assert!(seats[0].ledger().refuse_split().is_err());
    // Ranks 0 and 1 still pair, compared as before; a pair with rank 2 is refused.
    seats[0]
        .agree(call(Collective::Send { peer: 1 }, 4))
        .issued()
        .unwrap();
    seats[1]
        .agree(call(Collective::Recv { peer: 0 }, 4))
        .issued()
        .unwrap();
    assert!(matches!(
        seats[1].agree(call(Collective::Recv { peer: 0 }, 4)),
        Agreement::Issue
    ));
    assert!(matches!(
        seats[0].agree(call(Collective::Send { peer: 2 }, 4)),
        Agreement::Refuse(Error::CommunicatorAborted { .. })
    ));
}

#[test]
fn a_member_that_leaves_with_calls_waiting_for_it_strands_them() {
    let mut seats: Vec<_> = Ledger::clique(3).into_iter().flatten().collect();
    // Ranks 0 and 1 issued collective 0; rank 2 leaves without making it.
    seats[0].agree(all_gather(8)).issued().unwrap();
    seats[1].agree(all_gather(8)).issued().unwrap();
    drop(seats.pop());
    let stranded = seats[0].ledger().stranded();
    assert!(
        matches!(&stranded, Some(Error::CommunicatorAborted { reason }) if reason.contains("left")),
        "{stranded:?}"
    );
    assert!(seats[0].ledger.lock().nothing_waits());
}

#[test]
fn pre_multiplied_sums_agree_whatever_their_handles_and_disagree_with_a_sum() {
    // Each communicator numbers the reductions made on it: two members' handles differ.
    let pre_mul_sum = |handle| {
        call(
            Collective::AllReduce(Reduction::PreMulSum(UserReduction::for_tests(handle))),
            64,
        )
    };
    let sum = call(
        Collective::AllReduce(Reduction::Builtin(RedOp::ncclSum)),
        64,
    );
    let seats: Vec<_> = Ledger::clique(2).into_iter().flatten().collect();
    seats[0].agree(pre_mul_sum(0x1234_0005)).issued().unwrap();
    seats[1].agree(pre_mul_sum(0x0777_0006)).issued().unwrap();
    assert!(seats[0].ledger.lock().nothing_waits());
    // A sum where the other member pre-multiplies is refused, and both calls are named
    // with their reductions.
    seats[0].agree(pre_mul_sum(0x1234_0005)).issued().unwrap();
    let Agreement::StandIn(stand_in, err) = seats[1].agree(sum) else {
        panic!("not a stand-in");
    };
    assert!(matches!(
        stand_in.collective,
        Collective::AllReduce(Reduction::PreMulSum(_))
    ));
    let text = err.to_string();
    assert!(
        text.contains("rank 0 issued test (pre_mul_sum) of 64 × f32")
            && text.contains("rank 1 asked for test (sum) of 64 × f32"),
        "{text}"
    );
}

/// The seats of a clique of `members` (each taken away as its member leaves), and their
/// ledger, for the randomized tests below.
fn seats_and_ledger(members: usize) -> (Vec<Option<Seat>>, std::sync::Arc<Ledger>) {
    let seats: Vec<_> = Ledger::clique(members).into_iter().collect();
    let ledger = std::sync::Arc::clone(seats[0].as_ref().unwrap().ledger());
    (seats, ledger)
}

/// What the departure tests expect of a call.
enum Outcome {
    /// Issued: nothing it needs has left before making its match.
    Issued,
    /// Refused at once: a member it needs left before making its match; the member
    /// making it makes no more calls.
    RefusedLeft,
    /// An error of a broken (stranded) ledger: a stand-in where another member's call of
    /// that number waits, so that it completes, or a refusal; the member makes no more.
    Broken,
}

/// Which [`Outcome`] `agreement` is, when it is the one expected of a call that needs a
/// member that left (`needs_one_that_left`) on a ledger `stranded` or not; `None` when
/// it is not.
fn departure_outcome(
    agreement: &Agreement,
    needs_one_that_left: bool,
    stranded: bool,
) -> Option<Outcome> {
    match agreement {
        Agreement::Issue if !needs_one_that_left && !stranded => Some(Outcome::Issued),
        Agreement::Refuse(Error::CommunicatorAborted { reason })
            if needs_one_that_left && reason.contains("left") =>
        {
            Some(Outcome::RefusedLeft)
        }
        Agreement::StandIn(_, Error::CommunicatorAborted { .. })
        | Agreement::Refuse(Error::CommunicatorAborted { .. })
            if stranded =>
        {
            Some(Outcome::Broken)
        }
        _ => None,
    }
}

/// A small deterministic generator for the randomized tests below (xorshift).
struct Steps(u64);

impl Steps {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[test]
fn members_that_leave_at_random_points_are_matched_up_to_where_they_left() {
    // Three members make the same 12 collectives (all agree) in a random interleaving;
    // a member may leave after any prefix of its calls. Then each call of a remaining
    // member is issued exactly when every member that left had made that number's call,
    // and refused ("left") otherwise; nothing is ever stood in for; the ledger is
    // stranded exactly when a call issued before a member left waits for a number that
    // member never reached.
    const MEMBERS: usize = 3;
    const CALLS: usize = 12;
    // How often each rule was exercised, over all seeds (none may be zero).
    let (mut matched_after_a_leave, mut refused, mut strandings) = (0, 0, 0);
    for seed in 1..=400u64 {
        let mut steps = Steps(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let (mut seats, ledger) = seats_and_ledger(MEMBERS);
        // Calls each member made (issued), and whether it stopped (a call refused).
        let mut made = [0usize; MEMBERS];
        let mut stopped = [false; MEMBERS];
        let mut reached: Vec<Option<usize>> = vec![None; MEMBERS];
        let mut stranded = false;
        loop {
            let active: Vec<usize> = (0..MEMBERS)
                .filter(|&m| reached[m].is_none() && !stopped[m] && made[m] < CALLS)
                .collect();
            if active.is_empty() {
                break;
            }
            let m = active[steps.below(active.len())];
            if steps.below(8) == 0 {
                // Member `m` leaves having made `made[m]` calls; every issued call of a
                // number it never reached now waits for it forever.
                stranded |= (0..MEMBERS).any(|o| o != m && made[o] > made[m]);
                reached[m] = Some(made[m]);
                seats[m] = None;
                continue;
            }
            let number = made[m];
            let seat = seats[m].as_ref().unwrap();
            let agreement = seat.agree(all_gather(64));
            let needs_one_that_left = reached.iter().flatten().any(|&r| r <= number);
            match departure_outcome(&agreement, needs_one_that_left, stranded) {
                Some(Outcome::Issued) => {
                    made[m] += 1;
                    matched_after_a_leave += usize::from(reached.iter().any(Option::is_some));
                }
                Some(Outcome::RefusedLeft) => {
                    stopped[m] = true;
                    refused += 1;
                }
                Some(Outcome::Broken) => stopped[m] = true,
                None => panic!(
                    "seed {seed}: member {m}'s call number {number} (left at {reached:?}): \
                     {agreement:?}"
                ),
            }
        }
        assert_eq!(
            ledger.stranded().is_some(),
            stranded,
            "seed {seed}: stranded (left at {reached:?})"
        );
        assert_eq!(ledger.broken().is_some(), stranded, "seed {seed}: broken");
        strandings += usize::from(stranded);
    }
    assert!(
        matched_after_a_leave > 0 && refused > 0 && strandings > 0,
        "matched after a leave {matched_after_a_leave}, refused {refused}, stranded {strandings}"
    );
    println!(
        "matched after a leave {matched_after_a_leave}, refused {refused}, stranded {strandings}"
    );
}

#[test]
fn pairs_whose_member_leaves_at_random_points_are_matched_up_to_where_it_left() {
    // Three members each send to and receive from each other (8 rounds, each round a
    // send to every other member then a receive from every other member), in a random
    // interleaving; a member may leave after any prefix of its calls. A call on the
    // pair of `from` and `to` is issued exactly when a member of that pair that left
    // had made that pair's call of the same number, refused ("left") when it had not;
    // the ledger is stranded exactly when a call issued before a member left waits on a
    // pair for a number that member never reached.
    const MEMBERS: usize = 3;
    const ROUNDS: usize = 8;
    let script = |m: usize| -> Vec<Collective> {
        let others: Vec<i32> = (0..MEMBERS).filter(|&o| o != m).map(|o| o as i32).collect();
        (0..ROUNDS)
            .flat_map(|_| {
                let sends = others.iter().map(|&peer| Collective::Send { peer });
                let recvs = others.iter().map(|&peer| Collective::Recv { peer });
                sends.chain(recvs).collect::<Vec<_>>()
            })
            .collect()
    };
    // The pair (from, to) a call of member `m` is numbered on.
    let pair = |m: usize, c: Collective| match c {
        Collective::Send { peer } => (m, peer as usize),
        Collective::Recv { peer } => (peer as usize, m),
        _ => unreachable!("the script holds sends and receives"),
    };
    let (mut matched_after_a_leave, mut refused, mut strandings) = (0, 0, 0);
    for seed in 1..=400u64 {
        let mut steps = Steps(seed.wrapping_mul(0xD6E8_FEB8_6659_FD93) | 1);
        let (mut seats, ledger) = seats_and_ledger(MEMBERS);
        let scripts: Vec<_> = (0..MEMBERS).map(script).collect();
        let mut next = [0usize; MEMBERS];
        let mut stopped = [false; MEMBERS];
        let mut left = [false; MEMBERS];
        // Calls each member made on each pair (from, to).
        let mut taken = std::collections::HashMap::<(usize, (usize, usize)), usize>::new();
        let taken_by =
            |taken: &std::collections::HashMap<_, usize>, m: usize, p: (usize, usize)| {
                taken.get(&(m, p)).copied().unwrap_or(0)
            };
        let mut stranded = false;
        loop {
            let active: Vec<usize> = (0..MEMBERS)
                .filter(|&m| !left[m] && !stopped[m] && next[m] < scripts[m].len())
                .collect();
            if active.is_empty() {
                break;
            }
            let m = active[steps.below(active.len())];
            if steps.below(10) == 0 {
                // Every pair of `m` on which the other end made more calls than `m`.
                stranded |= taken.iter().any(|(&(o, p), &count)| {
                    o != m && (p.0 == m || p.1 == m) && count > taken_by(&taken, m, p)
                });
                left[m] = true;
                seats[m] = None;
                continue;
            }
            let collective = scripts[m][next[m]];
            let p = pair(m, collective);
            let number = taken_by(&taken, m, p);
            let other = if p.0 == m { p.1 } else { p.0 };
            let needs_one_that_left = left[other] && taken_by(&taken, other, p) <= number;
            let seat = seats[m].as_ref().unwrap();
            let agreement = seat.agree(call(collective, 16));
            match departure_outcome(&agreement, needs_one_that_left, stranded) {
                Some(Outcome::Issued) => {
                    next[m] += 1;
                    *taken.entry((m, p)).or_default() += 1;
                    matched_after_a_leave += usize::from(left[other]);
                }
                Some(Outcome::RefusedLeft) => {
                    stopped[m] = true;
                    refused += 1;
                }
                Some(Outcome::Broken) => stopped[m] = true,
                None => panic!(
                    "seed {seed}: member {m}'s {collective:?} number {number} (left {left:?}): \
                     {agreement:?}"
                ),
            }
        }
        assert_eq!(
            ledger.stranded().is_some(),
            stranded,
            "seed {seed}: stranded (left {left:?})"
        );
        strandings += usize::from(stranded);
    }
    assert!(
        matched_after_a_leave > 0 && refused > 0 && strandings > 0,
        "matched after a leave {matched_after_a_leave}, refused {refused}, stranded {strandings}"
    );
}

#[test]
fn whatever_the_members_do_a_broken_ledger_issues_nothing_more() {
    // Three members make random calls (collectives of two lengths, sends and receives
    // between them), leave, or are aborted, in random order. Whatever happens: no call
    // is issued once the ledger is broken (a disagreement, a stranding), none at all
    // once a member was aborted, and a stand-in is only ever asked for a call that
    // another member made.
    const MEMBERS: usize = 3;
    let mut outcomes = [0usize; 3];
    for seed in 1..=1000u64 {
        let mut steps = Steps(seed.wrapping_mul(0xBF58_476D_1CE4_E5B9) | 1);
        let (mut seats, ledger) = seats_and_ledger(MEMBERS);
        let mut aborted = false;
        for _ in 0..40 {
            let present: Vec<usize> = (0..MEMBERS).filter(|&m| seats[m].is_some()).collect();
            if present.is_empty() {
                break;
            }
            let m = present[steps.below(present.len())];
            let peer = ((m + 1 + steps.below(MEMBERS - 1)) % MEMBERS) as i32;
            let made = match steps.below(20) {
                0 => {
                    seats[m] = None;
                    continue;
                }
                1 => {
                    ledger.aborted();
                    aborted = true;
                    continue;
                }
                2..=9 => call(Collective::AllGather, 8 + 8 * steps.below(2)),
                10..=14 => call(Collective::Send { peer }, 4 + steps.below(2)),
                _ => call(Collective::Recv { peer }, 4 + steps.below(2)),
            };
            let broken_before = ledger.broken().is_some();
            let seat = seats[m].as_ref().unwrap();
            match seat.agree(made) {
                Agreement::Issue => {
                    assert!(
                        !broken_before && !aborted,
                        "seed {seed}: issued when broken"
                    );
                    outcomes[0] += 1;
                }
                Agreement::StandIn(stood_in, _) => {
                    assert!(!aborted, "seed {seed}: a stand-in after an abort");
                    // The partner's call: of the same collective (a receive for a send),
                    // one of the lengths the members use.
                    let lengths: &[usize] = match stood_in.collective {
                        Collective::AllGather => &[8, 16],
                        _ => &[4, 5],
                    };
                    assert!(
                        lengths.contains(&stood_in.count),
                        "seed {seed}: {stood_in:?}"
                    );
                    outcomes[1] += 1;
                }
                Agreement::Refuse(_) => outcomes[2] += 1,
            }
        }
    }
    assert!(
        outcomes.iter().all(|&n| n > 0),
        "issued, stood in, refused: {outcomes:?}"
    );
}
