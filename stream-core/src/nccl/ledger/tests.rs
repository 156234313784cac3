//! The unit tests of `ledger.rs`.

use super::{Agreement, Call, Ledger};
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

mod departures;
