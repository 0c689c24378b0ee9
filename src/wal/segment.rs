//! Segment files: naming, listing, and reading them back with torn-tail and corruption
//! detection.
//!
//! A WAL *stream* is a directory of segments: one stream per partition (resource kind) plus
//! `_meta` for leases and compactions. Segments are named `<seq>-<first>.wal` (16 hex digits
//! each): `seq` orders them, `first` is the first revision (or meta sequence number) they hold,
//! which is what lets a snapshot delete the segments it covers without opening them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::frame::{Frame, Frames};
use super::record::{self, FILE_HEADER_LEN, Record};

/// The stream of lease grants, revocations and compactions.
pub const META_STREAM: &str = "_meta";
/// The stream of the default partition (keys outside any resource prefix).
pub const DEFAULT_STREAM: &str = "_default";

/// A stream's directory name for a partition prefix: readable (`/registry/pods/` becomes
/// `+registry+pods+`) and reversible, so recovery knows the prefix without opening a file.
pub fn stream_name(prefix: &[u8]) -> String {
    if prefix.is_empty() {
        return DEFAULT_STREAM.to_string();
    }
    let mut s = String::with_capacity(prefix.len() + 8);
    for &b in prefix {
        match b {
            b'/' => s.push('+'),
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => s.push(b as char),
            _ => s.push_str(&format!("%{b:02X}")),
        }
    }
    s
}

/// The prefix a stream directory holds, `None` for names that are not partition streams.
pub fn stream_prefix(name: &str) -> Option<Bytes> {
    if name == DEFAULT_STREAM {
        return Some(Bytes::new());
    }
    if !name.starts_with('+') {
        return None;
    }
    let mut out = Vec::with_capacity(name.len());
    let b = name.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b'/'),
            b'%' => {
                let hex = name.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    Some(out.into())
}

/// A segment's place in its stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentFile {
    pub seq: u64,
    /// First revision (meta: first sequence number) it may hold.
    pub first: i64,
    pub path: PathBuf,
}

pub fn segment_file_name(seq: u64, first: i64) -> String {
    format!("{seq:016x}-{:016x}.wal", first as u64)
}

/// The segments of a stream directory, oldest first.
pub fn list_segments(dir: &Path) -> io::Result<Vec<SegmentFile>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".wal") else { continue };
        let Some((seq, first)) = stem.split_once('-') else { continue };
        let (Ok(seq), Ok(first)) = (u64::from_str_radix(seq, 16), u64::from_str_radix(first, 16))
        else {
            continue;
        };
        out.push(SegmentFile { seq, first: first as i64, path: e.path() });
    }
    out.sort_by_key(|s| s.seq);
    Ok(out)
}

/// How reading a file ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// Every byte belonged to a good record.
    Clean,
    /// The file ends inside a record, or its last record is bad (a write cut short by a
    /// crash). Everything from `offset` on is to be truncated.
    Torn { offset: u64, reason: String },
    /// A bad record with more data after it: not something a crash produces.
    Corrupt { offset: u64, reason: String, records_after: u64 },
}

/// A file's records (with their offsets) and how it ended.
#[derive(Debug)]
pub struct FileRecords<R = Record> {
    pub records: Vec<(u64, R)>,
    pub end: End,
}

/// Reads every record of a segment or snapshot file.
pub fn read_file(path: &Path) -> io::Result<FileRecords> {
    read_file_with(path, &Buffers::default())
}

/// [`read_file`] into one of `buffers`, whose records share it (no copy of each record): for
/// recovery's replay, which copies what it keeps. The file's pages then leave the page cache:
/// recovery reads each file once, and a store about the size of memory would otherwise recover
/// beside its own log in the cache, which reclaim then has to scan to evict.
pub fn read_file_with(path: &Path, buffers: &Buffers) -> io::Result<FileRecords> {
    use std::io::Read;
    let mut f = fs::File::open(path)?;
    let mut buf = buffers.take();
    f.read_to_end(&mut buf)?;
    // Only advice: a kernel that ignores it keeps the pages cached, as before.
    let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
    let data = Bytes::from_owner(Lent { buf, home: buffers.home.clone() });
    Ok(parse(&data, true, record::MAGIC, record::VERSION, Record::decode))
}

/// The buffers one reader of many files reads them into. A buffer comes back once nothing read
/// from it is left, so its pages are faulted in and zeroed once, not once per file: at 10M
/// objects, a restart that read each record into an allocation of its own spent a quarter of
/// its CPU zeroing pages.
#[derive(Debug)]
pub struct Buffers {
    /// Where a lent buffer goes back to.
    home: std::sync::mpsc::Sender<Vec<u8>>,
    back: std::sync::mpsc::Receiver<Vec<u8>>,
}

impl Default for Buffers {
    fn default() -> Self {
        let (home, back) = std::sync::mpsc::channel();
        Self { home, back }
    }
}

impl Buffers {
    /// A buffer that came back, emptied, or a new one if none did.
    fn take(&self) -> Vec<u8> {
        let mut buf = self.back.try_recv().unwrap_or_default();
        buf.clear();
        buf
    }
}

/// A buffer lent out as the owner of a file's bytes: it goes home when the last record that
/// shares it is dropped (or is freed, if its reader is gone).
struct Lent {
    buf: Vec<u8>,
    home: std::sync::mpsc::Sender<Vec<u8>>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let _ = self.home.send(std::mem::take(&mut self.buf));
    }
}

