//! The CPU bandwidth limit of the agent's own cgroup and how often the
//! kernel held it to it: the cgroup is found from `/proc/self/cgroup` and
//! `/proc/self/mountinfo`; v2 (`cpu.max`, `cpu.stat`: `nr_periods`,
//! `nr_throttled`, `throttled_usec`) or v1 (`cpu.cfs_quota_us`,
//! `cpu.cfs_period_us`, `cpu.stat`: `throttled_time` in nanoseconds). The
//! limit that binds is the smallest share on the way up to the hierarchy's
//! root (a parent's quota limits its children); its throttling is read
//! where it is set.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{HostError, parse_error, read};

/// The cgroup hierarchy the cpu controller is found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// The unified hierarchy.
    V2,
    /// A v1 hierarchy with the cpu controller.
    V1,
}

/// A CPU bandwidth limit: `quota` of CPU time per `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// CPU time the cgroup may use per period.
    pub quota: Duration,
    /// The period.
    pub period: Duration,
}

impl Quota {
    /// The share of one CPU: quota / period.
    #[must_use]
    pub fn share(&self) -> f64 {
        self.quota.as_secs_f64() / self.period.as_secs_f64().max(1e-9)
    }
}

/// The throttling counters of a cgroup (monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Throttling {
    /// Enforcement periods that had runnable threads.
    pub periods: u64,
    /// Periods in which the cgroup ran out of quota.
    pub throttled_periods: u64,
    /// Time its threads were held off the CPU for it.
    pub throttled: Duration,
}

/// The agent's own cgroup for the cpu controller.
#[derive(Clone, Debug)]
pub struct Cgroup {
    /// Its directory.
    pub dir: PathBuf,
    /// The hierarchy's mount point (where the walk up stops).
    root: PathBuf,
    /// Its hierarchy.
    pub version: Version,
}

impl Cgroup {
    /// The cgroup of this process.
    ///
    /// # Errors
    /// When procfs cannot be read or names no mounted cpu hierarchy.
    pub fn own() -> Result<Self, HostError> {
        let cgroup = read(Path::new("/proc/self/cgroup"))?;
        let mountinfo = read(Path::new("/proc/self/mountinfo"))?;
        locate(&cgroup, &mountinfo)
            .into_iter()
            .find(|c| c.dir.is_dir())
            .ok_or(HostError::NoCgroup)
    }

    /// The limit that binds this cgroup: the smallest share set on it or
    /// on a parent, with the directory it is set in; `None`: no limit.
    ///
    /// # Errors
    /// When the cgroup's own limit cannot be read (a parent's that cannot
    /// is passed over).
    pub fn quota(&self) -> Result<Option<(Quota, PathBuf)>, HostError> {
        let mut best = self.quota_in(&self.dir)?.map(|q| (q, self.dir.clone()));
        let mut dir = self.dir.as_path();
        while let Some(parent) = dir.parent() {
            if !parent.starts_with(&self.root) || parent == dir {
                break;
            }
            if let Ok(Some(q)) = self.quota_in(parent)
                && best.as_ref().is_none_or(|(b, _)| q.share() < b.share())
            {
                best = Some((q, parent.to_owned()));
            }
            dir = parent;
        }
        Ok(best)
    }

    /// The limit set in `dir`, if any (a missing file there: none, as at a
    /// hierarchy's root).
    fn quota_in(&self, dir: &Path) -> Result<Option<Quota>, HostError> {
        match self.version {
            Version::V2 => {
                let path = dir.join("cpu.max");
                if !path.exists() {
                    return Ok(None);
                }
                parse_cpu_max(&path, &read(&path)?)
            }
            Version::V1 => {
                let q = dir.join("cpu.cfs_quota_us");
                if !q.exists() {
                    return Ok(None);
                }
                let p = dir.join("cpu.cfs_period_us");
                parse_cfs(&q, &read(&q)?, &read(&p)?)
            }
        }
    }

    /// The throttling counters of the cgroup at `dir` (this one or the
    /// parent [`Cgroup::quota`] named).
    ///
    /// # Errors
    /// When its `cpu.stat` cannot be read or has no throttling counters.
    pub fn throttling(&self, dir: &Path) -> Result<Throttling, HostError> {
        let path = dir.join("cpu.stat");
        parse_cpu_stat(&path, &read(&path)?, self.version)
    }
}

/// The cpu cgroups `/proc/self/cgroup` names, under the mount points of
/// `mountinfo`: the v1 cpu hierarchy first (on a hybrid host it holds the
/// controller), then the unified one.
pub(crate) fn locate(cgroup: &str, mountinfo: &str) -> Vec<Cgroup> {
    let mut found = Vec::new();
    let mut v2 = None;
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            v2 = Some(path.to_owned());
        } else if controllers.split(',').any(|c| c == "cpu")
            && let Some((mount, root)) = mount_of(mountinfo, |fstype, opts| {
                fstype == "cgroup" && opts.split(',').any(|o| o == "cpu")
            })
        {
            found.push(Cgroup {
                dir: under(&mount, &root, path),
                root: mount,
                version: Version::V1,
            });
        }
    }
    if let Some(path) = v2
        && let Some((mount, root)) = mount_of(mountinfo, |fstype, _| fstype == "cgroup2")
    {
        found.push(Cgroup {
            dir: under(&mount, &root, &path),
            root: mount,
            version: Version::V2,
        });
    }
    found
}

