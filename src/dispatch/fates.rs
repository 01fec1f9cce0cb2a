//! Batch delivery's decisions, as pure functions: what the app's answer to a batch
//! means for each message in it, and the ordered-lane rule (a message of a key that
//! is not acked holds back the later messages of that key in the batch).

use std::collections::{HashMap, HashSet};

use super::lanes::LaneKey;
use crate::app::batch::Answer;
use crate::outputs::{Output, Refusal};
use crate::policy::{Disposition, Outcome};

/// What each message's outcome is, given the batch request's own outcome and, for a
/// 2xx, its per-message answer. `ids` are the messages' batch ids, in batch order.
/// Also returns how many result ids named no message of the batch (ignored).
pub(super) fn outcomes(
    request: &Outcome,
    answer: Option<&Answer>,
    ids: &[String],
) -> (Vec<Outcome>, usize) {
    let all = |o: Outcome| (vec![o; ids.len()], 0);
    let Outcome::Answered { status, .. } = request else {
        // No answer (unreachable, reset, timeout): each message as if alone.
        return all(request.clone());
    };
    match answer {
        // Not a 2xx (or no body was read): each message as if it got this answer.
        None | Some(Answer::AllAcked) => all(request.clone()),
        Some(Answer::Unparsable(_)) => all(Outcome::BadAnswer),
        Some(Answer::Results(results)) => {
            let by_id: HashMap<&str, usize> = ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.as_str(), i))
                .collect();
            let mut out = vec![
                Outcome::Answered {
                    status: *status,
                    retry_after: None,
                    action: None,
                };
                ids.len()
            ];
            let mut unknown = 0;
            for r in results {
                match by_id.get(r.id.as_str()) {
                    Some(&i) => {
                        out[i] = Outcome::Answered {
                            status: *status,
                            retry_after: r.retry_after,
                            action: Some(r.action),
                        };
                    }
                    None => unknown += 1,
                }
            }
            (out, unknown)
        }
    }
}

/// What each message of the batch publishes if it is acked (from its result item),
/// in batch order.
pub(super) fn outputs(answer: Option<&Answer>, ids: &[String]) -> Vec<Option<Published>> {
    let mut out = vec![None; ids.len()];
    if let Some(Answer::Results(results)) = answer {
        let by_id: HashMap<&str, usize> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        for r in results {
            if let (Some(&i), Some(o)) = (by_id.get(r.id.as_str()), &r.outputs) {
                out[i] = Some(o.clone());
            }
        }
    }
    out
}

/// A result item's outputs, or why they cannot be published.
pub(super) type Published = Result<Vec<Output>, Refusal>;

/// Whether messages of this lane are independent of each other (no order to keep).
pub(super) fn independent(lane: &LaneKey, ordered: bool) -> bool {
    !ordered || *lane == LaneKey::Free
}

/// Which messages' outputs are committed together: one group per key, in batch order
/// (committed one after another, a failed commit ending its group), and each
/// independent message a group of its own; the groups run at once. `commits[i]`:
/// message `i` will be acked and has outputs to publish.
pub(super) fn commit_groups(
    commits: &[bool],
    lanes: &[&LaneKey],
    ordered: bool,
) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of: std::collections::HashMap<&LaneKey, usize> = std::collections::HashMap::new();
    for (i, lane) in lanes.iter().enumerate() {
        if !commits.get(i).copied().unwrap_or(false) {
            continue;
        }
        if independent(lane, ordered) {
            groups.push(vec![i]);
        } else if let Some(&g) = group_of.get(lane) {
            groups[g].push(i);
        } else {
            group_of.insert(lane, groups.len());
            groups.push(vec![i]);
        }
    }
    groups
}

/// What happens to one message of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fate {
    /// Its own disposition.
    Decided(Disposition),
    /// An earlier message of its key in the batch was not acked: it goes back to its
    /// lane, after that one, whatever the app said of it.
    HeldBack,
}

/// In ordered modes, every message after the first one of its key that will come
/// again (a retry, or a hold: the request did not get through) is held back. A
/// message that ends in the batch (acked, terminated, dead-lettered) holds nothing
/// back: the later messages of its key get their own verdicts, as they would one
/// message at a time. `lanes` are the messages' lanes, in batch (= stream) order.
pub(super) fn fates(
    dispositions: Vec<Disposition>,
    lanes: &[&LaneKey],
    ordered: bool,
) -> Vec<Fate> {
    let mut stopped: HashSet<&LaneKey> = HashSet::new();
    dispositions
        .into_iter()
        .zip(lanes)
        .map(|(d, lane)| {
            if independent(lane, ordered) {
                return Fate::Decided(d);
            }
            if stopped.contains(lane) {
                return Fate::HeldBack;
            }
            if comes_again(&d) {
                stopped.insert(lane);
            }
            Fate::Decided(d)
        })
        .collect()
}

