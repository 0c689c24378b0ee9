//! JWT tokens (etcd's `server/auth/jwt.go` and `options.go`): `--auth-token
//! jwt,sign-method=RS256,priv-key=FILE,pub-key=FILE,ttl=5m`. A token is signed with the
//! member's key and carries the user name, the auth revision it was issued at and its expiry,
//! so any member holding the key checks it without shared state, and the revision makes a
//! token stale as soon as the auth state changes (etcd's rule for JWT). The encoding matches
//! golang-jwt's byte for byte (header `{"alg":..,"typ":"JWT"}`, claims in sorted key order,
//! unpadded base64url), so tokens move between etcd and mem_etcd members holding one key.
//!
//! Signatures are ring's, but ES512's (P-521, which ring lacks): the `p521` crate's; keys are read from the file's first PEM block as Go's jwt library
//! reads them: PKCS#1 or PKCS#8 RSA keys, SEC1 or PKCS#8 EC keys, PKCS#8 Ed25519 keys, public
//! keys as SubjectPublicKeyInfo or in a certificate (not Go's PKCS#1 `RSA PUBLIC KEY`), the
//! HMAC secret as the file's raw bytes. RSA keys must have 2048 to 8192 bits (ring's bounds).

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use parking_lot::RwLock;
use ring::rand::SystemRandom;
use ring::signature::{self as sig, KeyPair as _};
use ring::{hmac, signature::UnparsedPublicKey};
use tokio_rustls::rustls::pki_types::pem::{PemObject, SectionKind};

use super::AuthInfo;
use super::der;

/// What is wrong with the `--auth-token` option; the messages are etcd's where it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionsError {
    /// Not `simple` nor `jwt`, an option without `=`, or one given twice.
    Invalid,
    /// sign-method missing or unknown.
    Method,
    /// Neither key given.
    MissingKey,
    /// Both keys given, and they are not one pair.
    KeyMismatch,
    /// A key file that cannot be read or is not a key for the method.
    Key(String),
    /// ttl is not a Go duration.
    Ttl(String),
}

impl fmt::Display for OptionsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionsError::Invalid => f.write_str("auth: invalid auth options"),
            OptionsError::Method => f.write_str("auth: invalid auth signature method"),
            OptionsError::MissingKey => f.write_str("auth: missing key data"),
            OptionsError::KeyMismatch => f.write_str("auth: public and private keys don't match"),
            OptionsError::Key(e) => write!(f, "auth: {e}"),
            OptionsError::Ttl(t) => write!(f, "auth: invalid ttl {t:?}"),
        }
    }
}

impl std::error::Error for OptionsError {}

/// How tokens are made: `--auth-token`'s first word.
#[derive(Debug)]
pub enum TokenKind {
    Simple,
    Jwt(Box<Jwt>),
}

