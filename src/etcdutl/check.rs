//! `mem_etcd check copy`: whether a copy of a store is its source exactly, at one revision
//! both can answer. A copy is a store restored from the source's snapshot (the migration from
//! etcd keeps revisions), or one that follows it. Exactly means every key's value, create and
//! mod revisions, version and lease, then etcd's HashKV of the history up to that revision
//! (the two hash alike: HashKV is etcd's on mem_etcd). It reads over the public API only, so
//! either side may be etcd or mem_etcd.

use std::collections::VecDeque;
use std::ffi::OsString;

use bytes::Bytes;
use clap::Parser;

use super::client::{Access, Conn, Store};

use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb::KeyValue;

/// Check a copy of a store against its source
#[derive(Parser, Debug)]
#[command(name = "mem_etcd check", bin_name = "mem_etcd check")]
enum Cmd {
    /// Compares every key of the copy with the source's at one revision, and their HashKV at it.
    /// Exits 0 when they are the same, 1 when they differ (each difference printed), 2 when it
    /// could not compare.
    Copy {
        /// The source's client URL (etcd's or mem_etcd's), `http://` or `https://`; a
        /// cluster's, comma-separated, for the first member that answers.
        #[arg(long)]
        source: String,
        /// The copy's client URL (or URLs).
        #[arg(long)]
        copy: String,
        /// The revision to compare at; default: the older of the two heads.
        #[arg(long)]
        revision: Option<i64>,
        #[command(flatten)]
        access: Access,
        /// How many differences to print before only counting them.
        #[arg(long, default_value_t = 20)]
        max_differences: usize,
    },
}

/// Runs `mem_etcd check ...` (`args` from `check` on) and returns the exit status.
pub fn run(args: impl Iterator<Item = OsString>) -> i32 {
    let cmd = match Cmd::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let Cmd::Copy { source, copy, revision, access, max_differences } = cmd;
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mem_etcd check copy: {e}");
            return 2;
        }
    };
    let run = async {
        let source = Store::connect(&access, &source, "source").await?;
        let copy = Store::connect(&access, &copy, "copy").await?;
        compare(source.conn, copy.conn, revision, max_differences).await
    };
    match runtime.block_on(run) {
        Ok(0) => {
            println!("the copy is exact");
            0
        }
        Ok(n) => {
            println!("the copy differs: {n} difference(s)");
            1
        }
        Err(e) => {
            eprintln!("mem_etcd check copy: {e}");
            2
        }
    }
}

/// Compares the two at `revision` (or the older head), printing each difference up to `max`.
/// Returns how many it found.
pub(super) async fn compare(
    source: Conn,
    copy: Conn,
    revision: Option<i64>,
    max: usize,
) -> Result<usize, String> {
    let rev = match revision {
        Some(r) => r,
        None => {
            let mut kv = pb::kv_client::KvClient::new(source.clone());
            let mut copy_kv = pb::kv_client::KvClient::new(copy.clone());
            head(&mut kv, "source").await?.min(head(&mut copy_kv, "copy").await?)
        }
    };
    let mut found = walk(source.clone(), copy.clone(), rev, max).await?;
    if let (Some(d), _) = hashes(source, copy, rev).await? {
        found += 1;
        if found <= max {
            println!("differs: {d}");
        }
    }
    Ok(found)
}

/// Every key of the two at `rev`, compared in key order, each difference printed up to `max`.
/// Returns how many it found.
pub(super) async fn walk(source: Conn, copy: Conn, rev: i64, max: usize) -> Result<usize, String> {
    let kv = (pb::kv_client::KvClient::new(source), pb::kv_client::KvClient::new(copy));
    let mut found = 0usize;
    let mut differ = |what: String| {
        found += 1;
        if found <= max {
            println!("differs: {what}");
        }
    };
    let (mut s, mut c) = (Pager::new(kv.0, rev, "source"), Pager::new(kv.1, rev, "copy"));
    let mut keys = 0u64;
    let (x, y) = tokio::join!(s.next(), c.next());
    let (mut a, mut b) = (x?, y?);
    loop {
        match (&a, &b) {
            (None, None) => break,
            (Some(x), None) => {
                differ(format!("{} is only in the source", shown(&x.key)));
                a = s.next().await?;
            }
            (None, Some(y)) => {
                differ(format!("{} is only in the copy", shown(&y.key)));
                b = c.next().await?;
            }
            (Some(x), Some(y)) if x.key < y.key => {
                differ(format!("{} is only in the source", shown(&x.key)));
                a = s.next().await?;
            }
            (Some(x), Some(y)) if x.key > y.key => {
                differ(format!("{} is only in the copy", shown(&y.key)));
                b = c.next().await?;
            }
            (Some(x), Some(y)) => {
                keys += 1;
                for (field, sv, cv) in [
                    ("create_revision", x.create_revision, y.create_revision),
                    ("mod_revision", x.mod_revision, y.mod_revision),
                    ("version", x.version, y.version),
                    ("lease", x.lease, y.lease),
                ] {
                    if sv != cv {
                        differ(format!(
                            "{}: {field} {sv} in the source, {cv} in the copy",
                            shown(&x.key)
                        ));
                    }
                }
                if x.value != y.value {
                    differ(format!(
                        "{}: value of {} bytes in the source, {} bytes in the copy",
                        shown(&x.key),
                        x.value.len(),
                        y.value.len()
                    ));
                }
                // The two pages are asked for at once.
                let (x, y) = tokio::join!(s.next(), c.next());
                (a, b) = (x?, y?);
            }
        }
    }
    println!("compared {keys} keys present on both at revision {rev}");
    Ok(found)
}

