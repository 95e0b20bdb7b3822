//! The admin API's defence against DNS rebinding: which `Host` values name it. A web
//! page whose owner points its name at the admin address would otherwise be
//! same-origin with the API in its visitors' browsers, and read `/metrics`,
//! `/stats.json` and `/fill/jobs`; such a request carries the page's name, which is
//! none of the names accepted here.
//!
//! Not here: answering (`api` answers `421 Misdirected Request`, RFC 9110 §15.5.20) or
//! authentication (the commands' token, `api`).

use std::net::IpAddr;

/// Whether a request's `Host` (or absolute-form authority) names this admin API: the
/// address its connection was accepted on (Kubernetes probes and Prometheus scrapes by
/// pod IP), a loopback name (`localhost`, `127.0.0.0/8`, `[::1]`), or a name in
/// `admin.allowed_hosts`. The port is not compared: rebinding is defeated by the name
/// (a page's origin is the attacker's name, whatever the port), and a forwarded port
/// (`kubectl port-forward 8080:9090`) would otherwise be refused.
///
/// A request without `Host` passes: only HTTP/1.0 may omit it (the parser refuses an
/// HTTP/1.1 one, RFC 9112 §3.2), and browsers always send it, so a rebinding page cannot
/// make one; some load-balancer health checks are such requests.
pub(crate) fn host_allowed(
    authority: Option<&[u8]>,
    local: Option<IpAddr>,
    allowed: &[String],
) -> bool {
    let Some(authority) = authority else {
        return true;
    };
    // The parser has checked the `uri-host [":" port]` alphabet; an IPv6 literal is the
    // only host with `:` in it, and it is bracketed (RFC 3986 §3.2.2).
    let host = match authority.strip_prefix(b"[") {
        Some(rest) => match rest.iter().position(|&b| b == b']') {
            Some(end) => &authority[..end + 2],
            None => return false,
        },
        None => authority.split(|&b| b == b':').next().unwrap_or(b""),
    };
    let Ok(host) = std::str::from_utf8(host) else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(&host)
        .parse::<IpAddr>()
        .ok();
    match literal {
        Some(ip) => {
            ip.is_loopback()
                || local.is_some_and(|l| l.to_canonical() == ip.to_canonical())
                || allowed.contains(&host)
        }
        None => host == "localhost" || allowed.contains(&host),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_check() {
        let local: Option<IpAddr> = "10.1.2.3".parse().ok();
        let allowed = vec!["admin.internal".to_owned(), "[fd00::1]".to_owned()];
        let ok = |h: &str| host_allowed(Some(h.as_bytes()), local, &allowed);
        for good in [
            "10.1.2.3:9090",
            "10.1.2.3",
            "127.0.0.1:9090",
            "127.9.9.9",
            "localhost:9090",
            "LOCALHOST",
            "[::1]:9090",
            "[::1]",
            "admin.internal:9090",
            "Admin.Internal",
            "[fd00::1]:1",
        ] {
            assert!(ok(good), "{good}");
        }
        for bad in [
            "evil.example",
            "evil.example:9090",
            "10.1.2.4:9090",
            "localhost.evil.example",
            "[::2]",
            "[::1",
            "admin.internal.evil",
            "",
        ] {
            assert!(!ok(bad), "{bad}");
        }
        // An IPv4 client of a dual-stack listener: accepted on ::ffff:10.1.2.3.
        let mapped: Option<IpAddr> = "::ffff:10.1.2.3".parse().ok();
        assert!(host_allowed(Some(b"10.1.2.3:9090"), mapped, &[]));
        assert!(host_allowed(None, local, &[]), "HTTP/1.0 without Host");
    }
}
