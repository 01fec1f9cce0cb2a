//! The process's budget of requests in flight across its sources (`[budget]
//! max_in_flight`) as one pure decision: how many more requests source `i` may start
//! now, given the total and, for every source, its weight, what it has in flight, its
//! own limit, its reserve and whether it has work waiting. The handle the runners
//! share (counts, permits, wake-ups) is `crate::admission::budget`; this file keeps
//! no state.
//!
//! The rule, for a total `T > 0` (0 = off: each source's own limit alone):
//!
//! - **Reserves.** Each source keeps `rᵢ = min(reserveᵢ, own limitᵢ)` slots
//!   (`budget.reserve`) whether or not it has work: they are never lent, so a source
//!   whose requests hang cannot hold them and another's first request starts at
//!   once. Given in the order listed until the total is used (the config refuses
//!   reserves that sum past the total).
//! - **Shares.** The rest, `T − Σr`, is shared by the sources with work waiting (the
//!   asker counts as waiting: it asks because it has work): source `i`'s quota is
//!   `(T − Σr) × wᵢ / Σw` over them; each gets its quota's floor, and the slots the
//!   floors leave (fewer than the sources) go one each to the largest fractional
//!   remainders, a tie to the source listed first. A source's share is its reserve
//!   plus that part (its reserve alone without work waiting): the shares sum to `T`
//!   exactly (`Σr` when every waiting weight is 0).
//! - **Guarantee.** `gᵢ = min(shareᵢ, own limitᵢ)`: what a source with work waiting is
//!   never held below. A share its own limit cannot use is not kept for it.
//! - **Kept.** The unused part of the others' guarantees, `Σⱼ≠ᵢ max(0, gⱼ − fⱼ)`
//!   (for a source without work waiting: its reserve), and within it the others'
//!   unused reserves `Σⱼ≠ᵢ max(0, rⱼ − fⱼ)`.
//! - **Allowance.** With `free = T − Σf` (0 when a reload lowered `T` under what
//!   runs): `min(own limitᵢ − fᵢ, free − others' unused reserves, max(gᵢ − fᵢ, free −
//!   kept))`. A source under its guarantee may take any free slot but the others'
//!   reserves; one at or over it may borrow only what is free beyond all that is kept,
//!   so a share nobody uses is lent, a borrower never takes a slot kept for a source
//!   under its guarantee, and no start ever takes a reserve: `Σ max(fⱼ, rⱼ) ≤ T` holds
//!   from any state it held in.
//!
//! Nothing is taken back from what runs: a source over its share keeps its requests,
//! and the slots they free go first to the sources under their guarantee; its
//! reserve is what another source has at once.

/// One source as the budget sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Claim {
    /// Its `weight`: its share of the total against the other sources with work
    /// waiting (0: no share of its own, only what is lent).
    pub weight: u32,
    /// Requests it has in flight.
    pub in_flight: u32,
    /// Its own limit now (its `max_in_flight`, or its adaptive limit).
    pub limit: u32,
    /// Whether it has work that only the budget holds back.
    pub waiting: bool,
    /// The slots kept for it, with work or without, never lent (`budget.reserve`;
    /// within its own limit).
    pub reserve: u32,
}

/// Each source's share of `total`, in the order of `claims`: its reserve, plus, for a
/// source with work waiting, its weighted part of what the reserves leave (floors,
/// then the remainders to the largest fractions, a tie to the first listed). The
/// shares sum to `total` (the reserves alone when no source waiting has a weight).
pub fn shares(total: u32, claims: &[Claim]) -> Vec<u32> {
    shares_with(total, claims, None)
}

/// Each source's reserve in force: its `reserve` within its own limit, given in the
/// order of `claims` until `total` is used.
pub fn reserves(total: u32, claims: &[Claim]) -> Vec<u32> {
    let mut left = total;
    claims
        .iter()
        .map(|c| {
            let r = c.reserve.min(c.limit).min(left);
            left -= r;
            r
        })
        .collect()
}

