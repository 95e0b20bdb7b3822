//! Readiness (`GET /ready`): whether this process should receive traffic now, as a
//! Kubernetes readiness probe or a load balancer asks. Stricter than `/health`
//! (liveness: is the process serving at all): a cache whose index is still loading, or
//! whose store is being handed to the next process of an upgrade, is alive but not
//! ready.
//!
//! One pure function over a few facts, so more conditions (fill coverage, peers) are one
//! more field and one more arm. Not here: gathering the facts (`api`) or `/health`'s
//! verdict (`metrics::HealthVerdict`).

use linerate_cache::{DiskState, DiskStats};

use crate::admin::control::RunState;

/// What readiness is decided on.
pub(crate) struct ReadyFacts<'a> {
    /// Serving, draining or stopping.
    pub(crate) mode: RunState,
    /// Cache mode: the store's disks (`None` in appliance mode).
    pub(crate) disks: Option<&'a [DiskStats]>,
    /// Cache mode: the store is lent to the next process of an upgrade.
    pub(crate) store_lent: bool,
}

/// Why this process is not ready; the first that applies, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotReady {
    /// Draining or stopping: no new traffic.
    Draining,
    /// The store is being handed to the next process (upgrade in progress).
    HandingOver,
    /// Cache mode with no store disk in service: it could only relay.
    NoDiskInService,
    /// A disk in service has not finished loading its index: hits would be misses.
    IndexLoading,
}

impl NotReady {
    /// The body's `reason`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NotReady::Draining => "draining",
            NotReady::HandingOver => "handing_over",
            NotReady::NoDiskInService => "no_disk_in_service",
            NotReady::IndexLoading => "index_loading",
        }
    }
}

/// `Ok(())` when ready.
pub(crate) fn decide(f: &ReadyFacts<'_>) -> Result<(), NotReady> {
    if f.mode != RunState::Serving {
        return Err(NotReady::Draining);
    }
    if f.store_lent {
        return Err(NotReady::HandingOver);
    }
    if let Some(disks) = f.disks {
        let serving = || disks.iter().filter(|d| d.state == DiskState::InService);
        if serving().next().is_none() {
            return Err(NotReady::NoDiskInService);
        }
        if serving().any(|d| !d.index_loaded) {
            return Err(NotReady::IndexLoading);
        }
    }
    Ok(())
}

/// Status and JSON body of `GET /ready`.
pub(crate) fn reply(f: &ReadyFacts<'_>) -> (u16, String) {
    match decide(f) {
        Ok(()) => (200, "{\"ready\":true}\n".into()),
        Err(why) => (
            503,
            format!("{{\"ready\":false,\"reason\":\"{}\"}}\n", why.as_str()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(state: DiskState, index_loaded: bool) -> DiskStats {
        DiskStats {
            name: "d".into(),
            state,
            index_loaded,
            capacity_bytes: 0,
            used_bytes: 0,
            reserved_bytes: 0,
            objects: 0,
            evictions: 0,
            admissions_refused: 0,
            io_errors: 0,
            corrupt_objects: 0,
        }
    }

    fn facts(mode: RunState, disks: Option<&[DiskStats]>, store_lent: bool) -> ReadyFacts<'_> {
        ReadyFacts {
            mode,
            disks,
            store_lent,
        }
    }

    #[test]
    fn each_condition_decides() {
        let up = [disk(DiskState::InService, true)];
        let loading = [
            disk(DiskState::InService, true),
            disk(DiskState::InService, false),
        ];
        let out = [disk(DiskState::OutOfService, false)];
        let one_out = [
            disk(DiskState::InService, true),
            disk(DiskState::OutOfService, false),
        ];
        let s = RunState::Serving;
        assert_eq!(decide(&facts(s, None, false)), Ok(()));
        assert_eq!(decide(&facts(s, Some(&up), false)), Ok(()));
        assert_eq!(decide(&facts(s, Some(&one_out), false)), Ok(()));
        assert_eq!(
            decide(&facts(RunState::Draining, Some(&up), false)),
            Err(NotReady::Draining)
        );
        assert_eq!(
            decide(&facts(RunState::Stopping, None, false)),
            Err(NotReady::Draining)
        );
        assert_eq!(
            decide(&facts(s, Some(&up), true)),
            Err(NotReady::HandingOver)
        );
        assert_eq!(
            decide(&facts(s, Some(&out), false)),
            Err(NotReady::NoDiskInService)
        );
        assert_eq!(
            decide(&facts(s, Some(&loading), false)),
            Err(NotReady::IndexLoading)
        );
        assert_eq!(
            reply(&facts(s, Some(&loading), false)),
            (
                503,
                "{\"ready\":false,\"reason\":\"index_loading\"}\n".into()
            )
        );
    }
}
