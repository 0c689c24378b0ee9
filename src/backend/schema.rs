//! etcd's buckets (its `server/storage/schema`) in mem_etcd's terms: an etcd snapshot.db read
//! into the keys, versions, leases and compaction a mem_etcd data directory holds, and a
//! mem_etcd backup written out as a snapshot.db that `etcdutl snapshot restore` accepts.
//!
//! | bucket | key | value |
//! |---|---|---|
//! | `key` | revision: main u64 BE, `_`, sub u64 BE, then `t` for a tombstone | `mvccpb.KeyValue` (a tombstone's holds only the key) |
//! | `lease` | lease id, i64 BE | `leasepb.Lease` {ID, TTL, RemainingTTL} |
//! | `meta` | `consistent_index`, `term` (u64 BE); `scheduledCompactRev`, `finishedCompactRev` (a revision, as above); `storageVersion` | |
//! | `auth` | `authEnabled` (one byte), `authRevision` (u64 BE) | |
//! | `authUsers`, `authRoles` | name | `authpb.User`, `authpb.Role` |
//!
//! Revisions, create and mod revisions and versions are kept exactly: a Kubernetes object's
//! resourceVersion is its key's mod revision, and informers resume watches from them.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use prost::Message;
use sha2::{Digest, Sha256};

use super::bbolt::{self, Db};
use crate::proto::authpb;
use crate::proto::mvccpb::KeyValue;
use crate::wal::backup::{self, BackupError, Item, Summary};
use crate::wal::record::Version;

/// etcd's `leasepb.Lease`, the value of its `lease` bucket.
#[derive(Clone, PartialEq, Message)]
struct Lease {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(int64, tag = "2")]
    ttl: i64,
    /// Set by lease checkpoints; a restored lease gets its full TTL anyway, as in etcd.
    #[prost(int64, tag = "3")]
    remaining_ttl: i64,
}

/// The storage version an exported file declares: etcd 3.6 refuses to start on a file it
/// cannot place, and 3.6 files say this.
const STORAGE_VERSION: &[u8] = b"3.6.0";
const REV_LEN: usize = 17;

fn err(msg: impl Into<String>) -> BackupError {
    BackupError(msg.into())
}

fn rev_bytes(main: i64, sub: i64, tombstone: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(REV_LEN + 1);
    b.extend_from_slice(&(main as u64).to_be_bytes());
    b.push(b'_');
    b.extend_from_slice(&(sub as u64).to_be_bytes());
    if tombstone {
        b.push(b't');
    }
    b
}

/// One version of a key as etcd's `key` bucket holds it: the bucket key (its revision) and the
/// value (`mvccpb.KeyValue`; a tombstone's holds only the key).
struct KeyEntry {
    rev: [u8; REV_LEN + 1],
    tombstone: bool,
    kv: KeyValue,
}

impl KeyEntry {
    fn new(key: &Bytes, v: &Version) -> Self {
        let tombstone = v.version == 0;
        let rev = bucket_key(v.main, v.sub);
        let kv = if tombstone {
            KeyValue { key: key.clone(), ..Default::default() }
        } else {
            KeyValue {
                key: key.clone(),
                create_revision: v.create_rev,
                mod_revision: v.main,
                version: v.version,
                value: v.value.clone(),
                lease: v.lease,
            }
        };
        KeyEntry { rev, tombstone, kv }
    }
}

/// A version's key in etcd's `key` bucket: its revision, big-endian main `_` sub, then a `t`
/// that only a tombstone's key includes.
fn bucket_key(main: i64, sub: i64) -> [u8; REV_LEN + 1] {
    let mut rev = [0u8; REV_LEN + 1];
    rev[..8].copy_from_slice(&(main as u64).to_be_bytes());
    rev[8] = b'_';
    rev[9..REV_LEN].copy_from_slice(&(sub as u64).to_be_bytes());
    rev[REV_LEN] = b't';
    rev
}

