//! The randomized unit tests of `ledger.rs`: members that leave, and broken ledgers,
//! at random points of random interleavings.

use super::{all_gather, call};
use crate::driver::nccl::Collective;
use crate::nccl::ledger::{Agreement, Ledger, Seat};
use crate::Error;

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
