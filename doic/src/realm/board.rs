//! The one record of the agent's own realm report versions, shared by the
//! cores of every worker: one sequence space for the agent (RFC 7683
//! §5.2.1.4, "a new sequence number whenever the content changes"), so that
//! two workers never issue different versions of the same content.
//!
//! A core consults the board when it re-evaluates a realm (at most every
//! `REEVALUATE`, 100 ms, or when a host report changed), never on the path
//! of a request that changes nothing: it deposits the realm-routed requests
//! it saw since, and reads the realm's demand over the last [`WINDOW`]
//! summed over every core, so that every core estimates from the agent's
//! one demand. The version a core makes goes to
//! the other cores as a [`super::RealmReplica`]; the board is the tie-break
//! when two cores reach a new estimate before either replica has arrived.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::RealmVersion;

/// The span over which a realm's demand is measured.
pub const WINDOW: Duration = Duration::from_secs(1);
/// Deposits kept per realm (every core deposits at most every
/// [`super::REEVALUATE`]: ten per core per [`WINDOW`]).
const MAX_DEPOSITS: usize = 256;

/// The agent's realm report versions, for all its cores.
#[derive(Debug)]
pub struct RealmBoard {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The sequence number of the last version made.
    last_sequence: u64,
    /// Realms recorded at most (a version beyond is still made, its
    /// sequence from the same counter, but not recorded).
    max: usize,
    realms: HashMap<(u32, String), Entry>,
}

#[derive(Debug)]
struct Entry {
    servers: Vec<String>,
    /// `None` until a core makes the first version.
    version: Option<RealmVersion>,
    /// The cores' deposits: the span, requests seen, of those delegated.
    deposits: VecDeque<(Instant, Instant, u64, u64)>,
    /// The start of the first deposit.
    since: Option<Instant>,
}

impl Entry {
    fn new(servers: Vec<String>, version: Option<RealmVersion>) -> Self {
        Self {
            servers,
            version,
            deposits: VecDeque::new(),
            since: None,
        }
    }
}

/// What [`RealmBoard::propose`] decided.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Proposal {
    /// A new version, made by the proposing core: it sends it to the others.
    Made(RealmVersion),
    /// Another core's version, newer than the proposer's: it takes it.
    Taken(RealmVersion),
}

