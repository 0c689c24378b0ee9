//! Recovery: the newest complete snapshot, then every logged revision after it, merged across
//! streams in revision order and cut at the first revision that is not complete.
//!
//! A revision is complete when its records from every partition it wrote to are present (each
//! record says how many there are). Revisions are contiguous (every revision logs at least one
//! record, even if all its keys are excluded), so the recovered state is the state of exactly
//! one revision R: nothing after a missing or partial revision is applied, and the records
//! beyond R are truncated away so that the revisions written next cannot meet them.

use std::collections::VecDeque;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Instant;

use bytes::Bytes;

use super::RecoverError;
use super::record::{self, FILE_HEADER_LEN, Op, Record, Version};
use super::segment::{self, End, META_STREAM, SegmentFile};
use super::snapshot;
use crate::data_dir::DataDir;

/// Where recovered state goes (the store). Calls come in this order: snapshot keys, then
/// revisions. Partitions are independent, so calls for different partitions come from several
/// threads at once; one partition's calls come from one thread at a time, in order.
pub trait Replay: Sync {
    /// A key's retained versions from the snapshot, oldest first.
    fn snapshot_key(&self, prefix: &Bytes, key: Bytes, versions: Vec<Version>);
    /// One partition's changes in revision `rev`, after its changes in every earlier revision.
    fn txn(&self, prefix: &Bytes, rev: i64, ops: Vec<Op>);
}

/// Revisions handed to an applier thread at once: few enough that the appliers start while
/// the log is still being read, many enough that the handing over costs nothing per revision.
const APPLY_BATCH: usize = 512;

/// What recovery found besides the keys.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The recovered revision (1 for an empty log, as etcd starts).
    pub rev: i64,
    /// The compaction revision (-1 if none).
    pub compacted: i64,
    /// The prefixes compacted on their own (`Record::CompactPrefix`), each at its newest
    /// revision, in prefix order.
    pub floors: Vec<(Bytes, i64)>,
    /// Live leases: (id, granted TTL).
    pub leases: Vec<(i64, i64)>,
    /// The last meta sequence number seen.
    pub meta_seq: u64,
    /// Revision records replayed, and bytes of log read.
    pub records: u64,
    pub bytes: u64,
}

fn io_err(p: &Path) -> impl FnOnce(io::Error) -> RecoverError + '_ {
    move |e| RecoverError::Io(p.to_path_buf(), e)
}

/// A stream's records above the snapshot, in order, a segment at a time, from its reader.
struct Cursor<'scope> {
    /// Every segment of the stream, oldest first (the cut removes the ones after `current`).
    segments: Vec<SegmentFile>,
    /// The stream's reader: one segment's records per message, in order.
    chunks: Receiver<Result<Chunk, RecoverError>>,
    /// The reader's thread, joined before the cut touches the stream's files.
    reader: Option<std::thread::ScopedJoinHandle<'scope, ()>>,
    /// Records of the current segment not yet consumed, with their offsets.
    records: VecDeque<Record4>,
    /// Index in `segments` of the segment the records come from.
    current: Option<usize>,
    /// The stream's applier (a thread of its own), and the revisions waiting to be handed
    /// to it.
    apply: SyncSender<ApplyBatch>,
    pending: ApplyBatch,
}

/// A revision's record in a stream: offset in its segment, revision, partitions the revision
/// wrote to, operations.
type Record4 = (u64, i64, u32, Vec<Op>);

/// Revisions handed to a stream's applier: (revision, operations).
type ApplyBatch = Vec<(i64, Vec<Op>)>;

/// One segment's records as its stream's reader hands them over.
struct Chunk {
    segment: usize,
    records: Vec<Record4>,
    bytes: u64,
}

