//! Rendering what the workers counted: the Prometheus text exposition format (version
//! 0.0.4, written by hand: it is a few lines per family and needs no dependency) for
//! `/metrics`, and small JSON documents for `/health`, `/stats.json` (read by
//! `linerate stats` and the dashboard).
//!
//! Everything is summed here, on the admin thread, when scraped; the workers only ever
//! write their own counters. Not here: the HTTP side of the admin API (`admin`).

use std::fmt::Write;
use std::sync::Arc;

use crate::control::Mode;
use crate::operate::Metrics;
use crate::stats::{
    CacheStatus, CloseReason, DeliveryPath, Histogram, Snapshot, StatusClass, TlsOutcome,
    WorkerStats,
};
use linerate_sys::ktls::{Cipher, Version};

/// Rates over the admin thread's last sampling interval.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rates {
    /// Responses per second, all workers.
    pub(crate) requests_per_s: f64,
    /// Bytes per second, all workers.
    pub(crate) bytes_per_s: f64,
    /// Bytes per second, per worker.
    pub(crate) worker_bytes_per_s: Vec<f64>,
    /// Hit ratio over the interval; `None` without cache lookups.
    pub(crate) hit_ratio: Option<f64>,
}

/// Server-wide facts that are not worker counters.
pub(crate) struct Facts {
    /// Serving mode.
    pub(crate) mode: Mode,
    /// Seconds since start.
    pub(crate) uptime_s: f64,
    /// Successful and rejected reloads.
    pub(crate) reloads: (u64, u64),
    /// The kernel-TLS probe result; `None` without TLS listeners.
    pub(crate) ktls: Option<linerate_sys::ktls::Support>,
}

/// Per-worker snapshots and their sum.
pub(crate) struct Scrape {
    pub(crate) workers: Vec<Snapshot>,
    pub(crate) total: Snapshot,
}

