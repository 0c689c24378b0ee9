//! The user a client certificate stands for (etcd's `AuthInfoFromTLS`): its subject's common
//! name. A small DER walk rather than an X.509 crate: only this one field is ever read, from
//! certificates the TLS layer has already verified against `--trusted-ca-file`.

use super::der::{self, tlv};

/// The subject common name of a DER certificate (the last one, as Go reads it), if any.
pub fn common_name(der: &[u8]) -> Option<String> {
    const CN: [u8; 3] = [0x55, 0x04, 0x03];
    // serial number, signature algorithm, issuer, validity, then the subject
    let subject = der::skip(der::tbs_fields(der)?, 4)?;
    let (_, mut rdns, _) = tlv(subject)?;
    let mut cn = None;
    while !rdns.is_empty() {
        let (_, mut set, r) = tlv(rdns)?;
        rdns = r;
        while !set.is_empty() {
            let (_, atv, r) = tlv(set)?;
            set = r;
            let (tag, oid, value) = tlv(atv)?;
            if tag == der::OID && oid == CN {
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