/// Reads one stream's segments in a thread of its own, ahead of the merge by one segment,
/// handling each segment's end as `read_segment` does (a repaired stream ends at its cut).
fn read_stream(
    segments: Vec<SegmentFile>,
    base: i64,
    repair: bool,
    to: SyncSender<Result<Chunk, RecoverError>>,
) {
    let mut rest: VecDeque<_> = segments.into();
    let mut segment = 0;
    let buffers = segment::Buffers::default();
    while let Some(seg) = rest.pop_front() {
        let mut counted = Recovered::default();
        let chunk = read_segment(&seg, rest.is_empty(), repair, &mut counted, &buffers).and_then(
            |(read, stop)| {
                if stop {
                    drop_segments(&mut rest)?;
                }
                let records = read
                    .into_iter()
                    .filter_map(|(off, r)| match r {
                        Record::Txn { rev, parts, ops } if rev > base => {
                            Some((off, rev, parts, ops))
                        }
                        _ => None,
                    })
                    .collect();
                Ok(Chunk { segment, records, bytes: counted.bytes })
            },
        );
        let failed = chunk.is_err();
        // The merge stops listening once it has cut the log: nothing more to read then.
        if to.send(chunk).is_err() || failed {
            return;
        }
        segment += 1;
    }
}

/// Reads a data directory into `replay`.
///
/// Each partition's stream is read in a thread of its own and applied in another; this thread
/// merges their records by revision and decides which revisions are complete. A thread per
/// stream, not per core, so that the kernel spreads the streams' unequal work over the cores:
/// at 10M Kubernetes objects, 5M Events and 0.6M Nodes of 10 KB cost far from the same, and
/// two appliers (one per core) with two streams each left one doing most of the work.
pub fn recover(
    dir: &DataDir,
    repair: bool,
    replay: &dyn Replay,
) -> Result<Recovered, RecoverError> {
    std::thread::scope(|scope| recover_with(scope, dir, repair, replay))
}

