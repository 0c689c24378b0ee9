//! Snapshots: the whole retained state at one revision, so that restart time and disk use
//! follow the live data instead of every write ever made.
//!
//! A snapshot is a directory `snap/<revision>/` with one file per partition (`<stream>.snap`:
//! a header, every key's retained versions at or below the revision, an end record with the
//! record count) and `leases.snap`. It is written as `<revision>.tmp` and renamed when every
//! file is synced, so a directory without `.tmp` is complete. After the rename, older
//! snapshots and the WAL segments that hold only revisions (meta records) it covers are
//! deleted.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::frame::{Frame, Frames};
use super::record::{self, FILE_HEADER_LEN, FRAME_LEN, Record, Version};
use super::segment::{self, META_STREAM, stream_name};
use super::{RecoverError, Wal};
use crate::data_dir::{DataDir, sync_dir};

const LEASES_FILE: &str = "leases.snap";

/// The newest complete snapshot directory.
pub fn newest(dir: &DataDir) -> io::Result<Option<PathBuf>> {
    Ok(list(dir)?.pop().map(|(_, p)| p))
}

/// Complete snapshot directories, oldest first.
fn list(dir: &DataDir) -> io::Result<Vec<(i64, PathBuf)>> {
    let snap = dir.snapshots();
    let mut out = Vec::new();
    if !snap.exists() {
        return Ok(out);
    }
    for e in fs::read_dir(&snap)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Ok(rev) = u64::from_str_radix(name, 16) {
            out.push((rev as i64, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// What a snapshot says besides its keys.
#[derive(Debug, Default)]
pub struct Header {
    pub rev: i64,
    pub compacted: i64,
    pub meta_seq: u64,
    pub leases: Vec<(i64, i64)>,
    /// The prefixes compacted on their own, and their revisions (in the leases file).
    pub floors: Vec<(Bytes, i64)>,
}

/// Loads a snapshot directory, handing every key to `key` (prefix, key, versions). The files
/// (one per partition) are read in parallel, one per core at most, largest first (the largest
/// file bounds the load: started last, it would run on alone), so `key` is called from
/// several threads at once, each file's keys from one thread in the file's order.
pub fn load(
    dir: &Path,
    key: &(dyn Fn(&Bytes, Bytes, Vec<Version>) + Sync),
) -> Result<Header, RecoverError> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| RecoverError::Io(dir.into(), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "snap"))
        .collect();
    let size = |p: &PathBuf| fs::metadata(p).map_or(0, |m| m.len());
    files.sort_by_cached_key(|p| std::cmp::Reverse(size(p)));
    let loaded = on_each_core(&files, |path| load_file(path, key));
    let mut header = Header { rev: -1, ..Default::default() };
    for one in loaded {
        let one = one?;
        header.leases.extend(one.leases);
        header.floors.extend(one.floors);
        if one.rev < 0 {
            continue;
        }
        if header.rev >= 0 && header.rev != one.rev {
            return Err(RecoverError::Corrupt {
                path: dir.into(),
                offset: 0,
                reason: format!("a file says revision {}, others {}", one.rev, header.rev),
            });
        }
        header.rev = one.rev;
        header.compacted = one.compacted;
        header.meta_seq = one.meta_seq;
    }
    if header.rev < 0 {
        return Err(RecoverError::Corrupt {
            path: dir.into(),
            offset: 0,
            reason: "snapshot without files".into(),
        });
    }
    Ok(header)
}

/// Runs `f` on every item, an item at a time on each core, in the items' order: recovery's
/// work that splits by partition (a snapshot's files, a restored store's partitions). The
/// results come in the order the items finished.
pub fn on_each_core<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = parking_lot::Mutex::new(Vec::with_capacity(items.len()));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..cores.min(items.len()) {
            scope.spawn(|| {
                while let Some(item) =
                    items.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    let r = f(item);
                    done.lock().push(r);
                }
            });
        }
    });
    done.into_inner()
}

