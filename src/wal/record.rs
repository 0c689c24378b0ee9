//! The on-disk record format, shared by WAL segments and snapshot files.
//!
//! A file starts with a 16-byte header: the magic `MEMETCDW`, the format version (u32 LE) and
//! four reserved bytes. Then records, each framed as
//!
//! ```text
//! body length: u32 LE | CRC32C of the body: u32 LE | body
//! ```
//!
//! and each body starts with a type byte followed by varint-encoded fields. The framing lets a
//! reader tell a torn tail (a record running past the end of the file, or a bad last record)
//! from corruption in the middle (a bad record with more data after it).

use bytes::Bytes;

/// First bytes of every segment and snapshot file.
pub const MAGIC: &[u8; 8] = b"MEMETCDW";
/// The format this code writes and reads; a file with another version is refused.
pub const VERSION: u32 = 1;
/// Length of the file header.
pub const FILE_HEADER_LEN: u64 = 16;
/// Length of a record's frame (length and checksum).
pub const FRAME_LEN: usize = 8;
/// The largest body a reader accepts: bigger lengths are corruption, not records (a txn is at
/// most `--max-request-bytes` plus its events' previous values, far below this).
pub const MAX_BODY: usize = 1 << 30;

/// The 16-byte header of a file in this format.
pub fn file_header() -> [u8; FILE_HEADER_LEN as usize] {
    let mut h = [0u8; FILE_HEADER_LEN as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// Record types. Values are part of the format: never reuse one.
mod tag {
    pub const TXN: u8 = 1;
    pub const LEASE_GRANT: u8 = 2;
    pub const LEASE_REVOKE: u8 = 3;
    pub const COMPACT: u8 = 4;
    pub const SNAP_HEADER: u8 = 10;
    pub const SNAP_KEY: u8 = 11;
    pub const SNAP_LEASE: u8 = 12;
    pub const SNAP_END: u8 = 13;
    pub const SNAP_AUTH: u8 = 14;
    pub const COMPACT_PREFIX: u8 = 15;
    pub const OP_PUT: u8 = 1;
    pub const OP_DELETE: u8 = 2;
}

/// One change to a key, as the store applied it. A put carries everything needed to rebuild the
/// exact version (create revision and version are stored, not recomputed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Put { sub: i64, key: Bytes, value: Bytes, lease: i64, create_rev: i64, version: i64 },
    Delete { sub: i64, key: Bytes },
}

/// One version of a key in a snapshot; a tombstone has `version == 0`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub main: i64,
    pub sub: i64,
    pub create_rev: i64,
    pub version: i64,
    pub lease: i64,
    pub value: Bytes,
}

/// A decoded record body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// One revision's changes to one partition. `parts` is how many partitions the revision
    /// wrote a record to: recovery applies the revision only if it finds all of them.
    Txn {
        rev: i64,
        parts: u32,
        ops: Vec<Op>,
    },
    /// `seq` orders meta records so a snapshot can say which ones it already covers.
    LeaseGrant {
        seq: u64,
        id: i64,
        ttl: i64,
    },
    LeaseRevoke {
        seq: u64,
        id: i64,
    },
    Compact {
        seq: u64,
        rev: i64,
    },
    /// The history of the keys under `prefix` alone compacted at `rev` (a tenant's, see
    /// `mvcc::Store::compact_prefix`). Also how a snapshot or a backup says which prefixes
    /// were compacted so, with `seq` 0.
    CompactPrefix {
        seq: u64,
        prefix: Bytes,
        rev: i64,
    },
    /// First record of a partition snapshot: the revision it is the state of, the compaction
    /// revision, the last meta record it covers, and the partition's prefix.
    SnapHeader {
        rev: i64,
        compacted: i64,
        meta_seq: u64,
        prefix: Bytes,
    },
    SnapKey {
        key: Bytes,
        versions: Vec<Version>,
    },
    SnapLease {
        id: i64,
        ttl: i64,
    },
    /// Last record of a snapshot file: how many records came before it (a truncated snapshot
    /// is detected even if it ends on a record boundary).
    SnapEnd {
        records: u64,
    },
    /// A backup's auth state (users, roles, enabled, auth revision). Opaque here: the auth
    /// module encodes and decodes it, so that storage code needs no auth types.
    SnapAuth {
        state: Bytes,
    },
}

/// Appends `body`'s frame and body to `out`.
pub fn frame(out: &mut Vec<u8>, body: &[u8]) {
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
}

/// Builds a framed record in place: reserve the frame, write the body, then [`Framer::finish`].
#[derive(Debug)]
pub struct Framer<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
}