impl TokenKind {
    /// etcd's `decomposeOpts` and `NewTokenProvider`.
    pub fn parse(opts: &str) -> Result<TokenKind, OptionsError> {
        let mut parts = opts.split(',');
        let kind = parts.next().unwrap_or_default();
        let mut map: Vec<(&str, &str)> = Vec::new();
        for p in parts {
            let mut kv = p.split('=');
            let (Some(k), Some(v), None) = (kv.next(), kv.next(), kv.next()) else {
                return Err(OptionsError::Invalid);
            };
            if map.iter().any(|(seen, _)| *seen == k) {
                return Err(OptionsError::Invalid);
            }
            map.push((k, v));
        }
        let get = |k: &str| map.iter().find(|(n, _)| *n == k).map(|(_, v)| *v).unwrap_or("");
        match kind {
            "simple" => Ok(TokenKind::Simple),
            "jwt" => {
                let unknown: Vec<&str> = map
                    .iter()
                    .map(|(k, _)| *k)
                    .filter(|k| !["sign-method", "pub-key", "priv-key", "ttl"].contains(k))
                    .collect();
                if !unknown.is_empty() {
                    tracing::warn!(keys = ?unknown, "auth: unknown JWT options");
                }
                Jwt::new(get("sign-method"), get("priv-key"), get("pub-key"), get("ttl"))
                    .map(|j| TokenKind::Jwt(Box::new(j)))
            }
            _ => Err(OptionsError::Invalid),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// PKCS#1 v1.5 and PSS signatures alike: the same keys.
    Rsa,
    Ecdsa,
    Ed25519,
    Hmac,
}

/// A signing method: golang-jwt's name and ring's algorithms for it.
#[derive(Debug)]
struct Method {
    name: &'static str,
    family: Family,
    rsa_sign: Option<&'static dyn sig::RsaEncoding>,
    verify: Option<&'static dyn sig::VerificationAlgorithm>,
    ecdsa_sign: Option<&'static sig::EcdsaSigningAlgorithm>,
    hmac: Option<hmac::Algorithm>,
    /// The named curve's OID (DER content) for EC keys, to wrap a SEC1 key as PKCS#8.
    curve_oid: &'static [u8],
}

const P256_OID: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const P384_OID: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const P521_OID: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];
/// A P-521 private scalar's bytes, and an uncompressed P-521 point's (SEC1: 0x04, x, y).
const P521_SCALAR: usize = 66;
const P521_POINT: usize = 1 + 2 * P521_SCALAR;

fn method(name: &str) -> Result<Method, OptionsError> {
    let m = |name, family| Method {
        name,
        family,
        rsa_sign: None,
        verify: None,
        ecdsa_sign: None,
        hmac: None,
        curve_oid: &[],
    };
    Ok(match name {
        "RS256" => Method {
            rsa_sign: Some(&sig::RSA_PKCS1_SHA256),
            verify: Some(&sig::RSA_PKCS1_2048_8192_SHA256),
            ..m("RS256", Family::Rsa)
        },
        "RS384" => Method {
            rsa_sign: Some(&sig::RSA_PKCS1_SHA384),
            verify: Some(&sig::RSA_PKCS1_2048_8192_SHA384),
            ..m("RS384", Family::Rsa)
        },
        "RS512" => Method {
            rsa_sign: Some(&sig::RSA_PKCS1_SHA512),
            verify: Some(&sig::RSA_PKCS1_2048_8192_SHA512),
            ..m("RS512", Family::Rsa)
        },
        "PS256" => Method {
            rsa_sign: Some(&sig::RSA_PSS_SHA256),
            verify: Some(&sig::RSA_PSS_2048_8192_SHA256),
            ..m("PS256", Family::Rsa)
        },
        "PS384" => Method {
            rsa_sign: Some(&sig::RSA_PSS_SHA384),
            verify: Some(&sig::RSA_PSS_2048_8192_SHA384),
            ..m("PS384", Family::Rsa)
        },
        "PS512" => Method {
            rsa_sign: Some(&sig::RSA_PSS_SHA512),
            verify: Some(&sig::RSA_PSS_2048_8192_SHA512),
            ..m("PS512", Family::Rsa)
        },
        "ES256" => Method {
            ecdsa_sign: Some(&sig::ECDSA_P256_SHA256_FIXED_SIGNING),
            verify: Some(&sig::ECDSA_P256_SHA256_FIXED),
            curve_oid: P256_OID,
            ..m("ES256", Family::Ecdsa)
        },
        "ES384" => Method {
            ecdsa_sign: Some(&sig::ECDSA_P384_SHA384_FIXED_SIGNING),
            verify: Some(&sig::ECDSA_P384_SHA384_FIXED),
            curve_oid: P384_OID,
            ..m("ES384", Family::Ecdsa)
        },
        // Neither signing nor verifying is ring's: `Signer::P521` and `Jwt::verify`.
        "ES512" => Method { curve_oid: P521_OID, ..m("ES512", Family::Ecdsa) },
        "EdDSA" => Method { verify: Some(&sig::ED25519), ..m("EdDSA", Family::Ed25519) },
        "HS256" => Method { hmac: Some(hmac::HMAC_SHA256), ..m("HS256", Family::Hmac) },
        "HS384" => Method { hmac: Some(hmac::HMAC_SHA384), ..m("HS384", Family::Hmac) },
        "HS512" => Method { hmac: Some(hmac::HMAC_SHA512), ..m("HS512", Family::Hmac) },
        _ => return Err(OptionsError::Method),
    })
}

enum Signer {
    Rsa(sig::RsaKeyPair),
    Ecdsa(sig::EcdsaKeyPair),
    Ed25519(sig::Ed25519KeyPair),
    /// ES512. Boxed: the key is ten times the other variants' size. Signs with a nonce from
    /// the OS's random source, as golang-jwt does.
    P521(Box<p521::ecdsa::SigningKey>),
}

/// A JWT token maker and checker, shared by every request: immutable after start but for the
/// tokens it remembers (`verified`).
pub struct Jwt {
    method: Method,
    /// None with only a public key: this member checks tokens but cannot issue them.
    signer: Option<Signer>,
    /// The public key's bytes as ring takes them (PKCS#1 RSAPublicKey, an EC point, an
    /// Ed25519 key); empty for HMAC.
    public: Vec<u8>,
    hmac: Option<hmac::Key>,
    ttl: Duration,
    /// The encoded header, the same for every token.
    header: String,
    rng: SystemRandom,
    /// Tokens whose signature this member checked, with who they stand for and their expiry
    /// (seconds since the epoch): a client sends the same token with every request, and a
    /// signature check costs tens of microseconds (an ECDSA one, twice a put's own work). Keyed
    /// by the whole token, signature included, so only the very bytes checked match. Read by
    /// every authenticated request (shared lock), written on a miss; emptied when full.
    verified: RwLock<HashMap<Box<str>, (AuthInfo, f64)>>,
}

/// Tokens [`Jwt::verified`] holds at most: more clients than this at once merely check again.
const VERIFIED_MAX: usize = 4096;

impl fmt::Debug for Jwt {
    // Never the keys.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jwt")
            .field("method", &self.method.name)
            .field("verify_only", &self.verify_only())
            .field("ttl", &self.ttl)
            .finish()
    }
}

