//! Local wall-clock time, for schedules an operator writes in local time (fill job
//! windows). `localtime_r(3)` reads the zone from `TZ` or `/etc/localtime`, as `date`
//! does; Rust's standard library has no local time at all.

/// Minutes since local midnight (0..1440) at `unix_secs`, in the process's time zone;
/// `None` when the C library cannot convert the time.
pub fn minute_of_day(unix_secs: i64) -> Option<u32> {
    let t: libc::time_t = unix_secs;
    // SAFETY: an all-zero `tm` is a valid value of this plain C struct.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: `t` and `tm` are live locals; localtime_r is the re-entrant variant (it
    // writes only to `tm`), so no other thread's call can race with this one.
    let r = unsafe { libc::localtime_r(&t, &mut tm) };
    if r.is_null() {
        return None;
    }
    let m = u32::try_from(tm.tm_hour).ok()? * 60 + u32::try_from(tm.tm_min).ok()?;
    (m < 24 * 60).then_some(m)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test")]
mod tests {
    #[test]
    fn a_minute_of_the_day() {
        let m = super::minute_of_day(1_700_000_000).unwrap();
        assert!(m < 1440);
        // One hour later is sixty minutes later, modulo a day (no zone shifts by a
        // fraction of an hour across this instant).
        let later = super::minute_of_day(1_700_000_000 + 3600).unwrap();
        assert_eq!(later, (m + 60) % 1440);
    }
}