fn recover_with<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    dir: &DataDir,
    repair: bool,
    replay: &'scope dyn Replay,
) -> Result<Recovered, RecoverError> {
    let started = Instant::now();
    let mut out = Recovered { rev: 1, compacted: -1, ..Default::default() };
    let mut leases = std::collections::BTreeMap::new();
    let mut floors = std::collections::BTreeMap::<Bytes, i64>::new();
    let mut floor = |prefix: Bytes, rev: i64| {
        let f = floors.entry(prefix).or_insert(rev);
        *f = (*f).max(rev);
    };

    // 1. The newest complete snapshot.
    let snap = snapshot::newest(dir).map_err(io_err(dir.path()))?;
    let mut base = 1;
    if let Some(s) = &snap {
        let h =
            snapshot::load(s, &|prefix, key, versions| replay.snapshot_key(prefix, key, versions))?;
        base = h.rev;
        out.rev = h.rev;
        out.compacted = h.compacted;
        out.meta_seq = h.meta_seq;
        leases.extend(h.leases);
        h.floors.into_iter().for_each(|(p, r)| floor(p, r));
        tracing::info!(revision = h.rev, path = %s.display(), "wal: loaded snapshot");
    }
    let snap_meta_seq = out.meta_seq;

    // 2. Meta records after the snapshot: leases and compactions.
    let wal = dir.wal();
    let meta_dir = wal.join(META_STREAM);
    if meta_dir.exists() {
        let mut segs: VecDeque<_> =
            segment::list_segments(&meta_dir).map_err(io_err(&meta_dir))?.into();
        let buffers = segment::Buffers::default();
        while let Some(s) = segs.pop_front() {
            let (records, stop) = read_segment(&s, segs.is_empty(), repair, &mut out, &buffers)?;
            for (_, r) in records {
                match r {
                    Record::LeaseGrant { seq, id, ttl } if seq > snap_meta_seq => {
                        leases.insert(id, ttl);
                    }
                    Record::LeaseRevoke { seq, id } if seq > snap_meta_seq => {
                        leases.remove(&id);
                    }
                    Record::Compact { seq, rev } if seq > snap_meta_seq => {
                        out.compacted = out.compacted.max(rev);
                    }
                    Record::CompactPrefix { seq, ref prefix, rev } if seq > snap_meta_seq => {
                        floor(prefix.clone(), rev);
                    }
                    _ => {}
                }
                if let Some(seq) = meta_seq_of(&r) {
                    out.meta_seq = out.meta_seq.max(seq);
                }
            }
            if stop {
                drop_segments(&mut segs)?;
            }
        }
    }

    // 3. Partition streams, merged by revision.
    let mut cursors = Vec::new();
    if wal.exists() {
        for e in fs::read_dir(&wal).map_err(io_err(&wal))? {
            let e = e.map_err(io_err(&wal))?;
            let name = e.file_name().to_string_lossy().to_string();
            let Some(prefix) = segment::stream_prefix(&name) else { continue };
            let segs = segment::list_segments(&e.path()).map_err(io_err(&e.path()))?;
            // Each stream is read in a thread of its own, a segment ahead of the merge.
            let (to, chunks) = sync_channel(1);
            let mine = segs.clone();
            // Named, for per-thread profiles of a restart.
            let reader = std::thread::Builder::new()
                .name(format!("wal-read-{}", cursors.len()))
                .spawn_scoped(scope, move || read_stream(mine, base, repair, to))
                .expect("spawn a recovery thread");
            let (apply, batches) = sync_channel::<ApplyBatch>(4);
            std::thread::Builder::new()
                .name(format!("wal-apply-{}", cursors.len()))
                .spawn_scoped(scope, move || {
                    for batch in batches {
                        for (rev, ops) in batch {
                            replay.txn(&prefix, rev, ops);
                        }
                    }
                })
                .expect("spawn a recovery thread");
            cursors.push(Cursor {
                segments: segs,
                chunks,
                reader: Some(reader),
                records: VecDeque::new(),
                current: None,
                apply,
                pending: Vec::new(),
            });
        }
    }
    let total_bytes: u64 = cursors
        .iter()
        .flat_map(|c| c.segments.iter())
        .map(|s| fs::metadata(&s.path).map_or(0, |m| m.len()))
        .sum();
    let mut last_log = Instant::now();
    let mut expected = base + 1;
    let hand_over = |c: &mut Cursor| {
        // An applier ends only when its cursor is dropped: sending cannot fail before that.
        let _ = c.apply.send(std::mem::take(&mut c.pending));
    };
    loop {
        // Fill every cursor's head from its reader (which skipped what the snapshot covers).
        for c in cursors.iter_mut() {
            while c.records.is_empty() {
                let Ok(chunk) = c.chunks.recv() else { break };
                let chunk = chunk?;
                out.bytes += chunk.bytes;
                c.current = Some(chunk.segment);
                c.records = chunk.records.into();
            }
        }
        let Some(min) = cursors.iter().filter_map(|c| c.records.front().map(|r| r.1)).min() else {
            break;
        };
        let have: Vec<usize> = (0..cursors.len())
            .filter(|&i| cursors[i].records.front().is_some_and(|r| r.1 == min))
            .collect();
        let parts = cursors[have[0]].records.front().expect("has a head").2 as usize;
        if min != expected || have.len() != parts {
            break;
        }
        for i in have {
            let c = &mut cursors[i];
            let (_, rev, _, ops) = c.records.pop_front().expect("has a head");
            c.pending.push((rev, ops));
            if c.pending.len() >= APPLY_BATCH {
                hand_over(c);
            }
            out.records += 1;
        }
        out.rev = min;
        expected += 1;
        if last_log.elapsed().as_secs() >= 2 {
            let secs = started.elapsed().as_secs_f64();
            tracing::info!(
                revision = min,
                records = out.records,
                records_per_sec = (out.records as f64 / secs) as u64,
                percent = (100 * out.bytes / total_bytes.max(1)).min(100),
                "wal: replaying"
            );
            last_log = Instant::now();
        }
    }

    for c in cursors.iter_mut() {
        hand_over(c);
    }

    // 4. Cut: whatever is left is beyond the recovered revision (an incomplete revision and
    // everything after it): truncate it away.
    let mut dropped = 0;
    for c in cursors.iter_mut() {
        if let (Some((off, rev, _, _)), Some(current)) = (c.records.front(), c.current) {
            let seg = &c.segments[current];
            dropped += c.records.len() as u64;
            tracing::warn!(
                path = %seg.path.display(),
                offset = off,
                first_dropped_revision = rev,
                "wal: dropping records of revisions after the recovered revision {}",
                out.rev
            );
            // The reader first: it may be reading (or truncating a torn tail of) a later
            // segment. Nobody listening, it stops at its next hand-over.
            drop(std::mem::replace(&mut c.chunks, sync_channel(0).1));
            if let Some(reader) = c.reader.take() {
                let _ = reader.join();
            }
            segment::truncate(&seg.path, *off).map_err(io_err(&seg.path))?;
            c.records.clear();
            drop_segments(&mut VecDeque::from(c.segments.split_off(current + 1)))?;
        }
    }
    if dropped > 0 {
        tracing::warn!(dropped, revision = out.rev, "wal: incomplete revisions dropped");
    }
    // The appliers finish what they were handed once their cursors are gone (the caller's
    // thread scope waits for them).
    drop(cursors);
    if out.compacted > out.rev {
        out.compacted = out.rev;
    }
    out.leases = leases.into_iter().collect();
    // A prefix compacted at or below the store's compaction has nothing of its own left.
    out.floors = floors.into_iter().filter(|&(_, r)| r > out.compacted).collect();
    for f in &mut out.floors {
        f.1 = f.1.min(out.rev);
    }
    let secs = started.elapsed().as_secs_f64();
    tracing::info!(
        revision = out.rev,
        records = out.records,
        bytes = out.bytes,
        leases = out.leases.len(),
        compacted = out.compacted,
        seconds = format!("{secs:.3}"),
        "wal: recovered"
    );
    Ok(out)
}

