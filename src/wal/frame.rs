//! The one reader of framed records (the framing is [`record`](super::record)'s: length,
//! CRC32C, body): WAL segments, WAL snapshots, backups and the Raft log's segments are all read
//! through it, from a file or from bytes in memory. What the file around the records means
//! (its header, whether a bad record is a torn tail or corruption, what record must come last)
//! is left to each reader.

use std::io::{self, Read};

use bytes::Bytes;

use super::record::{FRAME_LEN, MAX_BODY};

/// Why a record is bad.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bad {
    /// A length no record has (zero, or past [`MAX_BODY`]): where the next record would start
    /// is unknown.
    Length(usize),
    Checksum,
    /// The checksum matched but the body does not parse (a bug, or a newer format).
    Decode,
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bad::Length(len) => write!(f, "impossible record length {len}"),
            Bad::Checksum => f.write_str("checksum mismatch"),
            Bad::Decode => f.write_str("record does not decode"),
        }
    }
}

/// What reading the next record found.
#[derive(Debug)]
pub enum Frame<R> {
    /// The input ended where a record would start.
    End,
    /// The input ended inside a record's frame or body.
    Short,
    Good(R),
    /// A bad record; the reader is after it unless its length was impossible.
    Bad(Bad),
}

/// Reads framed records one after another, keeping the offset of the next one.
#[derive(Debug)]
pub struct Frames<In> {
    input: In,
    offset: u64,
}

impl<In> Frames<In> {
    /// Records from `input`, whose first byte is at `offset` of its file.
    pub fn new(input: In, offset: u64) -> Self {
        Self { input, offset }
    }