fn read_key(path: &str) -> Result<Vec<u8>, OptionsError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    std::fs::read(path).map_err(|e| OptionsError::Key(format!("{path}: {e}")))
}

fn key_err(path: &str, what: &str) -> OptionsError {
    OptionsError::Key(format!("{path}: {what}"))
}

impl Jwt {
    fn new(
        method_name: &str,
        priv_path: &str,
        pub_path: &str,
        ttl: &str,
    ) -> Result<Self, OptionsError> {
        let ttl = if ttl.is_empty() {
            Duration::from_secs(300)
        } else {
            crate::duration::parse_duration(ttl).map_err(|_| OptionsError::Ttl(ttl.to_string()))?
        };
        let method = method(method_name)?;
        let (private, public) = (read_key(priv_path)?, read_key(pub_path)?);
        let header = B64.encode(format!(r#"{{"alg":"{}","typ":"JWT"}}"#, method.name));
        let mut jwt = Jwt {
            method,
            signer: None,
            public: Vec::new(),
            hmac: None,
            ttl,
            header,
            rng: SystemRandom::new(),
            verified: RwLock::default(),
        };
        if jwt.method.family == Family::Hmac {
            // Go's jwt takes the file's bytes as they are, newline included.
            if private.is_empty() {
                return Err(OptionsError::MissingKey);
            }
            jwt.hmac = Some(hmac::Key::new(jwt.method.hmac.expect("hmac"), &private));
            return Ok(jwt);
        }
        if !public.is_empty() {
            jwt.public = jwt
                .public_key(&public)
                .ok_or_else(|| key_err(pub_path, "not a public key for the method"))?;
        }
        if !private.is_empty() {
            let signer = jwt
                .private_key(&private)
                .ok_or_else(|| key_err(priv_path, "not a private key for the method"))?;
            let derived = match &signer {
                Signer::Rsa(k) => k.public_key().as_ref().to_vec(),
                Signer::Ecdsa(k) => k.public_key().as_ref().to_vec(),
                Signer::Ed25519(k) => k.public_key().as_ref().to_vec(),
                Signer::P521(k) => p521::ecdsa::VerifyingKey::from(k.as_ref())
                    .to_encoded_point(false)
                    .to_bytes()
                    .to_vec(),
            };
            if !jwt.public.is_empty() && jwt.public != derived {
                return Err(OptionsError::KeyMismatch);
            }
            jwt.public = derived;
            jwt.signer = Some(signer);
        }
        if jwt.public.is_empty() {
            return Err(OptionsError::MissingKey);
        }
        Ok(jwt)
    }

    /// Whether this member only checks tokens (etcd: `ErrVerifyOnly` on Authenticate).
    pub fn verify_only(&self) -> bool {
        self.signer.is_none() && self.hmac.is_none()
    }

    pub fn method_name(&self) -> &'static str {
        self.method.name
    }

    fn private_key(&self, pem: &[u8]) -> Option<Signer> {
        let (kind, doc) = first_pem(pem)?;
        let m = &self.method;
        match (m.family, kind) {
            (Family::Rsa, SectionKind::RsaPrivateKey) => {
                sig::RsaKeyPair::from_der(&doc).ok().map(Signer::Rsa)
            }
            (Family::Rsa, SectionKind::PrivateKey) => {
                sig::RsaKeyPair::from_pkcs8(&doc).ok().map(Signer::Rsa)
            }
            (Family::Ecdsa, SectionKind::EcPrivateKey | SectionKind::PrivateKey)
                if m.curve_oid == P521_OID =>
            {
                let scalar = p521_scalar(&doc, kind)?;
                p521::ecdsa::SigningKey::from_slice(&scalar).ok().map(|k| Signer::P521(Box::new(k)))
            }
            (Family::Ecdsa, SectionKind::EcPrivateKey | SectionKind::PrivateKey) => {
                let pkcs8 = if kind == SectionKind::EcPrivateKey {
                    sec1_to_pkcs8(&doc, m.curve_oid)
                } else {
                    doc
                };
                sig::EcdsaKeyPair::from_pkcs8(m.ecdsa_sign?, &pkcs8, &self.rng)
                    .ok()
                    .map(Signer::Ecdsa)
            }
            (Family::Ed25519, SectionKind::PrivateKey) => {
                sig::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&doc).ok().map(Signer::Ed25519)
            }
            _ => None,
        }
    }