impl bbolt::Entry for KeyEntry {
    fn key(&self) -> &[u8] {
        &self.rev[..REV_LEN + usize::from(self.tombstone)]
    }
    fn value_len(&self) -> usize {
        self.kv.encoded_len()
    }
    fn put_value(&self, out: &mut Vec<u8>) {
        self.kv.encode_raw(out)
    }
}

/// One version of a key, borrowed: what [`key_bucket_crc`] hashes (a tombstone has
/// `version == 0`).
#[derive(Debug)]
pub struct VersionView<'a> {
    pub main: i64,
    pub sub: i64,
    pub create_rev: i64,
    pub version: i64,
    pub lease: i64,
    pub value: &'a [u8],
}

/// The CRC-32C and length of `v` as etcd's `key` bucket holds it (bucket key, then the
/// `mvccpb.KeyValue`; etcd's HashKV hashes these bytes, and so does `mvcc::Store::hash_kv`),
/// without building them: HashKV walks every version of the store, and copying each value
/// out to hash it was most of that walk. The value is hashed where it lies; `scratch` holds
/// the few bytes around it and is reused from call to call.
pub fn key_bucket_crc(key: &[u8], v: &VersionView<'_>, scratch: &mut Vec<u8>) -> (u32, usize) {
    use prost::encoding::{WireType, encode_key, encode_varint, int64};
    let tombstone = v.version == 0;
    scratch.clear();
    scratch.extend_from_slice(&bucket_key(v.main, v.sub)[..REV_LEN + usize::from(tombstone)]);
    // `mvccpb.KeyValue` as prost encodes it: fields in tag order, zero values left out.
    if !key.is_empty() {
        encode_key(1, WireType::LengthDelimited, scratch);
        encode_varint(key.len() as u64, scratch);
        scratch.extend_from_slice(key);
    }
    if tombstone {
        return (crc32c::crc32c(scratch), scratch.len());
    }
    for (tag, n) in [(2, v.create_rev), (3, v.main), (4, v.version)] {
        if n != 0 {
            int64::encode(tag, &n, scratch);
        }
    }
    if !v.value.is_empty() {
        encode_key(5, WireType::LengthDelimited, scratch);
        encode_varint(v.value.len() as u64, scratch);
    }
    let mut crc = crc32c::crc32c_append(crc32c::crc32c(scratch), v.value);
    let mut len = scratch.len() + v.value.len();
    if v.lease != 0 {
        scratch.clear();
        int64::encode(6, &v.lease, scratch);
        crc = crc32c::crc32c_append(crc, scratch);
        len += scratch.len();
    }
    (crc, len)
}

/// (main, sub, tombstone) of a `key` bucket key.
fn parse_rev(b: &[u8]) -> Option<(i64, i64, bool)> {
    let tombstone = match b.len() {
        REV_LEN => false,
        18 if b[REV_LEN] == b't' => true,
        _ => return None,
    };
    if b[8] != b'_' {
        return None;
    }
    let main = u64::from_be_bytes(b[..8].try_into().ok()?) as i64;
    let sub = u64::from_be_bytes(b[9..REV_LEN].try_into().ok()?) as i64;
    Some((main, sub, tombstone))
}

/// etcd's auth state as its buckets hold it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct AuthState {
    pub enabled: bool,
    pub revision: u64,
    pub users: Vec<authpb::User>,
    pub roles: Vec<authpb::Role>,
}

impl AuthState {
    /// Whether there is anything to carry over.
    pub fn is_empty(&self) -> bool {
        !self.enabled && self.users.is_empty() && self.roles.is_empty()
    }
}

/// What an etcd snapshot.db holds, in mem_etcd's terms.
#[derive(Debug, Default)]
pub struct EtcdState {
    pub rev: i64,
    /// -1 if never compacted.
    pub compacted: i64,
    /// Every key's retained versions, oldest first, tombstones included.
    pub keys: BTreeMap<Bytes, Vec<Version>>,
    /// (id, granted TTL).
    pub leases: Vec<(i64, i64)>,
    pub auth: AuthState,
    /// The index of the last Raft entry the database has applied (`meta`'s
    /// `consistent_index`; 0 if absent).
    pub consistent_index: u64,
}

