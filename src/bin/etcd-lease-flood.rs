//! `etcd-lease-flood`: floods an etcd-compatible server with Lease renewals shaped the way
//! kube-apiserver writes them for kubelets.
//!
//! Each of `--num-keys` keys under `--key-prefix` holds a `coordination.k8s.io/v1` Lease in
//! Kubernetes' protobuf storage encoding (`k8s\0`, then a `runtime.Unknown` wrapping the Lease),
//! about 350 bytes, with `renewTime` advanced on every write. In `--mode txn` (the default) each
//! write is kube-apiserver's optimistic update: a Txn comparing the key's mod_revision with the
//! last one seen, a Put on success and a Range on failure; a conflict takes the revision from the
//! Range and retries. `--mode put` writes plain Puts. Works against etcd and mem_etcd.
//!
//! The run ends after `--duration` or `--total` writes and prints
//! `N writes in T s: R writes/s, p50 X ms, p99 Y ms, p99.9 Z ms, errors E`.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::Parser;
use mem_etcd::config::parse_duration;
use mem_etcd::proto::etcdserverpb as pb;
use pb::compare::{CompareResult, CompareTarget, TargetUnion};
use pb::kv_client::KvClient;
use pb::request_op::Request as Op;
use pb::response_op::Response as OpResponse;
use prost::Message;
use tonic::transport::Channel;

#[derive(Parser, Debug)]
#[command(name = "etcd-lease-flood", about = "Flood an etcd server with Kubernetes Lease renewals")]
struct Args {
    /// Servers to write to (host:port), comma-separated; connections are spread over them.
    #[arg(long, default_value = "127.0.0.1:2379", value_delimiter = ',')]
    endpoints: Vec<String>,
    /// gRPC connections.
    #[arg(long, default_value_t = 10)]
    clients: usize,
    /// Concurrent writers (each owns a share of the keys, as each kubelet owns its Lease).
    #[arg(long, default_value_t = 100)]
    workers: usize,
    /// Number of Lease objects.
    #[arg(long, default_value_t = 10_000)]
    num_keys: usize,
    #[arg(long, default_value = "/registry/leases/kube-node-lease/")]
    key_prefix: String,
    /// How long to run (ignored when --total is given).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Stop after this many writes.
    #[arg(long)]
    total: Option<u64>,
    /// Write every key exactly this many times, then stop (loads a store with an exact number
    /// of keys and versions; overrides --total and --duration).
    #[arg(long)]
    rounds: Option<u64>,
    /// Writes per second over all workers (unlimited if absent).
    #[arg(long)]
    rate: Option<f64>,
    /// txn: kube-apiserver's compare-mod_revision update; put: plain puts.
    #[arg(long, value_enum, default_value = "txn")]
    mode: Mode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    Txn,
    Put,
}

