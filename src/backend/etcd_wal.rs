//! etcd's write-ahead log (`member/wal/*.wal`), read only as far as starting on an etcd data
//! directory needs: the index of the last Raft entry it holds, to tell whether etcd's database
//! (`member/snap/db`, which mem_etcd imports) has applied everything the log holds.
//!
//! # Format (etcd's `wal` package)
//! ```text
//! frame   u64 LE: low 56 bits the record's length; if the top bit is set, bits 56..59 the
//!         padding after it (records are padded to 8 bytes); a zero frame ends the file's
//!         records (segments are preallocated with zeros)
//! record  walpb.Record { type int64 = 1, crc uint32 = 2, data bytes = 3 }; type 2 is a Raft
//!         entry, whose data is raftpb.Entry { Type = 1, Term = 2, Index = 3, Data = 4 }
//! ```
//! Segments are read in name order (etcd names them by sequence number and first index).

use std::path::Path;

use prost::Message;

/// etcd's `walpb.Record`.
#[derive(Clone, PartialEq, Message)]
struct Record {
    #[prost(int64, tag = "1")]
    kind: i64,
    #[prost(uint32, tag = "2")]
    crc: u32,
    #[prost(bytes = "vec", tag = "3")]
    data: Vec<u8>,
}

/// The part of etcd's `raftpb.Entry` this reads.
#[derive(Clone, PartialEq, Message)]
struct Entry {
    #[prost(uint64, tag = "2")]
    term: u64,
    #[prost(uint64, tag = "3")]
    index: u64,
}

/// `walpb.Record` type of a Raft entry.
const ENTRY: i64 = 2;

/// The index of the last Raft entry in the etcd WAL directory `dir` (`None` if it holds none).
/// A torn last record ends the reading, as it ends etcd's (which repairs it).
pub fn last_entry_index(dir: &Path) -> std::io::Result<Option<u64>> {
    let mut segments: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    segments.sort();
    let mut last = None;
    for seg in segments {
        let data = std::fs::read(&seg)?;
        let mut at = 0;
        while at + 8 <= data.len() {
            let frame = u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"));
            if frame == 0 {
                break;
            }
            let len = (frame & !(0xff << 56)) as usize;
            let pad = if frame >> 63 == 1 { ((frame >> 56) & 0x7) as usize } else { 0 };
            let Some(body) = data.get(at + 8..at + 8 + len) else { break };
            let Ok(rec) = Record::decode(body) else { break };
            if rec.kind == ENTRY {
                match Entry::decode(rec.data.as_slice()) {
                    Ok(e) => last = Some(e.index),
                    Err(_) => break,
                }
            }
            at += 8 + len + pad;
        }
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(out: &mut Vec<u8>, rec: &Record) {
        let body = rec.encode_to_vec();
        let pad = (8 - body.len() % 8) % 8;
        let mut len = body.len() as u64;
        if pad > 0 {
            len |= (0x80 | pad as u64) << 56;
        }
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&body);
        out.extend(std::iter::repeat_n(0, pad));
    }

    fn entry(index: u64) -> Record {
        let data = Entry { term: 2, index }.encode_to_vec();
        Record { kind: ENTRY, crc: 0, data }
    }

    #[test]
    fn the_last_entry_is_found_across_segments_up_to_the_zeroed_tail() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(last_entry_index(dir.path()).unwrap(), None);
        let mut a = Vec::new();
        frame(&mut a, &Record { kind: 1, crc: 0, data: vec![1, 2, 3] });
        for i in 1..=5 {
            frame(&mut a, &entry(i));
        }
        std::fs::write(dir.path().join("0000000000000000-0000000000000000.wal"), &a).unwrap();
        assert_eq!(last_entry_index(dir.path()).unwrap(), Some(5));
        let mut b = Vec::new();
        frame(&mut b, &entry(6));
        frame(&mut b, &Record { kind: 3, crc: 0, data: vec![9; 13] });
        frame(&mut b, &entry(7));
        let whole = b.len();
        b.extend(std::iter::repeat_n(0, 4096));
        std::fs::write(dir.path().join("0000000000000001-0000000000000006.wal"), &b).unwrap();
        std::fs::write(dir.path().join("0.tmp"), [0xff; 64]).unwrap();
        assert_eq!(last_entry_index(dir.path()).unwrap(), Some(7));
        // A torn last record: the one before it is the last.
        b.truncate(whole - 3);
        std::fs::write(dir.path().join("0000000000000001-0000000000000006.wal"), &b).unwrap();
        assert_eq!(last_entry_index(dir.path()).unwrap(), Some(6));
    }
}