/// Reads an etcd snapshot.db. Unless `skip_hash_check`, the file must end with the sha256
/// `etcdctl snapshot save` appends, and it must match (etcdutl's rule).
pub fn read(path: &Path, skip_hash_check: bool) -> Result<(EtcdState, Summary), BackupError> {
    let name = path.display();
    let data = std::fs::read(path).map_err(|e| err(format!("{name}: {e}")))?;
    let has_sha = data.len() % backup::ALIGN as usize == backup::SHA_LEN;
    let mut sha256 = String::new();
    let db_len = if has_sha { data.len() - backup::SHA_LEN } else { data.len() };
    if !skip_hash_check {
        if !has_sha {
            return Err(err(format!(
                "{name} has no sha256 at its end (its size, {} bytes, is not a multiple of 512 \
                 plus 32): it is truncated, or a database file copied rather than saved with \
                 `etcdctl snapshot save` (use --skip-hash-check to read it anyway)",
                data.len()
            )));
        }
        let got: [u8; 32] = Sha256::digest(&data[..db_len]).into();
        if got[..] != data[db_len..] {
            return Err(err(format!(
                "{name} is damaged or truncated: the sha256 of its content is {}, its last 32 \
                 bytes say {} (use --skip-hash-check to read it anyway)",
                backup::hex(&got),
                backup::hex(&data[db_len..])
            )));
        }
        sha256 = backup::hex(&got);
    }
    let db = Db::open(&data[..db_len]).map_err(|e| err(format!("{name}: {e}")))?;
    let bad = |what: String| err(format!("{name}: {what}"));
    let mut state = EtcdState { rev: 1, compacted: -1, ..Default::default() };

    // meta: the compaction. A scheduled compaction etcd did not finish is finished here.
    let mut compact = [0i64; 2];
    let mut consistent_index = 0;
    db.for_each(b"meta", &mut |k, v| {
        let slot = match k {
            b"scheduledCompactRev" => 0,
            b"finishedCompactRev" => 1,
            b"consistent_index" if v.len() == 8 => {
                consistent_index = u64::from_be_bytes(v.try_into().expect("8 bytes"));
                return Ok(());
            }
            _ => return Ok(()),
        };
        let (main, _, _) = parse_rev(v)
            .ok_or_else(|| bbolt::FormatError(format!("meta {:?} is not a revision", k)))?;
        compact[slot] = main;
        Ok(())
    })
    .map_err(|e| bad(e.0))?;
    let compacted = compact[0].max(compact[1]);
    state.consistent_index = consistent_index;

    let mut max_rev = 0i64;
    let found = db
        .for_each(b"key", &mut |k, v| {
            let Some((main, sub, tombstone)) = parse_rev(k) else {
                return Err(bbolt::FormatError(format!(
                    "key bucket entry {k:?} is not a revision"
                )));
            };
            let kv = KeyValue::decode(v).map_err(|e| {
                bbolt::FormatError(format!("revision {main}.{sub} does not decode: {e}"))
            })?;
            max_rev = max_rev.max(main);
            let version = if tombstone {
                Version { main, sub, create_rev: 0, version: 0, lease: 0, value: Bytes::new() }
            } else {
                Version {
                    main,
                    sub,
                    create_rev: kv.create_revision,
                    version: kv.version,
                    lease: kv.lease,
                    value: kv.value,
                }
            };
            // The bucket is in revision order, so every key's versions come oldest first.
            state.keys.entry(kv.key).or_default().push(version);
            Ok(())
        })
        .map_err(|e| bad(e.0))?;
    if !found {
        return Err(bad("no `key` bucket: not a snapshot of etcd's v3 store".into()));
    }
    if compacted > 0 {
        state.compacted = compacted;
        // etcd's compaction rule, for a compaction it scheduled but did not finish: a key keeps
        // its newest version at or below the compaction unless that is a tombstone.
        state.keys.retain(|_, vs| {
            if let Some(i) = vs.iter().rposition(|v| v.main <= compacted) {
                let keep_from = if vs[i].version == 0 { i + 1 } else { i };
                vs.drain(..keep_from);
            }
            !vs.is_empty()
        });
    }
    // etcd's current revision: the newest in the bucket, or the compaction's if that is newer
    // (it compacted away the tombstones of the last revisions).
    state.rev = max_rev.max(compacted).max(1);

    db.for_each(b"lease", &mut |_, v| {
        let l = Lease::decode(v).map_err(|e| bbolt::FormatError(format!("a lease: {e}")))?;
        state.leases.push((l.id, l.ttl));
        Ok(())
    })
    .map_err(|e| bad(e.0))?;

    db.for_each(b"auth", &mut |k, v| {
        match k {
            b"authEnabled" => state.auth.enabled = v.first() == Some(&1),
            b"authRevision" if v.len() == 8 => {
                state.auth.revision = u64::from_be_bytes(v.try_into().expect("8 bytes"))
            }
            _ => {}
        }
        Ok(())
    })
    .map_err(|e| bad(e.0))?;
    db.for_each(b"authUsers", &mut |_, v| {
        let u = authpb::User::decode(v).map_err(|e| bbolt::FormatError(format!("a user: {e}")))?;
        state.auth.users.push(u);
        Ok(())
    })
    .map_err(|e| bad(e.0))?;
    db.for_each(b"authRoles", &mut |_, v| {
        let r = authpb::Role::decode(v).map_err(|e| bbolt::FormatError(format!("a role: {e}")))?;
        state.auth.roles.push(r);
        Ok(())
    })
    .map_err(|e| bad(e.0))?;

    let summary = Summary {
        rev: state.rev,
        compacted: state.compacted,
        keys: state.keys.len() as u64,
        versions: state.keys.values().map(|v| v.len() as u64).sum(),
        leases: state.leases.clone(),
        // etcd compacts the whole store only.
        floors: Vec::new(),
        // In `state.auth`, as etcd's messages.
        auth: None,
        size: data.len() as u64,
        sha256,
    };
    Ok((state, summary))
}