/// Whether the message will be offered again after this disposition.
fn comes_again(d: &Disposition) -> bool {
    match d {
        Disposition::Retry { .. } | Disposition::Hold => true,
        Disposition::Ack | Disposition::Term { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::app::batch::ItemResult;
    use crate::policy::AppAction;

    #[test]
    fn commit_groups_table() {
        let (a, b) = (LaneKey::Partition(1), LaneKey::Partition(2));
        let free = LaneKey::Free;
        // (lanes, which commit, ordered, the groups)
        type Case<'a> = (Vec<&'a LaneKey>, Vec<bool>, bool, Vec<Vec<usize>>);
        let cases: Vec<Case> = vec![
            // Ordered: a key's messages in one group, in batch order; keys apart.
            (
                vec![&a, &b, &a, &b, &a],
                vec![true; 5],
                true,
                vec![vec![0, 2, 4], vec![1, 3]],
            ),
            // Unordered: every message on its own.
            (
                vec![&a, &b, &a],
                vec![true; 3],
                false,
                vec![vec![0], vec![1], vec![2]],
            ),
            // Free lanes are independent even in ordered modes.
            (
                vec![&free, &free, &a],
                vec![true; 3],
                true,
                vec![vec![0], vec![1], vec![2]],
            ),
            // Only what commits: not acked, or no outputs.
            (
                vec![&a, &a, &b, &a],
                vec![true, false, false, true],
                true,
                vec![vec![0, 3]],
            ),
            (vec![], vec![], true, vec![]),
        ];
        for (lanes, commits, ordered, want) in cases {
            assert_eq!(commit_groups(&commits, &lanes, ordered), want, "{lanes:?}");
        }
    }

    fn answered(status: u16, action: Option<AppAction>, ms: Option<u64>) -> Outcome {
        Outcome::Answered {
            status,
            retry_after: ms.map(Duration::from_millis),
            action,
        }
    }

    fn ids(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("S:{i}")).collect()
    }

    #[test]
    fn outcomes_table() {
        let ok = answered(200, None, None);
        let item = |id: &str, action, ms: Option<u64>| ItemResult {
            id: id.into(),
            action,
            retry_after: ms.map(Duration::from_millis),
            outputs: None,
        };
        let results = Answer::Results(vec![
            item("S:2", AppAction::Retry, Some(5000)),
            item("S:9", AppAction::Term, None),
            item("S:3", AppAction::Dlq, None),
        ]);
        let cases: Vec<(Outcome, Option<Answer>, Vec<Outcome>, usize)> = vec![
            (ok.clone(), Some(Answer::AllAcked), vec![ok.clone(); 3], 0),
            (
                ok.clone(),
                Some(results),
                vec![
                    ok.clone(),
                    answered(200, Some(AppAction::Retry), Some(5000)),
                    answered(200, Some(AppAction::Dlq), None),
                ],
                1,
            ),
            (
                ok.clone(),
                Some(Answer::Unparsable("x".into())),
                vec![Outcome::BadAnswer; 3],
                0,
            ),
            (
                answered(503, None, Some(2000)),
                None,
                vec![answered(503, None, Some(2000)); 3],
                0,
            ),
            (Outcome::Timeout, None, vec![Outcome::Timeout; 3], 0),
            (Outcome::Unreachable, None, vec![Outcome::Unreachable; 3], 0),
        ];
        for (request, answer, want, unknown) in cases {
            assert_eq!(
                outcomes(&request, answer.as_ref(), &ids(3)),
                (want, unknown),
                "{request:?} {answer:?}"
            );
        }
    }

    #[test]
    fn fates_table() {
        let (a, b, free) = (LaneKey::Partition(1), LaneKey::Partition(2), LaneKey::Free);
        let ack = Disposition::Ack;
        let retry = Disposition::Retry {
            delay: Duration::from_secs(1),
        };
        let term = Disposition::Term {
            reason: crate::policy::TermReason::Status(400),
        };
        let decided = |d: &Disposition| Fate::Decided(d.clone());
        let held = Fate::HeldBack;
        // (lanes, dispositions, ordered, fates)
        type Case<'a> = (Vec<&'a LaneKey>, Vec<Disposition>, bool, Vec<Fate>);
        let cases: Vec<Case> = vec![
            // A retry holds back its key's later messages, whatever the app said of them.
            (
                vec![&a, &b, &a, &a, &b],
                vec![
                    ack.clone(),
                    ack.clone(),
                    retry.clone(),
                    ack.clone(),
                    ack.clone(),
                ],
                true,
                vec![
                    decided(&ack),
                    decided(&ack),
                    decided(&retry),
                    held.clone(),
                    decided(&ack),
                ],
            ),
            // A hold (the request did not get through) too.
            (
                vec![&a, &a],
                vec![Disposition::Hold, ack.clone()],
                true,
                vec![decided(&Disposition::Hold), held.clone()],
            ),
            // A message that ends in the batch holds nothing back: term (a dead
            // letter) ends there, and the next of its key gets its own verdict.
            (
                vec![&a, &a, &a],
                vec![term.clone(), ack.clone(), retry.clone()],
                true,
                vec![decided(&term), decided(&ack), decided(&retry)],
            ),
            (
                vec![&a, &a, &a],
                vec![term.clone(), retry.clone(), ack.clone()],
                true,
                vec![decided(&term), decided(&retry), held.clone()],
            ),
            // Free lanes, and unordered batches, keep no order.
            (
                vec![&free, &free],
                vec![retry.clone(), ack.clone()],
                true,
                vec![decided(&retry), decided(&ack)],
            ),
            (
                vec![&a, &a],
                vec![retry.clone(), ack.clone()],
                false,
                vec![decided(&retry), decided(&ack)],
            ),
        ];
        for (lanes, dispositions, ordered, want) in cases {
            assert_eq!(
                fates(dispositions.clone(), &lanes, ordered),
                want,
                "{dispositions:?} ordered {ordered}"
            );
        }
    }
}