    /// The key ring verifies with, from a SubjectPublicKeyInfo (`PUBLIC KEY`) or a
    /// certificate.
    fn public_key(&self, pem: &[u8]) -> Option<Vec<u8>> {
        let (kind, doc) = first_pem(pem)?;
        let key = match kind {
            SectionKind::PublicKey => spki_key(&doc)?,
            // serial, signature algorithm, issuer, validity, subject, then the key
            SectionKind::Certificate => spki_key(der::skip(der::tbs_fields(&doc)?, 5)?)?,
            _ => return None,
        };
        // A key of another kind is refused at start rather than failing every token.
        match self.method.family {
            Family::Ed25519 => (key.len() == 32).then_some(key),
            Family::Ecdsa => (key.first() == Some(&4)
                && key.len()
                    == match self.method.curve_oid {
                        P256_OID => 65,
                        P384_OID => 97,
                        _ => P521_POINT,
                    })
            .then_some(key),
            _ => (key.first() == Some(&der::SEQUENCE)).then_some(key),
        }
    }

    /// etcd's `assign`: a token for `username` at auth revision `revision`.
    pub fn sign(&self, username: &str, revision: u64) -> Result<String, crate::error::Error> {
        let exp = SystemTime::now()
            .checked_add(self.ttl)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        // serde_json escapes as Go's encoding/json does for names (both escape '"', '\\' and
        // control characters; Go also escapes <, >, & which user names rarely hold).
        let name = serde_json::to_string(username).map_err(|_| crate::error::Error::Internal)?;
        let claims = format!(r#"{{"exp":{exp},"revision":{revision},"username":{name}}}"#);
        let mut token = String::with_capacity(self.header.len() + claims.len() * 2 + 400);
        token.push_str(&self.header);
        token.push('.');
        B64.encode_string(claims, &mut token);
        let signature = match (&self.signer, &self.hmac) {
            (_, Some(k)) => hmac::sign(k, token.as_bytes()).as_ref().to_vec(),
            (Some(Signer::Rsa(k)), _) => {
                let mut out = vec![0; k.public().modulus_len()];
                k.sign(
                    self.method.rsa_sign.ok_or(crate::error::Error::Internal)?,
                    &self.rng,
                    token.as_bytes(),
                    &mut out,
                )
                .map_err(|_| crate::error::Error::Internal)?;
                out
            }
            (Some(Signer::Ecdsa(k)), _) => k
                .sign(&self.rng, token.as_bytes())
                .map_err(|_| crate::error::Error::Internal)?
                .as_ref()
                .to_vec(),
            (Some(Signer::Ed25519(k)), _) => k.sign(token.as_bytes()).as_ref().to_vec(),
            (Some(Signer::P521(k)), _) => {
                use p521::ecdsa::signature::Signer as _;
                let s: p521::ecdsa::Signature = k.sign(token.as_bytes());
                s.to_bytes().to_vec()
            }
            (None, None) => return Err(crate::error::Error::VerifyOnly),
        };
        token.push('.');
        B64.encode_string(signature, &mut token);
        Ok(token)
    }

    /// etcd's `info`: who a well-signed, unexpired token of this method stands for.
    pub fn check(&self, token: &str) -> Option<AuthInfo> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs_f64();
        if let Some((info, exp)) = self.verified.read().get(token) {
            // golang-jwt: a token is valid strictly before its exp.
            return (now < *exp).then(|| info.clone());
        }
        let (info, exp) = self.verify(token, now)?;
        let mut verified = self.verified.write();
        if verified.len() >= VERIFIED_MAX {
            verified.clear();
        }
        verified.insert(token.into(), (info.clone(), exp));
        Some(info)
    }

