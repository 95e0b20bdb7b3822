//! The one seam every file operation of the store goes through ([`StoreIo`]), so tests
//! can fail chosen operations on chosen disks ([`crate::fault::FaultyIo`]) and the store
//! code stays the same in production ([`RealIo`]).
//!
//! What does not go through the seam: reading an object's body after a lookup. The
//! handle carries an open `File` and the server sends from it with sendfile; faults on
//! that path are the server's to count.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether [`StoreIo::open_read`] still asks for `O_NOATIME` (reads and `sendfile` skip
/// the access-time check): until the kernel first refuses it, on a cache directory whose
/// files another user owns (the server started as root once, then as a service user),
/// then never again in this process. Nothing in the store reads access times: the
/// eviction policy keeps its own counts.
static NOATIME: AtomicBool = AtomicBool::new(true);

pub use linerate_sys::fs::FsSpace;

/// What `stat` says of a file: enough to tell whether a path still names an open file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileState {
    /// Length in bytes.
    pub len: u64,
    /// Device holding it.
    pub dev: u64,
    /// Inode number on that device.
    pub ino: u64,
}

impl FileState {
    fn of(m: &std::fs::Metadata) -> FileState {
        use std::os::unix::fs::MetadataExt;
        FileState {
            len: m.len(),
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// Which file operation, for fault matching and error logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// Open an existing file for reading.
    Open,
    /// Create a new file (temporary object, journal, snapshot, probe).
    Create,
    /// Positional write into an object file.
    Write,
    /// Positional read (object header).
    Read,
    /// Append to a journal.
    Append,
    /// Read a whole small file (journal, snapshot, state).
    ReadFile,
    /// `fdatasync` of a file, `syncfs` of a filesystem or `fsync` of a directory.
    Sync,
    /// Atomic rename (publish).
    Rename,
    /// Unlink a file.
    Remove,
    /// Create a directory.
    CreateDir,
    /// List a directory.
    ReadDir,
    /// `statvfs`.
    Space,
    /// `fallocate`.
    Preallocate,
}

impl IoOp {
    /// Short stable name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            IoOp::Open => "open",
            IoOp::Create => "create",
            IoOp::Write => "write",
            IoOp::Read => "read",
            IoOp::Append => "append",
            IoOp::ReadFile => "read_file",
            IoOp::Sync => "sync",
            IoOp::Rename => "rename",
            IoOp::Remove => "remove",
            IoOp::CreateDir => "create_dir",
            IoOp::ReadDir => "read_dir",
            IoOp::Space => "space",
            IoOp::Preallocate => "preallocate",
        }
    }
}

/// File operations of the store. Every method takes the path it concerns (also for
/// operations on an open file) so a fault injector can match on the disk directory.
/// The default bodies are the real operations; [`RealIo`] uses them unchanged.
pub trait StoreIo: Send + Sync + 'static {
    /// Open `path` read-only (`O_RDONLY|O_CLOEXEC`, and `O_NOATIME` while the kernel
    /// allows it: see [`NOATIME`]).
    fn open_read(&self, path: &Path) -> io::Result<File> {
        use linerate_sys::open::{open_read, refused_noatime};
        let noatime = NOATIME.load(Ordering::Relaxed);
        match open_read(path, noatime) {
            Err(e) if noatime && refused_noatime(&e) => {
                NOATIME.store(false, Ordering::Relaxed);
                open_read(path, false)
            }
            r => r,
        }
    }

    /// Create `path`, failing if it exists (`O_RDWR|O_CREAT|O_EXCL|O_NOATIME`, mode
    /// 0644; the creator owns the file, so the kernel never refuses `O_NOATIME` here).
    fn create_new(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(linerate_sys::open::noatime_flag(true))
            .open(path)
    }

    /// Open `path` for appending, creating it if missing (journals).
    fn open_append(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o644)
            .open(path)
    }

    /// Write all of `buf` at `off` (`pwrite`, retried on short writes).
    fn write_at(&self, file: &File, _path: &Path, buf: &[u8], off: u64) -> io::Result<()> {
        file.write_all_at(buf, off)
    }

    /// Write all of `bufs`, one after another, at `off` (`pwritev`, continued after a
    /// short write).
    fn write_vectored_at(
        &self,
        file: &File,
        _path: &Path,
        bufs: &[&[u8]],
        off: u64,
    ) -> io::Result<()> {
        linerate_sys::fs::write_all_vectored_at(file.as_fd(), bufs, off)
    }

    /// Read up to `buf.len()` bytes at `off`; returns the count (`pread`).
    fn read_at(&self, file: &File, _path: &Path, buf: &mut [u8], off: u64) -> io::Result<usize> {
        file.read_at(buf, off)
    }

    /// Like [`StoreIo::read_at`], but only what the page cache holds: `WouldBlock`
    /// instead of waiting for the disk (`preadv2` with `RWF_NOWAIT`).
    fn read_at_nowait(
        &self,
        file: &File,
        _path: &Path,
        buf: &mut [u8],
        off: u64,
    ) -> io::Result<usize> {
        linerate_sys::pagecache::pread_nowait(std::os::fd::AsFd::as_fd(file), buf, off)
    }

    /// Append all of `buf` with one `write` on an `O_APPEND` file.
    fn append(&self, file: &File, _path: &Path, buf: &[u8]) -> io::Result<()> {
        (&*file).write_all(buf)
    }

    /// Length, device and inode of an open file (`fstat`).
    fn file_state(&self, file: &File, _path: &Path) -> io::Result<FileState> {
        Ok(FileState::of(&file.metadata()?))
    }

    /// Length, device and inode of the file `path` names now (`stat`).
    fn path_state(&self, path: &Path) -> io::Result<FileState> {
        Ok(FileState::of(&std::fs::metadata(path)?))
    }

    /// Whether `path` exists and is a directory (`stat`).
    fn is_dir(&self, path: &Path) -> io::Result<bool> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(m.is_dir()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Read a whole file into memory.
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        File::open(path)?.read_to_end(&mut out)?;
        Ok(out)
    }

    /// `fdatasync` the file.
    fn sync_data(&self, file: &File, _path: &Path) -> io::Result<()> {
        file.sync_data()
    }

    /// `syncfs` of the filesystem holding `file`: every file written there so far is
    /// durable after it, with one flush (a publish batch's group commit).
    fn sync_fs(&self, file: &File, _path: &Path) -> io::Result<()> {
        linerate_sys::fs::syncfs(file.as_fd())
    }

    /// `fsync` a directory, making renames and unlinks inside it durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    /// `rename(2)`: atomic replace of `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    /// `unlink(2)`.
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    /// `mkdir(2)` of one level; an existing directory is not an error.
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        match std::fs::create_dir(path) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            other => other,
        }
    }

    /// List the names in a directory.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(path)? {
            out.push(entry?.path());
        }
        Ok(out)
    }

    /// Size and free space of the filesystem holding `path`.
    fn space(&self, path: &Path) -> io::Result<FsSpace> {
        linerate_sys::fs::fs_space(path)
    }

    /// Reserve blocks for `[off, off+len)` without changing the length. Filesystems
    /// that cannot preallocate succeed silently.
    fn preallocate(&self, file: &File, _path: &Path, off: u64, len: u64) -> io::Result<()> {
        match linerate_sys::fs::preallocate(file.as_fd(), off, len) {
            Err(e) if linerate_sys::fs::is_unsupported(&e) => Ok(()),
            other => other,
        }
    }
}

/// The real filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealIo;

impl StoreIo for RealIo {}
