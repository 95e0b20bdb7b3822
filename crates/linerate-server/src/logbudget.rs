//! A bounded rate of log lines for events a client can cause at will (malformed
//! requests in the access log, refused admin calls in the server log): at most so many
//! lines per one-second window; the lines past it are counted, and the count is reported
//! with the first line logged after them, so a flood costs a few lines a second and
//! still leaves an exact total.
//!
//! Not here: where the lines go (the caller writes them) or counting the events
//! themselves (metrics count every one, logged or not).

use std::time::{Duration, Instant};

/// The window a budget is counted over.
const WINDOW: Duration = Duration::from_secs(1);

/// Lines allowed per window, and what was suppressed.
#[derive(Debug)]
pub(crate) struct LogBudget {
    per_window: u32,
    window_start: Option<Instant>,
    used: u32,
    suppressed: u64,
}

/// Whether to log one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Log it, saying how many events were suppressed since the last line logged.
    Log {
        /// Events not logged before this one (0 when none).
        suppressed: u64,
    },
    /// Over the budget: do not log it (it is counted).
    Suppress,
}

impl LogBudget {
    /// A budget of `per_window` lines per second.
    pub(crate) const fn new(per_window: u32) -> LogBudget {
        LogBudget {
            per_window,
            window_start: None,
            used: 0,
            suppressed: 0,
        }
    }

    /// Decide for one event happening at `now`.
    pub(crate) fn admit(&mut self, now: Instant) -> Admit {
        let fresh = self
            .window_start
            .is_none_or(|start| now.saturating_duration_since(start) >= WINDOW);
        if fresh {
            self.window_start = Some(now);
            self.used = 0;
        }
        if self.used >= self.per_window {
            self.suppressed += 1;
            return Admit::Suppress;
        }
        self.used += 1;
        Admit::Log {
            suppressed: std::mem::take(&mut self.suppressed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_lines_per_window_and_reports_what_it_dropped() {
        let mut b = LogBudget::new(3);
        let t0 = Instant::now();
        let decisions: Vec<Admit> = (0..10).map(|_| b.admit(t0)).collect();
        let logged = decisions
            .iter()
            .filter(|d| matches!(d, Admit::Log { .. }))
            .count();
        assert_eq!(logged, 3);
        assert_eq!(
            b.admit(t0 + Duration::from_millis(999)),
            Admit::Suppress,
            "same window"
        );
        assert_eq!(
            b.admit(t0 + WINDOW),
            Admit::Log { suppressed: 8 },
            "the next window reports all 8 dropped"
        );
        assert_eq!(b.admit(t0 + WINDOW), Admit::Log { suppressed: 0 });
    }
}
