//! Backups: the whole store at one revision as one file. It is what a Raft snapshot carries
//! to a member that catches up, and what Maintenance.Snapshot streamed before it streamed an
//! etcd snapshot.db (`backend::schema`); `mem_etcd snapshot restore` still turns such files
//! into a data directory, and `mem_etcd snapshot export` into an etcd snapshot.db.
//!
//! # Format
//! ```text
//! header   "MEMETCDB", format version (u32 LE), 4 reserved bytes         16 bytes
//! records  framed and encoded as in the WAL (see `record`):
//!            SnapHeader { rev, compacted, meta_seq: 0, prefix }   starts a partition's keys
//!            SnapKey { key, versions }...                          its keys, in key order
//!            ... one such group per partition
//!            SnapLease { id, ttl }...                              the leases, granted TTLs
//!            CompactPrefix { seq: 0, prefix, rev }...              prefixes compacted alone
//!            SnapAuth { state }                                    version 2 only (see below)
//!            SnapEnd { records }                                   records before it
//! padding  zero bytes up to a multiple of 512
//! sha256   of everything above                                     32 bytes
//! ```
//! Every header carries the same revision (the state's) and compaction revision (-1 if none).
//! A key's versions are those retained at or below the revision, oldest first, tombstones
//! included, as in a WAL snapshot; so a restored store has the source's history since its
//! compaction, not only the latest values.
//!
//! Versions 1 and 2 are both read; they differ only by the SnapAuth record, which version 2
//! always has and version 1 never has: the auth state (users with their password hashes, roles
//! with their permissions, whether auth is enabled, the auth revision), opaque bytes here that
//! `auth::codec` encodes. An encoder given the auth state writes version 2: what
//! Maintenance.Snapshot streamed while it streamed this format, so saved files have it. A Raft
//! snapshot's backup is version 1, since the machine state beside it carries the auth state:
//! members of an older mem_etcd still install it, and an older mem_etcd refuses a version-2
//! file by its version rather than by a record it cannot decode.
//!
//! The padding is for etcdctl: it takes a saved file's size modulo 512 being 32 as the sign
//! that a sha256 follows (etcd's bbolt files are page-aligned) and deletes the file otherwise.

use std::fs::{self, File};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::frame::{Bad, Frame, Frames};
use super::record::{self, Record, Version};
use super::snapshot::{PartitionWriter, SnapshotWriter};
use crate::data_dir::{DataDir, sync_dir};

/// First bytes of a backup. Not the WAL's magic: a backup is one file holding every partition,
/// a WAL snapshot file holds one.
pub const MAGIC: &[u8; 8] = b"MEMETCDB";
/// The newest backup format, written when the backup carries the auth state.
pub const VERSION: u32 = 2;
/// The format without the auth state, still written without it (see the format).
const VERSION_NO_AUTH: u32 = 1;
const HEADER_LEN: usize = 16;
/// The data before the checksum is padded to a multiple of this.
pub const ALIGN: u64 = 512;
pub const SHA_LEN: usize = 32;

/// bbolt's meta page magic, at offset 16 of an etcd snapshot (after the page header).
pub const BBOLT_MAGIC: [u8; 4] = 0xED0C_DAEDu32.to_le_bytes();

fn file_header(version: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&version.to_le_bytes());
    h
}

/// Produces a backup's bytes. Call [`partition`](Self::partition) before each partition's
/// [`key`](Self::key)s, then [`lease`](Self::lease)s and [`end`](Self::end); take the bytes
/// produced so far with [`take`](Self::take) whenever convenient. Without `take` (a dry run
/// for the size) the bytes are counted and dropped.
#[derive(Debug)]
pub struct Encoder {
    rev: i64,
    compacted: i64,
    /// Written by [`end`](Self::end); known from the start, since it decides the version.
    auth: Option<Bytes>,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    records: u64,
    /// Bytes produced, including those still in `buf`.
    len: u64,
    /// The sha256 of the bytes produced, up to `buf[..hashed]`.
    sha: Sha256,
    hashed: usize,
}

