//! The user a client certificate stands for (etcd's `AuthInfoFromTLS`): its subject's common
//! name. A small DER walk rather than an X.509 crate: only this one field is ever read, from
//! certificates the TLS layer has already verified against `--trusted-ca-file`.

/// One DER element: (tag, contents, what follows).
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
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

/// The subject common name of a DER certificate (the last one, as Go reads it), if any.
pub fn common_name(der: &[u8]) -> Option<String> {
    const CN: [u8; 3] = [0x55, 0x04, 0x03];
    let (_, cert, _) = tlv(der)?;
    let (_, tbs, _) = tlv(cert)?;
    let mut rest = tbs;
    if tlv(rest)?.0 == 0xa0 {
        rest = tlv(rest)?.2;
    }
    // serial number, signature algorithm, issuer, validity
    for _ in 0..4 {
        rest = tlv(rest)?.2;
    }
    let (_, mut rdns, _) = tlv(rest)?;
    let mut cn = None;
    while !rdns.is_empty() {
        let (_, mut set, r) = tlv(rdns)?;
        rdns = r;
        while !set.is_empty() {
            let (_, atv, r) = tlv(set)?;
            set = r;
            let (tag, oid, value) = tlv(atv)?;
            if tag == 0x06 && oid == CN {
                cn = Some(String::from_utf8_lossy(tlv(value)?.1).into_owned());
            }
        }
    }
    cn
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_common_name() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        p.distinguished_name.push(rcgen::DnType::OrganizationName, "org");
        p.distinguished_name.push(rcgen::DnType::CommonName, "alice");
        let cert = p.self_signed(&key).unwrap();
        assert_eq!(super::common_name(cert.der()).as_deref(), Some("alice"));
        assert_eq!(super::common_name(b"\x30\x03junk"), None);
    }
}
