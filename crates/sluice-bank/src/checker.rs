//! The bank workload's checker, run after the workload drained: it reads what the topics hold
//! (every committed event, each account's newest balance snapshot) and compares it with what
//! the load generator sent.
//!
//! - every transfer the broker accepted has exactly one debit step (debited or refused); a
//!   debited one exactly one credit, a refused one none; one whose send failed (unknown
//!   outcome) at most one of each, credited only if debited;
//! - every event belongs to a transfer that was sent, with its accounts and amount; a refusal
//!   only when the source's balance at that point was below the amount;
//! - replaying the events from the initial balances gives every account's snapshot, no balance
//!   is ever negative, and the snapshots sum to the initial total.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::record::{Record, Tag};

/// What the load generator sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub from: u32,
    pub to: u32,
    pub amount: i64,
    /// The broker acknowledged it (else its fate is unknown: a send that timed out).
    pub acknowledged: bool,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Verdict {
    pub ok: bool,
    pub violations: Vec<String>,
    /// Violations beyond the first `MAX_LISTED`, counted only.
    pub more_violations: usize,
    pub transfers_debited: u64,
    pub transfers_refused: u64,
    pub transfers_unknown_not_applied: u64,
}

const MAX_LISTED: usize = 50;

#[derive(Default)]
struct Steps {
    debited: u32,
    refused: u32,
    credited: u32,
}