    /// A full check of `token`: signature, method, expiry and claims.
    fn verify(&self, token: &str, now: f64) -> Option<(AuthInfo, f64)> {
        let (signed, signature) = token.rsplit_once('.')?;
        let (header, claims) = signed.split_once('.')?;
        let signature = B64.decode(signature).ok()?;
        let ok = match &self.hmac {
            Some(k) => hmac::verify(k, signed.as_bytes(), &signature).is_ok(),
            None if self.method.curve_oid == P521_OID => {
                use p521::ecdsa::signature::Verifier as _;
                let key = p521::ecdsa::VerifyingKey::from_sec1_bytes(&self.public).ok()?;
                let s = p521::ecdsa::Signature::from_slice(&signature).ok()?;
                key.verify(signed.as_bytes(), &s).is_ok()
            }
            None => UnparsedPublicKey::new(self.method.verify?, &self.public)
                .verify(signed.as_bytes(), &signature)
                .is_ok(),
        };
        if !ok {
            tracing::warn!("auth: a JWT token with a bad signature");
            return None;
        }
        let header: serde_json::Value = serde_json::from_slice(&B64.decode(header).ok()?).ok()?;
        if header.get("alg").and_then(|a| a.as_str()) != Some(self.method.name) {
            tracing::warn!("auth: a JWT token of another signing method");
            return None;
        }
        let claims: serde_json::Value = serde_json::from_slice(&B64.decode(claims).ok()?).ok()?;
        // golang-jwt: exp optional, but when present it must be a number in the future.
        let exp = match claims.get("exp") {
            None => f64::INFINITY,
            Some(e) => e.as_f64().filter(|e| now < *e)?,
        };
        let username = claims.get("username")?.as_str()?.to_string();
        let revision = claims.get("revision")?.as_f64()? as u64;
        Some((AuthInfo { username, revision }, exp))
    }
}

/// The first PEM block of `pem`, if it is a key or certificate. Go's jwt reads only the first
/// block, so a key after another one (the EC PARAMETERS `openssl ecparam -genkey` writes
/// unless given -noout) is refused, as etcd refuses it: a key file works on both or neither.
fn first_pem(pem: &[u8]) -> Option<(SectionKind, Vec<u8>)> {
    let text = std::str::from_utf8(pem).ok()?;
    let label = text.split("-----BEGIN ").nth(1)?.split("-----").next()?;
    let (kind, der) = <(SectionKind, Vec<u8>)>::from_pem_slice(pem).ok()?;
    let expected = match kind {
        SectionKind::PrivateKey => "PRIVATE KEY",
        SectionKind::RsaPrivateKey => "RSA PRIVATE KEY",
        SectionKind::EcPrivateKey => "EC PRIVATE KEY",
        SectionKind::PublicKey => "PUBLIC KEY",
        SectionKind::Certificate => "CERTIFICATE",
        _ => return None,
    };
    (label == expected).then_some((kind, der))
}