/// How many more requests source `i` may start now (0: none), counting it as
/// waiting. Starting that many in a row, the others unchanged, each start is allowed
/// and the next one is not.
pub fn allowance(total: u32, claims: &[Claim], i: usize) -> u32 {
    let Some(me) = claims.get(i) else {
        return 0;
    };
    let own = me.limit.saturating_sub(me.in_flight);
    if total == 0 {
        return own;
    }
    let reserves = reserves(total, claims);
    let shares = shares_with(total, claims, Some(i));
    let in_flight: u64 = claims.iter().map(|c| u64::from(c.in_flight)).sum();
    let free = u64::from(total).saturating_sub(in_flight);
    let others = claims
        .iter()
        .zip(shares.iter().zip(&reserves))
        .enumerate()
        .filter(|(j, _)| *j != i);
    let (mut kept, mut reserved) = (0u64, 0u64);
    for (_, (c, (&share, &reserve))) in others {
        reserved += unused(reserve, c);
        kept += unused(share, c);
    }
    let open = free.saturating_sub(reserved);
    let lendable = free.saturating_sub(kept);
    let n = open
        .min(unused(shares[i], me).max(lendable))
        .min(u64::from(own));
    // At most `own`, a u32.
    u32::try_from(n).unwrap_or(own)
}

/// Whether source `i` may start one more request now.
pub fn may_start(total: u32, claims: &[Claim], i: usize) -> bool {
    allowance(total, claims, i) > 0
}

/// What is left of a source's guarantee (its share, or its reserve, within its own
/// limit).
fn unused(share: u32, c: &Claim) -> u64 {
    u64::from(share.min(c.limit).saturating_sub(c.in_flight))
}