fn meta_seq_of(r: &Record) -> Option<u64> {
    match r {
        Record::LeaseGrant { seq, .. }
        | Record::LeaseRevoke { seq, .. }
        | Record::Compact { seq, .. }
        | Record::CompactPrefix { seq, .. } => Some(*seq),
        _ => None,
    }
}

/// Removes later segments of a stream that was cut short.
fn drop_segments(rest: &mut VecDeque<SegmentFile>) -> Result<(), RecoverError> {
    for s in rest.drain(..) {
        tracing::warn!(path = %s.path.display(), "wal: removing segment after the cut");
        match fs::remove_file(&s.path) {
            // A repaired stream's reader removed it already.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            r => r.map_err(io_err(&s.path))?,
        }
    }
    Ok(())
}

/// Reads one segment, handling its end. A torn tail of a stream's last segment is truncated
/// (with a warning). A corrupt record, or a torn one in an older segment, stops recovery unless
/// `repair`: then the segment is cut there and the flag returned says the stream ends here (the
/// caller removes its later segments). Returns the good records and that flag. `buffers`: the
/// caller's, for the file's bytes.
fn read_segment(
    seg: &SegmentFile,
    last: bool,
    repair: bool,
    out: &mut Recovered,
    buffers: &segment::Buffers,
) -> Result<(Vec<(u64, Record)>, bool), RecoverError> {
    let read = segment::read_file_with(&seg.path, buffers).map_err(io_err(&seg.path))?;
    out.bytes += fs::metadata(&seg.path).map_or(0, |m| m.len());
    let (offset, reason, after) = match read.end {
        End::Clean => return Ok((read.records, false)),
        End::Torn { offset, reason } if last => {
            tracing::warn!(
                path = %seg.path.display(),
                offset,
                reason,
                "wal: torn tail truncated (a write cut short by a crash)"
            );
            if offset < FILE_HEADER_LEN {
                // Not even a whole header: rewrite it so the file stays a valid empty segment.
                fs::write(&seg.path, record::file_header()).map_err(io_err(&seg.path))?;
            } else {
                segment::truncate(&seg.path, offset).map_err(io_err(&seg.path))?;
            }
            return Ok((read.records, false));
        }
        End::Torn { offset, reason } => (offset, reason, 0),
        End::Corrupt { offset, reason, records_after } => (offset, reason, records_after),
    };
    if !repair {
        return Err(RecoverError::Corrupt { path: seg.path.clone(), offset, reason });
    }
    tracing::warn!(
        path = %seg.path.display(),
        offset,
        reason,
        "wal: repair: truncated at a corrupt record; dropped {} records of this segment (and \
         every later segment of the stream)",
        after + 1
    );
    if offset < FILE_HEADER_LEN {
        fs::write(&seg.path, record::file_header()).map_err(io_err(&seg.path))?;
    } else {
        segment::truncate(&seg.path, offset).map_err(io_err(&seg.path))?;
    }
    Ok((read.records, true))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::wal::record::{self, Op, Record};
    use crate::wal::segment::{segment_file_name, stream_name};

    /// Collects what recovery replays.
    #[derive(Default)]
    struct Collect {
        txns: parking_lot::Mutex<Vec<(Bytes, i64, usize)>>,
    }

    impl Replay for Collect {
        fn snapshot_key(&self, _: &Bytes, _: Bytes, _: Vec<Version>) {}
        fn txn(&self, prefix: &Bytes, rev: i64, ops: Vec<Op>) {
            self.txns.lock().push((prefix.clone(), rev, ops.len()));
        }
    }

    fn put(rev: i64, parts: u32, key: &str) -> Record {
        let key = Bytes::copy_from_slice(key.as_bytes());
        let op =
            Op::Put { sub: 0, key, value: Bytes::new(), lease: 0, create_rev: rev, version: 1 };
        Record::Txn { rev, parts, ops: vec![op] }
    }

    fn write_stream(dir: &Path, prefix: &[u8], records: &[Record]) -> PathBuf {
        let d = DataDir::new(dir).wal().join(stream_name(prefix));
        fs::create_dir_all(&d).unwrap();
        let mut data = record::file_header().to_vec();
        for r in records {
            let mut body = Vec::new();
            r.encode(&mut body);
            record::frame(&mut data, &body);
        }
        let path = d.join(segment_file_name(0, 2));
        fs::write(&path, data).unwrap();
        path
    }

    #[test]
    fn recovery_stops_at_the_first_incomplete_revision_and_truncates_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let pods = b"/registry/pods/";
        let cms = b"/registry/configmaps/";
        // Revision 4 spans both streams but only the pods half reached the disk; revision 5 is
        // complete but comes after the hole.
        let p = write_stream(
            dir.path(),
            pods,
            &[
                put(2, 1, "/registry/pods/a"),
                put(4, 2, "/registry/pods/b"),
                put(5, 1, "/registry/pods/c"),
            ],
        );
        write_stream(dir.path(), cms, &[put(3, 1, "/registry/configmaps/x")]);
        let c = Collect::default();
        let r = recover(&DataDir::new(dir.path()), false, &c).unwrap();
        assert_eq!(r.rev, 3, "the state of revision 3: revision 4 is incomplete");
        // Streams are applied in parallel: the order across them is not the log's.
        let mut revs: Vec<i64> = c.txns.lock().iter().map(|t| t.1).collect();
        revs.sort();
        assert_eq!(revs, [2, 3]);
        // The records of revisions 4 and 5 were truncated away: a second recovery agrees and
        // new revisions 4 and 5 can be written without meeting them.
        let left = segment::read_file(&p).unwrap();
        assert_eq!(left.records.len(), 1);
        let c2 = Collect::default();
        assert_eq!(recover(&DataDir::new(dir.path()), false, &c2).unwrap().rev, 3);
    }

    #[test]
    fn a_revision_missing_from_every_stream_is_a_hole() {
        let dir = tempfile::tempdir().unwrap();
        write_stream(dir.path(), b"", &[put(2, 1, "a"), put(4, 1, "c")]);
        let c = Collect::default();
        assert_eq!(recover(&DataDir::new(dir.path()), false, &c).unwrap().rev, 2);
    }

    #[test]
    fn corruption_before_the_tail_stops_recovery_unless_repairing() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_stream(dir.path(), b"", &[put(2, 1, "a"), put(3, 1, "b"), put(4, 1, "c")]);
        let mut data = fs::read(&p).unwrap();
        let second = segment::read_file(&p).unwrap().records[1].0 as usize;
        data[second + 12] ^= 0x55;
        fs::write(&p, &data).unwrap();
        let err = recover(&DataDir::new(dir.path()), false, &Collect::default()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&p.display().to_string()) && msg.contains(&format!("offset {second}")),
            "{msg}"
        );
        let c = Collect::default();
        let r = recover(&DataDir::new(dir.path()), true, &c).unwrap();
        assert_eq!(r.rev, 2, "repair keeps what precedes the bad record");
        assert_eq!(fs::metadata(&p).unwrap().len(), second as u64);
    }
}