/// A store at one revision as an etcd snapshot.db is written from it. It borrows what it
/// writes, and writes it twice (to lay the file out, then to stream it), so that a snapshot of
/// a large store is streamed with its bytes made a page at a time.
#[derive(Debug)]
pub struct DbView<'a> {
    /// -1 if never compacted.
    pub compacted: i64,
    /// Every retained version with its key, in revision order: the order of etcd's `key`
    /// bucket.
    pub versions: &'a [(Bytes, Version)],
    /// (id, granted TTL), in id order.
    pub leases: &'a [(i64, i64)],
    pub auth: &'a AuthState,
}

impl DbView<'_> {
    /// Where the file's tree ends up (and so its size, without the sha256).
    pub fn layout(&self) -> bbolt::Layout {
        let mut w = bbolt::Writer::plan();
        self.buckets(&mut w);
        w.finish().expect("planning writes nothing")
    }

    /// Hands the file to `sink` in order, then its sha256 (as `etcdctl snapshot save` leaves
    /// it at the end); `layout` is [`DbView::layout`]. Returns false if `sink` stopped it.
    pub fn write(&self, layout: bbolt::Layout, sink: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        let mut sha = Sha256::new();
        let mut hashed = |b: &[u8]| {
            sha.update(b);
            sink(b)
        };
        let mut w = bbolt::Writer::new(layout, &mut hashed);
        self.buckets(&mut w);
        if w.finish().is_none() {
            return false;
        }
        let sum: [u8; 32] = sha.finalize().into();
        sink(&sum)
    }

    /// Every bucket etcd 3.6 creates, in name order (bbolt's).
    fn buckets(&self, w: &mut bbolt::Writer) {
        let none = std::iter::empty::<(&[u8], &[u8])>;
        w.bucket(b"alarm", none());
        let mut auth: Vec<(&[u8], Vec<u8>)> = Vec::new();
        // etcd writes the revision when it first starts (1), and the flag at every enable and
        // disable; a state without either (from a backup without auth state) leaves etcd to
        // start its auth from scratch, as it would on a new member.
        if self.auth.enabled || self.auth.revision > 0 {
            auth.push((b"authEnabled", vec![u8::from(self.auth.enabled)]));
            auth.push((b"authRevision", self.auth.revision.to_be_bytes().to_vec()));
        }
        w.bucket(b"auth", auth);
        let mut roles: Vec<_> =
            self.auth.roles.iter().map(|r| (r.name.to_vec(), r.encode_to_vec())).collect();
        roles.sort();
        w.bucket(b"authRoles", roles);
        let mut users: Vec<_> =
            self.auth.users.iter().map(|u| (u.name.to_vec(), u.encode_to_vec())).collect();
        users.sort();
        w.bucket(b"authUsers", users);
        w.bucket(b"cluster", none());
        w.bucket(b"key", self.versions.iter().map(|(k, v)| KeyEntry::new(k, v)));
        w.bucket(
            b"lease",
            self.leases.iter().map(|&(id, ttl)| {
                (id.to_be_bytes(), Lease { id, ttl, remaining_ttl: 0 }.encode_to_vec())
            }),
        );
        w.bucket(b"members", none());
        w.bucket(b"members_removed", none());
        // etcdutl rewrites the consistent index and term when it restores.
        let mut meta: Vec<(&[u8], Vec<u8>)> =
            vec![(b"consistent_index", 1u64.to_be_bytes().to_vec())];
        if self.compacted > 0 {
            meta.push((b"finishedCompactRev", rev_bytes(self.compacted, 0, false)));
            meta.push((b"scheduledCompactRev", rev_bytes(self.compacted, 0, false)));
        }
        meta.push((b"storageVersion", STORAGE_VERSION.to_vec()));
        meta.push((b"term", 1u64.to_be_bytes().to_vec()));
        w.bucket(b"meta", meta);
    }
}

