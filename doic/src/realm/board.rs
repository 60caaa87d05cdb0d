//! The one record of the agent's own realm report versions, shared by the
//! cores of every worker: one sequence space for the agent (RFC 7683
//! §5.2.1.4, "a new sequence number whenever the content changes"), so that
//! two workers never issue different versions of the same content.
//!
//! A core consults the board only when its own estimate of a realm differs
//! from the version it holds (or when it first sees the realm), never on the
//! path of a request that changes nothing. The version a core makes goes to
//! the other cores as a [`super::RealmReplica`]; the board is the tie-break
//! when two cores reach a new estimate before either replica has arrived.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::RealmVersion;

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
            g.realms.insert(
                key,
                Entry {
                    servers: servers.to_vec(),
                    version: None,
                },
            );
        }
    }

    /// The servers last recorded for (`app_id`, `realm`).
    pub(crate) fn servers(&self, app_id: u32, realm: &str) -> Option<Vec<String>> {
        self.lock()
            .realms
            .get(&(app_id, realm.to_owned()))
            .map(|e| e.servers.clone())
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
            g.realms.insert(
                key,
                Entry {
                    servers: Vec::new(),
                    version: Some(version.clone()),
                },
            );
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