/// Checks the workload's outcome. `events` in the order of each partition's log.
pub fn check(
    accounts: u32,
    initial_balance: i64,
    sent: &HashMap<u64, Sent>,
    events: &[Record],
    snapshots: &BTreeMap<u32, i64>,
) -> Verdict {
    let mut violations = Vec::new();
    let mut steps: HashMap<u64, Steps> = HashMap::new();
    let mut balances: Vec<i64> = vec![initial_balance; accounts as usize];
    let mut went_negative: BTreeMap<u32, i64> = BTreeMap::new();
    for e in events {
        let Some(s) = sent.get(&e.id) else {
            violations.push(format!(
                "event {:?} of transfer {} that was never sent",
                e.tag, e.id
            ));
            continue;
        };
        if (e.from, e.to, e.amount) != (s.from, s.to, s.amount) {
            violations.push(format!(
                "transfer {}: event {:?} says {}→{} amount {}, the transfer was {}→{} amount {}",
                e.id, e.tag, e.from, e.to, e.amount, s.from, s.to, s.amount
            ));
            continue;
        }
        let st = steps.entry(e.id).or_default();
        let account = match e.tag {
            Tag::Debited => {
                st.debited += 1;
                Some((e.from, -e.amount))
            }
            Tag::Refused => {
                st.refused += 1;
                // A refusal must be right: the source could not pay (an account's events are
                // all on its own partition, in the order they were decided, so the replayed
                // balance is the one the processor saw).
                let had = balances.get(e.from as usize).copied();
                if e.amount > 0 && e.from != e.to && had.is_some_and(|b| b >= e.amount) {
                    violations.push(format!(
                        "transfer {} was refused although account {} held {} for amount {}",
                        e.id,
                        e.from,
                        had.unwrap_or_default(),
                        e.amount
                    ));
                }
                None
            }
            Tag::Credited => {
                st.credited += 1;
                Some((e.to, e.amount))
            }
            Tag::Transfer | Tag::Credit => {
                violations.push(format!("a command ({:?}) in the events topic", e.tag));
                None
            }
        };
        if let Some((account, delta)) = account {
            match balances.get_mut(account as usize) {
                Some(b) => {
                    *b += delta;
                    if *b < 0 {
                        went_negative.entry(account).or_insert(*b);
                    }
                }
                None => violations.push(format!(
                    "transfer {}: account {account} does not exist",
                    e.id
                )),
            }
        }
    }
    for (account, balance) in &went_negative {
        violations.push(format!("account {account} went negative ({balance})"));
    }
    let (mut debited, mut refused, mut unknown_not_applied) = (0u64, 0u64, 0u64);
    let mut ids: Vec<&u64> = sent.keys().collect();
    ids.sort();
    let none = Steps::default();
    for id in ids {
        let s = &sent[id];
        let st = steps.get(id).unwrap_or(&none);
        let first = st.debited + st.refused;
        let fine = match (first, st.debited, st.credited) {
            (1, 1, 1) => {
                debited += 1;
                true
            }
            (1, 0, 0) => {
                refused += 1;
                true
            }
            (0, 0, 0) if !s.acknowledged => {
                unknown_not_applied += 1;
                true
            }
            _ => false,
        };
        if !fine {
            violations.push(format!(
                "transfer {id} ({}→{} amount {}{}): debited {} refused {} credited {} times",
                s.from,
                s.to,
                s.amount,
                if s.acknowledged {
                    ""
                } else {
                    ", send unacknowledged"
                },
                st.debited,
                st.refused,
                st.credited
            ));
        }
    }
    let mut total = 0i64;
    for account in 0..accounts {
        let replayed = balances[account as usize];
        let snapshot = snapshots.get(&account).copied();
        total += snapshot.unwrap_or(0);
        if snapshot != Some(replayed) {
            violations.push(format!(
                "account {account}: snapshot {snapshot:?}, the events give {replayed}"
            ));
        }
        if snapshot.is_some_and(|b| b < 0) {
            violations.push(format!(
                "account {account} has a negative balance {snapshot:?}"
            ));
        }
    }
    if let Some(extra) = snapshots.keys().find(|a| **a >= accounts) {
        violations.push(format!(
            "a snapshot of account {extra}, which does not exist"
        ));
    }
    let expected = initial_balance * i64::from(accounts);
    if total != expected {
        violations.push(format!(
            "the balances sum to {total}, not the initial {expected}"
        ));
    }
    let more = violations.len().saturating_sub(MAX_LISTED);
    violations.truncate(MAX_LISTED);
    Verdict {
        ok: violations.is_empty(),
        violations,
        more_violations: more,
        transfers_debited: debited,
        transfers_refused: refused,
        transfers_unknown_not_applied: unknown_not_applied,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(tag: Tag, id: u64, from: u32, to: u32, amount: i64) -> Record {
        Record {
            tag,
            id,
            from,
            to,
            amount,
            sent_us: 0,
        }
    }

    fn sent(list: &[(u64, u32, u32, i64)]) -> HashMap<u64, Sent> {
        list.iter()
            .map(|&(id, from, to, amount)| {
                (
                    id,
                    Sent {
                        from,
                        to,
                        amount,
                        acknowledged: true,
                    },
                )
            })
            .collect()
    }

    /// Two accounts of 100; transfer 1 moves 30 from 0 to 1, transfer 2 (150) is refused.
    fn good() -> (HashMap<u64, Sent>, Vec<Record>, BTreeMap<u32, i64>) {
        let s = sent(&[(1, 0, 1, 30), (2, 1, 0, 150)]);
        let events = vec![
            ev(Tag::Debited, 1, 0, 1, 30),
            ev(Tag::Refused, 2, 1, 0, 150),
            ev(Tag::Credited, 1, 0, 1, 30),
        ];
        (s, events, BTreeMap::from([(0, 70), (1, 130)]))
    }

    #[test]
    fn a_correct_run_passes() {
        let (s, e, b) = good();
        let v = check(2, 100, &s, &e, &b);
        assert!(v.ok, "{v:?}");
        assert_eq!((v.transfers_debited, v.transfers_refused), (1, 1));
    }

    #[test]
    fn a_lost_credit_is_caught() {
        let (s, mut e, _) = good();
        e.pop();
        let v = check(2, 100, &s, &e, &BTreeMap::from([(0, 70), (1, 100)]));
        assert!(!v.ok);
        assert!(
            v.violations
                .iter()
                .any(|x| x.contains("transfer 1") && x.contains("credited 0")),
            "{v:?}"
        );
        assert!(
            v.violations.iter().any(|x| x.contains("sum to 170")),
            "{v:?}"
        );
    }

    #[test]
    fn a_double_debit_is_caught() {
        let (s, mut e, _) = good();
        e.push(ev(Tag::Debited, 1, 0, 1, 30));
        let v = check(2, 100, &s, &e, &BTreeMap::from([(0, 40), (1, 130)]));
        assert!(!v.ok);
        assert!(
            v.violations.iter().any(|x| x.contains("debited 2")),
            "{v:?}"
        );
    }

    #[test]
    fn a_negative_balance_is_caught() {
        let s = sent(&[(1, 0, 1, 130)]);
        let e = vec![
            ev(Tag::Debited, 1, 0, 1, 130),
            ev(Tag::Credited, 1, 0, 1, 130),
        ];
        let v = check(2, 100, &s, &e, &BTreeMap::from([(0, -30), (1, 230)]));
        assert!(!v.ok);
        assert!(
            v.violations.iter().any(|x| x.contains("went negative")),
            "{v:?}"
        );
        assert!(
            v.violations.iter().any(|x| x.contains("negative balance")),
            "{v:?}"
        );
    }

    #[test]
    fn a_wrong_refusal_is_caught() {
        let s = sent(&[(1, 0, 1, 30)]);
        let e = vec![ev(Tag::Refused, 1, 0, 1, 30)];
        let v = check(2, 100, &s, &e, &BTreeMap::from([(0, 100), (1, 100)]));
        assert!(!v.ok);
        assert!(
            v.violations.iter().any(|x| x.contains("refused although")),
            "{v:?}"
        );
    }

    #[test]
    fn a_stale_snapshot_a_missing_outcome_and_a_foreign_event_are_caught() {
        let (mut s, mut e, mut b) = good();
        b.insert(1, 100);
        s.insert(
            3,
            Sent {
                from: 0,
                to: 1,
                amount: 1,
                acknowledged: true,
            },
        );
        e.push(ev(Tag::Credited, 99, 0, 1, 5));
        let v = check(2, 100, &s, &e, &b);
        assert!(
            v.violations
                .iter()
                .any(|x| x.contains("account 1: snapshot")),
            "{v:?}"
        );
        assert!(
            v.violations.iter().any(|x| x.contains("transfer 3")),
            "{v:?}"
        );
        assert!(
            v.violations.iter().any(|x| x.contains("never sent")),
            "{v:?}"
        );
    }

    #[test]
    fn an_unacknowledged_send_may_be_applied_once_or_not_at_all() {
        let (mut s, e, b) = good();
        s.insert(
            3,
            Sent {
                from: 0,
                to: 1,
                amount: 1,
                acknowledged: false,
            },
        );
        let v = check(2, 100, &s, &e, &b);
        assert!(v.ok, "{v:?}");
        assert_eq!(v.transfers_unknown_not_applied, 1);
    }
}