    /// The offset of the next record (after a [`Frame::Bad`] with a believable length: the
    /// one after the bad record).
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl<In: Read> Frames<In> {
    /// Reads the next record and decodes its body with `decode`. The body is read as it
    /// arrives, so a corrupt length costs no allocation of that size.
    pub fn next<R>(&mut self, decode: impl Fn(&Bytes) -> Option<R>) -> io::Result<Frame<R>> {
        let mut frame = [0u8; FRAME_LEN];
        match read_full(&mut self.input, &mut frame)? {
            0 => return Ok(Frame::End),
            n if n < FRAME_LEN => return Ok(Frame::Short),
            _ => {}
        }
        let (len, crc) = match frame_header(&frame) {
            Ok(h) => h,
            Err(bad) => return Ok(Frame::Bad(bad)),
        };
        let mut body = Vec::with_capacity(len.min(1 << 20));
        (&mut self.input).take(len as u64).read_to_end(&mut body)?;
        if body.len() < len {
            return Ok(Frame::Short);
        }
        self.offset += (FRAME_LEN + len) as u64;
        if crc32c::crc32c(&body) != crc {
            return Ok(Frame::Bad(Bad::Checksum));
        }
        match decode(&Bytes::from(body)) {
            Some(r) => Ok(Frame::Good(r)),
            None => Ok(Frame::Bad(Bad::Decode)),
        }
    }
}

impl Frames<Bytes> {
    /// [`Frames::next`] over a whole file in memory. `share`: the body handed to `decode` is a
    /// slice of the input, not a copy, so whatever the records keep of it keeps the whole input
    /// (for readers that copy what they keep, such as recovery's replay).
    pub fn next_in_memory<R>(
        &mut self,
        share: bool,
        decode: impl Fn(&Bytes) -> Option<R>,
    ) -> Frame<R> {
        if self.input.is_empty() {
            return Frame::End;
        }
        let Some(frame) = self.input.get(..FRAME_LEN) else { return Frame::Short };
        let (len, crc) = match frame_header(frame.try_into().expect("a frame")) {
            Ok(h) => h,
            Err(bad) => return Frame::Bad(bad),
        };
        if self.input.len() < FRAME_LEN + len {
            return Frame::Short;
        }
        let body = self.input.slice(FRAME_LEN..FRAME_LEN + len);
        self.input = self.input.slice(FRAME_LEN + len..);
        self.offset += (FRAME_LEN + len) as u64;
        if crc32c::crc32c(&body) != crc {
            return Frame::Bad(Bad::Checksum);
        }
        let body = if share { body } else { Bytes::copy_from_slice(&body) };
        match decode(&body) {
            Some(r) => Frame::Good(r),
            None => Frame::Bad(Bad::Decode),
        }
    }
}

/// A frame's body length and checksum, or why no record has that length.
fn frame_header(frame: &[u8; FRAME_LEN]) -> Result<(usize, u32), Bad> {
    let len = u32::from_le_bytes(frame[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(frame[4..].try_into().expect("4 bytes"));
    if len == 0 || len > MAX_BODY {
        return Err(Bad::Length(len));
    }
    Ok((len, crc))
}

/// Reads until `buf` is full or the input ends; returns how much was read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::record;

    #[test]
    fn good_short_bad_and_end_are_told_apart() {
        let mut data = Vec::new();
        record::frame(&mut data, b"one");
        record::frame(&mut data, b"two");
        let same = |b: &Bytes| Some(b.clone());
        let mut f = Frames::new(&data[..], 16);
        assert!(matches!(f.next(same).unwrap(), Frame::Good(b) if b == "one"));
        assert_eq!(f.offset(), 16 + 11);
        assert!(matches!(f.next(same).unwrap(), Frame::Good(b) if b == "two"));
        assert!(matches!(f.next(same).unwrap(), Frame::End));

        // Cut inside the first frame, inside its body, inside the second record.
        for cut in [3, 9, data.len() - 1] {
            let mut f = Frames::new(&data[..cut], 0);
            if cut > 11 {
                assert!(matches!(f.next(same).unwrap(), Frame::Good(_)));
            }
            assert!(matches!(f.next(same).unwrap(), Frame::Short), "{cut}");
        }

        let mut flipped = data.clone();
        flipped[9] ^= 1;
        let mut f = Frames::new(&flipped[..], 0);
        assert!(matches!(f.next(same).unwrap(), Frame::Bad(Bad::Checksum)));
        assert_eq!(f.offset(), 11, "after the bad record");
        assert!(matches!(f.next(same).unwrap(), Frame::Good(_)));

        let mut f = Frames::new(&data[..], 0);
        assert!(matches!(f.next(|_| None::<()>).unwrap(), Frame::Bad(Bad::Decode)));

        let zeroes = [0u8; 20];
        let mut f = Frames::new(&zeroes[..], 0);
        assert!(matches!(f.next(same).unwrap(), Frame::Bad(Bad::Length(0))));
        assert_eq!(f.offset(), 0);
    }

    #[test]
    fn frames_in_memory_read_as_frames_from_a_reader_and_share_only_when_asked() {
        let mut data = Vec::new();
        record::frame(&mut data, b"one");
        record::frame(&mut data, b"two");
        let mut flipped = data.clone();
        flipped[9] ^= 1;
        let inputs = [data.clone(), data[..3].to_vec(), data[..9].to_vec(), flipped, vec![0; 20]];
        let describe = |f: Frame<Bytes>| match f {
            Frame::Good(b) => format!("good {b:?}"),
            other => format!("{other:?}"),
        };
        for input in inputs {
            let mut from_reader = Frames::new(&input[..], 16);
            let mut in_memory = Frames::new(Bytes::from(input.clone()), 16);
            loop {
                let a = describe(from_reader.next(|b| Some(b.clone())).unwrap());
                let b = describe(in_memory.next_in_memory(false, |b| Some(b.clone())));
                assert_eq!((&a, from_reader.offset()), (&b, in_memory.offset()), "{input:?}");
                if !a.starts_with("good") {
                    break;
                }
            }
        }
        let data = Bytes::from(data);
        let within = |b: &Bytes| data.as_ptr_range().contains(&b.as_ptr());
        let mut shared = Frames::new(data.clone(), 0);
        assert!(matches!(shared.next_in_memory(true, |b| Some(within(b))), Frame::Good(true)));
        let mut copied = Frames::new(data.clone(), 0);
        assert!(matches!(copied.next_in_memory(false, |b| Some(within(b))), Frame::Good(false)));
    }
}
