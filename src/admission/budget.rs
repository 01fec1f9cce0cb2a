//! The process's budget of requests in flight across its sources (`[budget]
//! max_in_flight`), as the handle every source's runner shares: [`Budget`] (one per
//! process, cheap to clone; [`Budget::off`] when the total is 0) and one
//! [`BudgetShare`] per source ([`Budget::member`], with its weight). A runner asks
//! [`BudgetShare::try_start`] before each request; the [`BudgetPermit`] it gets is
//! held by the request's task and its drop returns the slot. A refused runner waits
//! on [`BudgetShare::freed`], woken when a slot it may take frees.
//!
//! Who may start is `crate::pace::budget`'s decision (pure); this file keeps the
//! counts behind one lock and wakes whom a change lets start. It never waits and
//! never counts time: a runner's own limit, its rate limit and its gates stay its
//! own (`crate::admission::pacing`); the budget only learns the limit, to lend what
//! a source cannot use. Bounded: one entry per share (kept, once the share is
//! dropped, only until its permits are back) and at most one stored wake-up each.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::pace::budget::{self, Claim};

/// The budget shared by every source of the process.
#[derive(Debug, Clone)]
pub struct Budget {
    ledger: Arc<Mutex<Ledger>>,
}

/// One source's part of the budget. Clones are the same share; when the last one is
/// dropped (the source removed) its work no longer counts as waiting, and its
/// requests still in flight count until their permits are dropped.
#[derive(Debug, Clone)]
pub struct BudgetShare {
    seat: Arc<SeatHandle>,
}

/// One request's slot in the budget, returned when dropped (the request's task
/// ended, finished, panicked or aborted alike).
#[derive(Debug)]
#[must_use = "the slot is returned when the permit is dropped"]
pub struct BudgetPermit {
    /// The ledger the slot is returned to.
    ledger: Arc<Mutex<Ledger>>,
    /// The seat it counts for.
    id: u64,
}

/// The counts behind the lock.
#[derive(Debug)]
struct Ledger {
    /// `[budget] max_in_flight`; 0 = off (each source's own limit only).
    total: u32,
    /// `[budget] reserve`: the slots kept for each source, never lent.
    reserve: u32,
    /// The id of the next seat.
    next_id: u64,
    /// One per share alive, and per share dropped with requests still in flight.
    seats: Vec<Seat>,
}

/// One source in the ledger.
#[derive(Debug)]
struct Seat {
    id: u64,
    /// Its weight, in flight, own limit and whether it has work waiting.
    claim: Claim,
    /// Its share was dropped: it waits for nothing, and leaves when nothing of it runs.
    gone: bool,
    /// Woken when it may start (a stored wake-up at most: a later `freed` returns at
    /// once).
    wake: Arc<Notify>,
}

/// What the clones of a share hold: the seat, left when the last clone drops.
#[derive(Debug)]
struct SeatHandle {
    ledger: Arc<Mutex<Ledger>>,
    id: u64,
    /// The source's name.
    name: String,
    wake: Arc<Notify>,
}

/// A poisoned lock only means another thread panicked between two plain updates of
/// counts: they are still counts, and the budget goes on.
fn lock(m: &Mutex<Ledger>) -> MutexGuard<'_, Ledger> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// === impl Budget ===

impl Default for Budget {
    fn default() -> Self {
        Budget::off()
    }
}

impl Budget {
    /// A budget of `max_in_flight` requests across the sources (0 = off), `reserve`
    /// of them kept for each source whatever the others hold (never lent).
    pub fn new(max_in_flight: u32, reserve: u32) -> Budget {
        Budget {
            ledger: Arc::new(Mutex::new(Ledger {
                total: max_in_flight,
                reserve,
                next_id: 0,
                seats: Vec::new(),
            })),
        }
    }

    /// No budget: each source's own limit only. It still counts, so that a reload
    /// that sets a total knows what runs.
    pub fn off() -> Budget {
        Budget::new(0, 0)
    }