impl Scrape {
    pub(crate) fn take(stats: &[Arc<WorkerStats>]) -> Scrape {
        let workers: Vec<Snapshot> = stats.iter().map(|s| s.snapshot()).collect();
        let mut total = Snapshot::default();
        for w in &workers {
            total.add(w);
        }
        Scrape { workers, total }
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Sum several workers' histograms and write them; `scale` divides bounds and the sum
/// (e.g. µs → s).
fn histogram(
    out: &mut String,
    name: &str,
    help: &str,
    scale: f64,
    parts: &mut dyn Iterator<Item = &Histogram>,
) {
    let mut bounds: &[u64] = &[];
    let mut buckets: Vec<u64> = Vec::new();
    let mut sum = 0u64;
    for h in parts {
        let (b, s) = h.read();
        bounds = h.bounds();
        if buckets.is_empty() {
            buckets = vec![0; b.len()];
        }
        for (x, y) in buckets.iter_mut().zip(b) {
            *x += y;
        }
        sum += s;
    }
    family(out, name, "histogram", help);
    let mut cumulative = 0;
    for (i, &b) in bounds.iter().enumerate() {
        cumulative += buckets.get(i).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"{}\"}} {cumulative}",
            b as f64 / scale
        );
    }
    cumulative += buckets.get(bounds.len()).copied().unwrap_or(0);
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
    let _ = writeln!(out, "{name}_sum {}", sum as f64 / scale);
    let _ = writeln!(out, "{name}_count {cumulative}");
}

/// The `/metrics` body.
pub(crate) fn prometheus(stats: &[Arc<WorkerStats>], facts: &Facts) -> String {
    let scrape = Scrape::take(stats);
    let t = &scrape.total;
    let mut out = String::with_capacity(8 * 1024);
    family(
        &mut out,
        "linerate_requests_total",
        "counter",
        "Responses sent, by status class and cache status (local = appliance library).",
    );
    for (ci, class) in StatusClass::ALL.iter().enumerate() {
        for (ki, cache) in CacheStatus::ALL.iter().enumerate() {
            let _ = writeln!(
                out,
                "linerate_requests_total{{status=\"{}\",cache=\"{}\"}} {}",
                class.as_str(),
                cache.as_str(),
                t.requests[ci][ki]
            );
        }
    }
    family(
        &mut out,
        "linerate_sent_bytes_total",
        "counter",
        "Bytes handed to the kernel (heads and bodies), by delivery path.",
    );
    for (i, path) in DeliveryPath::ALL.iter().enumerate() {
        let _ = writeln!(
            out,
            "linerate_sent_bytes_total{{path=\"{}\"}} {}",
            path.as_str(),
            t.sent[i]
        );
    }
    family(
        &mut out,
        "linerate_worker_sent_bytes_total",
        "counter",
        "Bytes sent per worker (per-core throughput).",
    );
    for (i, w) in scrape.workers.iter().enumerate() {
        let _ = writeln!(
            out,
            "linerate_worker_sent_bytes_total{{worker=\"{i}\"}} {}",
            w.sent_total()
        );
    }
    family(
        &mut out,
        "linerate_worker_requests_total",
        "counter",
        "Responses sent per worker.",
    );
    for (i, w) in scrape.workers.iter().enumerate() {
        let _ = writeln!(
            out,
            "linerate_worker_requests_total{{worker=\"{i}\"}} {}",
            w.requests_total()
        );
    }
    let counter = |out: &mut String, name: &str, help: &str, v: u64| {
        family(out, name, "counter", help);
        let _ = writeln!(out, "{name} {v}");
    };
    let gauge = |out: &mut String, name: &str, help: &str, v: f64| {
        family(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    };
    counter(
        &mut out,
        "linerate_connections_accepted_total",
        "Connections accepted.",
        t.accepted,
    );
    counter(
        &mut out,
        "linerate_connections_refused_total",
        "Connections closed at accept because the worker was at its connection limit.",
        t.refused,
    );
    family(
        &mut out,
        "linerate_connections_closed_total",
        "counter",
        "Connections closed, by reason.",
    );
    for (i, why) in CloseReason::ALL.iter().enumerate() {
        let _ = writeln!(
            out,
            "linerate_connections_closed_total{{reason=\"{}\"}} {}",
            why.as_str(),
            t.closed[i]
        );
    }
    gauge(
        &mut out,
        "linerate_connections_open",
        "Connections open now.",
        t.open as f64,
    );
    family(
        &mut out,
        "linerate_connections",
        "gauge",
        "Open connections by state (kept by transitions, not by scanning sockets).",
    );
    let idle = t.open.saturating_sub(t.active + t.parked);
    for (state, v) in [("active", t.active), ("idle", idle), ("parked", t.parked)] {
        let _ = writeln!(out, "linerate_connections{{state=\"{state}\"}} {v}");
    }
    histogram(
        &mut out,
        "linerate_response_duration_seconds",
        "Time to hand a response to the kernel, from its first byte to its last.",
        1e6,
        &mut stats.iter().map(|s| &s.duration),
    );
    counter(
        &mut out,
        "linerate_tcp_sampled_connections_total",
        "Connections whose TCP_INFO is sampled (tcp.info_sample).",
        t.sampled,
    );
    histogram(
        &mut out,
        "linerate_tcp_rtt_seconds",
        "Smoothed RTT of sampled connections, after each response.",
        1e6,
        &mut stats.iter().map(|s| &s.rtt),
    );
    histogram(
        &mut out,
        "linerate_tcp_retransmit_ratio",
        "Retransmitted share of data segments of sampled connections, at their end.",
        1e6,
        &mut stats.iter().map(|s| &s.retrans),
    );
    histogram(
        &mut out,
        "linerate_tcp_delivery_rate_bytes_per_second",
        "Delivery-rate estimate of sampled connections, after each response.",
        1.0,
        &mut stats.iter().map(|s| &s.delivery_rate),
    );
    histogram(
        &mut out,
        "linerate_tcp_congestion_window_segments",
        "Congestion window of sampled connections, after each response.",
        1.0,
        &mut stats.iter().map(|s| &s.cwnd),
    );
    let (hits, lookups) = t.hit_counts();
    gauge(
        &mut out,
        "linerate_cache_hit_ratio",
        "Hits (fresh or stale) over cache lookups since start; NaN without lookups (appliance mode).",
        if lookups == 0 {
            f64::NAN
        } else {
            hits as f64 / lookups as f64
        },
    );
    counter(
        &mut out,
        "linerate_access_log_lines_total",
        "Access-log lines buffered.",
        t.log_lines,
    );
    counter(
        &mut out,
        "linerate_access_log_dropped_total",
        "Access-log lines lost because the file could not be opened or written.",
        t.log_dropped,
    );
    counter(
        &mut out,
        "linerate_access_log_errors_total",
        "Access-log open or write failures.",
        t.log_errors,
    );
    family(
        &mut out,
        "linerate_tls_handshakes_total",
        "counter",
        "TLS handshakes, by outcome: the path a completed one's records took (ktls, userspace_tls) or why it failed.",
    );
    for (i, outcome) in TlsOutcome::ALL.iter().enumerate() {
        let _ = writeln!(
            out,
            "linerate_tls_handshakes_total{{outcome=\"{}\"}} {}",
            outcome.as_str(),
            t.tls[i]
        );
    }
    counter(
        &mut out,
        "linerate_tls_resumed_total",
        "TLS handshakes that resumed a session (tickets).",
        t.tls_resumed,
    );
    if let Some(support) = &facts.ktls {
        family(
            &mut out,
            "linerate_ktls_supported",
            "gauge",
            "1 if the start-up probe found this kernel's kTLS accepts the version and cipher.",
        );
        for version in [Version::Tls12, Version::Tls13] {
            for cipher in Cipher::ALL {
                let _ = writeln!(
                    out,
                    "linerate_ktls_supported{{version=\"{}\",cipher=\"{}\"}} {}",
                    version.as_str(),
                    cipher.as_str(),
                    u8::from(support.supports(version, cipher))
                );
            }
        }
        gauge(
            &mut out,
            "linerate_ktls_rekey_supported",
            "1 if the kernel can replace kTLS keys (TLS 1.3 KeyUpdate; Linux >= 6.14).",
            if support.rekey { 1.0 } else { 0.0 },
        );
    }
    family(
        &mut out,
        "linerate_config_reloads_total",
        "counter",
        "Configuration reloads, by result.",
    );
    let _ = writeln!(
        out,
        "linerate_config_reloads_total{{result=\"applied\"}} {}\nlinerate_config_reloads_total{{result=\"rejected\"}} {}",
        facts.reloads.0, facts.reloads.1
    );
    gauge(
        &mut out,
        "linerate_draining",
        "1 while draining or stopping (health fails), else 0.",
        if facts.mode == Mode::Serving {
            0.0
        } else {
            1.0
        },
    );
    gauge(
        &mut out,
        "linerate_workers",
        "Worker threads.",
        stats.len() as f64,
    );
    gauge(
        &mut out,
        "linerate_uptime_seconds",
        "Seconds since start.",
        facts.uptime_s,
    );
    family(
        &mut out,
        "linerate_build_info",
        "gauge",
        "Always 1; the version is a label.",
    );
    let _ = writeln!(
        out,
        "linerate_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    out
}

/// `/health`: the load balancer's view. The store is not wired into the server yet, so
/// `disks` is empty. With `admin.metrics` off nothing counts requests or bytes, so the
/// two rates are `null` rather than a misleading 0.
pub(crate) fn health(
    stats: &[Arc<WorkerStats>],
    facts: &Facts,
    rates: &Rates,
    metrics: Metrics,
) -> String {
    let t = Scrape::take(stats).total;
    let (throughput, requests) = match metrics {
        Metrics::On => (
            format!("{:.0}", rates.bytes_per_s),
            format!("{:.1}", rates.requests_per_s),
        ),
        Metrics::Off => ("null".to_owned(), "null".to_owned()),
    };
    format!(
        "{{\"status\":\"{}\",\"draining\":{},\"open_connections\":{},\"throughput_bytes_per_second\":{throughput},\"requests_per_second\":{requests},\"disks\":[]}}\n",
        facts.mode.as_str(),
        facts.mode != Mode::Serving,
        t.open,
    )
}

/// `/stats.json`: totals, rates and per-worker figures for `linerate stats` and the
/// dashboard.
pub(crate) fn stats_json(stats: &[Arc<WorkerStats>], facts: &Facts, rates: &Rates) -> String {
    let scrape = Scrape::take(stats);
    let t = &scrape.total;
    let mut out = String::with_capacity(1024);
    let ratio = |r: Option<f64>| r.map_or("null".to_owned(), |v| format!("{v:.4}"));
    let (hits, lookups) = t.hit_counts();
    let _ = write!(
        out,
        "{{\"mode\":\"{}\",\"uptime_s\":{:.1},\"workers\":{},\"requests_total\":{},\"sent_bytes_total\":{},\
\"requests_per_s\":{:.1},\"bytes_per_s\":{:.0},\"hit_ratio\":{},\"hit_ratio_total\":{},\
\"connections\":{{\"open\":{},\"active\":{},\"idle\":{},\"parked\":{}}},\"per_worker\":[",
        facts.mode.as_str(),
        facts.uptime_s,
        scrape.workers.len(),
        t.requests_total(),
        t.sent_total(),
        rates.requests_per_s,
        rates.bytes_per_s,
        ratio(rates.hit_ratio),
        ratio((lookups > 0).then(|| hits as f64 / lookups as f64)),
        t.open,
        t.active,
        t.open.saturating_sub(t.active + t.parked),
        t.parked,
    );
    for (i, w) in scrape.workers.iter().enumerate() {
        let rate = rates.worker_bytes_per_s.get(i).copied().unwrap_or(0.0);
        let _ = write!(
            out,
            "{}{{\"worker\":{i},\"requests\":{},\"sent_bytes\":{},\"bytes_per_s\":{rate:.0},\"open\":{}}}",
            if i == 0 { "" } else { "," },
            w.requests_total(),
            w.sent_total(),
            w.open
        );
    }
    out.push_str("],\"disks\":[]}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_exact_counts_and_cumulative_buckets() {
        let a = Arc::new(WorkerStats::new());
        let b = Arc::new(WorkerStats::new());
        a.response(200, CacheStatus::Local, 90);
        b.response(200, CacheStatus::Local, 400);
        b.response(404, CacheStatus::Local, 400);
        a.sent(DeliveryPath::Sendfile, 100);
        let facts = Facts {
            mode: Mode::Serving,
            uptime_s: 1.0,
            reloads: (0, 0),
            ktls: None,
        };
        let text = prometheus(&[a, b], &facts);
        assert!(text.contains("linerate_requests_total{status=\"2xx\",cache=\"local\"} 2\n"));
        assert!(text.contains("linerate_requests_total{status=\"4xx\",cache=\"local\"} 1\n"));
        assert!(text.contains("linerate_sent_bytes_total{path=\"sendfile\"} 100\n"));
        assert!(text.contains("linerate_response_duration_seconds_bucket{le=\"0.0001\"} 1\n"));
        assert!(text.contains("linerate_response_duration_seconds_bucket{le=\"0.0005\"} 3\n"));
        assert!(text.contains("linerate_response_duration_seconds_count 3\n"));
        assert!(text.contains("linerate_cache_hit_ratio NaN\n"));
    }
}