/// The subjectPublicKey bits of a SubjectPublicKeyInfo (what ring verifies with).
fn spki_key(spki: &[u8]) -> Option<Vec<u8>> {
    let body = der::content(spki, der::SEQUENCE)?;
    let (tag, _, rest) = der::tlv(body)?;
    (tag == der::SEQUENCE).then_some(())?;
    let bits = der::content(rest, der::BIT_STRING)?;
    (bits.first() == Some(&0)).then(|| bits[1..].to_vec())
}

/// The private scalar of a P-521 key: a SEC1 `EC PRIVATE KEY` (version 1, the scalar, ...), or
/// a PKCS#8 `PRIVATE KEY` whose algorithm names P-521 around one. `None` for a key of another
/// curve.
fn p521_scalar(doc: &[u8], kind: SectionKind) -> Option<Vec<u8>> {
    let sec1 = if kind == SectionKind::PrivateKey {
        // Past the version: the algorithm (id-ecPublicKey and the curve), then the SEC1 key.
        let rest = der::skip(der::content(doc, der::SEQUENCE)?, 1)?;
        let (tag, alg, rest) = der::tlv(rest)?;
        let curve = der::content(der::skip(alg, 1)?, der::OID)?;
        (tag == der::SEQUENCE && curve == P521_OID).then_some(())?;
        der::content(rest, der::OCTET_STRING)?
    } else {
        doc
    };
    let scalar =
        der::content(der::skip(der::content(sec1, der::SEQUENCE)?, 1)?, der::OCTET_STRING)?;
    (scalar.len() == P521_SCALAR).then(|| scalar.to_vec())
}