/// Writes `state` as an etcd snapshot.db: a bbolt file followed by its sha256, as
/// `etcdctl snapshot save` leaves one.
pub fn encode(state: &EtcdState) -> Vec<u8> {
    let mut versions: Vec<(Bytes, Version)> = Vec::new();
    for (key, vs) in &state.keys {
        versions.extend(vs.iter().map(|v| (key.clone(), v.clone())));
    }
    versions.sort_unstable_by_key(|(_, v)| (v.main, v.sub));
    let mut leases = state.leases.clone();
    leases.sort_unstable();
    let view = DbView {
        compacted: state.compacted,
        versions: &versions,
        leases: &leases,
        auth: &state.auth,
    };
    let layout = view.layout();
    let mut out = Vec::with_capacity(layout.bytes() as usize + backup::SHA_LEN);
    view.write(layout, &mut |b| {
        out.extend_from_slice(b);
        true
    });
    out
}

impl AuthState {
    /// The state as mem_etcd's auth store takes it (etcd's bucket values are authpb's
    /// messages, which mem_etcd's snapshots carry too).
    pub fn to_auth(&self) -> crate::auth::AuthState {
        crate::auth::codec::from_proto(crate::proto::memetcdpb::AuthSnapshot {
            enabled: self.enabled,
            revision: self.revision,
            users: self.users.clone(),
            roles: self.roles.clone(),
        })
    }

    /// mem_etcd's auth state as etcd's buckets hold it.
    pub fn from_auth(a: &crate::auth::AuthState) -> Self {
        let p = crate::auth::codec::to_proto(a);
        AuthState { enabled: p.enabled, revision: p.revision, users: p.users, roles: p.roles }
    }
}