/// One snapshot file: its keys to `key`, its header (and, for the leases file, the leases)
/// returned.
fn load_file(
    path: &Path,
    key: &(dyn Fn(&Bytes, Bytes, Vec<Version>) + Sync),
) -> Result<Header, RecoverError> {
    let mut header = Header { rev: -1, ..Default::default() };
    let is_leases = path.file_name().is_some_and(|n| n == LEASES_FILE);
    let mut prefix = Bytes::new();
    read_snapshot_file(path, &mut |r| {
        match r {
            Record::SnapHeader { rev, compacted, meta_seq, prefix: p } => {
                header.rev = rev;
                header.compacted = compacted;
                header.meta_seq = meta_seq;
                prefix = p;
            }
            Record::SnapKey { key: k, versions } if !is_leases => key(&prefix, k, versions),
            Record::SnapLease { id, ttl } if is_leases => header.leases.push((id, ttl)),
            Record::CompactPrefix { prefix, rev, .. } if is_leases => {
                header.floors.push((prefix, rev))
            }
            other => return Err(format!("unexpected record {other:?}")),
        }
        Ok(())
    })?;
    Ok(header)
}

/// Streams a snapshot file's records (between its header and end record) to `f`.
fn read_snapshot_file(
    path: &Path,
    f: &mut dyn FnMut(Record) -> Result<(), String>,
) -> Result<(), RecoverError> {
    let corrupt = |offset: u64, reason: String| RecoverError::Corrupt {
        path: path.to_path_buf(),
        offset,
        reason,
    };
    let file = File::open(path).map_err(|e| RecoverError::Io(path.into(), e))?;
    // A second handle, to drop what was read from the page cache as the read goes on (see
    // `segment::read_file_with`): a snapshot is about the store's size.
    let advise = file.try_clone().ok();
    let mut dropped = 0;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut head = [0u8; FILE_HEADER_LEN as usize];
    r.read_exact(&mut head).map_err(|e| corrupt(0, e.to_string()))?;
    if head != record::file_header() {
        return Err(corrupt(0, "not a mem_etcd snapshot of this format version".into()));
    }
    let mut frames = Frames::new(r, FILE_HEADER_LEN);
    let mut count = 0u64;
    loop {
        let offset = frames.offset();
        if let Some(len) =
            std::num::NonZeroU64::new(offset - dropped).filter(|n| n.get() >= 64 << 20)
            && let Some(a) = &advise
        {
            let _ = rustix::fs::fadvise(a, dropped, Some(len), rustix::fs::Advice::DontNeed);
            dropped = offset;
        }
        let rec = match frames.next(Record::decode) {
            Ok(Frame::Good(rec)) => rec,
            Ok(Frame::End | Frame::Short) => {
                return Err(corrupt(offset, "snapshot ends early".into()));
            }
            Ok(Frame::Bad(bad)) => return Err(corrupt(offset, bad.to_string())),
            Err(e) => return Err(RecoverError::Io(path.into(), e)),
        };
        if let Record::SnapEnd { records } = rec {
            if records != count {
                return Err(corrupt(offset, format!("{count} records, end says {records}")));
            }
            return Ok(());
        }
        f(rec).map_err(|e| corrupt(offset, e))?;
        count += 1;
    }
}

/// Writes one snapshot: [`partition`](Self::partition) per partition, [`leases`](Self::leases),
/// then [`commit`](Self::commit).
#[derive(Debug)]
pub struct SnapshotWriter {
    tmp: PathBuf,
    done: PathBuf,
    rev: i64,
    compacted: i64,
    meta_seq: u64,
    /// When it started, to time it.
    started: std::time::Instant,
}

/// One partition's snapshot file being written.
#[derive(Debug)]
pub struct PartitionWriter {
    out: BufWriter<File>,
    records: u64,
    scratch: Vec<u8>,
}

impl SnapshotWriter {
    /// Starts a snapshot of the state at `rev` covering meta records up to `meta_seq`.
    pub fn new(data_dir: &DataDir, rev: i64, compacted: i64, meta_seq: u64) -> io::Result<Self> {
        let snap = data_dir.snapshots();
        fs::create_dir_all(&snap)?;
        let name = format!("{:016x}", rev as u64);
        let tmp = snap.join(format!("{name}.tmp"));
        if tmp.exists() {
            fs::remove_dir_all(&tmp)?;
        }
        fs::create_dir(&tmp)?;
        let started = std::time::Instant::now();
        Ok(Self { tmp, done: snap.join(name), rev, compacted, meta_seq, started })
    }