/// The Kubernetes protobuf messages a stored Lease is made of (field numbers as in
/// k8s.io/api and k8s.io/apimachinery's generated.proto; only the fields a kubelet's Lease has).
mod k8s {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Unknown {
        #[prost(message, optional, tag = "1")]
        pub type_meta: Option<TypeMeta>,
        #[prost(bytes = "vec", tag = "2")]
        pub raw: Vec<u8>,
        #[prost(string, tag = "3")]
        pub content_encoding: String,
        #[prost(string, tag = "4")]
        pub content_type: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TypeMeta {
        #[prost(string, tag = "1")]
        pub api_version: String,
        #[prost(string, tag = "2")]
        pub kind: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Lease {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ObjectMeta>,
        #[prost(message, optional, tag = "2")]
        pub spec: Option<LeaseSpec>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ObjectMeta {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "3")]
        pub namespace: String,
        #[prost(string, tag = "5")]
        pub uid: String,
        #[prost(message, optional, tag = "8")]
        pub creation_timestamp: Option<Time>,
        #[prost(message, repeated, tag = "13")]
        pub owner_references: Vec<OwnerReference>,
        #[prost(message, repeated, tag = "17")]
        pub managed_fields: Vec<ManagedFieldsEntry>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct OwnerReference {
        #[prost(string, tag = "1")]
        pub kind: String,
        #[prost(string, tag = "3")]
        pub name: String,
        #[prost(string, tag = "4")]
        pub uid: String,
        #[prost(string, tag = "5")]
        pub api_version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ManagedFieldsEntry {
        #[prost(string, tag = "1")]
        pub manager: String,
        #[prost(string, tag = "2")]
        pub operation: String,
        #[prost(string, tag = "3")]
        pub api_version: String,
        #[prost(message, optional, tag = "4")]
        pub time: Option<Time>,
        #[prost(string, tag = "6")]
        pub fields_type: String,
        #[prost(message, optional, tag = "7")]
        pub fields_v1: Option<FieldsV1>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct FieldsV1 {
        #[prost(bytes = "vec", tag = "1")]
        pub raw: Vec<u8>,
    }

    /// Both `Time` and `MicroTime`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Time {
        #[prost(int64, tag = "1")]
        pub seconds: i64,
        #[prost(int32, tag = "2")]
        pub nanos: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseSpec {
        #[prost(string, tag = "1")]
        pub holder_identity: String,
        #[prost(int32, tag = "2")]
        pub lease_duration_seconds: i32,
        #[prost(message, optional, tag = "4")]
        pub renew_time: Option<Time>,
    }
}

/// A node's Lease as kube-apiserver stores it, renewed at `now`.
fn lease_value(node: &str, now: SystemTime) -> Bytes {
    let t = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let second = k8s::Time { seconds: t.as_secs() as i64, nanos: 0 };
    let micro = k8s::Time { seconds: t.as_secs() as i64, nanos: (t.subsec_micros() * 1000) as i32 };
    let uid = format!("{:08x}-7d1c-4b2a-9c1e-{:012x}", crc32c::crc32c(node.as_bytes()), node.len());
    let lease = k8s::Lease {
        metadata: Some(k8s::ObjectMeta {
            name: node.to_string(),
            namespace: "kube-node-lease".into(),
            uid: uid.clone(),
            creation_timestamp: Some(second.clone()),
            owner_references: vec![k8s::OwnerReference {
                kind: "Node".into(),
                name: node.to_string(),
                uid,
                api_version: "v1".into(),
            }],
            managed_fields: vec![k8s::ManagedFieldsEntry {
                manager: "kubelet".into(),
                operation: "Update".into(),
                api_version: "coordination.k8s.io/v1".into(),
                time: Some(second),
                fields_type: "FieldsV1".into(),
                fields_v1: Some(k8s::FieldsV1 {
                    raw: br#"{"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}"#
                        .to_vec(),
                }),
            }],
        }),
        spec: Some(k8s::LeaseSpec {
            holder_identity: node.to_string(),
            lease_duration_seconds: 40,
            renew_time: Some(micro),
        }),
    };
    let unknown = k8s::Unknown {
        type_meta: Some(k8s::TypeMeta {
            api_version: "coordination.k8s.io/v1".into(),
            kind: "Lease".into(),
        }),
        raw: lease.encode_to_vec(),
        content_encoding: String::new(),
        content_type: String::new(),
    };
    let mut out = b"k8s\0".to_vec();
    unknown.encode(&mut out).expect("a Vec grows as needed");
    out.into()
}

/// What the workers share.
struct Shared {
    args: Args,
    stop: AtomicBool,
    writes: AtomicU64,
    errors: AtomicU64,
    conflicts: AtomicU64,
    /// Key and value bytes of the successful writes.
    bytes: AtomicU64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.endpoints.is_empty() || args.clients == 0 || args.workers == 0 || args.num_keys == 0 {
        return Err("--endpoints, --clients, --workers and --num-keys must be non-empty".into());
    }
    let mut channels = Vec::new();
    for i in 0..args.clients {
        let ep = &args.endpoints[i % args.endpoints.len()];
        let url = if ep.contains("://") { ep.clone() } else { format!("http://{ep}") };
        let ch = Channel::from_shared(url.clone())?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| format!("connect {url}: {e}"))?;
        channels.push(ch);
    }
    let workers = args.workers.min(args.num_keys);
    let shared = Arc::new(Shared {
        args,
        stop: AtomicBool::new(false),
        writes: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        conflicts: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    });
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let client = KvClient::new(channels[w % channels.len()].clone())
            .max_decoding_message_size(usize::MAX);
        tasks.push(tokio::spawn(worker(shared.clone(), client, w, workers)));
    }
    let progress = tokio::spawn(progress(shared.clone(), started));
    if shared.args.total.is_none() && shared.args.rounds.is_none() {
        tokio::time::sleep(shared.args.duration).await;
        shared.stop.store(true, Ordering::SeqCst);
    }
    let mut latencies: Vec<u32> = Vec::new();
    for t in tasks {
        latencies.extend(t.await?);
    }
    let elapsed = started.elapsed().as_secs_f64();
    progress.abort();
    latencies.sort_unstable();
    let pct = |p: f64| {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i] as f64 / 1000.0
    };
    let n = shared.writes.load(Ordering::SeqCst);
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
    eprintln!("conflicts retried: {}", shared.conflicts.load(Ordering::SeqCst));
    eprintln!("key+value bytes written: {}", shared.bytes.load(Ordering::SeqCst));
    println!(
        "{n} writes in {elapsed:.2} s: {:.0} writes/s, p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, errors {}",
        n as f64 / elapsed,
        pct(0.5),
        pct(0.99),
        pct(0.999),
        shared.errors.load(Ordering::SeqCst)
    );
    Ok(())
}

/// One writer: owns keys `w, w + workers, …` and renews them round-robin. Returns the latency of
/// every write in microseconds (a write's retries after conflicts included).
async fn worker(
    shared: Arc<Shared>,
    mut kv: KvClient<Channel>,
    w: usize,
    workers: usize,
) -> Vec<u32> {
    let a = &shared.args;
    let keys: Vec<(String, Bytes)> = (w..a.num_keys)
        .step_by(workers)
        .map(|i| {
            let node = format!("node-{i:07}");
            (node.clone(), Bytes::from(format!("{}{node}", a.key_prefix)))
        })
        .collect();
    // The mod_revision last seen per key (0: unknown, the first write finds out).
    let mut seen = vec![0i64; keys.len()];
    let mut latencies = Vec::new();
    let pace = a.rate.map(|r| Duration::from_secs_f64(workers as f64 / r.max(1e-3)));
    // Staggered, so that paced workers do not all fire at once.
    let mut next =
        Instant::now() + pace.map_or(Duration::ZERO, |p| p.mul_f64(w as f64 / workers as f64));
    let mut i = 0;
    let quota = a.rounds.map(|r| r * keys.len() as u64);
    let mut done = 0u64;
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        if let Some(q) = quota {
            if done >= q {
                break;
            }
            done += 1;
        } else if let Some(total) = a.total {
            // Claim a write; stop once the total is handed out.
            if shared.writes.fetch_add(1, Ordering::SeqCst) >= total {
                shared.writes.fetch_sub(1, Ordering::SeqCst);
                break;
            }
        }
        if let Some(p) = pace {
            next += p;
            tokio::time::sleep_until(next.into()).await;
        }
        let (node, key) = &keys[i];
        let t0 = Instant::now();
        let written = match a.mode {
            Mode::Put => put(&mut kv, key, node).await,
            Mode::Txn => update(&shared, &mut kv, key, node, &mut seen[i]).await,
        };
        latencies.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
        match written {
            Some(n) => _ = shared.bytes.fetch_add(n as u64, Ordering::Relaxed),
            None => _ = shared.errors.fetch_add(1, Ordering::Relaxed),
        }
        if a.total.is_none() || quota.is_some() {
            shared.writes.fetch_add(1, Ordering::Relaxed);
        }
        i = (i + 1) % keys.len();
    }
    latencies
}