    /// A source's share, at `weight` (0: no share of its own, only what others
    /// leave). Its own limit is unknown (unbounded) until [`BudgetShare::set_limit`].
    pub fn member(&self, name: &str, weight: u32) -> BudgetShare {
        let wake = Arc::new(Notify::new());
        let mut ledger = lock(&self.ledger);
        let id = ledger.next_id;
        ledger.next_id += 1;
        ledger.seats.push(Seat {
            id,
            claim: Claim {
                weight,
                in_flight: 0,
                limit: u32::MAX,
                waiting: false,
                reserve: 0,
            },
            gone: false,
            wake: Arc::clone(&wake),
        });
        // A newcomer waits for nothing yet, and takes nothing from anyone.
        drop(ledger);
        BudgetShare {
            seat: Arc::new(SeatHandle {
                ledger: Arc::clone(&self.ledger),
                id,
                name: name.to_string(),
                wake,
            }),
        }
    }

    /// A new total (a reload; 0 = off): a lower one lets what runs finish, nothing
    /// starts until the sources are under it; a higher one wakes who may start.
    pub fn set_total(&self, max_in_flight: u32) {
        let mut ledger = lock(&self.ledger);
        if ledger.total != max_in_flight {
            ledger.total = max_in_flight;
            ledger.wake(None);
        }
    }

    /// A new reserve (a reload): a lower one lends what it no longer keeps, a higher
    /// one is kept as slots free (nothing in flight is cut short).
    pub fn set_reserve(&self, reserve: u32) {
        let mut ledger = lock(&self.ledger);
        if ledger.reserve != reserve {
            ledger.reserve = reserve;
            ledger.wake(None);
        }
    }

    /// The total (0 = off).
    pub fn total(&self) -> u32 {
        lock(&self.ledger).total
    }

    /// Requests in flight across the sources.
    pub fn in_flight(&self) -> u32 {
        lock(&self.ledger).in_flight()
    }
}

// === impl BudgetShare ===

impl BudgetShare {
    /// The source's name, as [`Budget::member`] was given it.
    pub fn name(&self) -> &str {
        &self.seat.name
    }

    /// A slot for one request, when the budget allows one now ([`budget::allowance`]:
    /// within the total and the source's own limit, its weighted share, or a share
    /// nobody uses). Refused, the source counts as having work waiting (it asked) until
    /// it says otherwise ([`BudgetShare::set_waiting`]), and [`BudgetShare::freed`]
    /// wakes it when it may start.
    pub fn try_start(&self) -> Option<BudgetPermit> {
        let h = &self.seat;
        let mut ledger = lock(&h.ledger);
        let i = ledger.index(h.id)?;
        let allowed = if ledger.total == 0 {
            // Off: no need to weigh the others.
            let c = ledger.seats[i].claim;
            c.limit.saturating_sub(c.in_flight)
        } else {
            budget::allowance(ledger.total, &ledger.claims(), i)
        };
        if allowed == 0 {
            if !ledger.seats[i].claim.waiting {
                ledger.seats[i].claim.waiting = true;
                // Its share now counts: others' may shrink or, lent less, grow.
                ledger.wake(Some(h.id));
            }
            return None;
        }
        // A start lets nobody else start (less is free, and what was kept for this
        // source was not the others'): no wake-up.
        let claim = &mut ledger.seats[i].claim;
        claim.in_flight = claim.in_flight.saturating_add(1);
        Some(BudgetPermit {
            ledger: Arc::clone(&h.ledger),
            id: h.id,
        })
    }

    /// Whether the source has work that only the budget holds back: true keeps its
    /// share for it; false (nothing to start, or its own limit, gate, pause or rate
    /// limit holds it) lends its share to the others.
    pub fn set_waiting(&self, waiting: bool) {
        self.update(|c| c.waiting = waiting);
    }

    /// The source's own limit now (its `max_in_flight`, or its adaptive limit): what
    /// of its share it cannot use is lent.
    pub fn set_limit(&self, limit: usize) {
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        self.update(|c| c.limit = limit);
    }

    /// A new weight (a reload).
    pub fn set_weight(&self, weight: u32) {
        self.update(|c| c.weight = weight);
    }

    /// Returns when the source may start (a slot it may take freed, the total rose, a
    /// share was given up), or at once if that happened since the last call. It may
    /// wake without a slot being left (another took it first): ask again. Cancel-safe:
    /// a wake-up a dropped call received is kept for the next.
    pub async fn freed(&self) {
        self.seat.wake.notified().await;
    }