    fn file(&self, name: &str, prefix: &Bytes) -> io::Result<PartitionWriter> {
        let f = File::create(self.tmp.join(name))?;
        let mut w = PartitionWriter {
            out: BufWriter::with_capacity(1 << 20, f),
            records: 0,
            scratch: Vec::new(),
        };
        w.out.write_all(&record::file_header())?;
        let h = Record::SnapHeader {
            rev: self.rev,
            compacted: self.compacted,
            meta_seq: self.meta_seq,
            prefix: prefix.clone(),
        };
        w.write(&h)?;
        Ok(w)
    }

    /// The file for partition `prefix`.
    pub fn partition(&self, prefix: &Bytes) -> io::Result<PartitionWriter> {
        self.file(&format!("{}.snap", stream_name(prefix)), prefix)
    }

    /// Writes the leases, (id, granted TTL), and the prefixes compacted on their own,
    /// (prefix, revision), in the file of their own.
    pub fn leases(&self, leases: &[(i64, i64)], floors: &[(Bytes, i64)]) -> io::Result<()> {
        let mut w = self.file(LEASES_FILE, &Bytes::new())?;
        for &(id, ttl) in leases {
            w.write(&Record::SnapLease { id, ttl })?;
        }
        for (prefix, rev) in floors {
            w.write(&Record::CompactPrefix { seq: 0, prefix: prefix.clone(), rev: *rev })?;
        }
        w.finish()
    }

    /// Makes the snapshot complete in a data directory that has no log yet (one being restored
    /// from a backup): synced, then renamed into place.
    pub fn commit_new(self) -> io::Result<()> {
        sync_dir(&self.tmp)?;
        fs::rename(&self.tmp, &self.done)?;
        sync_dir(self.done.parent().expect("snap dir"))
    }

    /// Makes the snapshot the one recovery uses, then deletes what it makes redundant: older
    /// snapshots and WAL segments holding only revisions (meta records) it covers.
    pub fn commit(self, wal: &Wal) -> io::Result<()> {
        let syncing = std::time::Instant::now();
        sync_dir(&self.tmp)?;
        fs::rename(&self.tmp, &self.done)?;
        let snap = self.done.parent().expect("snap dir");
        sync_dir(snap)?;
        let stats = &wal.stats.snapshots;
        stats.fsync_seconds.observe(syncing.elapsed().as_secs_f64());
        stats.save_seconds.observe(self.started.elapsed().as_secs_f64());
        for (rev, path) in list(&wal.options().dir)? {
            if rev < self.rev {
                fs::remove_dir_all(path)?;
            }
        }
        // Snapshots a crash interrupted (never renamed, so never used).
        for e in fs::read_dir(snap)? {
            let path = e?.path();
            if path.extension().is_some_and(|x| x == "tmp") {
                fs::remove_dir_all(path)?;
            }
        }
        let waldir = wal.options().dir.wal();
        let mut removed = 0;
        for e in fs::read_dir(&waldir)? {
            let dir = e?.path();
            let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            let covered = if name == META_STREAM { self.meta_seq as i64 } else { self.rev };
            let segs = segment::list_segments(&dir)?;
            for pair in segs.windows(2) {
                // Every record of a segment comes before the next segment's first one.
                if pair[1].first <= covered + 1 {
                    fs::remove_file(&pair[0].path)?;
                    removed += 1;
                }
            }
        }
        tracing::info!(revision = self.rev, removed_segments = removed, "wal: snapshot written");
        Ok(())
    }
}

impl PartitionWriter {
    fn write(&mut self, r: &Record) -> io::Result<()> {
        self.scratch.clear();
        r.encode(&mut self.scratch);
        let mut framed = Vec::with_capacity(self.scratch.len() + FRAME_LEN);
        record::frame(&mut framed, &self.scratch);
        self.out.write_all(&framed)?;
        self.records += 1;
        Ok(())
    }

    /// One key and its retained versions at or below the snapshot revision, oldest first.
    pub fn key(&mut self, key: Bytes, versions: Vec<Version>) -> io::Result<()> {
        self.write(&Record::SnapKey { key, versions })
    }

    /// Ends and syncs the file.
    pub fn finish(mut self) -> io::Result<()> {
        let end = Record::SnapEnd { records: self.records };
        self.write(&end)?;
        let f = self.out.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()
    }
}