/// A SEC1 `EC PRIVATE KEY` as the PKCS#8 document ring reads: version 0, the algorithm
/// id-ecPublicKey with the named curve, the SEC1 bytes as the private key.
fn sec1_to_pkcs8(sec1: &[u8], curve_oid: &[u8]) -> Vec<u8> {
    const EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    let alg = [der::encode(der::OID, EC_PUBLIC_KEY), der::encode(der::OID, curve_oid)].concat();
    let body = [
        der::encode(der::INTEGER, &[0]),
        der::encode(der::SEQUENCE, &alg),
        der::encode(der::OCTET_STRING, sec1),
    ]
    .concat();
    der::encode(der::SEQUENCE, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_as_etcd_checks_them() {
        assert!(matches!(TokenKind::parse("simple"), Ok(TokenKind::Simple)));
        assert_eq!(TokenKind::parse("bogus").err(), Some(OptionsError::Invalid));
        assert_eq!(TokenKind::parse("jwt,ttl").err(), Some(OptionsError::Invalid));
        assert_eq!(TokenKind::parse("jwt,ttl=1m,ttl=2m").err(), Some(OptionsError::Invalid));
        assert_eq!(TokenKind::parse("jwt,ttl=1m").err(), Some(OptionsError::Method));
        assert_eq!(TokenKind::parse("jwt,sign-method=XS1").err(), Some(OptionsError::Method));
        assert_eq!(TokenKind::parse("jwt,sign-method=RS256").err(), Some(OptionsError::MissingKey));
        assert_eq!(TokenKind::parse("jwt,sign-method=HS256").err(), Some(OptionsError::MissingKey));
    }

    fn hs256(secret: &[u8], ttl: &str) -> Jwt {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, secret).unwrap();
        Jwt::new("HS256", path.to_str().unwrap(), "", ttl).unwrap()
    }

    #[test]
    fn a_token_says_who_and_at_which_revision_and_only_with_the_key() {
        let jwt = hs256(b"secret", "5m");
        let token = jwt.sign("alice", 7).unwrap();
        assert_eq!(jwt.check(&token), Some(AuthInfo { username: "alice".into(), revision: 7 }));
        assert!(token.starts_with("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."), "{token}");
        // Another key, a changed claim, a truncated token: refused.
        assert_eq!(hs256(b"other", "5m").check(&token), None);
        let (h, rest) = token.split_once('.').unwrap();
        let (_, s) = rest.split_once('.').unwrap();
        let forged = B64.encode(r#"{"exp":9999999999,"revision":7,"username":"root"}"#);
        assert_eq!(jwt.check(&format!("{h}.{forged}.{s}")), None);
        assert_eq!(jwt.check(&token[..token.len() - 2]), None);
        assert_eq!(jwt.check("not a token"), None);
    }

    #[test]
    fn an_expired_token_is_refused() {
        let jwt = hs256(b"secret", "1s");
        let token = jwt.sign("alice", 1).unwrap();
        // Checked once (and remembered), then past its expiry: refused all the same.
        assert!(jwt.check(&token).is_some());
        std::thread::sleep(Duration::from_millis(2100));
        assert_eq!(jwt.check(&token), None);
    }

    fn fixture(name: &str) -> String {
        format!("{}/tests/fixtures/jwt/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    #[test]
    fn every_method_signs_and_checks_with_keys_as_openssl_writes_them() {
        // (method, private key, public key): PKCS#1 and PKCS#8 RSA, SEC1 and PKCS#8 EC,
        // PKCS#8 Ed25519.
        let cases = [
            ("RS256", "rsa.key", "rsa.pub"),
            ("RS512", "rsa.key", "rsa.pub"),
            ("PS256", "rsa.key", "rsa.pub"),
            ("PS384", "rsa.key", "rsa.pub"),
            ("ES256", "ec256.key", "ec256.pub"),
            ("ES384", "ec384.key", "ec384.pub"),
            ("ES512", "ec521.key", "ec521.pub"),
            ("ES512", "ec521-pkcs8.key", "ec521.pub"),
            ("EdDSA", "ed25519.key", "ed25519.pub"),
        ];
        for (m, private, public) in cases {
            let (private, public) = (fixture(private), fixture(public));
            let signer = Jwt::new(m, &private, &public, "").unwrap_or_else(|e| panic!("{m}: {e}"));
            let alone = Jwt::new(m, &private, "", "").unwrap_or_else(|e| panic!("{m}: {e}"));
            let checker = Jwt::new(m, "", &public, "").unwrap_or_else(|e| panic!("{m}: {e}"));
            assert!(checker.verify_only() && !signer.verify_only(), "{m}");
            let token = signer.sign("alice", 3).unwrap();
            let want = Some(AuthInfo { username: "alice".into(), revision: 3 });
            assert_eq!(checker.check(&token), want, "{m}");
            assert_eq!(alone.check(&token), want, "{m}");
            assert_eq!(checker.sign("alice", 3), Err(crate::error::Error::VerifyOnly), "{m}");
        }
        let rsa = fixture("rsa-pkcs8.key");
        let token = Jwt::new("RS256", &rsa, "", "").unwrap().sign("bob", 1).unwrap();
        // Another key, and another method with the same key: refused.
        assert_eq!(Jwt::new("RS256", "", &fixture("rsa.pub"), "").unwrap().check(&token), None);
        let pss = Jwt::new("PS256", &rsa, "", "").unwrap();
        assert_eq!(pss.check(&token), None);
        assert_eq!(
            Jwt::new("RS256", &rsa, &fixture("rsa.pub"), "").err(),
            Some(OptionsError::KeyMismatch)
        );
        assert!(matches!(
            Jwt::new("ES256", &fixture("ec384.key"), "", ""),
            Err(OptionsError::Key(_))
        ));
        assert!(matches!(
            Jwt::new("ES256", "", &fixture("rsa.pub"), ""),
            Err(OptionsError::Key(_))
        ));
        assert!(matches!(Jwt::new("ES512", &rsa, "", ""), Err(OptionsError::Key(_))));
        for (m, private, public) in
            [("ES512", "ec384.key", "ec384.pub"), ("ES384", "ec521.key", "ec521.pub")]
        {
            assert!(
                matches!(Jwt::new(m, &fixture(private), "", ""), Err(OptionsError::Key(_))),
                "{m}"
            );
            assert!(
                matches!(Jwt::new(m, "", &fixture(public), ""), Err(OptionsError::Key(_))),
                "{m}"
            );
        }
        // A key after EC PARAMETERS: refused, as Go's jwt (first PEM block only) refuses it.
        let params_first = fixture("ec256-with-params.key");
        assert!(matches!(Jwt::new("ES256", &params_first, "", ""), Err(OptionsError::Key(_))));
    }
}