    /// This source's requests in flight.
    pub fn in_flight(&self) -> u32 {
        let ledger = lock(&self.seat.ledger);
        ledger
            .index(self.seat.id)
            .map_or(0, |i| ledger.seats[i].claim.in_flight)
    }

    /// Changes this source's claim; when that changes it, wakes the others it lets
    /// start.
    fn update(&self, change: impl FnOnce(&mut Claim)) {
        let h = &self.seat;
        let mut ledger = lock(&h.ledger);
        let Some(i) = ledger.index(h.id) else {
            return;
        };
        let before = ledger.seats[i].claim;
        change(&mut ledger.seats[i].claim);
        if ledger.seats[i].claim != before {
            ledger.wake(Some(h.id));
        }
    }
}

impl Drop for SeatHandle {
    /// The source is gone: it waits for nothing; its seat leaves with its last request.
    fn drop(&mut self) {
        let mut ledger = lock(&self.ledger);
        if let Some(i) = ledger.index(self.id) {
            let seat = &mut ledger.seats[i];
            seat.gone = true;
            seat.claim.waiting = false;
            if seat.claim.in_flight == 0 {
                ledger.seats.remove(i);
            }
            ledger.wake(None);
        }
    }
}

// === impl BudgetPermit ===

impl Drop for BudgetPermit {
    /// The slot returns, and whoever it lets start is woken.
    fn drop(&mut self) {
        let mut ledger = lock(&self.ledger);
        if let Some(i) = ledger.index(self.id) {
            let seat = &mut ledger.seats[i];
            seat.claim.in_flight = seat.claim.in_flight.saturating_sub(1);
            if seat.gone && seat.claim.in_flight == 0 {
                ledger.seats.remove(i);
            }
        }
        ledger.wake(None);
    }
}

// === impl Ledger ===

impl Ledger {
    fn index(&self, id: u64) -> Option<usize> {
        self.seats.iter().position(|s| s.id == id)
    }

    /// Every seat's claim, with the reserve (none for a source gone).
    fn claims(&self) -> Vec<Claim> {
        self.seats
            .iter()
            .map(|s| Claim {
                reserve: if s.gone { 0 } else { self.reserve },
                ..s.claim
            })
            .collect()
    }

    fn in_flight(&self) -> u32 {
        self.seats
            .iter()
            .fold(0u32, |n, s| n.saturating_add(s.claim.in_flight))
    }

