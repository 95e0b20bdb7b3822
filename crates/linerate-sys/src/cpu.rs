//! CPU affinity for the thread-per-core runtime: each worker is pinned to one CPU so
//! its connections, caches and counters stay on that core (DESIGN.md, OCA NUMA siloing).
//! Does not choose which CPU: the server does.

use std::io;

/// CPUs this process may run on (its affinity mask), in ascending order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain old data; zeroed is its empty value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 = this thread; `set` is a live cpu_set_t of the size we pass.
    let ret =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    crate::cvt(ret as libc::c_long)?;
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads the set we own, with an index below CPU_SETSIZE.
    Ok((0..max)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Pin the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: as above, zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE checked above; `set` is ours.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 = calling thread; pointer and size describe `set`.
    let ret = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    crate::cvt(ret as libc::c_long).map(|_| ())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test")]
mod tests {
    #[test]
    fn pin_to_an_allowed_cpu_then_read_back() {
        let cpus = super::allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let last = *cpus.last().unwrap();
        std::thread::spawn(move || {
            super::pin_current_thread(last).unwrap();
            assert_eq!(super::allowed_cpus().unwrap(), vec![last]);
        })
        .join()
        .unwrap();
        assert!(super::pin_current_thread(1 << 20).is_err());
    }
}