impl RealmBoard {
    /// A board whose first version gets `sequence_base + 1`; `sequence_base`
    /// must exceed any sequence sent before a restart (RFC 7683 §5.2.1.4;
    /// e.g. seconds since the Unix epoch at start). At most `max` realms are
    /// recorded.
    #[must_use]
    pub fn new(sequence_base: u64, max: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                last_sequence: sequence_base,
                max,
                realms: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The board holds plain values: a core that panicked holding it
        // left it consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the servers a realm-routed request to (`app_id`, `realm`) may
    /// go to, so that a core that has not treated such a request can still
    /// re-evaluate the realm when a host report of one of them changes.
    pub(crate) fn note_servers(&self, app_id: u32, realm: &str, servers: &[String]) {
        let mut g = self.lock();
        let key = (app_id, realm.to_owned());
        if let Some(e) = g.realms.get_mut(&key) {
            servers.clone_into(&mut e.servers);
        } else if g.realms.len() < g.max {
            g.realms.insert(key, Entry::new(servers.to_vec(), None));
        }
    }

    /// The servers last recorded for (`app_id`, `realm`).
    pub(crate) fn servers(&self, app_id: u32, realm: &str) -> Option<Vec<String>> {
        self.lock()
            .realms
            .get(&(app_id, realm.to_owned()))
            .map(|e| e.servers.clone())
    }

    /// Deposits the realm-routed requests a core saw for (`app_id`,
    /// `realm`) over `span` (from its last deposit to now), (all, of those
    /// from DOIC clients that abate at the source), and returns the realm's
    /// demand from every core, in requests/s the same way, over the
    /// [`WINDOW`] that ends one `REEVALUATE` (100 ms) ago (by then every core
    /// that receives such requests has deposited what it saw; a deposit
    /// counts for the part of its span inside the window). `None` until a
    /// tenth of a second is measured, or when the realm is not recorded.
    pub fn demand(
        &self,
        span: (Instant, Instant),
        app_id: u32,
        realm: &str,
        (seen, delegated): (u64, u64),
    ) -> Option<(f64, f64)> {
        let (from, now) = span;
        let mut g = self.lock();
        let e = g.realms.get_mut(&(app_id, realm.to_owned()))?;
        let since = *e.since.get_or_insert(from);
        let end = now.checked_sub(super::REEVALUATE)?;
        let start = end.checked_sub(WINDOW).unwrap_or(since).max(since);
        while e.deposits.front().is_some_and(|d| d.1 <= start) {
            e.deposits.pop_front();
        }
        if seen > 0 || delegated > 0 {
            if e.deposits.len() >= MAX_DEPOSITS {
                e.deposits.pop_front();
            }
            e.deposits.push_back((from, now, seen, delegated));
        }
        let secs = end.saturating_duration_since(start).as_secs_f64();
        if secs < super::REEVALUATE.as_secs_f64() {
            return None;
        }
        let (mut all, mut del) = (0.0, 0.0);
        for &(f, t, s, d) in &e.deposits {
            let inside = t.min(end).saturating_duration_since(f.max(start));
            let whole = t.saturating_duration_since(f);
            let part = if whole.is_zero() {
                if t > start && t <= end { 1.0 } else { 0.0 }
            } else {
                inside.as_secs_f64() / whole.as_secs_f64()
            };
            #[expect(clippy::cast_precision_loss, reason = "request counts")]
            {
                all += s as f64 * part;
                del += d as f64 * part;
            }
        }
        Some((all / secs, del / secs))
    }

    /// A core holding version `held` of (`app_id`, `realm`) estimates
    /// `percent`. When another core already made a newer version with that
    /// content, or (`forced` false: a periodic re-evaluation, not a host
    /// report that changed) any newer version, the core takes that one;
    /// otherwise a new version with the next sequence number is made.
    #[expect(
        clippy::too_many_arguments,
        reason = "one caller; the version's inputs are distinct"
    )]
    pub(crate) fn propose(
        &self,
        now: Instant,
        app_id: u32,
        realm: &str,
        held: u64,
        percent: u32,
        forced: bool,
        validity: Duration,
    ) -> Proposal {
        let mut g = self.lock();
        let key = (app_id, realm.to_owned());
        if let Some(v) = g.realms.get(&key).and_then(|e| e.version.as_ref())
            && v.sequence > held
            && (v.percent == percent || !forced)
        {
            return Proposal::Taken(v.clone());
        }
        g.last_sequence += 1;
        let version = RealmVersion {
            percent,
            sequence: g.last_sequence,
            at: now,
            ending_until: (percent == 0).then(|| now + validity),
        };
        if let Some(e) = g.realms.get_mut(&key) {
            e.version = Some(version.clone());
        } else if g.realms.len() < g.max {
            g.realms
                .insert(key, Entry::new(Vec::new(), Some(version.clone())));
        }
        Proposal::Made(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: Duration = Duration::from_secs(30);

    #[test]
    fn one_sequence_per_content_whoever_proposes_it() {
        let b = RealmBoard::new(1000, 4);
        let t0 = Instant::now();
        // Core A makes 20 %; core B, still holding nothing, reaches 20 % too.
        let Proposal::Made(a) = b.propose(t0, 1, "r", 0, 20, true, V) else {
            panic!("a new version")
        };
        assert_eq!(a.sequence, 1001);
        assert_eq!(
            b.propose(t0, 1, "r", 0, 20, true, V),
            Proposal::Taken(a.clone())
        );
        // A periodic estimate of 19 % from B defers to A's newer version.
        assert_eq!(
            b.propose(t0, 1, "r", 0, 19, false, V),
            Proposal::Taken(a.clone())
        );
        // A changed host report makes a new version even so.
        let Proposal::Made(c) = b.propose(t0, 1, "r", 0, 25, true, V) else {
            panic!("a new version")
        };
        assert_eq!(c.sequence, 1002);
        // Holding the newest, a core makes the next one: the end report.
        let Proposal::Made(end) = b.propose(t0, 1, "r", 1002, 0, false, V) else {
            panic!("a new version")
        };
        assert_eq!((end.sequence, end.ending_until), (1003, Some(t0 + V)));
        // Another realm: the same counter.
        let Proposal::Made(other) = b.propose(t0, 1, "q", 0, 10, true, V) else {
            panic!("a new version")
        };
        assert_eq!(other.sequence, 1004);
    }

    #[test]
    fn servers_recorded_for_cores_that_did_not_see_the_requests() {
        let b = RealmBoard::new(0, 1);
        assert_eq!(b.servers(1, "r"), None);
        b.note_servers(1, "r", &["s1".into(), "s2".into()]);
        assert_eq!(b.servers(1, "r"), Some(vec!["s1".into(), "s2".into()]));
        // Bounded: a second realm is not recorded.
        b.note_servers(1, "q", &["s3".into()]);
        assert_eq!(b.servers(1, "q"), None);
    }
}