/// `state` as a mem_etcd backup (`wal::backup`'s format), for a Raft snapshot.
pub fn to_backup(state: &EtcdState) -> Vec<u8> {
    // What this builds goes into a Raft snapshot, whose machine state carries the auth state
    // (see `etcdutl::snapshot`).
    let mut e = backup::Encoder::new(state.rev, state.compacted, None);
    e.partition(&Bytes::new());
    for (key, versions) in &state.keys {
        e.key(key.clone(), versions.clone());
    }
    for &(id, ttl) in &state.leases {
        e.lease(id, ttl);
    }
    e.end();
    e.take()
}

/// `mem_etcd snapshot restore` of an etcd snapshot.db: a new data directory holding its keys
/// with their revisions, its compaction and its leases; `auth` writes its auth state (users,
/// roles, enabled, revision), if it has any, into the directory.
pub fn restore(
    file: &Path,
    dir: &Path,
    skip_hash_check: bool,
    auth: &dyn Fn(&Path, &AuthState) -> std::io::Result<()>,
) -> Result<Summary, BackupError> {
    let (state, summary) = read(file, skip_hash_check)?;
    backup::into_new_dir(dir, &mut |dir| {
        let mut keys = state.keys.iter().map(|(k, v)| (k.clone(), v.clone()));
        backup::write_data_dir(dir, state.rev, state.compacted, &mut keys, &state.leases)?;
        if !state.auth.is_empty() {
            auth(dir, &state.auth).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        }
        Ok(summary.clone())
    })
}

/// Whether `file` is a bbolt database (an etcd snapshot.db, what Maintenance.Snapshot
/// streams) rather than a mem_etcd backup (what older mem_etcds streamed): its first meta
/// page's magic.
pub fn is_db(file: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 20];
    std::fs::File::open(file).and_then(|mut f| f.read_exact(&mut head)).is_ok()
        && head[16..20] == backup::BBOLT_MAGIC
}

/// `mem_etcd snapshot export`: the snapshot `file` written as an etcd snapshot.db at `out`
/// (which must not exist), its auth state (if it has one) in etcd's auth buckets. `file` is a
/// mem_etcd backup an older mem_etcd saved, or already an etcd snapshot.db (checked, and
/// written out compacted).
pub fn export(file: &Path, out: &Path, skip_hash_check: bool) -> Result<Summary, BackupError> {
    if is_db(file) {
        let (state, summary) = read(file, skip_hash_check)?;
        return write_new(&encode(&state), out).map(|size| Summary { size, ..summary });
    }
    let mut state = EtcdState::default();
    let summary = backup::read(file, skip_hash_check, &mut |item| {
        if let Item::Key(key, versions) = item {
            state.keys.insert(key, versions);
        }
        Ok(())
    })?;
    state.rev = summary.rev;
    state.compacted = summary.compacted;
    state.leases = summary.leases.clone();
    if let Some(b) = &summary.auth {
        let a = crate::auth::codec::decode(b)
            .ok_or_else(|| err(format!("{}: its auth state does not decode", file.display())))?;
        state.auth = AuthState::from_auth(&a);
    }
    write_new(&encode(&state), out).map(|size| Summary { size, ..summary })
}

