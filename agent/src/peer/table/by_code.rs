//! Counts by Result-Code (RFC 6733 §7.1) for a peer's answers. Every
//! answer the agent relays or sends is counted once, on the request path:
//! the codes it meets most (success, its own 3002/3004/5012, none found)
//! each have an atomic of their own, one relaxed add; any other code goes
//! to a map under a lock, as rare as the code.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use diameter::dictionary::result;

/// The codes counted without a lock: none found (0), 2001, and the ones
/// the agent answers itself under overload and at failures (RFC 6733
/// §7.1.3: 3002, 3004; §7.1.5: 5012).
const COMMON: [u32; 5] = [
    0,
    result::SUCCESS,
    result::UNABLE_TO_DELIVER,
    result::TOO_BUSY,
    result::UNABLE_TO_COMPLY,
];

/// Monotonic counts by Result-Code.
#[derive(Debug, Default)]
pub struct ByCode {
    common: [AtomicU64; COMMON.len()],
    other: Mutex<BTreeMap<u32, u64>>,
}

impl ByCode {
    /// Counts one answer with `code`.
    #[inline]
    pub fn add(&self, code: u32) {
        match COMMON.iter().position(|&c| c == code) {
            Some(i) => {
                self.common[i].fetch_add(1, Ordering::Relaxed);
            }
            None => self.add_other(code),
        }
    }

    #[cold]
    fn add_other(&self, code: u32) {
        *self
            .other
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(code)
            .or_default() += 1;
    }

    /// The codes counted so far (those not yet met are left out), in order.
    #[must_use]
    pub fn snapshot(&self) -> BTreeMap<u32, u64> {
        let mut m = self
            .other
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (c, n) in COMMON.iter().zip(&self.common) {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                m.insert(*c, n);
            }
        }
        m
    }

    /// The count of `code`.
    #[must_use]
    pub fn get(&self, code: u32) -> u64 {
        match COMMON.iter().position(|&c| c == code) {
            Some(i) => self.common[i].load(Ordering::Relaxed),
            None => self
                .other
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&code)
                .copied()
                .unwrap_or(0),
        }
    }

    /// All answers counted, whatever their code.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_and_other_codes_are_counted_alike() {
        let c = ByCode::default();
        for code in [2001, 2001, 3004, 0, 5030, 5030, 5030, 2001] {
            c.add(code);
        }
        assert_eq!(
            c.snapshot().into_iter().collect::<Vec<_>>(),
            vec![(0, 1), (2001, 3), (3004, 1), (5030, 3)]
        );
        assert_eq!((c.get(2001), c.get(5030), c.get(3002)), (3, 3, 0));
        assert_eq!(c.total(), 8);
    }
}
