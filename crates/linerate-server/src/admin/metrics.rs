//! Rendering what the workers counted: the Prometheus text exposition format (version
//! 0.0.4, written by hand: it is a few lines per family and needs no dependency) for
//! `/metrics`, and small JSON documents for `/health`, `/stats.json` (read by
//! `linerate stats` and the dashboard).
//!
//! Everything is summed here, on the admin thread, when scraped; the workers only ever
//! write their own counters. In cache mode the store's per-disk figures and the origin
//! servers' health are read here too (relaxed atomic loads, taken by `Admin::facts`).
//! Not here: the HTTP side of the admin API (`admin`).

use std::fmt::Write;
use std::sync::Arc;

use linerate_cache::{DiskState, DiskStats};

use crate::admin::control::RunState;
use crate::operate::Metrics;
use crate::origin::{OriginSnapshot, ServerSnapshot, ServerState};
use crate::proxy::PrefetchCounts;
use crate::stats::{
    CachePhase, CloseReason, DeliveryPath, Histogram, Refusal, Snapshot, StatusClass, TlsOutcome,
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
    pub(crate) mode: RunState,
    /// Seconds since start.
    pub(crate) uptime_s: f64,
    /// Successful and rejected reloads.
    pub(crate) reloads: (u64, u64),
    /// The kernel-TLS probe result; `None` without TLS listeners.
    pub(crate) ktls: Option<linerate_sys::ktls::Support>,
    /// Cache mode's disks and origins; `None` in appliance mode.
    pub(crate) cache: Option<CacheFacts>,
}

/// Cache mode's store disks and origin servers at the moment of the request.
pub(crate) struct CacheFacts {
    /// Per disk, in configuration order.
    pub(crate) disks: Vec<DiskStats>,
    /// Per origin, in configuration order.
    pub(crate) origins: Vec<OriginSnapshot>,
    /// HLS segment prefetch, all workers together.
    pub(crate) prefetch: PrefetchCounts,
    /// Object files the store keeps open for hits (`Store::open_files`).
    pub(crate) open_files: usize,
    /// Fill writes done on the workers, handed to the fill threads, and slow ones.
    pub(crate) fill_writes: (u64, u64, u64),
}

/// What `/health` tells a load balancer, and why.
///
/// A down origin does not fail health: every edge in front of that origin sees the
/// same failure, so pulling this one would only move its clients to another edge that
/// fails the same way (and hits, and stale-if-error answers, still work here). An edge
/// whose every cache disk is out of service is different: it can only relay, so its
/// traffic is better served by a healthy edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HealthVerdict {
    /// Serving: `200`.
    Serving,
    /// Draining or stopping: `503`.
    Draining,
    /// Cache mode with every store disk out of service: `503`.
    NoCacheDisk,
}

impl HealthVerdict {
    /// The verdict for these facts (draining wins over a disk problem).
    pub(crate) fn of(facts: &Facts) -> HealthVerdict {
        if facts.mode != RunState::Serving {
            return HealthVerdict::Draining;
        }
        match &facts.cache {
            Some(c)
                if !c.disks.is_empty()
                    && c.disks.iter().all(|d| d.state == DiskState::OutOfService) =>
            {
                HealthVerdict::NoCacheDisk
            }
            _ => HealthVerdict::Serving,
        }
    }

    /// The `/health` status code.
    pub(crate) fn status(self) -> u16 {
        match self {
            HealthVerdict::Serving => 200,
            HealthVerdict::Draining | HealthVerdict::NoCacheDisk => 503,
        }
    }

    /// Label for the body's `reason` and logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HealthVerdict::Serving => "serving",
            HealthVerdict::Draining => "draining",
            HealthVerdict::NoCacheDisk => "all_disks_out_of_service",
        }
    }
}

/// How much of each disk and origin server a JSON document lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detail {
    /// `/health`: state and size (polled often by load balancers; kept short).
    Brief,
    /// `/stats.json`: every counter.
    Full,
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

