//! Persistence of a disk's index: an append-only journal of inserts and removals plus a
//! periodic snapshot, both as checksummed records (layout in `docs/on-disk-format.md`).
//!
//! Why not scan the objects at start-up: reading one header per object is a random read
//! per object, minutes for a million on a spinning disk. Why not an embedded database
//! (redb): the index has to be in memory anyway for eviction and lookups; a flat log
//! that replays at memory speed needs no second copy of the truth. The journal is
//! written with one `write(2)` per record, or per batch of records while a disk's
//! publisher holds them ([`JournalWriter::hold`]), and never synced per record: a kill -9
//! keeps everything written (the page cache survives the process); power loss may drop
//! the tail, which leaves orphan files the reconcile scan adopts. A torn or corrupt record
//! ends the replay of that file. This file encodes, parses and writes; deciding when to
//! compact and what the records mean for the index is the disk's job.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::format::HeaderError;
use crate::io::StoreIo;
use crate::key::{KeyHash, MAX_KEY_LEN};
use crate::meta::Reader;
use crate::policy::QueueId;

/// Magic of journal and snapshot files: "LRCJ".
const MAGIC: [u8; 4] = *b"LRCJ";
/// Version of the journal/snapshot record format.
pub const JOURNAL_VERSION: u16 = 1;
const KIND_JOURNAL: u16 = 1;
const KIND_SNAPSHOT: u16 = 2;
const FILE_HEADER_LEN: usize = 16;
const REC_INSERT: u8 = 1;
const REC_REMOVE: u8 = 2;
const REC_PIN: u8 = 3;
/// Largest record payload: an insert with the longest key.
const MAX_RECORD_LEN: usize = 64 + MAX_KEY_LEN;
/// Snapshot bytes buffered before each write: large enough to write at disk speed,
/// small enough not to hold 100 MB in memory for a million objects.
const SNAPSHOT_CHUNK: usize = 1 << 20;

/// Name of the snapshot file in a disk directory.
pub const SNAPSHOT_NAME: &str = "index.snap";
const SNAPSHOT_TMP_NAME: &str = "index.snap.tmp";
const JOURNAL_PREFIX: &str = "journal.";

/// One persisted index change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// An object was published (or, in a snapshot, is live).
    Insert {
        /// Key hash.
        hash: KeyHash,
        /// Bytes charged.
        charge: u64,
        /// Write start, Unix ms.
        created_ms: u64,
        /// Eviction queue (snapshots); journals write `Small`.
        queue: QueueId,
        /// Full key.
        key: Vec<u8>,
    },
    /// An object was evicted or purged.
    Remove {
        /// Key hash.
        hash: KeyHash,
    },
    /// An object was pinned (never evicted) or unpinned. A later insert of the same
    /// hash keeps the pin (a refreshed copy of a pinned object stays pinned).
    Pin {
        /// Key hash.
        hash: KeyHash,
        /// Pinned (true) or evictable again.
        pinned: bool,
    },
}

impl Record {
    /// Append `len u32 | payload | xxh3-64(payload)` to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        match self {
            Record::Insert {
                hash,
                charge,
                created_ms,
                queue,
                key,
            } => {
                out.push(REC_INSERT);
                out.extend_from_slice(&hash.0.to_le_bytes());
                out.extend_from_slice(&charge.to_le_bytes());
                out.extend_from_slice(&created_ms.to_le_bytes());
                out.push(match queue {
                    QueueId::Main => 1,
                    QueueId::Pinned => 3,
                    _ => 0,
                });
                out.extend_from_slice(&(key.len() as u32).to_le_bytes());
                out.extend_from_slice(key);
            }
            Record::Remove { hash } => {
                out.push(REC_REMOVE);
                out.extend_from_slice(&hash.0.to_le_bytes());
            }
            Record::Pin { hash, pinned } => {
                out.push(REC_PIN);
                out.extend_from_slice(&hash.0.to_le_bytes());
                out.push(u8::from(*pinned));
            }
        }
        let len = (out.len() - start - 4) as u32;
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
        let sum = xxhash_rust::xxh3::xxh3_64(&out[start + 4..]);
        out.extend_from_slice(&sum.to_le_bytes());
    }

    fn decode(payload: &[u8]) -> Result<Record, HeaderError> {
        let mut r = Reader {
            buf: payload,
            pos: 0,
        };
        let kind = r.take(1)?[0];
        let hash = KeyHash(r.u128()?);
        let rec = match kind {
            REC_INSERT => {
                let charge = r.u64()?;
                let created_ms = r.u64()?;
                let queue = QueueId::from_u8(r.take(1)?[0]);
                let key_len = r.u32()? as usize;
                if key_len > MAX_KEY_LEN {
                    return Err(HeaderError::BadLength);
                }
                let key = r.take(key_len)?.to_vec();
                Record::Insert {
                    hash,
                    charge,
                    created_ms,
                    queue,
                    key,
                }
            }
            REC_REMOVE => Record::Remove { hash },
            REC_PIN => Record::Pin {
                hash,
                pinned: match r.take(1)?[0] {
                    0 => false,
                    1 => true,
                    _ => return Err(HeaderError::BadMeta),
                },
            },
            _ => return Err(HeaderError::BadMeta),
        };
        if r.pos != payload.len() {
            return Err(HeaderError::BadLength);
        }
        Ok(rec)
    }
}