    /// Wakes every source with work waiting that may start now (but `except`, whose
    /// own call changed things: it asks again by itself). Each wake-up is one stored
    /// permit at most, so a source woken twice before it looks wakes once.
    fn wake(&self, except: Option<u64>) {
        if !self.seats.iter().any(|s| s.claim.waiting && !s.gone) {
            return;
        }
        let claims = self.claims();
        for (i, s) in self.seats.iter().enumerate() {
            if s.claim.waiting
                && !s.gone
                && Some(s.id) != except
                && budget::allowance(self.total, &claims, i) > 0
            {
                s.wake.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;
    use tokio::time::{Instant, sleep};

    use super::*;

    /// Whether `share` was woken (a wake-up is waiting to be taken).
    fn woken(share: &BudgetShare) -> bool {
        share.freed().now_or_never().is_some()
    }

    /// A budget of `total` slots (`reserve` kept for each source) and two sources of
    /// it, a and b, of weight 1.
    fn two(total: u32, reserve: u32) -> (Budget, BudgetShare, BudgetShare) {
        let budget = Budget::new(total, reserve);
        let (a, b) = (budget.member("a", 1), budget.member("b", 1));
        (budget, a, b)
    }

    /// A budget of 4 where b waits for its share, 2, and a holds the other 2: the two
    /// sources and a's permits.
    fn half_kept_for_b() -> (BudgetShare, BudgetShare, Vec<BudgetPermit>) {
        let (_, a, b) = two(4, 0);
        b.set_waiting(true);
        let held = take(&a, 2);
        assert!(a.try_start().is_none(), "B's two are kept");
        (a, b, held)
    }

    /// `n` requests started by `share`, each of which must be let start.
    fn take(share: &BudgetShare, n: usize) -> Vec<BudgetPermit> {
        (0..n)
            .map(|k| {
                share
                    .try_start()
                    .unwrap_or_else(|| panic!("start {k} of {n}"))
            })
            .collect()
    }

    #[test]
    fn off_counts_but_holds_only_the_own_limit() {
        let budget = Budget::off();
        let a = budget.member("a", 1);
        assert_eq!(a.name(), "a");
        let held = take(&a, 100);
        assert_eq!(budget.in_flight(), 100);
        a.set_limit(100);
        assert!(a.try_start().is_none(), "its own limit");
        drop(held);
        assert_eq!(budget.in_flight(), 0);
        assert_eq!(Budget::default().total(), 0);
    }

    #[test]
    fn a_slot_returns_when_its_permit_drops() {
        let budget = Budget::new(2, 0);
        let a = budget.member("a", 1);
        let first = a.try_start().unwrap();
        let second = a.try_start().unwrap();
        assert!(a.try_start().is_none(), "the total");
        assert!(!woken(&a));
        drop(first);
        assert!(woken(&a), "a refused source is woken when a slot frees");
        assert_eq!((a.in_flight(), budget.in_flight()), (1, 1));
        let third = a.try_start().unwrap();
        // A wait given up after its wake-up came keeps the wake-up for the next.
        let mut wait = Box::pin(a.freed());
        assert!(wait.as_mut().now_or_never().is_none());
        drop(second);
        drop(wait);
        assert!(woken(&a));
        drop(third);
        assert_eq!(budget.in_flight(), 0);
    }

    #[test]
    fn a_new_weight_moves_the_shares() {
        let (a, b, _a) = half_kept_for_b();
        b.set_weight(3);
        assert!(!woken(&a), "B's share grew to 3");
        b.set_weight(0);
        assert!(woken(&a), "B has no share of its own now");
        let _more = take(&a, 2);
    }

    #[test]
    fn an_idle_share_is_lent_and_given_back_as_slots_free() {
        let (budget, a, b) = two(10, 0);
        a.set_limit(32);
        b.set_limit(32);
        // B has nothing: A may take the whole total.
        let mut hog = take(&a, 10);
        assert!(a.try_start().is_none());
        // B has work: refused (all is taken), it waits; A may not take what frees.
        assert!(b.try_start().is_none());
        let mut fair = Vec::new();
        for k in 0..5 {
            hog.pop();
            assert!(woken(&b), "slot {k}: B under its share is woken");
            assert!(a.try_start().is_none(), "slot {k}: kept for B");
            fair.push(b.try_start().unwrap());
        }
        assert_eq!(b.in_flight(), 5);
        hog.pop();
        assert!(!woken(&b), "B at its share: not woken for A's slot");
        hog.push(a.try_start().unwrap());
        assert_eq!((a.in_flight(), budget.in_flight()), (5, 10));
    }

    #[test]
    fn a_reserve_is_never_lent_to_a_source_whose_requests_hang() {
        let (budget, a, b) = two(8, 1);
        a.set_limit(32);
        b.set_limit(32);
        // B has nothing: A takes all but B's reserve, and its requests never end.
        let _hung = take(&a, 7);
        assert!(a.try_start().is_none(), "B's one is kept");
        // B's work arrives: its first request starts at once.
        let first = b.try_start().expect("B's reserve");
        assert!(b.try_start().is_none(), "the rest as A's requests end");
        // A lower reserve lends it; a higher one is kept as slots free.
        drop(first);
        b.set_waiting(false);
        budget.set_reserve(0);
        assert!(woken(&a), "the reserve given up is lent");
        let _eighth = a.try_start().expect("lent");
        budget.set_reserve(1);
        assert!(b.try_start().is_none(), "nothing in flight is cut short");
    }

    #[test]
    fn what_an_own_limit_cannot_use_is_lent() {
        let (budget, a, b) = two(10, 0);
        a.set_limit(32);
        b.set_limit(2);
        b.set_waiting(true);
        let _a = take(&a, 8);
        assert!(a.try_start().is_none(), "two kept for B's limit");
        let _b = take(&b, 2);
        assert!(b.try_start().is_none());
        assert_eq!(budget.in_flight(), 10);
    }

    #[test]
    fn giving_up_a_share_wakes_who_it_lets_start() {
        let (a, b, _a) = half_kept_for_b();
        assert!(!woken(&a));
        b.set_waiting(false);
        assert!(woken(&a), "B lends its share");
        let _more = take(&a, 2);
        b.set_waiting(true);
        assert!(b.try_start().is_none(), "all taken; B waits for its share");
    }

    #[test]
    fn a_lowered_total_is_honoured_as_slots_return() {
        let budget = Budget::new(4, 0);
        let a = budget.member("a", 1);
        let mut held = take(&a, 4);
        budget.set_total(2);
        assert!(a.try_start().is_none());
        held.pop();
        held.pop();
        assert!(a.try_start().is_none(), "2 in flight: at the new total");
        assert!(!woken(&a));
        held.pop();
        assert!(woken(&a));
        held.push(a.try_start().unwrap());
        assert!(a.try_start().is_none());
        budget.set_total(3);
        assert!(woken(&a), "a higher total wakes");
        held.push(a.try_start().unwrap());
        assert_eq!(budget.in_flight(), 3);
    }

    #[test]
    fn a_dropped_share_counts_until_its_requests_end() {
        let (budget, a, b) = two(4, 0);
        let held = take(&a, 3);
        drop(a);
        assert_eq!(budget.in_flight(), 3);
        let _one = b.try_start().unwrap();
        assert!(b.try_start().is_none(), "A's requests still count");
        drop(held);
        assert_eq!(budget.in_flight(), 1);
        assert!(woken(&b));
        let _more = take(&b, 3);
        assert_eq!(lock(&budget.ledger).seats.len(), 1, "A's seat left");
    }

    /// Two sources in tasks, each starting requests of 10 ms whenever the budget
    /// lets it, with 40 of work: A starts first and borrows every slot, then B's
    /// work arrives. B gets its share as A's requests end, the total is never
    /// passed, and each source ends with as many slots as its weight says.
    #[tokio::test(start_paused = true)]
    async fn one_source_hogging_cannot_starve_another() {
        let budget = Budget::new(8, 0);
        let a = budget.member("a", 1);
        let b = budget.member("b", 3);
        a.set_limit(100);
        b.set_limit(100);
        let peak = Arc::new(Mutex::new((0u32, Vec::new())));
        let run = |share: BudgetShare, delay: Duration| {
            let (budget, peak) = (budget.clone(), Arc::clone(&peak));
            tokio::spawn(async move {
                sleep(delay).await;
                let mut tasks = tokio::task::JoinSet::new();
                let mut left = 40;
                while left > 0 {
                    match share.try_start() {
                        Some(permit) => {
                            left -= 1;
                            {
                                let mut p = peak.lock().unwrap();
                                p.0 = p.0.max(budget.in_flight());
                            }
                            tasks.spawn(async move {
                                sleep(Duration::from_millis(10)).await;
                                drop(permit);
                            });
                        }
                        None => {
                            tokio::select! {
                                () = share.freed() => {}
                                Some(_) = tasks.join_next() => {}
                            }
                        }
                    }
                }
                share.set_waiting(false);
                while tasks.join_next().await.is_some() {}
            })
        };
        let sampler = {
            let (a, b, peak) = (a.clone(), b.clone(), Arc::clone(&peak));
            tokio::spawn(async move {
                // Between the starts and ends, which happen on whole 10 ms.
                sleep(Duration::from_millis(2)).await;
                let start = Instant::now();
                while start.elapsed() < Duration::from_millis(60) {
                    peak.lock().unwrap().1.push((a.in_flight(), b.in_flight()));
                    sleep(Duration::from_millis(5)).await;
                }
            })
        };
        let ta = run(a, Duration::ZERO);
        let tb = run(b, Duration::from_millis(1));
        ta.await.unwrap();
        tb.await.unwrap();
        sampler.await.unwrap();
        let (max, samples) = peak.lock().unwrap().clone();
        assert_eq!(max, 8, "never past the total");
        assert_eq!(samples[..2], [(8, 0); 2], "A alone borrows all");
        // From the first round of A's requests ending, B runs its share of 6 of 8.
        assert_eq!(samples[2..], [(2, 6); 10], "{samples:?}");
        assert_eq!(budget.in_flight(), 0);
    }
}