/// Writes `bytes` as the new file `out`, synced; returns its size.
fn write_new(bytes: &[u8], out: &Path) -> Result<u64, BackupError> {
    let io = |e: std::io::Error| err(format!("{}: {e}", out.display()));
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(out).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    Ok(bytes.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(main: i64, sub: i64, create: i64, version: i64, value: &'static [u8]) -> Version {
        Version { main, sub, create_rev: create, version, lease: 0, value: Bytes::from(value) }
    }

    #[test]
    fn a_versions_crc_is_the_crc_of_its_key_bucket_entry() {
        use bbolt::Entry;
        let keys: [&[u8]; 3] = [b"k", b"/registry/pods/default/p", &[7u8; 300]];
        let values: [&'static [u8]; 3] = [b"", b"v", &[1u8; 5000]];
        let mut scratch = Vec::new();
        for key in keys {
            for value in values {
                for (main, sub, create, version, lease) in [
                    (9, 0, 3, 2, 0),
                    (1 << 40, 7, 1, 1, 0x7a2b_9c11_0000_0001),
                    (12, 1, 0, 0, 0),
                    (5, 0, 5, 1, -3),
                ] {
                    let mut x = v(main, sub, create, version, value);
                    x.lease = lease;
                    let e = KeyEntry::new(&Bytes::copy_from_slice(key), &x);
                    let bytes = [e.key(), &e.kv.encode_to_vec()].concat();
                    let view = VersionView { main, sub, create_rev: create, version, lease, value };
                    let got = key_bucket_crc(key, &view, &mut scratch);
                    assert_eq!(got, (crc32c::crc32c(&bytes), bytes.len()), "{x:?}");
                }
            }
        }
    }

    #[test]
    fn a_state_survives_export_and_import_with_its_revisions() {
        let mut s = EtcdState { rev: 9, compacted: 4, ..Default::default() };
        s.keys.insert(Bytes::from_static(b"a"), vec![v(3, 0, 2, 2, b"x"), v(5, 1, 0, 0, b"")]);
        s.keys.insert(
            Bytes::from_static(b"/registry/pods/p"),
            vec![Version { lease: 7, ..v(9, 0, 9, 1, b"y") }],
        );
        s.leases = vec![(7, 60)];
        let bytes = encode(&s);
        assert_eq!(bytes.len() % 512, 32);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        std::fs::write(&path, &bytes).unwrap();
        let (back, summary) = read(&path, false).unwrap();
        assert_eq!((back.rev, back.compacted, summary.versions), (9, 4, 3));
        assert_eq!(back.keys, s.keys);
        assert_eq!(back.leases, s.leases);

        let mut damaged = bytes.clone();
        damaged[bbolt::PAGE_SIZE * 4] ^= 1;
        std::fs::write(&path, &damaged).unwrap();
        assert!(read(&path, false).unwrap_err().0.contains("sha256"));
        std::fs::write(&path, &bytes[..bytes.len() - 32]).unwrap();
        assert!(read(&path, false).unwrap_err().0.contains("no sha256"));
        assert_eq!(read(&path, true).unwrap().0.keys, s.keys);
    }

    #[test]
    fn an_unfinished_compaction_is_finished_by_etcds_rule() {
        let mut s = EtcdState { rev: 8, compacted: 6, ..Default::default() };
        // a: put 2, put 4, deleted 6: everything goes. b: put 3, put 5, put 8: 5 and 8 stay.
        s.keys.insert(
            Bytes::from_static(b"a"),
            vec![v(2, 0, 2, 1, b"1"), v(4, 0, 2, 2, b"2"), v(6, 0, 0, 0, b"")],
        );
        s.keys.insert(
            Bytes::from_static(b"b"),
            vec![v(3, 0, 3, 1, b"1"), v(5, 0, 3, 2, b"2"), v(8, 0, 3, 3, b"3")],
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        std::fs::write(&path, encode(&s)).unwrap();
        let (back, _) = read(&path, false).unwrap();
        assert!(!back.keys.contains_key(&b"a"[..]));
        let b: Vec<i64> = back.keys[&b"b"[..]].iter().map(|v| v.main).collect();
        assert_eq!(b, vec![5, 8]);
        assert_eq!(back.rev, 8);
    }

    /// A backup (mem_etcd's format) of one key at revision 5, with the auth state `auth`.
    fn mem_backup(path: &Path, auth: Option<&crate::auth::AuthState>) {
        let auth = auth.map(|a| Bytes::from(crate::auth::codec::encode(a)));
        let mut e = backup::Encoder::new(5, -1, auth);
        e.partition(&Bytes::new());
        e.key(Bytes::from_static(b"/app/x"), vec![v(5, 0, 5, 1, b"1")]);
        e.end();
        std::fs::write(path, e.take()).unwrap();
    }

    /// Every entry of bucket `name` of the etcd snapshot.db at `path`; `None` if it has none.
    fn bucket(path: &Path, name: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        let data = std::fs::read(path).unwrap();
        let db = Db::open(&data[..data.len() - backup::SHA_LEN]).unwrap();
        let mut out = Vec::new();
        let found = db.for_each(name, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(())
        });
        found.unwrap().then_some(out)
    }

    #[test]
    fn an_export_writes_the_backups_auth_state_as_etcd_lays_it_out() {
        use crate::auth::store::{Role, User};
        use crate::auth::{PermType, Permission};
        let user = |name: &str, role: &str| User {
            name: name.into(),
            password: format!("$2a$10$hash-of-{name}").into_bytes(),
            roles: vec![role.into()],
            no_password: false,
        };
        let auth = crate::auth::AuthState {
            enabled: true,
            revision: 7,
            users: vec![user("alice", "app"), user("root", "root")],
            roles: vec![
                Role {
                    name: "app".into(),
                    permissions: vec![Permission {
                        perm_type: PermType::ReadWrite,
                        key: b"/app/".to_vec(),
                        range_end: b"/app0".to_vec(),
                    }],
                },
                Role { name: "root".into(), permissions: vec![] },
            ],
        };
        let dir = tempfile::tempdir().unwrap();
        let (mem, out) = (dir.path().join("mem.db"), dir.path().join("etcd.db"));
        mem_backup(&mem, Some(&auth));
        export(&mem, &out, false).unwrap();
        let (back, summary) = read(&out, false).unwrap();
        assert_eq!(back.auth.to_auth(), auth);
        assert_eq!((summary.rev, summary.keys), (5, 1));

        // etcd's layout: the flag as one byte, the revision as 8 big-endian bytes, users and
        // roles by name.
        let want: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (b"authEnabled".to_vec(), vec![1]),
            (b"authRevision".to_vec(), 7u64.to_be_bytes().to_vec()),
        ];
        assert_eq!(bucket(&out, b"auth"), Some(want));
        let users = bucket(&out, b"authUsers").unwrap();
        let names: Vec<&[u8]> = users.iter().map(|(k, _)| &k[..]).collect();
        assert_eq!(names, [&b"alice"[..], b"root"]);
        let alice = authpb::User::decode(&users[0].1[..]).unwrap();
        assert_eq!(
            (&alice.name[..], &alice.password[..]),
            (&b"alice"[..], &b"$2a$10$hash-of-alice"[..])
        );
        assert_eq!(alice.roles, ["app"]);
        let roles = bucket(&out, b"authRoles").unwrap();
        let app = authpb::Role::decode(&roles[0].1[..]).unwrap();
        assert_eq!((&roles[0].0[..], app.key_permission.len()), (&b"app"[..], 1));
        assert_eq!(&app.key_permission[0].range_end[..], b"/app0");

        // Disabled is written too (etcd keeps the flag once auth was ever enabled).
        let (mem, out) = (dir.path().join("off.db"), dir.path().join("etcd-off.db"));
        mem_backup(&mem, Some(&crate::auth::AuthState { enabled: false, ..auth }));
        export(&mem, &out, false).unwrap();
        assert_eq!(bucket(&out, b"auth").unwrap()[0], (b"authEnabled".to_vec(), vec![0]));
        assert!(!read(&out, false).unwrap().0.auth.enabled);
    }

    #[test]
    fn a_backup_without_auth_state_exports_etcds_auth_buckets_empty() {
        let dir = tempfile::tempdir().unwrap();
        let (mem, out) = (dir.path().join("mem.db"), dir.path().join("etcd.db"));
        mem_backup(&mem, None);
        export(&mem, &out, false).unwrap();
        for name in [&b"auth"[..], b"authUsers", b"authRoles"] {
            assert_eq!(bucket(&out, name), Some(vec![]), "{}", String::from_utf8_lossy(name));
        }
        assert!(read(&out, false).unwrap().0.auth.is_empty());
    }
}