/// A label value as the text format wants it: `\`, `"` and newline escaped. Disk and
/// origin names are already restricted to `[A-Za-z0-9_-]` by the configuration, but a
/// server's authority comes from a URL, so escape rather than trust.
fn label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// `v` as a JSON string, quotes included (RFC 8259 §7: `"`, `\` and controls escaped).
fn json_str(out: &mut String, v: &str) {
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
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
        for (ki, cache) in CachePhase::ALL.iter().enumerate() {
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
    family(
        &mut out,
        "linerate_requests_refused_total",
        "counter",
        "Requests refused for the client's fault (malformed, too large, too slow, a target that is not a path), by reason; each is also an access-log line with reason=, a bounded number per second.",
    );
    for (i, why) in Refusal::ALL.iter().enumerate() {
        let _ = writeln!(
            out,
            "linerate_requests_refused_total{{reason=\"{}\"}} {}",
            why.as_str(),
            t.refusals[i]
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
        "Time from a request's head parsed to its response's last byte handed to the kernel (a miss's wait for the origin included).",
        1e6,
        &mut stats.iter().map(|s| &s.duration),
    );
    family(
        &mut out,
        "linerate_worker_stall_seconds_total",
        "counter",
        "Seconds each worker's event loop spent in file sends (and user-space TLS file reads) that took over 1 ms plus 1 ns per byte moved (wall time: a disk wait, or the worker preempted inside the call), with every connection of that worker waiting too.",
    );
    for (i, w) in scrape.workers.iter().enumerate() {
        let _ = writeln!(
            out,
            "linerate_worker_stall_seconds_total{{worker=\"{i}\"}} {}",
            w.stall_ns as f64 / 1e9
        );
    }
    family(
        &mut out,
        "linerate_worker_stalls_total",
        "counter",
        "File sends (and user-space TLS file reads) on each worker's event loop that took over 1 ms plus 1 ns per byte moved.",
    );
    for (i, w) in scrape.workers.iter().enumerate() {
        let _ = writeln!(
            out,
            "linerate_worker_stalls_total{{worker=\"{i}\"}} {}",
            w.stalls
        );
    }
    histogram(
        &mut out,
        "linerate_loop_file_io_seconds",
        "Duration of each file send (and user-space TLS file read) made on an event loop.",
        1e6,
        &mut stats.iter().map(|s| &s.loop_io),
    );
    counter(
        &mut out,
        "linerate_disk_pool_sends_total",
        "Windows (up to 2 MiB) not in the page cache, sent by a disk's blocking pool instead of an event loop.",
        t.pool_sends,
    );
    counter(
        &mut out,
        "linerate_disk_pool_sent_bytes_total",
        "Bytes the disk pools sent (also counted in linerate_sent_bytes_total).",
        t.pool_bytes,
    );
    counter(
        &mut out,
        "linerate_http2_connections_total",
        "Connections that spoke HTTP/2 (h2c with prior knowledge, or ALPN h2).",
        t.http2_connections,
    );
    counter(
        &mut out,
        "linerate_http2_requests_total",
        "Requests answered on HTTP/2 streams (also counted in linerate_requests_total).",
        t.http2_streams,
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
        "Responses from the store (cache=hit or stale) over those plus cache=miss, since start; pass and local are not lookups; NaN without lookups (appliance mode).",
        if lookups == 0 {
            f64::NAN
        } else {
            hits as f64 / lookups as f64
        },
    );
    if let Some(cache) = &facts.cache {
        disk_families(&mut out, &cache.disks);
        origin_families(&mut out, &cache.origins);
        prefetch_families(&mut out, &cache.prefetch);
        let (inline, pooled, slow) = cache.fill_writes;
        family(
            &mut out,
            "linerate_cache_fill_writes_total",
            "counter",
            "Fill disk writes (temporary file creates and body appends) by where they ran: on the worker (a small body's page-cache writes while they are quick) or on the fill threads (a body declared over 256 KiB always; others for a while after slow ones).",
        );
        let _ = writeln!(
            out,
            "linerate_cache_fill_writes_total{{on=\"worker\"}} {inline}"
        );
        let _ = writeln!(
            out,
            "linerate_cache_fill_writes_total{{on=\"fill_threads\"}} {pooled}"
        );
        family(
            &mut out,
            "linerate_cache_fill_slow_writes_total",
            "counter",
            "Times a worker's slow fill writes (over 1 ms each) added up to over 50 ms in 100 ms, sending its writes to the fill threads for 250 ms, twice as long each time it recurs within a second of the last period (up to 8 s).",
        );
        let _ = writeln!(out, "linerate_cache_fill_slow_writes_total {slow}");
        gauge(
            &mut out,
            "linerate_cache_open_files",
            "Object files the store keeps open so hits skip open, header read, fstat and close (at most cache.open_files).",
            cache.open_files as f64,
        );
    }
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
        if facts.mode == RunState::Serving {
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

/// Per-disk families (cache mode): one series per disk, labelled `disk`.
fn disk_families(out: &mut String, disks: &[DiskStats]) {
    family(
        out,
        "linerate_cache_disk_state",
        "gauge",
        "Store disk service state: 1 on the current state (in_service, out_of_service), 0 on the other.",
    );
    for d in disks {
        for state in [DiskState::InService, DiskState::OutOfService] {
            let _ = writeln!(
                out,
                "linerate_cache_disk_state{{disk=\"{}\",state=\"{}\"}} {}",
                label(&d.name),
                state.as_str(),
                u8::from(d.state == state)
            );
        }
    }
    let per_disk =
        |out: &mut String, name: &str, kind: &str, help: &str, v: fn(&DiskStats) -> u64| {
            family(out, name, kind, help);
            for d in disks {
                let _ = writeln!(out, "{name}{{disk=\"{}\"}} {}", label(&d.name), v(d));
            }
        };
    per_disk(
        out,
        "linerate_cache_disk_index_loaded",
        "gauge",
        "1 once the disk's index has loaded after start (until then its objects are misses).",
        |d| u64::from(d.index_loaded),
    );
    per_disk(
        out,
        "linerate_cache_disk_bytes_capacity",
        "gauge",
        "Effective capacity of the store disk, bytes.",
        |d| d.capacity_bytes,
    );
    per_disk(
        out,
        "linerate_cache_disk_bytes_used",
        "gauge",
        "Bytes of stored objects (file sizes rounded up to 4 KiB).",
        |d| d.used_bytes,
    );
    per_disk(
        out,
        "linerate_cache_disk_bytes_reserved",
        "gauge",
        "Bytes reserved by writes in progress.",
        |d| d.reserved_bytes,
    );
    per_disk(
        out,
        "linerate_cache_disk_objects",
        "gauge",
        "Objects stored on the disk.",
        |d| d.objects,
    );
    per_disk(
        out,
        "linerate_cache_disk_evictions_total",
        "counter",
        "Objects evicted to make room.",
        |d| d.evictions,
    );
    per_disk(
        out,
        "linerate_cache_disk_admissions_refused_total",
        "counter",
        "Writes refused because the disk was at capacity.",
        |d| d.admissions_refused,
    );
    per_disk(
        out,
        "linerate_cache_disk_behind_refused_total",
        "counter",
        "Writes refused because the disk was behind the fills (over 256 MiB of complete objects waiting for their flush): relayed, not stored.",
        |d| d.behind_refused,
    );
    per_disk(
        out,
        "linerate_cache_disk_publish_batches_total",
        "counter",
        "Group commits: one flush (fdatasync, or syncfs for several) publishing every object that completed meanwhile.",
        |d| d.publish_batches,
    );
    per_disk(
        out,
        "linerate_cache_disk_published_total",
        "counter",
        "Objects published (flushed, renamed into place, indexed) through group commits.",
        |d| d.published,
    );
    per_disk(
        out,
        "linerate_cache_disk_errors_total",
        "counter",
        "I/O and integrity errors counted against the disk (corrupt objects included).",
        |d| d.io_errors,
    );
    per_disk(
        out,
        "linerate_cache_disk_corrupt_objects_total",
        "counter",
        "Object or index files that failed their header or checksum check.",
        |d| d.corrupt_objects,
    );
}

/// Per-origin-server families (cache mode): labelled `origin` (its configured name) and
/// `server` (`host:port` as sent in `Host`).
fn prefetch_families(out: &mut String, p: &PrefetchCounts) {
    let families: [(&str, &str, u64); 6] = [
        (
            "linerate_cache_prefetch_issued_total",
            "Prefetch fills started: segments, and slices of byte ranges and read-ahead (routes prefetch_segments, slice_readahead).",
            p.issued,
        ),
        (
            "linerate_cache_prefetch_used_total",
            "Prefetched segments and slices a client then read (served from the store, or joined while the prefetch ran).",
            p.used,
        ),
        (
            "linerate_cache_prefetch_wasted_total",
            "Prefetched segments and slices no client read within 60 s of the prefetch.",
            p.wasted,
        ),
        (
            "linerate_cache_prefetch_skipped_total",
            "Prefetches not started because the origin had cache.prefetch_in_flight prefetches running.",
            p.skipped,
        ),
        (
            "linerate_cache_prefetch_playlists_read_total",
            "Stored playlist and MPD copies and DASH SegmentBase indexes read to learn their segments.",
            p.playlists,
        ),
        (
            "linerate_cache_prefetch_switches_total",
            "Viewers seen moving to another rendition of a master playlist or DASH AdaptationSet.",
            p.switches,
        ),
    ];
    for (name, help, v) in families {
        family(out, name, "counter", help);
        let _ = writeln!(out, "{name} {v}");
    }
    family(
        out,
        "linerate_cache_prefetch_dropped_total",
        "counter",
        "Queued prefetches never issued: reason=\"switch\", their viewer moved to another rendition.",
    );
    let _ = writeln!(
        out,
        "linerate_cache_prefetch_dropped_total{{reason=\"switch\"}} {}",
        p.dropped_switch
    );
    let per_route = [
        (
            "linerate_cache_prefetch_route_issued_total",
            "Prefetch fills started, per route that prefetches (route: its number in the configuration, from 0).",
            false,
        ),
        (
            "linerate_cache_prefetch_route_used_total",
            "Prefetched segments and slices a client then read, per route (used / issued: the share of prefetches read).",
            true,
        ),
    ];
    for (name, help, used) in per_route {
        family(out, name, "counter", help);
        for r in &p.routes {
            let _ = writeln!(
                out,
                "{name}{{route=\"{}\",host=\"{}\",path_prefix=\"{}\"}} {}",
                r.route,
                label(&r.host),
                label(&r.path_prefix),
                if used { r.used } else { r.issued }
            );
        }
    }
}

fn origin_families(out: &mut String, origins: &[OriginSnapshot]) {
    let servers = || {
        origins.iter().flat_map(|o| {
            let origin = label(&o.name);
            o.servers.iter().map(move |s| {
                let labels = format!("origin=\"{origin}\",server=\"{}\"", label(&s.authority));
                (labels, s)
            })
        })
    };
    let per_server =
        |out: &mut String, name: &str, kind: &str, help: &str, v: fn(&ServerSnapshot) -> u64| {
            family(out, name, kind, help);
            for (labels, s) in servers() {
                let _ = writeln!(out, "{name}{{{labels}}} {}", v(s));
            }
        };
    per_server(
        out,
        "linerate_origin_up",
        "gauge",
        "1 while the origin server is sent requests, 0 while marked down (down_after failures in a row, for down_for).",
        |s| u64::from(s.state == ServerState::Up),
    );
    per_server(
        out,
        "linerate_origin_consecutive_failures",
        "gauge",
        "Failures in a row since the server's last success.",
        |s| u64::from(s.consecutive_failures),
    );
    per_server(
        out,
        "linerate_origin_requests_total",
        "counter",
        "Requests sent to the origin server (each attempt, retries included).",
        |s| s.requests,
    );
    family(
        out,
        "linerate_origin_failures_total",
        "counter",
        "Failed requests to the origin server, by kind (the Cache-Status detail); every kind is listed.",
    );
    for (labels, s) in servers() {
        for (kind, n) in &s.failures {
            let _ = writeln!(
                out,
                "linerate_origin_failures_total{{{labels},kind=\"{kind}\"}} {n}"
            );
        }
    }
    per_server(
        out,
        "linerate_origin_connections_opened_total",
        "counter",
        "Connections opened to the origin server (TCP, and TLS for https).",
        |s| s.connections_opened,
    );
    per_server(
        out,
        "linerate_origin_connections_reused_total",
        "counter",
        "Requests sent on a pooled (kept-alive) connection to the origin server.",
        |s| s.connections_reused,
    );
}

/// `/health`: the load balancer's view (its status code is [`HealthVerdict::status`]).
/// With `admin.metrics` off nothing counts requests or bytes, so the two rates are
/// `null` rather than a misleading 0. In cache mode `disks` lists the store's disks,
/// `origins` their servers' health, and a `503` that is not a drain carries a `reason`;
/// appliance mode has no store, so its `disks` is empty and the rest is absent.
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
    let reason = match HealthVerdict::of(facts) {
        v @ HealthVerdict::NoCacheDisk => format!(",\"reason\":\"{}\"", v.as_str()),
        HealthVerdict::Serving | HealthVerdict::Draining => String::new(),
    };
    let mut out = format!(
        "{{\"status\":\"{}\",\"draining\":{}{reason},\"open_connections\":{},\"throughput_bytes_per_second\":{throughput},\"requests_per_second\":{requests},",
        facts.mode.as_str(),
        facts.mode != RunState::Serving,
        t.open,
    );
    cache_json(&mut out, facts.cache.as_ref(), Detail::Brief);
    out.push_str("}\n");
    out
}

/// `/stats.json`: totals, rates and per-worker figures for `linerate stats` and the
/// dashboard; in cache mode also every disk and origin server counter.
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
    out.push_str("],");
    cache_json(&mut out, facts.cache.as_ref(), Detail::Full);
    out.push_str("}\n");
    out
}

/// `"disks":[...]` and, in cache mode, `,"origins":[...]` (no surrounding braces).
/// These come last in both documents: `linerate stats` finds its fields by the first
/// occurrence of their name, and the top-level ones must come first.
fn cache_json(out: &mut String, cache: Option<&CacheFacts>, detail: Detail) {
    out.push_str("\"disks\":[");
    let Some(cache) = cache else {
        out.push(']');
        return;
    };
    for (i, d) in cache.disks.iter().enumerate() {
        out.push_str(if i == 0 { "{\"name\":" } else { ",{\"name\":" });
        json_str(out, &d.name);
        let _ = write!(
            out,
            ",\"state\":\"{}\",\"index_loaded\":{},\"used_bytes\":{},\"capacity_bytes\":{},\"objects\":{}",
            d.state.as_str(),
            d.index_loaded,
            d.used_bytes,
            d.capacity_bytes,
            d.objects
        );
        if detail == Detail::Full {
            let _ = write!(
                out,
                ",\"reserved_bytes\":{},\"evictions\":{},\"admissions_refused\":{},\"io_errors\":{},\"corrupt_objects\":{}",
                d.reserved_bytes, d.evictions, d.admissions_refused, d.io_errors, d.corrupt_objects
            );
        }
        out.push('}');
    }
    out.push_str("],\"origins\":[");
    for (i, o) in cache.origins.iter().enumerate() {
        out.push_str(if i == 0 { "{\"name\":" } else { ",{\"name\":" });
        json_str(out, &o.name);
        out.push_str(",\"servers\":[");
        for (j, s) in o.servers.iter().enumerate() {
            out.push_str(if j == 0 {
                "{\"server\":"
            } else {
                ",{\"server\":"
            });
            json_str(out, &s.authority);
            let _ = write!(
                out,
                ",\"up\":{},\"state\":\"{}\",\"consecutive_failures\":{}",
                s.state == ServerState::Up,
                s.state.as_str(),
                s.consecutive_failures
            );
            if detail == Detail::Full {
                let _ = write!(
                    out,
                    ",\"requests\":{},\"connections_opened\":{},\"connections_reused\":{},\"failures\":{{",
                    s.requests, s.connections_opened, s.connections_reused
                );
                for (k, (kind, n)) in s.failures.iter().enumerate() {
                    let _ = write!(out, "{}\"{kind}\":{n}", if k == 0 { "" } else { "," });
                }
                out.push('}');
            }
            out.push('}');
        }
        out.push_str("]}");
    }
    out.push(']');
    if detail == Detail::Full {
        prefetch_json(out, &cache.prefetch);
    }
}

/// `,"prefetch":{...}`: the prefetch counters, and per route that prefetches its
/// issued and used prefetches and `used_ratio` (used / issued, `null` before any).
fn prefetch_json(out: &mut String, p: &PrefetchCounts) {
    let _ = write!(
        out,
        ",\"prefetch\":{{\"issued\":{},\"used\":{},\"wasted\":{},\"skipped\":{},\"dropped_switch\":{},\"switches\":{},\"routes\":[",
        p.issued, p.used, p.wasted, p.skipped, p.dropped_switch, p.switches
    );
    for (i, r) in p.routes.iter().enumerate() {
        let _ = write!(
            out,
            "{}{{\"route\":{},\"host\":",
            if i == 0 { "" } else { "," },
            r.route
        );
        json_str(out, &r.host);
        out.push_str(",\"path_prefix\":");
        json_str(out, &r.path_prefix);
        let ratio = if r.issued == 0 {
            "null".to_owned()
        } else {
            format!("{:.4}", r.used as f64 / r.issued as f64)
        };
        let _ = write!(
            out,
            ",\"issued\":{},\"used\":{},\"used_ratio\":{ratio}}}",
            r.issued, r.used
        );
    }
    out.push_str("]}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_exact_counts_and_cumulative_buckets() {
        let a = Arc::new(WorkerStats::new());
        let b = Arc::new(WorkerStats::new());
        a.response(200, CachePhase::Local, 90);
        b.response(200, CachePhase::Local, 400);
        b.response(404, CachePhase::Local, 400);
        a.sent(DeliveryPath::Sendfile, 100);
        let facts = Facts {
            mode: RunState::Serving,
            uptime_s: 1.0,
            reloads: (0, 0),
            ktls: None,
            cache: None,
        };
        let text = prometheus(&[a, b], &facts);
        assert!(text.contains("linerate_requests_total{status=\"2xx\",cache=\"local\"} 2\n"));
        assert!(text.contains("linerate_requests_total{status=\"4xx\",cache=\"local\"} 1\n"));
        assert!(text.contains("linerate_sent_bytes_total{path=\"sendfile\"} 100\n"));
        assert!(text.contains("linerate_response_duration_seconds_bucket{le=\"0.0001\"} 1\n"));
        assert!(text.contains("linerate_response_duration_seconds_bucket{le=\"0.0005\"} 3\n"));
        assert!(text.contains("linerate_response_duration_seconds_count 3\n"));
        assert!(text.contains("linerate_cache_hit_ratio NaN\n"));
        // Appliance mode: no store, no origins.
        assert!(!text.contains("linerate_cache_disk_"));
        assert!(!text.contains("linerate_origin_"));
    }

    fn disk(name: &str, state: DiskState) -> DiskStats {
        DiskStats {
            name: name.to_owned(),
            state,
            index_loaded: true,
            capacity_bytes: 1 << 30,
            used_bytes: 8192,
            reserved_bytes: 0,
            objects: 2,
            evictions: 3,
            admissions_refused: 4,
            behind_refused: 0,
            publish_batches: 0,
            published: 0,
            io_errors: 5,
            corrupt_objects: 1,
        }
    }

    fn cache_facts(mode: RunState, disks: Vec<DiskStats>) -> Facts {
        let failures = crate::origin::ERROR_KINDS
            .iter()
            .map(|&k| (k, u64::from(k == "connect") * 2))
            .collect();
        Facts {
            mode,
            uptime_s: 1.0,
            reloads: (0, 0),
            ktls: None,
            cache: Some(CacheFacts {
                disks,
                origins: vec![OriginSnapshot {
                    name: "o".to_owned(),
                    servers: vec![crate::origin::ServerSnapshot {
                        authority: "a\"b:81".to_owned(),
                        state: ServerState::Down,
                        consecutive_failures: 2,
                        requests: 7,
                        failures,
                        connections_opened: 5,
                        connections_reused: 2,
                    }],
                }],
                prefetch: PrefetchCounts {
                    issued: 4,
                    used: 3,
                    wasted: 1,
                    skipped: 1,
                    playlists: 2,
                    switches: 1,
                    dropped_switch: 2,
                    routes: vec![crate::proxy::PrefetchRouteCounts {
                        route: 1,
                        host: "*".to_owned(),
                        path_prefix: "/v/".to_owned(),
                        issued: 4,
                        used: 3,
                    }],
                },
                open_files: 3,
                fill_writes: (0, 0, 0),
            }),
        }
    }

    #[test]
    fn cache_mode_exports_disks_and_origin_servers() {
        let a = Arc::new(WorkerStats::new());
        a.response(200, CachePhase::Hit, 10);
        a.response(200, CachePhase::Stale, 10);
        a.response(200, CachePhase::Miss, 10);
        a.response(200, CachePhase::Miss, 10);
        a.response(200, CachePhase::Pass, 10);
        let facts = cache_facts(
            RunState::Serving,
            vec![
                disk("d0", DiskState::InService),
                disk("d1", DiskState::OutOfService),
            ],
        );
        let text = prometheus(&[a], &facts);
        for line in [
            "linerate_cache_hit_ratio 0.5\n",
            "linerate_cache_prefetch_issued_total 4\n",
            "linerate_cache_prefetch_used_total 3\n",
            "linerate_cache_prefetch_wasted_total 1\n",
            "linerate_cache_prefetch_dropped_total{reason=\"switch\"} 2\n",
            "linerate_cache_prefetch_route_issued_total{route=\"1\",host=\"*\",path_prefix=\"/v/\"} 4\n",
            "linerate_cache_prefetch_route_used_total{route=\"1\",host=\"*\",path_prefix=\"/v/\"} 3\n",
            "linerate_cache_disk_state{disk=\"d0\",state=\"in_service\"} 1\n",
            "linerate_cache_disk_state{disk=\"d0\",state=\"out_of_service\"} 0\n",
            "linerate_cache_disk_state{disk=\"d1\",state=\"out_of_service\"} 1\n",
            "linerate_cache_disk_bytes_capacity{disk=\"d0\"} 1073741824\n",
            "linerate_cache_disk_bytes_used{disk=\"d1\"} 8192\n",
            "linerate_cache_disk_objects{disk=\"d0\"} 2\n",
            "linerate_cache_disk_evictions_total{disk=\"d0\"} 3\n",
            "linerate_cache_disk_admissions_refused_total{disk=\"d0\"} 4\n",
            "linerate_cache_disk_errors_total{disk=\"d0\"} 5\n",
            "linerate_cache_disk_corrupt_objects_total{disk=\"d0\"} 1\n",
            "linerate_cache_disk_index_loaded{disk=\"d0\"} 1\n",
            "# TYPE linerate_origin_up gauge\n",
            // The authority's quote is escaped (text format 0.0.4).
            "linerate_origin_up{origin=\"o\",server=\"a\\\"b:81\"} 0\n",
            "linerate_origin_consecutive_failures{origin=\"o\",server=\"a\\\"b:81\"} 2\n",
            "linerate_origin_requests_total{origin=\"o\",server=\"a\\\"b:81\"} 7\n",
            "linerate_origin_failures_total{origin=\"o\",server=\"a\\\"b:81\",kind=\"connect\"} 2\n",
            "linerate_origin_failures_total{origin=\"o\",server=\"a\\\"b:81\",kind=\"reset\"} 0\n",
            "linerate_origin_connections_opened_total{origin=\"o\",server=\"a\\\"b:81\"} 5\n",
            "linerate_origin_connections_reused_total{origin=\"o\",server=\"a\\\"b:81\"} 2\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        // One HELP/TYPE per family, however many series.
        assert_eq!(
            text.matches("# TYPE linerate_origin_failures_total ")
                .count(),
            1
        );
    }

    #[test]
    fn health_fails_only_when_no_disk_can_cache() {
        let stats = [Arc::new(WorkerStats::new())];
        let rates = Rates::default();
        // An origin server down does not fail health.
        let up = cache_facts(RunState::Serving, vec![disk("d0", DiskState::InService)]);
        assert_eq!(HealthVerdict::of(&up), HealthVerdict::Serving);
        assert_eq!(HealthVerdict::of(&up).status(), 200);
        let body = health(&stats, &up, &rates, Metrics::On);
        assert!(
            body.contains(
                "\"disks\":[{\"name\":\"d0\",\"state\":\"in_service\",\"index_loaded\":true,\"used_bytes\":8192,\"capacity_bytes\":1073741824,\"objects\":2}]"
            ),
            "{body}"
        );
        assert!(
            body.contains(
                "\"origins\":[{\"name\":\"o\",\"servers\":[{\"server\":\"a\\\"b:81\",\"up\":false,\"state\":\"down\",\"consecutive_failures\":2}]}]}\n"
            ),
            "{body}"
        );
        assert!(!body.contains("reason"), "{body}");
        // Every disk out of service: 503 with a reason.
        let out = cache_facts(
            RunState::Serving,
            vec![
                disk("d0", DiskState::OutOfService),
                disk("d1", DiskState::OutOfService),
            ],
        );
        assert_eq!(HealthVerdict::of(&out).status(), 503);
        let body = health(&stats, &out, &rates, Metrics::On);
        assert!(
            body.starts_with(
                "{\"status\":\"serving\",\"draining\":false,\"reason\":\"all_disks_out_of_service\","
            ),
            "{body}"
        );
        // One left in service is enough.
        let one = cache_facts(
            RunState::Serving,
            vec![
                disk("d0", DiskState::OutOfService),
                disk("d1", DiskState::InService),
            ],
        );
        assert_eq!(HealthVerdict::of(&one).status(), 200);
        // Draining wins (and needs no reason: `draining` says it).
        let draining = cache_facts(
            RunState::Draining,
            vec![disk("d0", DiskState::OutOfService)],
        );
        assert_eq!(HealthVerdict::of(&draining), HealthVerdict::Draining);
        assert!(!health(&stats, &draining, &rates, Metrics::On).contains("reason"));
    }

    #[test]
    fn appliance_health_and_stats_keep_an_empty_disk_list() {
        let stats = [Arc::new(WorkerStats::new())];
        let facts = Facts {
            mode: RunState::Serving,
            uptime_s: 1.0,
            reloads: (0, 0),
            ktls: None,
            cache: None,
        };
        let rates = Rates::default();
        assert_eq!(
            health(&stats, &facts, &rates, Metrics::Off),
            "{\"status\":\"serving\",\"draining\":false,\"open_connections\":0,\"throughput_bytes_per_second\":null,\"requests_per_second\":null,\"disks\":[]}\n"
        );
        assert!(stats_json(&stats, &facts, &rates).ends_with("}],\"disks\":[]}\n"));
    }

    #[test]
    fn stats_json_has_every_disk_and_server_counter() {
        let stats = [Arc::new(WorkerStats::new())];
        let facts = cache_facts(RunState::Serving, vec![disk("d0", DiskState::InService)]);
        let doc = stats_json(&stats, &facts, &Rates::default());
        assert!(
            doc.contains("\"objects\":2,\"reserved_bytes\":0,\"evictions\":3,\"admissions_refused\":4,\"io_errors\":5,\"corrupt_objects\":1}"),
            "{doc}"
        );
        assert!(
            doc.contains("\"requests\":7,\"connections_opened\":5,\"connections_reused\":2,\"failures\":{\"connect\":2,\"connect_timeout\":0,"),
            "{doc}"
        );
        assert!(
            doc.ends_with("\"io\":0}}]}],\"prefetch\":{\"issued\":4,\"used\":3,\"wasted\":1,\"skipped\":1,\"dropped_switch\":2,\"switches\":1,\"routes\":[{\"route\":1,\"host\":\"*\",\"path_prefix\":\"/v/\",\"issued\":4,\"used\":3,\"used_ratio\":0.7500}]}}\n"),
            "{doc}"
        );
    }

    #[test]
    fn json_strings_and_labels_are_escaped() {
        let mut s = String::new();
        json_str(&mut s, "a\"b\\c\n");
        assert_eq!(s, "\"a\\\"b\\\\c\\u000a\"");
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
