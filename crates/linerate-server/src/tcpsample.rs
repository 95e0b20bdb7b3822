//! `TCP_INFO` for the sampled connections: read after every response ("during") and
//! when the connection ends, into the worker's RTT, retransmission, delivery-rate and
//! congestion-window histograms. Unsampled connections never reach this file, which is
//! the point: one `getsockopt` per response is what full per-connection statistics cost.
//!
//! With `admin.metrics` off the histograms are not fed; the RTT (and the congestion
//! control, read once per sampled connection) still reach the access log.
//!
//! Not here: choosing the sample (`Worker::sample_tcp`) or the syscall (`linerate-sys`).

use std::os::fd::AsFd;

use tokio::net::TcpStream;

use crate::context::Worker;

/// Parts per million, the unit of the retransmission histogram.
const PPM: u64 = 1_000_000;

/// After a response on a sampled connection: RTT, delivery rate and congestion window.
/// Returns the smoothed RTT for the access log.
pub(crate) fn during(worker: &Worker, stream: &TcpStream) -> Option<u32> {
    let info = linerate_sys::tcp::tcp_info(stream.as_fd()).ok()?;
    if let Some(stats) = worker.request_stats() {
        stats.rtt.observe(u64::from(info.rtt_us));
        stats.cwnd.observe(u64::from(info.snd_cwnd));
        if info.delivery_rate > 0 {
            stats.delivery_rate.observe(info.delivery_rate);
        }
    }
    Some(info.rtt_us)
}

/// When a sampled connection ends: its lifetime retransmission share (only meaningful
/// once, at the end, so it is not observed per response).
pub(crate) fn at_end(worker: &Worker, stream: &TcpStream) {
    let Some(stats) = worker.request_stats() else {
        return;
    };
    let Ok(info) = linerate_sys::tcp::tcp_info(stream.as_fd()) else {
        return;
    };
    if info.data_segs_out == 0 {
        return;
    }
    let ppm = u64::from(info.total_retrans) * PPM / u64::from(info.data_segs_out);
    stats.retrans.observe(ppm);
}

/// The congestion control the kernel actually uses on a sampled connection, for the
/// access log. Read from the socket rather than taken from the configuration because
/// a route with `congctl` overrides the listener's algorithm (tcp_ca_openreq_child).
/// One `getsockopt` per sampled connection, only when requests are logged.
pub(crate) fn congestion(stream: &TcpStream) -> Option<String> {
    linerate_sys::tcp::congestion(stream.as_fd()).ok()
}