impl<'a> Framer<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        let start = out.len();
        out.extend_from_slice(&[0; FRAME_LEN]);
        Self { out, start }
    }

    pub fn body(&mut self) -> &mut Vec<u8> {
        self.out
    }

    pub fn finish(self) {
        let body = &self.out[self.start + FRAME_LEN..];
        let len = (body.len() as u32).to_le_bytes();
        let crc = crc32c::crc32c(body).to_le_bytes();
        self.out[self.start..self.start + 4].copy_from_slice(&len);
        self.out[self.start + 4..self.start + 8].copy_from_slice(&crc);
    }
}

pub fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Signed values (revisions, lease ids) are stored as their two's complement bits: they are
/// non-negative in practice, and -1 (no compaction) costs ten bytes only in a header.
pub fn put_ivarint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, v as u64)
}

pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_uvarint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Starts a txn record body; the caller then adds ops with [`put_op`].
pub fn begin_txn(out: &mut Vec<u8>, rev: i64, parts: u32, ops: usize) {
    out.push(tag::TXN);
    put_ivarint(out, rev);
    put_uvarint(out, parts as u64);
    put_uvarint(out, ops as u64);
}

pub fn put_op(out: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Put { sub, key, value, lease, create_rev, version } => {
            out.push(tag::OP_PUT);
            put_ivarint(out, *sub);
            put_bytes(out, key);
            put_bytes(out, value);
            put_ivarint(out, *lease);
            put_ivarint(out, *create_rev);
            put_ivarint(out, *version);
        }
        Op::Delete { sub, key } => {
            out.push(tag::OP_DELETE);
            put_ivarint(out, *sub);
            put_bytes(out, key);
        }
    }
}

impl Record {
    /// The record's body (without frame).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Record::Txn { rev, parts, ops } => {
                begin_txn(out, *rev, *parts, ops.len());
                ops.iter().for_each(|op| put_op(out, op));
            }
            Record::LeaseGrant { seq, id, ttl } => {
                out.push(tag::LEASE_GRANT);
                put_uvarint(out, *seq);
                put_ivarint(out, *id);
                put_ivarint(out, *ttl);
            }
            Record::LeaseRevoke { seq, id } => {
                out.push(tag::LEASE_REVOKE);
                put_uvarint(out, *seq);
                put_ivarint(out, *id);
            }
            Record::Compact { seq, rev } => {
                out.push(tag::COMPACT);
                put_uvarint(out, *seq);
                put_ivarint(out, *rev);
            }
            Record::CompactPrefix { seq, prefix, rev } => {
                out.push(tag::COMPACT_PREFIX);
                put_uvarint(out, *seq);
                put_bytes(out, prefix);
                put_ivarint(out, *rev);
            }
            Record::SnapHeader { rev, compacted, meta_seq, prefix } => {
                out.push(tag::SNAP_HEADER);
                put_ivarint(out, *rev);
                put_ivarint(out, *compacted);
                put_uvarint(out, *meta_seq);
                put_bytes(out, prefix);
            }
            Record::SnapKey { key, versions } => {
                out.push(tag::SNAP_KEY);
                put_bytes(out, key);
                put_uvarint(out, versions.len() as u64);
                for v in versions {
                    put_ivarint(out, v.main);
                    put_ivarint(out, v.sub);
                    put_ivarint(out, v.create_rev);
                    put_ivarint(out, v.version);
                    put_ivarint(out, v.lease);
                    put_bytes(out, &v.value);
                }
            }
            Record::SnapLease { id, ttl } => {
                out.push(tag::SNAP_LEASE);
                put_ivarint(out, *id);
                put_ivarint(out, *ttl);
            }
            Record::SnapEnd { records } => {
                out.push(tag::SNAP_END);
                put_uvarint(out, *records);
            }
            Record::SnapAuth { state } => {
                out.push(tag::SNAP_AUTH);
                put_bytes(out, state);
            }
        }
    }

    /// Decodes a body whose checksum matched. `None` if it does not parse (a bug or a record
    /// written by a newer version: treated as corruption by the caller).
    pub fn decode(body: &Bytes) -> Option<Record> {
        let mut d = Decoder { buf: body, pos: 1 };
        let r = match *body.first()? {
            tag::TXN => {
                let rev = d.ivarint()?;
                let parts = d.uvarint()? as u32;
                let n = d.uvarint()? as usize;
                let mut ops = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    ops.push(match d.byte()? {
                        tag::OP_PUT => Op::Put {
                            sub: d.ivarint()?,
                            key: d.bytes()?,
                            value: d.bytes()?,
                            lease: d.ivarint()?,
                            create_rev: d.ivarint()?,
                            version: d.ivarint()?,
                        },
                        tag::OP_DELETE => Op::Delete { sub: d.ivarint()?, key: d.bytes()? },
                        _ => return None,
                    });
                }
                Record::Txn { rev, parts, ops }
            }
            tag::LEASE_GRANT => {
                Record::LeaseGrant { seq: d.uvarint()?, id: d.ivarint()?, ttl: d.ivarint()? }
            }
            tag::LEASE_REVOKE => Record::LeaseRevoke { seq: d.uvarint()?, id: d.ivarint()? },
            tag::COMPACT => Record::Compact { seq: d.uvarint()?, rev: d.ivarint()? },
            tag::COMPACT_PREFIX => {
                Record::CompactPrefix { seq: d.uvarint()?, prefix: d.bytes()?, rev: d.ivarint()? }
            }
            tag::SNAP_HEADER => Record::SnapHeader {
                rev: d.ivarint()?,
                compacted: d.ivarint()?,
                meta_seq: d.uvarint()?,
                prefix: d.bytes()?,
            },
            tag::SNAP_KEY => {
                let key = d.bytes()?;
                let n = d.uvarint()? as usize;
                let mut versions = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    versions.push(Version {
                        main: d.ivarint()?,
                        sub: d.ivarint()?,
                        create_rev: d.ivarint()?,
                        version: d.ivarint()?,
                        lease: d.ivarint()?,
                        value: d.bytes()?,
                    });
                }
                Record::SnapKey { key, versions }
            }
            tag::SNAP_LEASE => Record::SnapLease { id: d.ivarint()?, ttl: d.ivarint()? },
            tag::SNAP_END => Record::SnapEnd { records: d.uvarint()? },
            tag::SNAP_AUTH => Record::SnapAuth { state: d.bytes()? },
            _ => return None,
        };
        (d.pos == body.len()).then_some(r)
    }
}