impl Encoder {
    /// A backup of revision `rev`, compacted at `compacted` (-1 if never), carrying the auth
    /// state `auth` (opaque bytes, see the format) if given.
    pub fn new(rev: i64, compacted: i64, auth: Option<Bytes>) -> Self {
        let version = if auth.is_some() { VERSION } else { VERSION_NO_AUTH };
        let mut e = Self {
            rev,
            compacted,
            auth,
            buf: Vec::new(),
            scratch: Vec::new(),
            records: 0,
            len: 0,
            sha: Sha256::new(),
            hashed: 0,
        };
        e.put_raw(&file_header(version));
        e
    }

    fn put_raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
        self.len += b.len() as u64;
    }

    fn put(&mut self, r: &Record) {
        self.scratch.clear();
        r.encode(&mut self.scratch);
        let before = self.buf.len();
        record::frame(&mut self.buf, &self.scratch);
        self.len += (self.buf.len() - before) as u64;
        self.records += 1;
    }

    /// Starts partition `prefix`'s keys.
    pub fn partition(&mut self, prefix: &Bytes) {
        let (rev, compacted) = (self.rev, self.compacted);
        self.put(&Record::SnapHeader { rev, compacted, meta_seq: 0, prefix: prefix.clone() });
    }

    /// One key's retained versions at or below the revision, oldest first.
    pub fn key(&mut self, key: Bytes, versions: Vec<Version>) {
        self.put(&Record::SnapKey { key, versions });
    }

    /// A lease and its granted TTL.
    pub fn lease(&mut self, id: i64, ttl: i64) {
        self.put(&Record::SnapLease { id, ttl });
    }

    /// A prefix compacted on its own, and its revision (after the leases).
    pub fn floor(&mut self, prefix: &Bytes, rev: i64) {
        self.put(&Record::CompactPrefix { seq: 0, prefix: prefix.clone(), rev });
    }

    /// Ends the records, pads, and appends the checksum: the backup is complete.
    pub fn end(&mut self) {
        if let Some(state) = self.auth.take() {
            self.put(&Record::SnapAuth { state });
        }
        let records = self.records;
        self.put(&Record::SnapEnd { records });
        let pad = (ALIGN - self.len % ALIGN) % ALIGN;
        self.put_raw(&vec![0u8; pad as usize]);
        self.sha.update(&self.buf[self.hashed..]);
        self.hashed = self.buf.len();
        let sum: [u8; SHA_LEN] = self.sha.clone().finalize().into();
        self.put_raw(&sum);
    }

    /// Bytes produced so far: the whole backup once [`end`](Self::end) was called.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes waiting to be taken.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Takes the bytes produced since the last call.
    pub fn take(&mut self) -> Vec<u8> {
        self.sha.update(&self.buf[self.hashed..]);
        self.hashed = 0;
        std::mem::take(&mut self.buf)
    }

    /// Drops the bytes produced since the last call (they still count in [`len`](Self::len)):
    /// for a dry run that only measures.
    pub fn discard(&mut self) {
        self.hashed = 0;
        self.buf.clear();
    }
}

/// Why a backup cannot be read or restored. The text is for an operator.
#[derive(Debug)]
pub struct BackupError(pub String);

impl std::fmt::Display for BackupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BackupError {}

fn err(msg: impl Into<String>) -> BackupError {
    BackupError(msg.into())
}

/// What a backup holds besides its keys.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub rev: i64,
    /// The compaction revision, -1 if none.
    pub compacted: i64,
    /// Keys (with at least one retained version), and versions of them, tombstones included.
    pub keys: u64,
    pub versions: u64,
    /// (id, granted TTL).
    pub leases: Vec<(i64, i64)>,
    /// The prefixes compacted on their own (a tenant's), and their revisions.
    pub floors: Vec<(Bytes, i64)>,
    /// The auth state as `auth::codec` encodes it; `None` from a version-1 backup, which has
    /// none (not an empty one: restoring it leaves the target's auth state as it is).
    pub auth: Option<Bytes>,
    /// The file's size and its sha256 (hex).
    pub size: u64,
    pub sha256: String,
}