fn file_header(kind: u16, gen: u64) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..4].copy_from_slice(&MAGIC);
    h[4..6].copy_from_slice(&JOURNAL_VERSION.to_le_bytes());
    h[6..8].copy_from_slice(&kind.to_le_bytes());
    h[8..].copy_from_slice(&gen.to_le_bytes());
    h
}

/// Result of parsing one journal or snapshot file.
#[derive(Debug, Default)]
pub struct Parsed {
    /// Generation in the file header.
    pub gen: u64,
    /// Valid records, in order.
    pub records: Vec<Record>,
    /// Whether the file ended with a torn or corrupt record (normal after a crash).
    pub torn: bool,
}

/// Parse a journal (`snapshot == false`) or snapshot. A bad file header is an error;
/// a bad record ends the parse with `torn` set.
pub fn parse(buf: &[u8], snapshot: bool) -> Result<Parsed, HeaderError> {
    let head = buf.get(..FILE_HEADER_LEN).ok_or(HeaderError::Truncated)?;
    if head[..4] != MAGIC {
        return Err(HeaderError::BadMagic);
    }
    let version = u16::from_le_bytes([head[4], head[5]]);
    if version != JOURNAL_VERSION {
        return Err(HeaderError::UnsupportedVersion(version));
    }
    let kind = u16::from_le_bytes([head[6], head[7]]);
    if kind
        != if snapshot {
            KIND_SNAPSHOT
        } else {
            KIND_JOURNAL
        }
    {
        return Err(HeaderError::BadMagic);
    }
    let mut gen = [0u8; 8];
    gen.copy_from_slice(&head[8..16]);
    let mut out = Parsed {
        gen: u64::from_le_bytes(gen),
        ..Parsed::default()
    };
    let mut r = Reader {
        buf,
        pos: FILE_HEADER_LEN,
    };
    while r.pos < buf.len() {
        match next_record(&mut r) {
            Ok(rec) => out.records.push(rec),
            Err(_) => {
                out.torn = true;
                break;
            }
        }
    }
    Ok(out)
}

fn next_record(r: &mut Reader<'_>) -> Result<Record, HeaderError> {
    let len = r.u32()? as usize;
    if len > MAX_RECORD_LEN {
        return Err(HeaderError::BadLength);
    }
    let payload = r.take(len)?;
    let sum = r.u64()?;
    if xxhash_rust::xxh3::xxh3_64(payload) != sum {
        return Err(HeaderError::BadChecksum);
    }
    Record::decode(payload)
}

/// Path of journal generation `gen` in `dir`.
pub fn journal_path(dir: &Path, gen: u64) -> PathBuf {
    dir.join(format!("{JOURNAL_PREFIX}{gen:016x}"))
}

/// Generations of the journals present in `dir`, ascending.
pub fn list_journals(io: &dyn StoreIo, dir: &Path) -> io::Result<Vec<u64>> {
    let mut gens: Vec<u64> = io
        .read_dir(dir)?
        .iter()
        .filter_map(|p| {
            p.file_name()?
                .to_str()?
                .strip_prefix(JOURNAL_PREFIX)
                .map(str::to_owned)
        })
        .filter_map(|g| u64::from_str_radix(&g, 16).ok())
        .collect();
    gens.sort_unstable();
    Ok(gens)
}