/// The mount point and mounted root of the first mount `fits` (file
/// system type, super options).
fn mount_of(mountinfo: &str, fits: impl Fn(&str, &str) -> bool) -> Option<(PathBuf, String)> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut l = left.split_whitespace();
        let root = l.nth(3)?;
        let mount = l.next()?;
        let mut r = right.split_whitespace();
        let fstype = r.next()?;
        let opts = r.nth(1).unwrap_or("");
        fits(fstype, opts).then(|| (PathBuf::from(mount), root.to_owned()))
    })
}

/// The directory of cgroup `path` in a hierarchy mounted at `mount` from
/// its `root` (a container sees its own cgroup as the root).
fn under(mount: &Path, root: &str, path: &str) -> PathBuf {
    let rel = path.strip_prefix(root).unwrap_or(path);
    mount.join(rel.trim_start_matches('/'))
}

/// v2 `cpu.max`: `max PERIOD` or `QUOTA PERIOD` (µs).
pub(crate) fn parse_cpu_max(path: &Path, s: &str) -> Result<Option<Quota>, HostError> {
    let mut f = s.split_whitespace();
    let quota = f.next().ok_or_else(|| parse_error(path, "empty cpu.max"))?;
    let period: u64 = f
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| parse_error(path, "no period in cpu.max"))?;
    if quota == "max" {
        return Ok(None);
    }
    let quota: u64 = quota
        .parse()
        .map_err(|_| parse_error(path, "quota neither max nor a number"))?;
    Ok(Some(Quota {
        quota: Duration::from_micros(quota),
        period: Duration::from_micros(period),
    }))
}

/// v1 `cpu.cfs_quota_us` (-1: none) and `cpu.cfs_period_us`.
pub(crate) fn parse_cfs(
    path: &Path,
    quota: &str,
    period: &str,
) -> Result<Option<Quota>, HostError> {
    let quota: i64 = quota
        .trim()
        .parse()
        .map_err(|_| parse_error(path, "quota not a number"))?;
    let period: u64 = period
        .trim()
        .parse()
        .map_err(|_| parse_error(path, "period not a number"))?;
    Ok(u64::try_from(quota).ok().map(|q| Quota {
        quota: Duration::from_micros(q),
        period: Duration::from_micros(period),
    }))
}

/// The throttling counters of `cpu.stat`.
pub(crate) fn parse_cpu_stat(
    path: &Path,
    s: &str,
    version: Version,
) -> Result<Throttling, HostError> {
    let field = |name: &str| -> Option<u64> {
        s.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == name).then(|| v.trim().parse().ok()).flatten()
        })
    };
    let periods = field("nr_periods");
    let throttled_periods = field("nr_throttled");
    let throttled = match version {
        Version::V2 => field("throttled_usec").map(Duration::from_micros),
        Version::V1 => field("throttled_time").map(Duration::from_nanos),
    };
    match (periods, throttled_periods, throttled) {
        (Some(periods), Some(throttled_periods), Some(throttled)) => Ok(Throttling {
            periods,
            throttled_periods,
            throttled,
        }),
        _ => Err(parse_error(path, "no throttling counters in cpu.stat")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
27 25 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct
28 25 0:25 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset
";

    #[test]
    fn the_cpu_cgroup_is_found_in_v1_then_v2() {
        let cg = "12:cpuset:/\n4:cpu,cpuacct:/bench-own\n0::/user.slice\n";
        let found = locate(cg, MOUNTINFO);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].version, Version::V1);
        assert_eq!(
            found[0].dir,
            Path::new("/sys/fs/cgroup/cpu,cpuacct/bench-own")
        );
        assert_eq!(found[1].version, Version::V2);
        assert_eq!(found[1].dir, Path::new("/sys/fs/cgroup/unified/user.slice"));
        // A pure v2 host, the process in a container whose cgroup is the
        // mounted root.
        let mi = "40 30 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let found = locate("0::/kubepods/pod1/agent\n", mi);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].dir, Path::new("/sys/fs/cgroup/agent"));
        assert!(locate("", MOUNTINFO).is_empty());
    }

    #[test]
    fn limits_and_throttling_are_parsed() {
        let p = Path::new("x");
        let q = parse_cpu_max(p, "10000 100000\n").unwrap().unwrap();
        assert!((q.share() - 0.1).abs() < 1e-12);
        assert_eq!(parse_cpu_max(p, "max 100000\n").unwrap(), None);
        assert!(parse_cpu_max(p, "").is_err());
        assert_eq!(parse_cfs(p, "-1\n", "100000\n").unwrap(), None);
        let q = parse_cfs(p, "1000\n", "50000\n").unwrap().unwrap();
        assert!((q.share() - 0.02).abs() < 1e-12);
        let v2 = "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 40\nnr_throttled 30\nthrottled_usec 2500000\n";
        assert_eq!(
            parse_cpu_stat(p, v2, Version::V2).unwrap(),
            Throttling {
                periods: 40,
                throttled_periods: 30,
                throttled: Duration::from_millis(2500)
            }
        );
        let v1 = "nr_periods 10\nnr_throttled 9\nthrottled_time 900000000\n";
        assert_eq!(
            parse_cpu_stat(p, v1, Version::V1).unwrap().throttled,
            Duration::from_millis(900)
        );
        // v2 without the cpu controller: usage only.
        assert!(parse_cpu_stat(p, "usage_usec 5\n", Version::V2).is_err());
    }
}