/// The shares, with `asker` counted as waiting: the reserves, then the rest by weight.
fn shares_with(total: u32, claims: &[Claim], asker: Option<usize>) -> Vec<u32> {
    let mut out = reserves(total, claims);
    // The reserves are given until the total is used: at most `total`.
    let pool = total.saturating_sub(out.iter().sum::<u32>());
    let waiting = |j: usize, c: &Claim| c.waiting || asker == Some(j);
    let sum: u64 = claims
        .iter()
        .enumerate()
        .filter(|&(j, c)| waiting(j, c))
        .map(|(_, c)| u64::from(c.weight))
        .sum();
    if sum == 0 {
        return out;
    }
    let mut given = 0u64;
    // (remainder, index) of each waiting source.
    let mut remainders = Vec::new();
    for (j, c) in claims.iter().enumerate() {
        if waiting(j, c) {
            let quota = u64::from(pool) * u64::from(c.weight);
            let floor = quota / sum;
            // At most `pool`, a u32: with the reserve, at most `total`.
            out[j] += u32::try_from(floor).unwrap_or(pool);
            given += floor;
            remainders.push((quota % sum, j));
        }
    }
    // The remainders sum to `left × sum`, each under `sum`: more than `left` of them
    // are positive, so a source of weight 0 never gets one.
    let left = u64::from(pool).saturating_sub(given);
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, j) in remainders
        .iter()
        .take(usize::try_from(left).unwrap_or(usize::MAX))
    {
        out[j] += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A claim: weight, in flight, own limit, waiting; no reserve.
    fn c(weight: u32, in_flight: u32, limit: u32, waiting: bool) -> Claim {
        Claim {
            weight,
            in_flight,
            limit,
            waiting,
            reserve: 0,
        }
    }

    /// The same claim with a reserve of `r`.
    fn kept(claim: Claim, r: u32) -> Claim {
        Claim {
            reserve: r,
            ..claim
        }
    }

    /// The slots of `reserves` that `claims` do not use, but source `i`'s.
    fn others_unused(total: u32, claims: &[Claim], i: usize) -> u32 {
        let r = reserves(total, claims);
        claims
            .iter()
            .zip(&r)
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, (c, &r))| r.saturating_sub(c.in_flight))
            .sum()
    }

    #[test]
    fn shares_table() {
        let w = |weight| c(weight, 0, 100, true);
        let idle = c(5, 3, 100, false);
        for (total, claims, want) in [
            (10, vec![w(1), w(1)], vec![5, 5]),
            (10, vec![w(1), w(1), w(1)], vec![4, 3, 3]),
            (10, vec![w(3), w(1)], vec![8, 2]),
            (7, vec![w(2), w(3), w(2)], vec![2, 3, 2]),
            (10, vec![w(1), idle, w(1)], vec![5, 0, 5]),
            (10, vec![idle, w(2)], vec![0, 10]),
            (10, vec![w(0), w(1)], vec![0, 10]),
            (10, vec![w(0), w(0)], vec![0, 0]),
            (3, vec![w(100), w(1), w(1)], vec![3, 0, 0]),
            (0, vec![w(1), w(1)], vec![0, 0]),
            (5, vec![], vec![]),
        ] {
            assert_eq!(shares(total, &claims), want, "{total} {claims:?}");
        }
    }

    /// Source `i`'s allowance under `total` is `want`, and it may start iff that is
    /// positive.
    fn check(total: u32, claims: &[Claim], i: usize, want: u32, why: &str) {
        assert_eq!(allowance(total, claims, i), want, "{why}: {claims:?}");
        assert_eq!(may_start(total, claims, i), want > 0, "{why}");
    }

    /// Work waiting: weight, in flight, own limit.
    fn on(weight: u32, in_flight: u32, limit: u32) -> Claim {
        c(weight, in_flight, limit, true)
    }

    /// No work waiting: weight, in flight, own limit.
    fn off(weight: u32, in_flight: u32, limit: u32) -> Claim {
        c(weight, in_flight, limit, false)
    }

    #[test]
    fn allowance_table() {
        // check(total, claims, the source asking, its allowance, why)
        check(0, &[on(1, 7, 10), on(1, 50, 100)], 0, 3, "off: own limit");
        check(10, &[on(1, 0, 10), on(1, 0, 10)], 0, 5, "B's 5 kept");
        check(10, &[on(1, 5, 10), on(1, 0, 10)], 0, 0, "at its share");
        check(10, &[on(1, 5, 10), on(1, 0, 10)], 1, 5, "B under share");
        check(10, &[on(1, 3, 10), off(1, 0, 10)], 0, 7, "B idle: lent");
        check(10, &[on(1, 3, 10), on(1, 0, 2)], 0, 5, "B's limit: lent");
        check(10, &[on(1, 8, 10), off(1, 2, 10)], 0, 0, "total reached");
        check(10, &[on(1, 8, 10), on(1, 0, 10)], 1, 2, "B: what is free");
        check(10, &[on(1, 8, 10), on(1, 0, 10)], 0, 0, "A over: B's");
        check(10, &[on(1, 0, 4), off(1, 0, 10)], 0, 4, "own limit");
        check(10, &[on(1, 4, 4), on(1, 0, 10)], 0, 0, "at own limit");
        check(4, &[on(1, 5, 10), on(1, 0, 10)], 1, 0, "lowered, over");
        check(4, &[on(1, 3, 10), on(1, 0, 10)], 1, 1, "lowered, 1 free");
        check(10, &[on(3, 0, 10), on(1, 0, 10)], 0, 8, "8: the tie");
        check(10, &[on(3, 8, 10), on(1, 0, 10)], 0, 0, "A at its 8");
        check(10, &[on(3, 7, 10), on(1, 0, 10)], 0, 1, "A 1 under");
        check(10, &[on(0, 0, 10), on(1, 0, 10)], 0, 0, "weight 0");
        check(10, &[on(0, 0, 10), on(1, 6, 6)], 0, 4, "weight 0: lent");
        check(10, &[off(1, 0, 10), off(1, 0, 10)], 0, 10, "asking: wants");
        check(10, &[on(1, 0, 10)], 3, 0, "no such source");
    }

    #[test]
    fn reserves_and_shares_with_them() {
        let w = |weight, r| kept(c(weight, 0, 100, true), r);
        let idle = |r| kept(c(1, 0, 100, false), r);
        // (total, claims, reserves, shares)
        for (total, claims, want_r, want_s) in [
            (10, vec![w(1, 1), idle(1)], vec![1, 1], vec![9, 1]),
            (10, vec![w(3, 1), w(1, 1)], vec![1, 1], vec![7, 3]),
            (8, vec![w(1, 1), w(1, 1)], vec![1, 1], vec![4, 4]),
            (
                8,
                vec![w(1, 2), idle(2), idle(2)],
                vec![2, 2, 2],
                vec![4, 2, 2],
            ),
            (
                2,
                vec![w(1, 1), idle(1), w(1, 1)],
                vec![1, 1, 0],
                vec![1, 1, 0],
            ),
            (8, vec![idle(1), idle(1)], vec![1, 1], vec![1, 1]),
            (8, vec![w(0, 1), w(0, 1)], vec![1, 1], vec![1, 1]),
            (
                8,
                vec![kept(c(1, 0, 0, false), 1), w(1, 1)],
                vec![0, 1],
                vec![0, 8],
            ),
            (
                8,
                vec![kept(c(1, 0, 3, true), 5), w(1, 0)],
                vec![3, 0],
                vec![6, 2],
            ),
        ] {
            assert_eq!(reserves(total, &claims), want_r, "{total} {claims:?}");
            assert_eq!(shares(total, &claims), want_s, "{total} {claims:?}");
        }
    }

    #[test]
    fn allowance_with_reserves_table() {
        let on1 = |f, l| kept(on(1, f, l), 1);
        let off1 = |f, l| kept(off(1, f, l), 1);
        // check(total, claims, the source asking, its allowance, why)
        check(8, &[on1(0, 32), off1(0, 32)], 0, 7, "B's reserve kept");
        check(8, &[on1(7, 32), off1(0, 32)], 0, 0, "A at 7: never B's");
        check(8, &[on1(7, 32), on1(0, 32)], 1, 1, "B's first at once");
        check(8, &[on1(7, 32), on1(1, 32)], 1, 0, "then as A's end");
        check(
            8,
            &[on1(6, 32), off1(0, 32), on1(0, 32)],
            2,
            1,
            "C: not B's",
        );
        check(8, &[on1(0, 32), off1(0, 0)], 0, 8, "B's limit 0: none");
        check(8, &[on1(0, 32), off1(0, 1), off1(0, 1)], 0, 6, "two kept");
        check(
            8,
            &[kept(on(1, 0, 32), 2), kept(off(1, 0, 32), 2)],
            0,
            6,
            "2",
        );
        check(8, &[on1(0, 32), off(1, 0, 32)], 0, 8, "reserve 0: all lent");
        check(4, &[on1(5, 32), on1(0, 32)], 1, 0, "lowered, over");
        check(0, &[on1(7, 10), on1(50, 100)], 0, 3, "off: own limit");
    }

    #[test]
    fn a_hog_gives_way_as_its_requests_finish() {
        // A (weight 1) borrowed every slot while B was idle; B now waits.
        let mut claims = [c(1, 10, 10, true), c(1, 0, 10, true)];
        let mut order = Vec::new();
        for _ in 0..10 {
            claims[0].in_flight -= 1;
            let who = (0..2).find(|&i| may_start(10, &claims, i)).unwrap();
            assert!(!may_start(10, &claims, 1 - who), "one slot, one start");
            claims[who].in_flight += 1;
            order.push(who);
        }
        assert_eq!(
            order[..5],
            [1; 5],
            "B takes each freed slot up to its share"
        );
        assert_eq!(claims[1].in_flight, 5);
        assert!(
            order[5..].iter().all(|&w| w == 0),
            "then A keeps its own share"
        );
    }

    /// Up to 5 sources: weight, in flight, own limit, waiting, reserve (0 to 2).
    fn claims_strategy() -> impl Strategy<Value = Vec<Claim>> {
        proptest::collection::vec(
            (0u32..5, 0u32..12, 0u32..12, any::<bool>(), 0u32..3)
                .prop_map(|(w, f, l, b, r)| kept(c(w, f, l, b), r)),
            1..6,
        )
    }

    /// A total of 1 to 39, up to 5 sources, and one of them (`i`) with work waiting.
    fn one_waiting_strategy() -> impl Strategy<Value = (u32, Vec<Claim>, usize)> {
        (1u32..40, claims_strategy(), any::<prop::sample::Index>()).prop_map(
            |(total, mut claims, pick)| {
                let i = pick.index(claims.len());
                claims[i].waiting = true;
                (total, claims, i)
            },
        )
    }

    /// Sources that start from nothing, all with work waiting (reserve 0 to 2).
    fn fresh_strategy() -> impl Strategy<Value = Vec<Claim>> {
        proptest::collection::vec(
            (0u32..5, 0u32..12, 0u32..3).prop_map(|(w, l, r)| kept(c(w, 0, l, true), r)),
            1..6,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The shares sum to the total (the reserves alone when no source waiting
        /// has a weight); past its reserve, each source waiting has its quota of what
        /// the reserves leave, its floor or ceiling; the others their reserve alone.
        #[test]
        fn shares_sum_to_the_total_and_round_only_the_remainder(
            total in 0u32..40, claims in claims_strategy(),
        ) {
            let s = shares(total, &claims);
            let r = reserves(total, &claims);
            let reserved: u32 = r.iter().sum();
            prop_assert!(reserved <= total);
            let pool = u64::from(total - reserved);
            let sum: u64 = claims.iter().filter(|c| c.waiting).map(|c| u64::from(c.weight)).sum();
            let given: u64 = s.iter().map(|&x| u64::from(x)).sum();
            prop_assert_eq!(given, if sum == 0 { u64::from(reserved) } else { u64::from(total) });
            for ((c, &share), &r) in claims.iter().zip(&s).zip(&r) {
                prop_assert!(r <= c.reserve.min(c.limit));
                if !c.waiting || sum == 0 {
                    prop_assert_eq!(share, r);
                    continue;
                }
                let quota = pool * u64::from(c.weight);
                let part = u64::from(share - r) * sum;
                prop_assert!(part + sum > quota && part < quota + sum, "{} ~ {}", part, quota);
            }
        }

        /// A start never takes the sources past the total (a lowered one: never
        /// further past), nor the source past its own limit; off, only its own limit
        /// counts. Starting its allowance in a row is allowed, one more is not.
        #[test]
        fn never_past_the_total_or_its_own_limit(
            total in 0u32..40, claims in claims_strategy(), pick in any::<prop::sample::Index>(),
        ) {
            let i = pick.index(claims.len());
            let n = allowance(total, &claims, i);
            let in_flight: u32 = claims.iter().map(|c| c.in_flight).sum();
            let me = claims[i];
            prop_assert!(me.in_flight + n <= me.limit.max(me.in_flight));
            if total == 0 {
                prop_assert_eq!(n, me.limit.saturating_sub(me.in_flight));
            } else {
                prop_assert!(in_flight + n <= total.max(in_flight));
                if in_flight >= total {
                    prop_assert_eq!(n, 0);
                }
            }
            let mut after = claims.clone();
            for _ in 0..n {
                prop_assert!(may_start(total, &after, i));
                after[i].in_flight += 1;
            }
            prop_assert!(!may_start(total, &after, i));
        }

        /// A source with work waiting, under its guarantee (its share within its own
        /// limit), is refused only when what is free is the others' reserves; a
        /// refusal otherwise means it is at its guarantee and what is free is kept
        /// for the others'.
        #[test]
        fn under_its_guarantee_it_is_refused_only_when_the_total_is_reached(
            (total, claims, i) in one_waiting_strategy(),
        ) {
            let s = shares(total, &claims);
            let in_flight: u32 = claims.iter().map(|c| c.in_flight).sum();
            let open = in_flight + others_unused(total, &claims, i) < total;
            let me = claims[i];
            let guarantee = s[i].min(me.limit);
            if me.in_flight < guarantee && open {
                prop_assert!(may_start(total, &claims, i));
            }
            if !may_start(total, &claims, i) && me.in_flight < me.limit && open {
                let kept: u32 = claims.iter().zip(&s).enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, (c, &sh))| sh.min(c.limit).saturating_sub(c.in_flight))
                    .sum();
                prop_assert!(me.in_flight >= guarantee && total - in_flight <= kept);
            }
        }

        /// A borrower (at or over its guarantee) never takes a slot kept for another
        /// source under its guarantee: after the start, each of them may still start.
        #[test]
        fn a_borrower_never_takes_a_kept_slot((total, claims, i) in one_waiting_strategy()) {
            let s = shares(total, &claims);
            if claims[i].in_flight >= s[i].min(claims[i].limit) && may_start(total, &claims, i) {
                let mut after = claims.clone();
                after[i].in_flight += 1;
                for (j, c) in claims.iter().enumerate() {
                    if j != i && c.waiting && c.in_flight < s[j].min(c.limit) {
                        prop_assert!(may_start(total, &after, j), "{} took {}'s slot", i, j);
                    }
                }
            }
        }

        /// Work-conserving: while more is free than the reserves not in use and a
        /// source with work waiting is under its own limit, some source with work
        /// waiting may start.
        #[test]
        fn while_room_is_left_someone_may_start(total in 0u32..40, claims in claims_strategy()) {
            let in_flight: u32 = claims.iter().map(|c| c.in_flight).sum();
            let reserved: u32 = reserves(total, &claims).iter().zip(&claims)
                .map(|(&r, c)| r.saturating_sub(c.in_flight)).sum();
            let wants = claims.iter().any(|c| c.waiting && c.in_flight < c.limit);
            if (total == 0 || in_flight + reserved < total) && wants {
                prop_assert!((0..claims.len()).any(|i| claims[i].waiting && may_start(total, &claims, i)));
            }
        }

        /// From nothing in flight, every source with work waiting asking in any order
        /// until none may start: each has at least its guarantee, the total (or what
        /// the own limits allow) is used, and one source alone may use
        /// min(total, its own limit).
        #[test]
        fn any_order_of_starts_ends_with_every_guarantee_met(
            total in 1u32..40, claims in fresh_strategy(), order in proptest::collection::vec(0usize..5, 0..200),
        ) {
            let s = shares(total, &claims);
            let mut now = claims.clone();
            for k in order {
                let i = k % now.len();
                if may_start(total, &now, i) {
                    now[i].in_flight += 1;
                }
            }
            // Then each in turn, until a round starts nothing.
            let mut started = true;
            while started {
                started = false;
                for i in 0..now.len() {
                    if may_start(total, &now, i) {
                        now[i].in_flight += 1;
                        started = true;
                    }
                }
            }
            let used: u32 = now.iter().map(|c| c.in_flight).sum();
            let limits: u32 = now.iter().map(|c| c.limit).sum();
            prop_assert_eq!(used, total.min(limits));
            for (j, c) in now.iter().enumerate() {
                prop_assert!(c.in_flight >= s[j].min(c.limit), "{} below its guarantee", j);
                prop_assert!(c.in_flight <= c.limit);
            }
            let mut alone = claims.clone();
            for c in alone.iter_mut().skip(1) {
                c.waiting = false;
            }
            let others = others_unused(total, &alone, 0);
            prop_assert_eq!(allowance(total, &alone, 0), (total - others).min(claims[0].limit));
        }

        /// Starts and finishes in any order never take what runs past the total,
        /// and never take a reserve: every source holds at least its reserve's worth
        /// of the total (`Σ max(in flight, reserve) ≤ total`), so one under its
        /// reserve may start whatever the others hold, waiting or not.
        #[test]
        fn starts_and_finishes_keep_the_total_and_never_lend_a_reserve(
            total in 1u32..20, claims in fresh_strategy(),
            steps in proptest::collection::vec((0usize..5, any::<bool>(), any::<bool>()), 0..300),
        ) {
            let mut now = claims;
            let r = reserves(total, &now);
            for (k, start, waiting) in steps {
                let i = k % now.len();
                now[i].waiting = waiting;
                if start {
                    if may_start(total, &now, i) {
                        now[i].in_flight += 1;
                    }
                } else {
                    now[i].in_flight = now[i].in_flight.saturating_sub(1);
                }
                let used: u32 = now.iter().map(|c| c.in_flight).sum();
                prop_assert!(used <= total);
                prop_assert!(now.iter().all(|c| c.in_flight <= c.limit));
                let held: u32 = now.iter().zip(&r).map(|(c, &r)| c.in_flight.max(r)).sum();
                prop_assert!(held <= total, "a reserve was lent: {:?}", now);
                for (j, c) in now.iter().enumerate() {
                    if c.in_flight < r[j] {
                        prop_assert!(may_start(total, &now, j), "{} under its reserve", j);
                    }
                }
            }
        }
    }
}
