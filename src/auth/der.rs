//! The little DER the auth module reads and writes: a client certificate's common name
//! (`cert`), the keys in their PEM envelopes (`jwt`). A few lines rather than an ASN.1 crate:
//! only definite lengths, and only the fields named here are ever looked at.

pub const INTEGER: u8 = 0x02;
pub const BIT_STRING: u8 = 0x03;
pub const OCTET_STRING: u8 = 0x04;
pub const OID: u8 = 0x06;
pub const SEQUENCE: u8 = 0x30;
/// The `[0] EXPLICIT` tag of a certificate's version.
const VERSION: u8 = 0xa0;

/// One DER element: (tag, contents, what follows).
pub fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *b.first()?;
    let first = *b.get(1)? as usize;
    let (len, header) = if first < 0x80 {
        (first, 2)
    } else {
        let n = first & 0x7f;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | *b.get(2 + i)? as usize;
        }
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    Some((tag, b.get(header..end)?, &b[end..]))
}

/// The contents of `b`'s first element, which must have tag `tag`.
pub fn content(b: &[u8], tag: u8) -> Option<&[u8]> {
    let (t, c, _) = tlv(b)?;
    (t == tag).then_some(c)
}

/// A certificate's TBSCertificate fields from the serial number on (serial, signature
/// algorithm, issuer, validity, subject, subjectPublicKeyInfo, ...): past the optional version.
pub fn tbs_fields(cert: &[u8]) -> Option<&[u8]> {
    let tbs = content(content(cert, SEQUENCE)?, SEQUENCE)?;
    match tlv(tbs)? {
        (VERSION, _, rest) => Some(rest),
        _ => Some(tbs),
    }
}

/// `rest` past its first `n` elements.
pub fn skip(mut rest: &[u8], n: usize) -> Option<&[u8]> {
    for _ in 0..n {
        rest = tlv(rest)?.2;
    }
    Some(rest)
}

/// The element with `tag` and `content`.
pub fn encode(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_lengths_round_trip() {
        for len in [0usize, 1, 127, 128, 255, 256, 70000] {
            let content = vec![7u8; len];
            let enc = encode(OCTET_STRING, &content);
            assert_eq!(super::content(&enc, OCTET_STRING), Some(&content[..]));
        }
    }
}