/// A plain Put; `Some(key and value bytes)` once written.
async fn put(kv: &mut KvClient<Channel>, key: &Bytes, node: &str) -> Option<usize> {
    let value = lease_value(node, SystemTime::now());
    let n = key.len() + value.len();
    let req = pb::PutRequest { key: key.clone(), value, ..Default::default() };
    kv.put(req).await.ok().map(|_| n)
}

/// kube-apiserver's GuaranteedUpdate: compare mod_revision, put, or read the current revision
/// and try again. `Some(key and value bytes)` once written.
async fn update(
    shared: &Shared,
    kv: &mut KvClient<Channel>,
    key: &Bytes,
    node: &str,
    seen: &mut i64,
) -> Option<usize> {
    for _ in 0..16 {
        let value = lease_value(node, SystemTime::now());
        let n = key.len() + value.len();
        let req = pb::TxnRequest {
            compare: vec![pb::Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Mod as i32,
                key: key.clone(),
                range_end: Bytes::new(),
                target_union: Some(TargetUnion::ModRevision(*seen)),
            }],
            success: vec![pb::RequestOp {
                request: Some(Op::RequestPut(pb::PutRequest {
                    key: key.clone(),
                    value,
                    ..Default::default()
                })),
            }],
            failure: vec![pb::RequestOp {
                request: Some(Op::RequestRange(pb::RangeRequest {
                    key: key.clone(),
                    ..Default::default()
                })),
            }],
        };
        let Ok(resp) = kv.txn(req).await else { return None };
        let resp = resp.into_inner();
        if resp.succeeded {
            *seen = resp.header.map_or(0, |h| h.revision);
            return Some(n);
        }
        // Someone else wrote it (or we did not know its revision yet): take the current one.
        let known = *seen != 0;
        *seen = match resp.responses.into_iter().next().and_then(|r| r.response) {
            Some(OpResponse::ResponseRange(r)) => r.kvs.first().map_or(0, |kv| kv.mod_revision),
            _ => return None,
        };
        if known {
            shared.conflicts.fetch_add(1, Ordering::Relaxed);
        }
    }
    None
}

/// Live progress on a terminal: rate over the last second, totals, errors.
async fn progress(shared: Arc<Shared>, started: Instant) {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let n = shared.writes.load(Ordering::Relaxed);
        eprint!(
            "\r{:>6.1} s  {:>8} writes/s  {:>10} writes  {} errors  {} conflicts   ",
            started.elapsed().as_secs_f64(),
            n - last,
            n,
            shared.errors.load(Ordering::Relaxed),
            shared.conflicts.load(Ordering::Relaxed)
        );
        last = n;
    }
}
