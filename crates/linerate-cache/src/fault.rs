//! Fault injection for tests: [`FaultyIo`] wraps [`RealIo`] and fails chosen operations
//! on chosen paths with chosen errnos, a chosen number of times.
//!
//! Public (not `cfg(test)`) so integration tests and the server's tests can use it; it
//! costs nothing unless constructed. It can make flushes slow ([`FaultyIo::set_sync_delay`],
//! a disk behind its writes); it does not simulate torn writes (kill -9 tests cover
//! torn state with real processes).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::io::{FsSpace, IoOp, RealIo, StoreIo};

/// One injected fault.
#[derive(Debug, Clone)]
pub struct FaultRule {
    /// Operation to fail; `None` fails every operation.
    pub op: Option<IoOp>,
    /// Only paths under this directory; `None` matches every path.
    pub under: Option<PathBuf>,
    /// errno to return (`libc::EIO`, `libc::ENOSPC`, …).
    pub errno: i32,
    /// Matching calls to let through before failing.
    pub skip: u64,
    /// How many times to fail after that; `None` = for ever (until cleared).
    pub times: Option<u64>,
}

impl FaultRule {
    /// Fail `op` under `dir` with `errno`, every time, from now on.
    pub fn always(op: Option<IoOp>, dir: &Path, errno: i32) -> FaultRule {
        FaultRule {
            op,
            under: Some(dir.to_path_buf()),
            errno,
            skip: 0,
            times: None,
        }
    }
}

/// A [`StoreIo`] that fails operations according to its rules, else does them for real.
#[derive(Debug, Default)]
pub struct FaultyIo {
    rules: Mutex<Vec<FaultRule>>,
    /// What `space` reports instead of the real filesystem's, when set.
    space: Mutex<Option<FsSpace>>,
    /// How long every `fdatasync` and `syncfs` takes at least (a slow disk), when set.
    sync_delay: Mutex<Option<std::time::Duration>>,
}

impl FaultyIo {
    /// No faults until [`FaultyIo::add`] is called.
    pub fn new() -> FaultyIo {
        FaultyIo::default()
    }

    /// Add a rule (checked in insertion order; the first match decides).
    pub fn add(&self, rule: FaultRule) {
        self.lock().push(rule);
    }

    /// Report `space` for every filesystem (`None`: the real one), so a test of the
    /// store's own watermarks does not depend on how full the host's disk is.
    pub fn set_space(&self, space: Option<FsSpace>) {
        *self.space.lock().unwrap_or_else(|p| p.into_inner()) = space;
    }

    /// Make every `fdatasync` and `syncfs` take at least `delay` (`None`: as long as
    /// the real one):
    /// a disk slower than the fills, whatever the test machine's disk is.
    pub fn set_sync_delay(&self, delay: Option<std::time::Duration>) {
        *self.sync_delay.lock().unwrap_or_else(|p| p.into_inner()) = delay;
    }

    /// Remove every rule: the disk is healthy again.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<FaultRule>> {
        // A poisoned lock only means a test thread panicked; the rules are still valid.
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check(&self, op: IoOp, path: &Path) -> io::Result<()> {
        let mut rules = self.lock();
        for rule in rules.iter_mut() {
            if rule.op.is_some_and(|o| o != op) {
                continue;
            }
            if rule.under.as_ref().is_some_and(|d| !path.starts_with(d)) {
                continue;
            }
            if rule.skip > 0 {
                rule.skip -= 1;
                return Ok(());
            }
            match &mut rule.times {
                Some(0) => continue,
                Some(n) => *n -= 1,
                None => {}
            }
            return Err(io::Error::from_raw_os_error(rule.errno));
        }
        Ok(())
    }
}

impl StoreIo for FaultyIo {
    fn open_read(&self, path: &Path) -> io::Result<File> {
        self.check(IoOp::Open, path)?;
        RealIo.open_read(path)
    }
    fn create_new(&self, path: &Path) -> io::Result<File> {
        self.check(IoOp::Create, path)?;
        RealIo.create_new(path)
    }
    fn open_append(&self, path: &Path) -> io::Result<File> {
        self.check(IoOp::Create, path)?;
        RealIo.open_append(path)
    }
    fn write_at(&self, file: &File, path: &Path, buf: &[u8], off: u64) -> io::Result<()> {
        self.check(IoOp::Write, path)?;
        RealIo.write_at(file, path, buf, off)
    }
    fn write_vectored_at(
        &self,
        file: &File,
        path: &Path,
        bufs: &[&[u8]],
        off: u64,
    ) -> io::Result<()> {
        self.check(IoOp::Write, path)?;
        RealIo.write_vectored_at(file, path, bufs, off)
    }
    fn read_at(&self, file: &File, path: &Path, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.check(IoOp::Read, path)?;
        RealIo.read_at(file, path, buf, off)
    }
    fn read_at_nowait(
        &self,
        file: &File,
        path: &Path,
        buf: &mut [u8],
        off: u64,
    ) -> io::Result<usize> {
        self.check(IoOp::Read, path)?;
        RealIo.read_at_nowait(file, path, buf, off)
    }
    fn append(&self, file: &File, path: &Path, buf: &[u8]) -> io::Result<()> {
        self.check(IoOp::Append, path)?;
        RealIo.append(file, path, buf)
    }
    fn file_state(&self, file: &File, path: &Path) -> io::Result<crate::io::FileState> {
        self.check(IoOp::Read, path)?;
        RealIo.file_state(file, path)
    }
    fn path_state(&self, path: &Path) -> io::Result<crate::io::FileState> {
        self.check(IoOp::Open, path)?;
        RealIo.path_state(path)
    }
    fn is_dir(&self, path: &Path) -> io::Result<bool> {
        self.check(IoOp::Open, path)?;
        RealIo.is_dir(path)
    }
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.check(IoOp::ReadFile, path)?;
        RealIo.read_file(path)
    }
    fn sync_data(&self, file: &File, path: &Path) -> io::Result<()> {
        self.check(IoOp::Sync, path)?;
        let delay = *self.sync_delay.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
        RealIo.sync_data(file, path)
    }
    fn sync_fs(&self, file: &File, path: &Path) -> io::Result<()> {
        self.check(IoOp::Sync, path)?;
        let delay = *self.sync_delay.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
        RealIo.sync_fs(file, path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.check(IoOp::Sync, path)?;
        RealIo.sync_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check(IoOp::Rename, to)?;
        RealIo.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.check(IoOp::Remove, path)?;
        RealIo.remove_file(path)
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.check(IoOp::CreateDir, path)?;
        RealIo.create_dir(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.check(IoOp::ReadDir, path)?;
        RealIo.read_dir(path)
    }
    fn space(&self, path: &Path) -> io::Result<FsSpace> {
        self.check(IoOp::Space, path)?;
        match *self.space.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(s) => Ok(s),
            None => RealIo.space(path),
        }
    }
    fn preallocate(&self, file: &File, path: &Path, off: u64, len: u64) -> io::Result<()> {
        self.check(IoOp::Preallocate, path)?;
        RealIo.preallocate(file, path, off, len)
    }
}