/// An open journal being appended to.
#[derive(Debug)]
pub struct JournalWriter {
    file: File,
    path: PathBuf,
    /// Generation of this journal.
    pub gen: u64,
    /// Bytes appended so far (header included).
    pub bytes: u64,
    /// Records appended while held ([`JournalWriter::hold`]), in order, not yet written.
    held: Vec<u8>,
    holding: bool,
}

impl JournalWriter {
    /// Create journal `gen` in `dir` (truncating nothing: a new generation is always a
    /// new file) and write its header.
    pub fn create(io: &dyn StoreIo, dir: &Path, gen: u64) -> io::Result<JournalWriter> {
        let path = journal_path(dir, gen);
        let file = io.open_append(&path)?;
        io.append(&file, &path, &file_header(KIND_JOURNAL, gen))?;
        Ok(JournalWriter {
            file,
            path,
            gen,
            bytes: FILE_HEADER_LEN as u64,
            held: Vec::new(),
            holding: false,
        })
    }

    /// Append one record with a single `write(2)`, so a crash leaves either the whole
    /// record or a torn tail the parser rejects. Not synced (see the file comment).
    /// While held, the record joins the held ones instead, after them.
    pub fn append(&mut self, io: &dyn StoreIo, rec: &Record) -> io::Result<()> {
        if self.holding {
            rec.encode_into(&mut self.held);
            return Ok(());
        }
        let mut buf = Vec::with_capacity(64);
        rec.encode_into(&mut buf);
        io.append(&self.file, &self.path, &buf)?;
        self.bytes += buf.len() as u64;
        Ok(())
    }

    /// Hold the records appended from now on until [`JournalWriter::release`]: one
    /// `write(2)` for a publisher's batch instead of one per object (the journal is
    /// never synced per record, so holding them for the batch's milliseconds changes
    /// what a crash can lose by that much). Every append goes through the same buffer
    /// meanwhile, so the file keeps the order the changes were made in.
    pub fn hold(&mut self) {
        self.holding = true;
    }

    /// Write the held records with one `write(2)` (a crash in it leaves a torn tail
    /// the parser drops, with whole records before it) and append directly again.
    pub fn release(&mut self, io: &dyn StoreIo) -> io::Result<()> {
        self.holding = false;
        if self.held.is_empty() {
            return Ok(());
        }
        let r = io.append(&self.file, &self.path, &self.held);
        if r.is_ok() {
            self.bytes += self.held.len() as u64;
        }
        self.held.clear();
        r
    }

    /// Write any held records, then `fdatasync` the journal (done before it is
    /// superseded by a snapshot, or handed to another process).
    pub fn sync(&mut self, io: &dyn StoreIo) -> io::Result<()> {
        let holding = self.holding;
        let released = self.release(io);
        self.holding = holding;
        released?;
        io.sync_data(&self.file, &self.path)
    }
}