/// Parses a file of framed records (`record`'s framing) that starts with `magic` and format
/// `version`, decoding each body with `decode` (the Raft log uses the same framing for its own
/// records). `share`: each body is a slice of `data` (see [`Frames::next_in_memory`]).
pub fn parse<R>(
    data: &Bytes,
    share: bool,
    magic: &[u8; 8],
    version: u32,
    decode: impl Fn(&Bytes) -> Option<R>,
) -> FileRecords<R> {
    let mut records = Vec::new();
    let hl = FILE_HEADER_LEN as usize;
    if data.len() < hl {
        // A file is created and its header written in one go; a short one is a crash during
        // creation (empty or partial header).
        let mut header = magic.to_vec();
        header.extend_from_slice(&version.to_le_bytes());
        header.resize(hl, 0);
        let end = if header.starts_with(data) {
            End::Torn { offset: 0, reason: "incomplete file header".into() }
        } else {
            End::Corrupt { offset: 0, reason: "not a mem_etcd WAL file".into(), records_after: 0 }
        };
        return FileRecords { records, end };
    }
    if &data[..8] != magic {
        let end =
            End::Corrupt { offset: 0, reason: "not a mem_etcd WAL file".into(), records_after: 0 };
        return FileRecords { records, end };
    }
    let found = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
    if found != version {
        let reason = format!("format version {found}, this build reads {version}");
        return FileRecords { records, end: End::Corrupt { offset: 0, reason, records_after: 0 } };
    }
    let mut frames = Frames::new(data.slice(hl..), hl as u64);
    let end = loop {
        let pos = frames.offset();
        match frames.next_in_memory(share, &decode) {
            Frame::End => break End::Clean,
            Frame::Good(rec) => records.push((pos, rec)),
            Frame::Short => {
                break End::Torn { offset: pos, reason: "record cut short".into() };
            }
            Frame::Bad(bad) => {
                // A bad last record, or zeroes to the end (a filesystem that extended the file
                // before the data reached it), is a torn write; anything else is corruption.
                let reason = bad.to_string();
                let next = (frames.offset() > pos).then_some(frames.offset() as usize);
                let last = next.is_some_and(|n| n == data.len());
                if last || data[pos as usize..].iter().all(|&b| b == 0) {
                    break End::Torn { offset: pos, reason };
                }
                let records_after = next.map_or(0, |n| count_after(data, n, &decode));
                break End::Corrupt { offset: pos, reason, records_after };
            }
        }
    };
    FileRecords { records, end }
}

/// How many good records follow `from` (to say what a repair drops).
fn count_after<R>(data: &Bytes, from: usize, decode: impl Fn(&Bytes) -> Option<R>) -> u64 {
    let mut frames = Frames::new(data.slice(from..), from as u64);
    let mut n = 0;
    while let Frame::Good(_) = frames.next_in_memory(true, &decode) {
        n += 1;
    }
    n
}

/// Cuts a file at `offset` and makes the cut durable.
pub fn truncate(path: &Path, offset: u64) -> io::Result<()> {
    let f = fs::OpenOptions::new().write(true).open(path)?;
    f.set_len(offset)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wal(data: &[u8]) -> FileRecords {
        parse(&Bytes::copy_from_slice(data), true, record::MAGIC, record::VERSION, Record::decode)
    }

    fn file_with(records: &[Record]) -> Vec<u8> {
        let mut data = record::file_header().to_vec();
        for r in records {
            let mut body = Vec::new();
            r.encode(&mut body);
            record::frame(&mut data, &body);
        }
        data
    }

    fn grants(n: u64) -> Vec<Record> {
        (0..n).map(|i| Record::LeaseGrant { seq: i, id: i as i64 + 1, ttl: 10 }).collect()
    }

    #[test]
    fn stream_names_round_trip() {
        for p in [&b""[..], b"/registry/pods/", b"/registry/apps/deployments/", b"/a+b%c\xff/"] {
            let name = stream_name(p);
            assert!(!name.contains('/'));
            assert_eq!(stream_prefix(&name).as_deref(), Some(p), "{name}");
        }
        assert_eq!(stream_name(b"/registry/pods/"), "+registry+pods+");
        assert_eq!(stream_prefix(META_STREAM), None);
    }

    #[test]
    fn torn_tails_and_corruption_are_told_apart() {
        let data = file_with(&grants(5));
        let clean = wal(&data);
        assert_eq!((clean.records.len(), clean.end), (5, End::Clean));

        // Cut inside the last record: torn at its start.
        let last_at = clean.records[4].0;
        let torn = wal(&data[..data.len() - 3]);
        assert_eq!(torn.records.len(), 4);
        assert!(matches!(torn.end, End::Torn { offset, .. } if offset == last_at));

        // A flipped byte in the last record: torn too (it ends the file).
        let mut bad_last = data.clone();
        *bad_last.last_mut().unwrap() ^= 0xff;
        assert!(matches!(wal(&bad_last).end, End::Torn { offset, .. } if offset == last_at));

        // A flipped byte in the second record: corruption, with three good records after.
        let mut bad_mid = data.clone();
        let second = clean.records[1].0 as usize;
        bad_mid[second + record::FRAME_LEN + 1] ^= 0xff;
        let r = wal(&bad_mid);
        assert_eq!(r.records.len(), 1);
        assert!(
            matches!(r.end, End::Corrupt { offset, records_after: 3, .. } if offset == second as u64)
        );

        // Zeroes after the records: torn.
        let mut zeroed = data.clone();
        zeroed.extend_from_slice(&[0; 100]);
        assert!(matches!(wal(&zeroed).end, End::Torn { .. }));

        // A partial header is a torn creation; a wrong magic is not ours.
        assert!(matches!(wal(&data[..5]).end, End::Torn { offset: 0, .. }));
        assert!(matches!(wal(b"NOTAWALFILE_____x").end, End::Corrupt { .. }));
    }
}
