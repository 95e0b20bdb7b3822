//! Process resource limits. A server holding 10,000+ connections needs more file
//! descriptors than the usual soft limit of 1024; like nginx's `worker_rlimit_nofile`,
//! linerate raises the soft limit to the hard limit at start-up. Does not touch the hard
//! limit (that needs privilege and is the operator's decision, e.g. systemd LimitNOFILE).

use std::io;

/// Raise `RLIMIT_NOFILE`'s soft limit to its hard limit; returns the new soft limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a live rlimit the kernel fills in.
    crate::cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } as libc::c_long)?;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: `lim` is a valid rlimit with cur <= max.
        crate::cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } as libc::c_long)?;
    }
    Ok(lim.rlim_cur)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test")]
mod tests {
    #[test]
    fn soft_limit_ends_at_hard_limit() {
        let soft = super::raise_nofile_limit().unwrap();
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: test: a live rlimit for the kernel to fill.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(soft, lim.rlim_max);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
    }
}