/// Write a snapshot of `records` for journal generation `gen` (the first journal a
/// restart must replay after it) atomically: temp file, fdatasync, rename, dir fsync.
pub fn write_snapshot<I>(io: &dyn StoreIo, dir: &Path, gen: u64, records: I) -> io::Result<u64>
where
    I: IntoIterator<Item = Record>,
{
    let tmp = dir.join(SNAPSHOT_TMP_NAME);
    match io.remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let file = io.create_new(&tmp)?;
    let mut buf = Vec::with_capacity(SNAPSHOT_CHUNK + MAX_RECORD_LEN);
    buf.extend_from_slice(&file_header(KIND_SNAPSHOT, gen));
    let mut off = 0u64;
    let mut count = 0u64;
    for rec in records {
        rec.encode_into(&mut buf);
        count += 1;
        if buf.len() >= SNAPSHOT_CHUNK {
            io.write_at(&file, &tmp, &buf, off)?;
            off += buf.len() as u64;
            buf.clear();
        }
    }
    io.write_at(&file, &tmp, &buf, off)?;
    io.sync_data(&file, &tmp)?;
    io.rename(&tmp, &dir.join(SNAPSHOT_NAME))?;
    io.sync_dir(dir)?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(i: u8) -> Record {
        Record::Insert {
            hash: KeyHash::of(&[i]),
            charge: 4096,
            created_ms: 5,
            queue: QueueId::Small,
            key: vec![i; 10],
        }
    }

    /// Guards the publisher's batched journal writes: held records reach the file
    /// only at `release` (or a `sync`), all of them, in the order they were appended,
    /// and appends go straight to the file again afterwards.
    #[test]
    #[allow(clippy::unwrap_used, reason = "test on a temp dir it created")]
    fn held_records_are_written_together_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let io = crate::io::RealIo;
        let mut j = JournalWriter::create(&io, dir.path(), 1).unwrap();
        let path = journal_path(dir.path(), 1);
        let on_file = || {
            parse(&std::fs::read(&path).unwrap(), false)
                .unwrap()
                .records
        };
        let remove = Record::Remove {
            hash: KeyHash::of(&[1]),
        };
        j.hold();
        for r in [&insert(1), &remove, &insert(2)] {
            j.append(&io, r).unwrap();
        }
        assert_eq!(on_file(), vec![], "held, not written");
        assert_eq!(j.bytes, FILE_HEADER_LEN as u64);
        j.release(&io).unwrap();
        assert_eq!(on_file(), vec![insert(1), remove.clone(), insert(2)]);
        assert_eq!(j.bytes, std::fs::metadata(&path).unwrap().len());
        j.append(&io, &insert(3)).unwrap();
        assert_eq!(on_file().len(), 4, "released: appends write at once");
        // A sync (before rotation or lending) writes what is held and keeps holding.
        j.hold();
        j.append(&io, &insert(4)).unwrap();
        j.sync(&io).unwrap();
        assert_eq!(on_file().last(), Some(&insert(4)));
        j.append(&io, &insert(5)).unwrap();
        assert_eq!(on_file().len(), 5, "still held after the sync");
        j.release(&io).unwrap();
        assert_eq!(on_file().last(), Some(&insert(5)));
    }

    #[test]
    fn torn_tail_is_dropped() {
        let mut buf = file_header(KIND_JOURNAL, 7).to_vec();
        insert(1).encode_into(&mut buf);
        Record::Remove {
            hash: KeyHash::of(&[1]),
        }
        .encode_into(&mut buf);
        let full = buf.len();
        insert(2).encode_into(&mut buf);
        for cut in full..buf.len() {
            let p = parse(&buf[..cut], false).ok();
            assert_eq!(p.as_ref().map(|p| p.records.len()), Some(2));
            assert_eq!(p.map(|p| p.torn), Some(cut != full));
        }
        let p = parse(&buf, false).ok();
        assert_eq!(p.as_ref().map(|p| (p.gen, p.records.len())), Some((7, 3)));
        assert!(parse(&buf, true).is_err(), "a journal is not a snapshot");
    }

    #[test]
    fn pin_records_and_pinned_inserts_round_trip() {
        let mut buf = file_header(KIND_JOURNAL, 3).to_vec();
        let pin = Record::Pin {
            hash: KeyHash::of(b"k"),
            pinned: true,
        };
        let unpin = Record::Pin {
            hash: KeyHash::of(b"k"),
            pinned: false,
        };
        let pinned_insert = Record::Insert {
            hash: KeyHash::of(b"k"),
            charge: 4096,
            created_ms: 9,
            queue: QueueId::Pinned,
            key: b"k".to_vec(),
        };
        for r in [&pin, &unpin, &pinned_insert] {
            r.encode_into(&mut buf);
        }
        let p = parse(&buf, false).ok().map(|p| p.records);
        assert_eq!(p, Some(vec![pin, unpin, pinned_insert]));
    }

    #[test]
    fn corrupt_record_stops_replay() {
        let mut buf = file_header(KIND_JOURNAL, 1).to_vec();
        insert(1).encode_into(&mut buf);
        let mid = buf.len();
        insert(2).encode_into(&mut buf);
        insert(3).encode_into(&mut buf);
        buf[mid + 10] ^= 0xff;
        let p = parse(&buf, false).ok();
        assert_eq!(p.map(|p| (p.records.len(), p.torn)), Some((1, true)));
    }
}