/// One thing a backup holds, in file order.
#[derive(Debug)]
pub enum Item {
    /// A partition's keys follow; every partition is of the same revision.
    Partition {
        prefix: Bytes,
        rev: i64,
        compacted: i64,
    },
    Key(Bytes, Vec<Version>),
}

/// Reads the backup at `path`, handing partitions and keys to `visit` in file order. Unless
/// `skip_hash_check`, the sha256 is verified before anything is handed out, so a damaged file
/// is refused before anything was written from it.
pub fn read(
    path: &Path,
    skip_hash_check: bool,
    visit: &mut dyn FnMut(Item) -> Result<(), BackupError>,
) -> Result<Summary, BackupError> {
    read_at(path, 0, skip_hash_check, visit)
}

/// [`read`] of a backup that starts `offset` bytes into the file (a Raft snapshot holds one
/// after its own header).
pub fn read_at(
    path: &Path,
    offset: u64,
    skip_hash_check: bool,
    visit: &mut dyn FnMut(Item) -> Result<(), BackupError>,
) -> Result<Summary, BackupError> {
    let name = path.display();
    let io_err = |e: io::Error| err(format!("{name}: {e}"));
    let mut f = File::open(path).map_err(io_err)?;
    let size = f.metadata().map_err(io_err)?.len().saturating_sub(offset);
    f.seek(SeekFrom::Start(offset)).map_err(io_err)?;
    let mut head = [0u8; 20];
    let got = read_up_to(&mut f, &mut head).map_err(io_err)?;
    if got == head.len() && head[16..20] == BBOLT_MAGIC {
        return Err(err(format!(
            "{name} is a snapshot of etcd (a bbolt database), not of mem_etcd: turn it into a \
             data directory with `mem_etcd snapshot restore`"
        )));
    }
    if got < 12 || head[..8] != MAGIC[..] {
        return Err(err(format!(
            "{name} is not a snapshot: neither an etcd snapshot.db (bbolt) nor a backup an older \
             mem_etcd saved (no {MAGIC:?} header)"
        )));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if !(VERSION_NO_AUTH..=VERSION).contains(&version) {
        return Err(err(format!(
            "{name} is a mem_etcd snapshot of format version {version}; this mem_etcd reads \
             versions {VERSION_NO_AUTH} to {VERSION}"
        )));
    }
    let with_auth = version >= VERSION;
    let data_len = size.saturating_sub(SHA_LEN as u64);
    let has_sha = size >= (HEADER_LEN + SHA_LEN) as u64 && data_len % ALIGN == 0;
    let mut sha256 = String::new();
    if !skip_hash_check {
        if !has_sha {
            return Err(err(format!(
                "{name} is truncated or damaged: its size ({size} bytes) is not a multiple of \
                 {ALIGN} plus the 32-byte sha256 a complete snapshot ends with"
            )));
        }
        f.seek(SeekFrom::Start(offset)).map_err(io_err)?;
        let mut r = BufReader::with_capacity(1 << 20, (&mut f).take(data_len));
        let mut sha = Sha256::new();
        io::copy(&mut r, &mut sha).map_err(io_err)?;
        let mut want = [0u8; SHA_LEN];
        f.seek(SeekFrom::Start(offset + data_len)).map_err(io_err)?;
        f.read_exact(&mut want).map_err(io_err)?;
        let got: [u8; SHA_LEN] = sha.finalize().into();
        if got != want {
            return Err(err(format!(
                "{name} is damaged or truncated: the sha256 of its content is {}, its last 32 \
                 bytes say {} (use --skip-hash-check to read it anyway)",
                hex(&got),
                hex(&want)
            )));
        }
        sha256 = hex(&got);
    }
    f.seek(SeekFrom::Start(offset + HEADER_LEN as u64)).map_err(io_err)?;
    let r = BufReader::with_capacity(1 << 20, f);
    let mut out = Summary { rev: -1, size, sha256, ..Default::default() };
    let mut frames = Frames::new(r, HEADER_LEN as u64);
    let mut count = 0u64;
    let at = |offset: u64, what: String| err(format!("{name}: at offset {offset}: {what}"));
    loop {
        let offset = frames.offset();
        let rec = match frames.next(Record::decode).map_err(io_err)? {
            Frame::Good(rec) => rec,
            Frame::End | Frame::Short => return Err(at(offset, "the snapshot ends early".into())),
            Frame::Bad(Bad::Checksum) => return Err(at(offset, "record checksum mismatch".into())),
            Frame::Bad(bad) => return Err(at(offset, bad.to_string())),
        };
        match rec {
            Record::SnapHeader { rev, compacted, prefix, .. } => {
                if out.rev >= 0 && (rev, compacted) != (out.rev, out.compacted) {
                    return Err(at(offset, "partitions of different revisions".into()));
                }
                (out.rev, out.compacted) = (rev, compacted);
                visit(Item::Partition { prefix, rev, compacted })?;
            }
            Record::SnapKey { key, versions }
                if out.rev >= 0
                    && out.leases.is_empty()
                    && out.floors.is_empty()
                    && out.auth.is_none() =>
            {
                out.keys += 1;
                out.versions += versions.len() as u64;
                visit(Item::Key(key, versions))?;
            }
            Record::SnapLease { id, ttl }
                if out.rev >= 0 && out.floors.is_empty() && out.auth.is_none() =>
            {
                out.leases.push((id, ttl))
            }
            Record::CompactPrefix { prefix, rev, .. } if out.rev >= 0 && out.auth.is_none() => {
                out.floors.push((prefix, rev))
            }
            Record::SnapAuth { state } if with_auth && out.rev >= 0 && out.auth.is_none() => {
                out.auth = Some(state)
            }
            Record::SnapEnd { records } if records == count && out.rev >= 0 => {
                if with_auth && out.auth.is_none() {
                    return Err(at(offset, "no auth state in a version-2 snapshot".into()));
                }
                return Ok(out);
            }
            other => return Err(at(offset, format!("unexpected record {}", kind(&other)))),
        }
        count += 1;
    }
}

fn kind(r: &Record) -> &'static str {
    match r {
        Record::SnapHeader { .. } => "partition header",
        Record::SnapKey { .. } => "key",
        Record::SnapLease { .. } => "lease",
        Record::CompactPrefix { .. } => "prefix compaction",
        Record::SnapAuth { .. } => "auth state",
        Record::SnapEnd { .. } => "end (with a wrong record count)",
        _ => "of the WAL",
    }
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Writes the backup at `file` as a new data directory `dir` (which must not exist or be
/// empty): a WAL snapshot at the backup's revision, from which `mem_etcd --data-dir dir`
/// recovers every key, version and lease and continues after the revision. `auth` writes the
/// backup's auth state, if it has one, into the directory (where it goes is the server's
/// business). On failure nothing is left in `dir`.
pub fn restore(
    file: &Path,
    dir: &Path,
    skip_hash_check: bool,
    auth: &dyn Fn(&Path, &Bytes) -> io::Result<()>,
) -> Result<Summary, BackupError> {
    into_new_dir(dir, &mut |dir| {
        let summary = restore_into(file, dir, skip_hash_check)?;
        if let Some(state) = &summary.auth {
            auth(dir, state).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        }
        Ok(summary)
    })
}

/// Runs `fill` on data directory `dir`, which must not exist or be empty; if it fails, leaves
/// nothing in `dir`.
pub fn into_new_dir(
    dir: &Path,
    fill: &mut dyn FnMut(&Path) -> Result<Summary, BackupError>,
) -> Result<Summary, BackupError> {
    let created = !dir.exists();
    if !created {
        let mut entries = fs::read_dir(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        if entries.next().is_some() {
            return Err(err(format!(
                "data dir {} is not empty: restore into a new or empty directory",
                dir.display()
            )));
        }
    }
    let result = fill(dir);
    if result.is_err() {
        // Best effort: what is left is an incomplete data directory nothing should start on.
        if created {
            let _ = fs::remove_dir_all(dir);
        } else if let Ok(entries) = fs::read_dir(dir) {
            for e in entries.flatten() {
                let p = e.path();
                let _ = if p.is_dir() { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
            }
        }
    }
    result
}

/// Writes a data directory holding `keys` (each with its retained versions, oldest first) and
/// `leases` at revision `rev`, compacted at `compacted` (-1 if never): what a backup read from
/// another format restores to. Call it through [`into_new_dir`].
pub fn write_data_dir(
    dir: &Path,
    rev: i64,
    compacted: i64,
    keys: &mut dyn Iterator<Item = (Bytes, Vec<Version>)>,
    leases: &[(i64, i64)],
) -> Result<(), BackupError> {
    let io_err = |e: io::Error| err(format!("{}: {e}", dir.display()));
    let data_dir = DataDir::new(dir);
    let _lock = super::lock_dir(&data_dir).map_err(io_err)?;
    let w = SnapshotWriter::new(&data_dir, rev, compacted, 0).map_err(io_err)?;
    // Recovery puts every key in its partition whatever the file it comes from; one file is
    // enough.
    let mut part = w.partition(&Bytes::new()).map_err(io_err)?;
    for (key, versions) in keys {
        part.key(key, versions).map_err(io_err)?;
    }
    part.finish().map_err(io_err)?;
    w.leases(leases, &[]).map_err(io_err)?;
    w.commit_new().map_err(io_err)?;
    sync_dir(dir).map_err(io_err)
}

fn restore_into(file: &Path, dir: &Path, skip_hash_check: bool) -> Result<Summary, BackupError> {
    let io_err = |e: io::Error| err(format!("{}: {e}", dir.display()));
    // Opened at the first header (which carries the revision), so that a file refused before
    // it (not a backup, a bad checksum) leaves nothing behind.
    let mut out: Option<(std::fs::File, SnapshotWriter)> = None;
    let mut seen = std::collections::HashSet::new();
    let mut part: Option<PartitionWriter> = None;
    let summary = read(file, skip_hash_check, &mut |item| {
        match item {
            Item::Partition { prefix, rev, compacted } => {
                if out.is_none() {
                    let data_dir = DataDir::new(dir);
                    let lock = super::lock_dir(&data_dir).map_err(io_err)?;
                    let w = SnapshotWriter::new(&data_dir, rev, compacted, 0).map_err(io_err)?;
                    out = Some((lock, w));
                }
                if let Some(p) = part.take() {
                    p.finish().map_err(io_err)?;
                }
                if !seen.insert(prefix.clone()) {
                    return Err(err(format!("partition {prefix:?} appears twice")));
                }
                let (_, w) = out.as_ref().expect("opened above");
                part = Some(w.partition(&prefix).map_err(io_err)?);
            }
            Item::Key(key, versions) => {
                let p = part.as_mut().expect("read() hands out keys only after a header");
                p.key(key, versions).map_err(io_err)?;
            }
        }
        Ok(())
    })?;
    if let Some(p) = part.take() {
        p.finish().map_err(io_err)?;
    }
    let (_lock, w) = out.expect("read() fails on a backup without a header");
    w.leases(&summary.leases, &summary.floors).map_err(io_err)?;
    w.commit_new().map_err(io_err)?;
    sync_dir(dir).map_err(io_err)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(main: i64, value: &'static [u8]) -> Version {
        let version = if value.is_empty() { 0 } else { 1 };
        Version { main, sub: 0, create_rev: main, version, lease: 0, value: Bytes::from(value) }
    }

    /// A backup at revision 9 of two partitions and a lease, as one byte string; with the
    /// auth state `auth` if given.
    fn sample_with(auth: Option<&'static [u8]>) -> Vec<u8> {
        let mut e = Encoder::new(9, 4, auth.map(Bytes::from_static));
        let mut out = Vec::new();
        e.partition(&Bytes::new());
        e.key(Bytes::from_static(b"a"), vec![v(3, b"x"), v(5, b"")]);
        out.extend(e.take());
        e.partition(&Bytes::from_static(b"/registry/pods/"));
        e.key(Bytes::from_static(b"/registry/pods/p"), vec![v(9, b"y")]);
        e.lease(7, 60);
        e.end();
        let len = e.len();
        out.extend(e.take());
        assert_eq!(out.len() as u64, len);
        out
    }

    /// [`sample_with`] without auth state: the format before auth state (version 1).
    fn sample() -> Vec<u8> {
        sample_with(None)
    }

    const AUTH: &[u8] = b"\x08\x01\x10\x07 opaque auth state";

    fn file(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    fn read_all(path: &Path, skip: bool) -> Result<(Summary, Vec<String>), BackupError> {
        let mut items = Vec::new();
        let s = read(path, skip, &mut |i| {
            items.push(match i {
                Item::Partition { prefix, .. } => format!("part {prefix:?}"),
                Item::Key(k, vs) => format!("key {k:?} {}", vs.len()),
            });
            Ok(())
        })?;
        Ok((s, items))
    }

    #[test]
    fn a_backup_reads_back_and_ends_with_its_sha256_after_padding_to_512() {
        let bytes = sample();
        assert_eq!(bytes.len() % 512, 32, "etcdctl recognises the checksum by this");
        let body = &bytes[..bytes.len() - 32];
        assert_eq!(&bytes[bytes.len() - 32..], &Sha256::digest(body)[..]);
        let (_d, path) = file(&bytes);
        let (s, items) = read_all(&path, false).unwrap();
        assert_eq!((s.rev, s.compacted, s.keys, s.versions), (9, 4, 2, 3));
        assert_eq!(s.leases, vec![(7, 60)]);
        assert_eq!(s.sha256, hex(&Sha256::digest(body)));
        assert_eq!(items.len(), 4, "{items:?}");
    }

    #[test]
    fn damaged_truncated_and_foreign_files_are_refused() {
        let good = sample();
        let mut flipped = good.clone();
        flipped[40] ^= 1;
        let (_d, path) = file(&flipped);
        let e = read_all(&path, false).unwrap_err().0;
        assert!(e.contains("is damaged or truncated: the sha256"), "{e}");
        // Without the hash check, the record's own checksum still catches it.
        let e = read_all(&path, true).unwrap_err().0;
        assert!(e.contains("checksum mismatch"), "{e}");

        for cut in [good.len() - 1, good.len() - 32, 40, 10] {
            let (_d, path) = file(&good[..cut]);
            let e = read_all(&path, false).unwrap_err().0;
            assert!(e.contains("truncated") || e.contains("is not a snapshot"), "{cut}: {e}");
            // Without the hash check only a cut into the records is noticed.
            let skipped = read_all(&path, true);
            match cut {
                10 => assert!(skipped.unwrap_err().0.contains("is not a snapshot")),
                40 => assert!(skipped.unwrap_err().0.contains("ends early")),
                _ => assert_eq!(skipped.unwrap().0.rev, 9),
            }
        }

        let mut bolt = vec![0u8; 4096 * 4 + 32];
        bolt[16..20].copy_from_slice(&BBOLT_MAGIC);
        let (_d, path) = file(&bolt);
        let e = read_all(&path, false).unwrap_err().0;
        assert!(e.contains("is a snapshot of etcd (a bbolt database)"), "{e}");

        let e = error_as_version(good, 3);
        assert!(e.contains("format version 3"), "{e}");
    }

    /// The error reading `bytes` with their format version replaced by `version` (the hash
    /// check skipped: the sha256 no longer matches).
    fn error_as_version(mut bytes: Vec<u8>, version: u8) -> String {
        bytes[8] = version;
        let (_d, path) = file(&bytes);
        read_all(&path, true).unwrap_err().0
    }

    #[test]
    fn the_auth_state_makes_a_version_2_backup_and_reads_back_as_written() {
        let bytes = sample_with(Some(AUTH));
        assert_eq!(bytes[8..12], 2u32.to_le_bytes());
        assert_eq!(bytes.len() % 512, 32);
        let (_d, path) = file(&bytes);
        let (s, items) = read_all(&path, false).unwrap();
        assert_eq!(s.auth.as_deref(), Some(AUTH));
        assert_eq!((s.rev, s.compacted, s.keys, s.versions), (9, 4, 2, 3));
        assert_eq!(s.leases, vec![(7, 60)]);
        assert_eq!(items.len(), 4, "{items:?}");

        // Without it: version 1, the format older versions write and read.
        let old = sample();
        assert_eq!(old[8..12], 1u32.to_le_bytes());
        let (_d, path) = file(&old);
        let (s, _) = read_all(&path, false).unwrap();
        assert_eq!((s.rev, s.keys, s.auth), (9, 2, None));
    }

    #[test]
    fn the_auth_state_is_where_its_version_says_or_the_backup_is_refused() {
        // Version 2 without the record: a backup that lost its auth state.
        let e = error_as_version(sample(), 2);
        assert!(e.contains("no auth state in a version-2 snapshot"), "{e}");
        let e = error_as_version(sample_with(Some(AUTH)), 1);
        assert!(e.contains("unexpected record auth state"), "{e}");
    }

    #[test]
    fn restore_hands_the_auth_state_to_its_writer_only_if_the_backup_has_one() {
        let write = |dir: &Path, state: &Bytes| fs::write(dir.join("auth"), state);
        let (d, path) = file(&sample_with(Some(AUTH)));
        let target = d.path().join("data");
        let s = restore(&path, &target, false, &write).unwrap();
        assert_eq!(s.auth.as_deref(), Some(AUTH));
        assert_eq!(fs::read(target.join("auth")).unwrap(), AUTH);

        let (d, path) = file(&sample());
        let target = d.path().join("data");
        restore(&path, &target, false, &write).unwrap();
        assert!(!target.join("auth").exists());

        // A writer that fails fails the restore, which leaves nothing.
        let (d, path) = file(&sample_with(Some(AUTH)));
        let target = d.path().join("data");
        let e =
            restore(&path, &target, false, &|_, _| Err(io::Error::other("no room"))).unwrap_err();
        assert!(e.0.contains("no room"), "{e}");
        assert!(!target.exists());
    }

    #[test]
    fn restore_wants_an_empty_dir_and_leaves_nothing_when_it_fails() {
        let (d, path) = file(&sample());
        let target = d.path().join("data");
        let none = |_: &Path, _: &Bytes| unreachable!("no auth state in this backup");
        let s = restore(&path, &target, false, &none).unwrap();
        assert_eq!(s.rev, 9);
        let e = restore(&path, &target, false, &none).unwrap_err().0;
        assert!(e.contains("is not empty"), "{e}");

        let mut bad = sample();
        let n = bad.len();
        bad[n - 1] ^= 1;
        let (d, path) = file(&bad);
        let target = d.path().join("data");
        assert!(restore(&path, &target, false, &none).is_err());
        assert!(!target.exists());
        // A bad record found only while writing (the hash check skipped).
        let mut bad = sample();
        bad[60] ^= 1;
        fs::write(&path, &bad).unwrap();
        fs::create_dir(&target).unwrap();
        assert!(restore(&path, &target, true, &none).is_err());
        assert_eq!(fs::read_dir(&target).unwrap().count(), 0);
    }
}
