//! One partition's accounts, held in memory by the processor that owns the partition: their
//! balances and the transfer ids already applied here (so a command sent twice is applied
//! once). Changes since the last committed transaction are kept in an undo log, so an aborted
//! transaction takes them back.

use std::collections::{HashMap, HashSet};

use crate::record::{Record, Tag};

#[derive(Debug, Default)]
pub struct Ledger {
    balances: HashMap<u32, i64>,
    /// Transfers whose debit step ran here (debited or refused).
    debits: HashSet<u64>,
    /// Transfers whose credit step ran here.
    credits: HashSet<u64>,
    undo: Vec<Undo>,
}

#[derive(Debug)]
enum Undo {
    Balance(u32, i64),
    Debit(u64),
    Credit(u64),
}

/// What applying a command produces, all written in the processor's transaction.
#[derive(Debug, PartialEq, Eq)]
pub struct Effects {
    /// The event (record of truth), keyed by the account it happened to.
    pub event: Record,
    /// The account's new balance (the compacted snapshot), if it changed.
    pub balance: Option<(u32, i64)>,
    /// The saga's next command: the credit, keyed by the destination.
    pub next: Option<Record>,
}

impl Ledger {
    /// Loads an account's balance from its snapshot.
    pub fn set_balance(&mut self, account: u32, balance: i64) {
        self.balances.insert(account, balance);
    }

    /// Loads an event that already happened (rebuilding from the events topic).
    pub fn replay(&mut self, event: &Record) {
        match event.tag {
            Tag::Debited | Tag::Refused => {
                self.debits.insert(event.id);
            }
            Tag::Credited => {
                self.credits.insert(event.id);
            }
            Tag::Transfer | Tag::Credit => {}
        }
    }

    pub fn balance(&self, account: u32) -> i64 {
        self.balances.get(&account).copied().unwrap_or(0)
    }

    /// Applies a command; `None` if it was applied before (a duplicate) or is not a command.
    pub fn apply(&mut self, command: &Record) -> Option<Effects> {
        match command.tag {
            Tag::Transfer => {
                if !self.debits.insert(command.id) {
                    return None;
                }
                self.undo.push(Undo::Debit(command.id));
                let before = self.balance(command.from);
                if command.amount <= 0 || before < command.amount || command.from == command.to {
                    return Some(Effects {
                        event: command.with_tag(Tag::Refused),
                        balance: None,
                        next: None,
                    });
                }
                let after = before - command.amount;
                self.undo.push(Undo::Balance(command.from, before));
                self.balances.insert(command.from, after);
                Some(Effects {
                    event: command.with_tag(Tag::Debited),
                    balance: Some((command.from, after)),
                    next: Some(command.with_tag(Tag::Credit)),
                })
            }
            Tag::Credit => {
                if !self.credits.insert(command.id) {
                    return None;
                }
                self.undo.push(Undo::Credit(command.id));
                let before = self.balance(command.to);
                let after = before + command.amount;
                self.undo.push(Undo::Balance(command.to, before));
                self.balances.insert(command.to, after);
                Some(Effects {
                    event: command.with_tag(Tag::Credited),
                    balance: Some((command.to, after)),
                    next: None,
                })
            }
            Tag::Debited | Tag::Refused | Tag::Credited => None,
        }
    }

    /// The transaction committed: its changes stay.
    pub fn commit(&mut self) {
        self.undo.clear();
    }

    /// The transaction aborted: its changes go, newest first.
    pub fn rollback(&mut self) {
        while let Some(u) = self.undo.pop() {
            match u {
                Undo::Balance(account, before) => {
                    self.balances.insert(account, before);
                }
                Undo::Debit(id) => {
                    self.debits.remove(&id);
                }
                Undo::Credit(id) => {
                    self.credits.remove(&id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn transfer(id: u64, from: u32, to: u32, amount: i64) -> Record {
        Record {
            tag: Tag::Transfer,
            id,
            from,
            to,
            amount,
            sent_us: 0,
        }
    }

    #[test]
    fn a_transfer_debits_then_credits_once_and_refuses_an_overdraft() {
        let mut l = Ledger::default();
        l.set_balance(1, 100);
        let e = l.apply(&transfer(7, 1, 2, 60)).unwrap();
        assert_eq!(e.event.tag, Tag::Debited);
        assert_eq!(e.balance, Some((1, 40)));
        let credit = e.next.unwrap();
        assert_eq!(
            l.apply(&transfer(7, 1, 2, 60)),
            None,
            "a duplicate is applied once"
        );
        let refused = l.apply(&transfer(8, 1, 2, 60)).unwrap();
        assert_eq!((refused.event.tag, refused.balance), (Tag::Refused, None));
        assert_eq!(l.apply(&credit).unwrap().balance, Some((2, 60)));
        assert_eq!(l.apply(&credit), None);
        assert_eq!((l.balance(1), l.balance(2)), (40, 60));
    }

    #[test]
    fn a_rollback_takes_back_everything_since_the_commit() {
        let mut l = Ledger::default();
        l.set_balance(1, 100);
        l.apply(&transfer(1, 1, 2, 10)).unwrap();
        l.commit();
        let credit = l.apply(&transfer(2, 1, 2, 30)).unwrap().next.unwrap();
        l.apply(&credit).unwrap();
        l.rollback();
        assert_eq!((l.balance(1), l.balance(2)), (90, 0));
        assert!(
            l.apply(&transfer(2, 1, 2, 30)).is_some(),
            "the aborted id may run again"
        );
    }
}