/// HashKV at `rev` on both, asked at once: the difference, if any, and the copy's compaction
/// revision. Equal hashes at equal compaction revisions mean equal histories from there to
/// `rev`: every key's every kept revision, value, version and lease.
pub(super) async fn hashes(
    source: Conn,
    copy: Conn,
    rev: i64,
) -> Result<(Option<String>, i64), String> {
    let hash = |ch: Conn, who: &'static str| async move {
        let mut m = pb::maintenance_client::MaintenanceClient::new(ch);
        let r = m.hash_kv(pb::HashKvRequest { revision: rev }).await;
        r.map(|r| r.into_inner()).map_err(|e| format!("{who}: HashKV at {rev}: {}", e.message()))
    };
    let (hs, hc) = tokio::try_join!(hash(source, "source"), hash(copy, "copy"))?;
    println!(
        "HashKV at {rev}: source {} (compacted at {}), copy {} (compacted at {})",
        hs.hash, hs.compact_revision, hc.hash, hc.compact_revision
    );
    let difference = if hs.compact_revision != hc.compact_revision {
        Some(format!(
            "compacted at {} in the source, {} in the copy (HashKV covers the history from there)",
            hs.compact_revision, hc.compact_revision
        ))
    } else if hs.hash != hc.hash {
        Some(format!("HashKV at {rev}: {} in the source, {} in the copy", hs.hash, hc.hash))
    } else {
        None
    };
    Ok((difference, hc.compact_revision))
}

/// The store's head revision (cheap enough to ask every second).
pub(super) async fn head(kv: &mut pb::kv_client::KvClient<Conn>, who: &str) -> Result<i64, String> {
    // One key's lookup: the header carries the revision, and nothing is counted.
    let req = pb::RangeRequest { key: Bytes::from_static(b"\0"), ..Default::default() };
    let r = kv.range(req).await.map_err(|e| format!("{who}: {}", e.message()))?.into_inner();
    Ok(r.header.map_or(0, |h| h.revision))
}

/// Every key at one revision, in key order, a page at a time.
struct Pager {
    kv: pb::kv_client::KvClient<Conn>,
    rev: i64,
    who: &'static str,
    /// The first key of the next page; `None` once the last page came.
    next: Option<Bytes>,
    page: VecDeque<KeyValue>,
}

impl Pager {
    /// Keys a page: small enough for any `--max-request-bytes` answer of Kubernetes objects.
    const PAGE: i64 = 500;

    fn new(kv: pb::kv_client::KvClient<Conn>, rev: i64, who: &'static str) -> Self {
        // 500 Kubernetes objects of up to 1.5 MiB each: no bound of tonic's 4 MiB default.
        let kv = kv.max_decoding_message_size(usize::MAX);
        Self { kv, rev, who, next: Some(Bytes::from_static(b"\0")), page: VecDeque::new() }
    }

    async fn next(&mut self) -> Result<Option<KeyValue>, String> {
        if self.page.is_empty()
            && let Some(start) = self.next.take()
        {
            let req = pb::RangeRequest {
                key: start,
                range_end: Bytes::from_static(b"\0"),
                revision: self.rev,
                limit: Self::PAGE,
                ..Default::default()
            };
            let r = self.kv.range(req).await;
            let r =
                r.map_err(|e| format!("{}: Range at {}: {}", self.who, self.rev, e.message()))?;
            let r = r.into_inner();
            if r.more
                && let Some(last) = r.kvs.last()
            {
                let mut after = last.key.to_vec();
                after.push(0);
                self.next = Some(after.into());
            }
            self.page.extend(r.kvs);
        }
        Ok(self.page.pop_front())
    }
}

fn shown(key: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(key))
}