/// Reads fields out of a body; slices share the body's buffer (no copies on replay). Used by the
/// Raft log's records too.
#[derive(Debug)]
pub struct Decoder<'a> {
    buf: &'a Bytes,
    pos: usize,
}

impl<'a> Decoder<'a> {
    /// Reads `buf` from byte `pos` on.
    pub fn new(buf: &'a Bytes, pos: usize) -> Self {
        Self { buf, pos }
    }

    /// Whether every byte was read.
    pub fn done(&self) -> bool {
        self.pos == self.buf.len()
    }

    pub fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    pub fn uvarint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    pub fn ivarint(&mut self) -> Option<i64> {
        self.uvarint().map(|v| v as i64)
    }

    pub fn bytes(&mut self) -> Option<Bytes> {
        let n = self.uvarint()? as usize;
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len())?;
        let b = self.buf.slice(self.pos..end);
        self.pos = end;
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_type_round_trips() {
        let records = vec![
            Record::Txn {
                rev: 42,
                parts: 2,
                ops: vec![
                    Op::Put {
                        sub: 0,
                        key: Bytes::from_static(b"/registry/pods/a"),
                        value: Bytes::from(vec![7u8; 300]),
                        lease: 0x7fff_0000_1234,
                        create_rev: 40,
                        version: 3,
                    },
                    Op::Delete { sub: 1, key: Bytes::from_static(b"/registry/pods/b") },
                ],
            },
            Record::LeaseGrant { seq: 9, id: 77, ttl: 10 },
            Record::LeaseRevoke { seq: 10, id: 77 },
            Record::Compact { seq: 11, rev: 40 },
            Record::CompactPrefix { seq: 12, prefix: Bytes::from_static(b"/tenant-a/"), rev: 41 },
            Record::SnapHeader {
                rev: 100,
                compacted: -1,
                meta_seq: 11,
                prefix: Bytes::from_static(b"/registry/pods/"),
            },
            Record::SnapKey {
                key: Bytes::from_static(b"k"),
                versions: vec![Version {
                    main: 5,
                    sub: 1,
                    create_rev: 5,
                    version: 1,
                    lease: 0,
                    value: Bytes::from_static(b"v"),
                }],
            },
            Record::SnapLease { id: 3, ttl: 60 },
            Record::SnapEnd { records: 4 },
            Record::SnapAuth { state: Bytes::from_static(b"\x08\x01opaque") },
        ];
        for r in records {
            let mut body = Vec::new();
            r.encode(&mut body);
            assert_eq!(Record::decode(&Bytes::from(body.clone())), Some(r.clone()));
            body.push(0);
            assert_eq!(Record::decode(&Bytes::from(body)), None, "trailing bytes are refused");
        }
    }
}
