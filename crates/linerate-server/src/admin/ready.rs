//! Readiness (`GET /ready`): whether this process should receive traffic now, as a
//! Kubernetes readiness probe or a load balancer asks. Stricter than `/health`
//! (liveness: is the process serving at all): a cache whose index is still loading, or
//! whose store is being handed to the next process of an upgrade, is alive but not
//! ready. Fill coverage is a warm-up condition: it holds only until the process first
//! answered ready (`api` keeps that fact), so a job submitted later never takes a
//! serving node out of its load balancer.
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
    /// Fill coverage, when `[fill] ready_coverage` asks for some (see `fill`).
    pub(crate) fill: Option<FillFacts>,
}

/// How much of what the readiness-counting fill jobs plan is held, how much must be,
/// and whether it still counts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FillFacts {
    /// Share held, 0.0 to 1.0 (1.0 with no such job; see `Fills::coverage`).
    pub(crate) coverage: f64,
    /// `[fill] ready_coverage`.
    pub(crate) need: f64,
    /// Whether coverage holds readiness back: only until this node first answered
    /// ready. A job submitted to a node already serving fills it without taking it out
    /// of the load balancer.
    pub(crate) waits: bool,
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
    /// Before the first ready answer: the unfinished fill jobs that count toward
    /// readiness hold less than `[fill] ready_coverage`.
    FillCoverage,
}

impl NotReady {
    /// The body's `reason`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NotReady::Draining => "draining",
            NotReady::HandingOver => "handing_over",
            NotReady::NoDiskInService => "no_disk_in_service",
            NotReady::IndexLoading => "index_loading",
            NotReady::FillCoverage => "fill_coverage",
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
    if f.fill.is_some_and(|x| x.waits && x.coverage < x.need) {
        return Err(NotReady::FillCoverage);
    }
    Ok(())
}

/// Status and JSON body of `GET /ready` (with the fill coverage when it counts).
pub(crate) fn reply(f: &ReadyFacts<'_>) -> (u16, String) {
    let fill = f.fill.map_or(String::new(), |x| {
        format!(
            ",\"fill_coverage\":{:.4},\"fill_ready_coverage\":{}",
            x.coverage, x.need
        )
    });
    match decide(f) {
        Ok(()) => (200, format!("{{\"ready\":true{fill}}}\n")),
        Err(why) => (
            503,
            format!(
                "{{\"ready\":false,\"reason\":\"{}\"{fill}}}\n",
                why.as_str()
            ),
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
            behind_refused: 0,
            publish_batches: 0,
            published: 0,
            io_errors: 0,
            corrupt_objects: 0,
        }
    }

    fn facts(mode: RunState, disks: Option<&[DiskStats]>, store_lent: bool) -> ReadyFacts<'_> {
        ReadyFacts {
            mode,
            disks,
            store_lent,
            fill: None,
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

    #[test]
    fn fill_coverage_counts_only_when_asked_for_and_last() {
        let up = [disk(DiskState::InService, true)];
        let with = |coverage, need| ReadyFacts {
            fill: Some(FillFacts {
                coverage,
                need,
                waits: true,
            }),
            ..facts(RunState::Serving, Some(&up), false)
        };
        assert_eq!(decide(&with(0.5, 0.9)), Err(NotReady::FillCoverage));
        assert_eq!(decide(&with(0.9, 0.9)), Ok(()));
        // Once the node has been ready, coverage is shown but holds nothing back.
        let after = ReadyFacts {
            fill: Some(FillFacts {
                coverage: 0.5,
                need: 0.9,
                waits: false,
            }),
            ..facts(RunState::Serving, Some(&up), false)
        };
        assert_eq!(decide(&after), Ok(()));
        assert_eq!(
            reply(&with(0.25, 1.0)),
            (
                503,
                "{\"ready\":false,\"reason\":\"fill_coverage\",\"fill_coverage\":0.2500,\"fill_ready_coverage\":1}\n".into()
            )
        );
        // Draining is said first.
        let draining = ReadyFacts {
            mode: RunState::Draining,
            ..with(0.0, 1.0)
        };
        assert_eq!(decide(&draining), Err(NotReady::Draining));
    }
}
