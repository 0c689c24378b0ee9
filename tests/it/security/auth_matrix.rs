//! The auth matrix: every RPC of every service, called with auth enabled as four callers —
//! anonymous (no token, no certificate), alice (who may read and write `/app/`), bob (a user
//! who may not) and root — on a member alone and on a follower of a 3-member cluster, against
//! mem_etcd and a real etcd 3.6; the answers (gRPC code and message, or success) must be
//! etcd's.
//!
//! [`MATRIX`] is the table: one row per call, with the arguments it is made with and what
//! etcd asks of the caller ([`Need`]). The test also checks etcd's answers against the
//! declared need, so the table documents etcd's rules and cannot drift from them. Calls that
//! change state are made so that the comparison means something without wrecking the server
//! (a member id that does not exist, a peer URL that is taken, a bogus downgrade version, a
//! leader transferee that is not a member); where a second check follows the permission check,
//! root's answer shows the order (e.g. Compact of a future revision). Where mem_etcd answers
//! differently on purpose (never by allowing what etcd refuses), [`KNOWN`] lists the case and
//! why, and the test requires exactly that answer.

use std::time::{Duration, Instant};

use tokio_stream::wrappers::ReceiverStream;
use tonic::Request;
use tonic::transport::Channel;

use crate::cluster::harness::Cluster;
use crate::support::*;
use mem_etcd::proto::v3electionpb as epb;
use mem_etcd::proto::v3lockpb as lpb;

/// Who calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Anon,
    /// Role `app`: readwrite on `/app/`..`/app0`.
    Alice,
    /// Role `bobs`: readwrite on `/bob/`..`/bob0` only.
    Bob,
    Root,
}

const CALLERS: [Who; 4] = [Who::Anon, Who::Alice, Who::Bob, Who::Root];

/// What etcd asks of a caller, while auth is enabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Need {
    /// Nothing (Authenticate).
    Nothing,
    /// Any authenticated user (etcd's `requireAuthInfo`).
    User,
    /// Permission on the keys (or the user or role) concerned: alice has it, bob not.
    Key,
    /// The root role (etcd's `IsAdminPermitted`).
    Root,
    /// Root, or anonymous: UserGet lets a caller read its own user, and no credentials are
    /// the empty user name (so anonymous may "read" the user named "", which does not exist).
    RootOrEmptyName,
}

/// Every call, with its arguments. Keys under `/app/` are alice's; `/secret` nobody's but
/// root's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rpc {
    Range,
    RangeSerializable,
    Put,
    /// A put to /app/ with a lease that does not exist: permission first, then the lease.
    PutMissingLease,
    DeleteRange,
    Txn,
    TxnReadOnly,
    /// A future revision: permission first, then the revision.
    CompactFuture,
    Compact,
    Watch,
    LeaseGrant,
    /// A lease holding a key under /app/, made by root for the call.
    LeaseRevoke,
    /// A lease holding /secret.
    LeaseRevokeSecret,
    /// A lease that does not exist: someone first, then the lease.
    LeaseRevokeMissing,
    LeaseKeepAlive,
    LeaseKeepAliveSecret,
    LeaseTimeToLive,
    LeaseTimeToLiveKeys,
    LeaseTimeToLiveKeysSecret,
    /// Listing while every lease holds only keys under /app/.
    LeaseLeases,
    /// Listing while a lease holds /secret.
    LeaseLeasesSecret,
    AlarmGet,
    /// Clears a NOSPACE alarm that is not raised: changes nothing.
    AlarmDeactivate,
    Status,
    Defragment,
    Hash,
    HashKv,
    Snapshot,
    /// To a member id that does not exist.
    MoveLeader,
    /// VALIDATE of a version that is no etcd version.
    Downgrade,
    MemberList,
    /// A learner with a peer URL a member already has.
    MemberAdd,
    /// Members that do not exist.
    MemberRemove,
    MemberUpdate,
    MemberPromote,
    /// A lock of the caller's own under /app/, with a lease the call grants.
    Lock,
    Unlock,
    /// A candidacy of the caller's own under /app/, with a lease the call grants.
    Campaign,
    /// A leader key that is no leader's.
    Proclaim,
    /// alice's election.
    Leader,
    /// alice's election: its first message.
    Observe,
    /// A leader key that is no leader's: nothing to delete.
    Resign,
    /// Auth is enabled already.
    AuthEnable,
    AuthStatus,
    Authenticate,
    /// A new user per caller.
    UserAdd,
    /// alice herself.
    UserGet,
    /// A user that does not exist.
    UserGetMissing,
    /// The empty name.
    UserGetEmpty,
    UserList,
    UserChangePassword,
    UserGrantRole,
    UserRevokeRole,
    UserDelete,
    /// A new role per caller.
    RoleAdd,
    /// alice's role.
    RoleGet,
    RoleList,
    RoleGrantPermission,
    RoleRevokePermission,
    RoleDelete,
    /// Last: root's call turns auth off.
    AuthDisable,
}

use Need::*;

/// The matrix, in the order it runs (each row as anonymous, alice, bob, root).
const MATRIX: &[(Rpc, Need)] = &[
    // KV
    (Rpc::Range, Key),
    (Rpc::RangeSerializable, Key),
    (Rpc::Put, Key),
    (Rpc::PutMissingLease, Key),
    (Rpc::DeleteRange, Key),
    (Rpc::Txn, Key),
    (Rpc::TxnReadOnly, Key),
    (Rpc::CompactFuture, Root),
    (Rpc::Compact, Root),
    // Watch
    (Rpc::Watch, Key),
    // Lease
    (Rpc::LeaseGrant, User),
    (Rpc::LeaseRevoke, Key),
    (Rpc::LeaseRevokeSecret, Root),
    (Rpc::LeaseRevokeMissing, User),
    (Rpc::LeaseKeepAlive, Key),
    (Rpc::LeaseKeepAliveSecret, Root),
    (Rpc::LeaseTimeToLive, User),
    (Rpc::LeaseTimeToLiveKeys, Key),
    (Rpc::LeaseTimeToLiveKeysSecret, Root),
    (Rpc::LeaseLeases, Key),
    (Rpc::LeaseLeasesSecret, Root),
    // Maintenance
    (Rpc::AlarmGet, User),
    (Rpc::AlarmDeactivate, Root),
    (Rpc::Status, User),
    (Rpc::Defragment, Root),
    (Rpc::Hash, Root),
    (Rpc::HashKv, Root),
    (Rpc::Snapshot, Root),
    (Rpc::MoveLeader, Root),
    (Rpc::Downgrade, Root),
    // Cluster
    (Rpc::MemberList, User),
    (Rpc::MemberAdd, Root),
    (Rpc::MemberRemove, Root),
    (Rpc::MemberUpdate, Root),
    (Rpc::MemberPromote, Root),
    // Lock and Election: made of KV calls as the caller, as etcd's, so their refusals are the
    // KV's (with code Unknown). Observe's are silent: its stream ends without a message.
    (Rpc::Lock, Key),
    (Rpc::Unlock, Key),
    (Rpc::Campaign, Key),
    (Rpc::Proclaim, Key),
    (Rpc::Leader, Key),
    (Rpc::Observe, Nothing),
    (Rpc::Resign, Key),
    // Auth
    (Rpc::AuthEnable, Root),
    (Rpc::AuthStatus, Root),
    (Rpc::Authenticate, Nothing),
    (Rpc::UserAdd, Root),
    (Rpc::UserGet, Key),
    (Rpc::UserGetMissing, Root),
    (Rpc::UserGetEmpty, RootOrEmptyName),
    (Rpc::UserList, Root),
    (Rpc::UserChangePassword, Root),
    (Rpc::UserGrantRole, Root),
    (Rpc::UserRevokeRole, Root),
    (Rpc::UserDelete, Root),
    (Rpc::RoleAdd, Root),
    (Rpc::RoleGet, Key),
    (Rpc::RoleList, Root),
    (Rpc::RoleGrantPermission, Root),
    (Rpc::RoleRevokePermission, Root),
    (Rpc::RoleDelete, Root),
    (Rpc::AuthDisable, Root),
];

/// Where the calls go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deployment {
    Alone,
    Follower,
}

/// Answers mem_etcd gives on purpose where etcd's differ: (where, call, caller, mem_etcd's
/// answer, why). Only ever refusals of calls etcd refuses as well (the test checks both).
/// None today: Downgrade, the last, now checks its target as etcd does.
const KNOWN: &[(Deployment, Rpc, Who, &str, &str)] = &[];

/// A member id no member has.
const NO_MEMBER: u64 = 0x1234_5678;
/// A lease id no lease has.
const NO_LEASE: i64 = 0x7777_7777;
/// How long a stream's first answer may take.
const STREAM_WAIT: Duration = Duration::from_secs(10);

/// The member called, and the callers' tokens.
struct Ctx {
    raw: Raw,
    lock: lpb::lock_client::LockClient<Channel>,
    election: epb::election_client::ElectionClient<Channel>,
    lease: pb::lease_client::LeaseClient<Channel>,
    watch: pb::watch_client::WatchClient<Channel>,
    /// Tokens of alice, bob and root.
    tokens: [String; 3],
    /// A peer URL a member of the cluster has.
    peer_url: String,
}

fn outcome<T>(r: Result<tonic::Response<T>, tonic::Status>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => status_text(&e),
    }
}

fn status_text(e: &tonic::Status) -> String {
    format!("{:?}: {}", e.code(), e.message())
}

/// A leader key of alice's election that no candidate has.
fn no_leader() -> epb::LeaderKey {
    epb::LeaderKey { name: b("/app/e-alice"), key: b("/app/e-alice/none"), rev: 1, lease: NO_LEASE }
}

fn b(s: &str) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(s.as_bytes())
}

impl Ctx {
    /// `m` as sent by `who`.
    fn by<T>(&self, who: Who, m: T) -> Request<T> {
        let mut r = Request::new(m);
        let token = match who {
            Who::Anon => return r,
            Who::Alice => &self.tokens[0],
            Who::Bob => &self.tokens[1],
            Who::Root => &self.tokens[2],
        };
        r.metadata_mut().insert("token", token.parse().unwrap());
        r
    }

    fn root<T>(&self, m: T) -> Request<T> {
        self.by(Who::Root, m)
    }

    /// A lease (root's) holding `key`.
    async fn leased(&mut self, key: &str) -> i64 {
        let g = pb::LeaseGrantRequest { ttl: 600, id: 0 };
        let id = self.lease.lease_grant(self.root(g)).await.expect("root grants").into_inner().id;
        let put = pb::PutRequest { key: b(key), value: b("v"), lease: id, ..Default::default() };
        self.raw.kv.put(self.root(put)).await.expect("root puts");
        id
    }

    async fn revoke(&mut self, id: i64) {
        let _ = self.lease.lease_revoke(self.root(pb::LeaseRevokeRequest { id })).await;
    }

    /// One keep-alive of `id`: its first answer.
    async fn keep_alive(&mut self, who: Who, id: i64) -> String {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(pb::LeaseKeepAliveRequest { id }).await.unwrap();
        let call = self.lease.lease_keep_alive(self.by(who, ReceiverStream::new(rx)));
        let first = tokio::time::timeout(STREAM_WAIT, async {
            let mut s = call.await?.into_inner();
            s.message().await
        })
        .await
        .expect("a keep-alive answers");
        drop(tx);
        match first {
            Ok(Some(r)) if r.ttl > 0 => "ok".into(),
            Ok(other) => format!("no renewal: {other:?}"),
            Err(e) => status_text(&e),
        }
    }

    /// Creates a watch on /app/a: created, or canceled with a reason.
    async fn watch_app(&mut self, who: Who) -> String {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let create = pb::WatchCreateRequest { key: b("/app/a"), ..Default::default() };
        let req = pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)),
        };
        tx.send(req).await.unwrap();
        let call = self.watch.watch(self.by(who, ReceiverStream::new(rx)));
        let first = tokio::time::timeout(STREAM_WAIT, async {
            let mut s = call.await?.into_inner();
            s.message().await
        })
        .await
        .expect("a watch answers");
        drop(tx);
        match first {
            Ok(Some(r)) if r.canceled => format!("canceled: {}", r.cancel_reason),
            Ok(Some(r)) if r.created => "ok".into(),
            Ok(other) => format!("unexpected: {other:?}"),
            Err(e) => status_text(&e),
        }
    }

    /// The first answer of a snapshot stream.
    async fn snapshot(&mut self, who: Who) -> String {
        let call = self.raw.maint.snapshot(self.by(who, pb::SnapshotRequest {}));
        let first = tokio::time::timeout(STREAM_WAIT, async {
            let mut s = call.await?.into_inner();
            s.message().await
        })
        .await
        .expect("a snapshot answers");
        match first {
            Ok(Some(_)) => "ok".into(),
            Ok(None) => "empty".into(),
            Err(e) => status_text(&e),
        }
    }

    /// alice's election's first Observe message: "ok", or how the stream ended.
    async fn observe(&mut self, who: Who) -> String {
        let call =
            self.election.observe(self.by(who, epb::LeaderRequest { name: b("/app/e-alice") }));
        let first = tokio::time::timeout(STREAM_WAIT, async {
            let mut s = call.await?.into_inner();
            s.message().await
        })
        .await
        .expect("an observe answers");
        match first {
            Ok(Some(_)) => "ok".into(),
            Ok(None) => "ended".into(),
            Err(e) => status_text(&e),
        }
    }

    /// Makes `rpc` as `who`: "ok" or "Code: message".
    async fn call(&mut self, rpc: Rpc, who: Who) -> String {
        let name = format!("{who:?}").to_lowercase();
        let put = |k: &str| pb::PutRequest { key: b(k), value: b("v"), ..Default::default() };
        let range = |k: &str| pb::RangeRequest { key: b(k), ..Default::default() };
        let app_range = || pb::RequestOp {
            request: Some(pb::request_op::Request::RequestRange(range("/app/a"))),
        };
        let compare = || pb::Compare {
            key: b("/app/a"),
            target: pb::compare::CompareTarget::Version as i32,
            result: pb::compare::CompareResult::Greater as i32,
            target_union: Some(pb::compare::TargetUnion::Version(0)),
            ..Default::default()
        };
        let user = |n: &str| pb::AuthUserGetRequest { name: n.into() };
        match rpc {
            Rpc::Range => outcome(self.raw.kv.range(self.by(who, range("/app/a"))).await),
            Rpc::RangeSerializable => {
                let r = pb::RangeRequest { serializable: true, ..range("/app/a") };
                outcome(self.raw.kv.range(self.by(who, r)).await)
            }
            Rpc::Put => outcome(self.raw.kv.put(self.by(who, put("/app/a"))).await),
            Rpc::PutMissingLease => {
                let p = pb::PutRequest { lease: NO_LEASE, ..put("/app/a") };
                outcome(self.raw.kv.put(self.by(who, p)).await)
            }
            Rpc::DeleteRange => {
                let d = pb::DeleteRangeRequest { key: b("/app/none"), ..Default::default() };
                outcome(self.raw.kv.delete_range(self.by(who, d)).await)
            }
            Rpc::Txn => {
                let t = pb::TxnRequest {
                    compare: vec![compare()],
                    success: vec![pb::RequestOp {
                        request: Some(pb::request_op::Request::RequestPut(put("/app/a"))),
                    }],
                    failure: vec![],
                };
                outcome(self.raw.kv.txn(self.by(who, t)).await)
            }
            Rpc::TxnReadOnly => {
                let t = pb::TxnRequest {
                    compare: vec![compare()],
                    success: vec![app_range()],
                    failure: vec![app_range()],
                };
                outcome(self.raw.kv.txn(self.by(who, t)).await)
            }
            Rpc::CompactFuture => {
                let c = pb::CompactionRequest { revision: 1_000_000, physical: false };
                outcome(self.raw.kv.compact(self.by(who, c)).await)
            }
            Rpc::Compact => {
                let c = pb::CompactionRequest { revision: 2, physical: false };
                outcome(self.raw.kv.compact(self.by(who, c)).await)
            }
            Rpc::Watch => self.watch_app(who).await,
            Rpc::LeaseGrant => {
                let g = pb::LeaseGrantRequest { ttl: 600, id: 0 };
                outcome(self.lease.lease_grant(self.by(who, g)).await)
            }
            Rpc::LeaseRevoke | Rpc::LeaseRevokeSecret => {
                let key = if rpc == Rpc::LeaseRevoke {
                    format!("/app/l-{name}")
                } else {
                    "/secret".into()
                };
                let id = self.leased(&key).await;
                let r = outcome(
                    self.lease.lease_revoke(self.by(who, pb::LeaseRevokeRequest { id })).await,
                );
                self.revoke(id).await;
                r
            }
            Rpc::LeaseRevokeMissing => {
                let r = pb::LeaseRevokeRequest { id: NO_LEASE };
                outcome(self.lease.lease_revoke(self.by(who, r)).await)
            }
            Rpc::LeaseKeepAlive | Rpc::LeaseKeepAliveSecret => {
                let key = if rpc == Rpc::LeaseKeepAlive {
                    "/app/k".to_string()
                } else {
                    "/secret".into()
                };
                let id = self.leased(&key).await;
                let r = self.keep_alive(who, id).await;
                self.revoke(id).await;
                r
            }
            Rpc::LeaseTimeToLive | Rpc::LeaseTimeToLiveKeys | Rpc::LeaseTimeToLiveKeysSecret => {
                let key = if rpc == Rpc::LeaseTimeToLiveKeysSecret { "/secret" } else { "/app/t" };
                let id = self.leased(key).await;
                let keys = rpc != Rpc::LeaseTimeToLive;
                let t = pb::LeaseTimeToLiveRequest { id, keys };
                let r = outcome(self.lease.lease_time_to_live(self.by(who, t)).await);
                self.revoke(id).await;
                r
            }
            Rpc::LeaseLeases | Rpc::LeaseLeasesSecret => {
                let key = if rpc == Rpc::LeaseLeasesSecret { "/secret" } else { "/app/ls" };
                let id = self.leased(key).await;
                let r =
                    outcome(self.lease.lease_leases(self.by(who, pb::LeaseLeasesRequest {})).await);
                self.revoke(id).await;
                r
            }
            Rpc::AlarmGet => {
                let a = pb::AlarmRequest {
                    action: pb::alarm_request::AlarmAction::Get as i32,
                    ..Default::default()
                };
                outcome(self.raw.maint.alarm(self.by(who, a)).await)
            }
            Rpc::AlarmDeactivate => {
                let a = pb::AlarmRequest {
                    action: pb::alarm_request::AlarmAction::Deactivate as i32,
                    member_id: NO_MEMBER,
                    alarm: pb::AlarmType::Nospace as i32,
                };
                outcome(self.raw.maint.alarm(self.by(who, a)).await)
            }
            Rpc::Status => outcome(self.raw.maint.status(self.by(who, pb::StatusRequest {})).await),
            Rpc::Defragment => {
                outcome(self.raw.maint.defragment(self.by(who, pb::DefragmentRequest {})).await)
            }
            Rpc::Hash => outcome(self.raw.maint.hash(self.by(who, pb::HashRequest {})).await),
            Rpc::HashKv => {
                let h = pb::HashKvRequest { revision: 0 };
                outcome(self.raw.maint.hash_kv(self.by(who, h)).await)
            }
            Rpc::Snapshot => self.snapshot(who).await,
            Rpc::MoveLeader => {
                let m = pb::MoveLeaderRequest { target_id: NO_MEMBER };
                outcome(self.raw.maint.move_leader(self.by(who, m)).await)
            }
            Rpc::Downgrade => {
                let d = pb::DowngradeRequest {
                    action: pb::downgrade_request::DowngradeAction::Validate as i32,
                    version: "0.1".into(),
                };
                outcome(self.raw.maint.downgrade(self.by(who, d)).await)
            }
            Rpc::MemberList => {
                let l = pb::MemberListRequest { linearizable: false };
                outcome(self.raw.cluster.member_list(self.by(who, l)).await)
            }
            Rpc::MemberAdd => {
                let a = pb::MemberAddRequest {
                    peer_ur_ls: vec![self.peer_url.clone()],
                    is_learner: true,
                };
                // Until every member has been connected for the health interval, a change is
                // refused as "unhealthy cluster" (by both servers): wait that out (bounded).
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let r = outcome(self.raw.cluster.member_add(self.by(who, a.clone())).await);
                    if !r.ends_with("etcdserver: unhealthy cluster") || Instant::now() > deadline {
                        break r;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            Rpc::MemberRemove => {
                let r = pb::MemberRemoveRequest { id: NO_MEMBER };
                outcome(self.raw.cluster.member_remove(self.by(who, r)).await)
            }
            Rpc::MemberUpdate => {
                let u = pb::MemberUpdateRequest {
                    id: NO_MEMBER,
                    peer_ur_ls: vec!["http://127.0.0.1:9".into()],
                };
                outcome(self.raw.cluster.member_update(self.by(who, u)).await)
            }
            Rpc::MemberPromote => {
                let p = pb::MemberPromoteRequest { id: NO_MEMBER };
                outcome(self.raw.cluster.member_promote(self.by(who, p)).await)
            }
            Rpc::AuthEnable => {
                outcome(self.raw.auth.auth_enable(self.by(who, pb::AuthEnableRequest {})).await)
            }
            Rpc::AuthStatus => {
                outcome(self.raw.auth.auth_status(self.by(who, pb::AuthStatusRequest {})).await)
            }
            Rpc::Authenticate => {
                let a =
                    pb::AuthenticateRequest { name: "alice".into(), password: "alicepw".into() };
                outcome(self.raw.auth.authenticate(self.by(who, a)).await)
            }
            Rpc::UserAdd => {
                let a = pb::AuthUserAddRequest {
                    name: format!("u-{name}"),
                    password: "pw".into(),
                    ..Default::default()
                };
                outcome(self.raw.auth.user_add(self.by(who, a)).await)
            }
            Rpc::UserGet => outcome(self.raw.auth.user_get(self.by(who, user("alice"))).await),
            Rpc::UserGetMissing => {
                outcome(self.raw.auth.user_get(self.by(who, user("nobody"))).await)
            }
            Rpc::UserGetEmpty => outcome(self.raw.auth.user_get(self.by(who, user(""))).await),
            Rpc::UserList => {
                outcome(self.raw.auth.user_list(self.by(who, pb::AuthUserListRequest {})).await)
            }
            Rpc::UserChangePassword => {
                let c = pb::AuthUserChangePasswordRequest {
                    name: "nobody".into(),
                    password: "pw".into(),
                    ..Default::default()
                };
                outcome(self.raw.auth.user_change_password(self.by(who, c)).await)
            }
            Rpc::UserGrantRole => {
                let g = pb::AuthUserGrantRoleRequest { user: "nobody".into(), role: "app".into() };
                outcome(self.raw.auth.user_grant_role(self.by(who, g)).await)
            }
            Rpc::UserRevokeRole => {
                let r = pb::AuthUserRevokeRoleRequest { name: "nobody".into(), role: "app".into() };
                outcome(self.raw.auth.user_revoke_role(self.by(who, r)).await)
            }
            Rpc::UserDelete => {
                let d = pb::AuthUserDeleteRequest { name: "nobody".into() };
                outcome(self.raw.auth.user_delete(self.by(who, d)).await)
            }
            Rpc::RoleAdd => {
                let a = pb::AuthRoleAddRequest { name: format!("r-{name}") };
                outcome(self.raw.auth.role_add(self.by(who, a)).await)
            }
            Rpc::RoleGet => {
                let g = pb::AuthRoleGetRequest { role: "app".into() };
                outcome(self.raw.auth.role_get(self.by(who, g)).await)
            }
            Rpc::RoleList => {
                outcome(self.raw.auth.role_list(self.by(who, pb::AuthRoleListRequest {})).await)
            }
            Rpc::RoleGrantPermission => {
                let perm = mem_etcd::proto::authpb::Permission {
                    perm_type: 0,
                    key: b("/x"),
                    range_end: bytes::Bytes::new(),
                };
                let g =
                    pb::AuthRoleGrantPermissionRequest { name: "nosuch".into(), perm: Some(perm) };
                outcome(self.raw.auth.role_grant_permission(self.by(who, g)).await)
            }
            Rpc::RoleRevokePermission => {
                let r = pb::AuthRoleRevokePermissionRequest {
                    role: "nosuch".into(),
                    key: b("/x"),
                    range_end: bytes::Bytes::new(),
                };
                outcome(self.raw.auth.role_revoke_permission(self.by(who, r)).await)
            }
            Rpc::RoleDelete => {
                let d = pb::AuthRoleDeleteRequest { role: "nosuch".into() };
                outcome(self.raw.auth.role_delete(self.by(who, d)).await)
            }
            Rpc::AuthDisable => {
                outcome(self.raw.auth.auth_disable(self.by(who, pb::AuthDisableRequest {})).await)
            }
            Rpc::Lock => {
                let l = lpb::LockRequest { name: b(&format!("/app/lock-{name}")), lease: 0 };
                outcome(self.lock.lock(self.by(who, l)).await)
            }
            Rpc::Unlock => {
                let u = lpb::UnlockRequest { key: b("/app/none") };
                outcome(self.lock.unlock(self.by(who, u)).await)
            }
            Rpc::Campaign => {
                let c = epb::CampaignRequest {
                    name: b(&format!("/app/e-{name}")),
                    lease: 0,
                    value: b("v"),
                };
                outcome(self.election.campaign(self.by(who, c)).await)
            }
            Rpc::Proclaim => {
                let p = epb::ProclaimRequest { leader: Some(no_leader()), value: b("v") };
                outcome(self.election.proclaim(self.by(who, p)).await)
            }
            Rpc::Leader => {
                let l = epb::LeaderRequest { name: b("/app/e-alice") };
                outcome(self.election.leader(self.by(who, l)).await)
            }
            Rpc::Observe => self.observe(who).await,
            Rpc::Resign => {
                let r = epb::ResignRequest { leader: Some(no_leader()) };
                outcome(self.election.resign(self.by(who, r)).await)
            }
        }
    }
}

/// Users, roles and a few keys, then auth on; returns the context for calls to `raw`'s member.
/// `peer_url`: a peer URL a member has (for MemberAdd).
async fn set_up(mut raw: Raw, peer_url: String) -> Ctx {
    let a = &mut raw.auth;
    let add = |n: &str| pb::AuthUserAddRequest {
        name: n.into(),
        password: format!("{n}pw"),
        ..Default::default()
    };
    let role = |r: &str, user: &str, prefix: &str, end: &str| {
        let perm =
            mem_etcd::proto::authpb::Permission { perm_type: 2, key: b(prefix), range_end: b(end) };
        (
            pb::AuthRoleAddRequest { name: r.into() },
            pb::AuthRoleGrantPermissionRequest { name: r.into(), perm: Some(perm) },
            pb::AuthUserGrantRoleRequest { user: user.into(), role: r.into() },
        )
    };
    for u in ["root", "alice", "bob"] {
        a.user_add(add(u)).await.unwrap();
    }
    a.role_add(pb::AuthRoleAddRequest { name: "root".into() }).await.unwrap();
    let grant = pb::AuthUserGrantRoleRequest { user: "root".into(), role: "root".into() };
    a.user_grant_role(grant).await.unwrap();
    for (r, u, k, e) in [("app", "alice", "/app/", "/app0"), ("bobs", "bob", "/bob/", "/bob0")] {
        let (add, perm, grant) = role(r, u, k, e);
        a.role_add(add).await.unwrap();
        a.role_grant_permission(perm).await.unwrap();
        a.user_grant_role(grant).await.unwrap();
    }
    for k in ["/app/a", "/app/b", "/bob/a", "/secret"] {
        let p = pb::PutRequest { key: b(k), value: b("v"), ..Default::default() };
        raw.kv.put(p).await.unwrap();
    }
    raw.auth.auth_enable(pb::AuthEnableRequest {}).await.unwrap();
    let mut tokens = Vec::new();
    for u in ["alice", "bob", "root"] {
        let r = pb::AuthenticateRequest { name: u.into(), password: format!("{u}pw") };
        tokens.push(raw.auth.authenticate(r).await.unwrap().into_inner().token);
    }
    Ctx {
        lock: lpb::lock_client::LockClient::new(raw.channel.clone()),
        election: epb::election_client::ElectionClient::new(raw.channel.clone()),
        lease: pb::lease_client::LeaseClient::new(raw.channel.clone()),
        watch: pb::watch_client::WatchClient::new(raw.channel.clone()),
        raw,
        tokens: tokens.try_into().unwrap(),
        peer_url,
    }
}

/// The answers of every row, by caller.
async fn run(mut ctx: Ctx) -> Vec<(Rpc, [String; 4])> {
    let mut out = Vec::new();
    for (rpc, _) in MATRIX {
        let mut answers = Vec::new();
        for who in CALLERS {
            answers.push(ctx.call(*rpc, who).await);
        }
        out.push((*rpc, answers.try_into().unwrap()));
    }
    out
}

/// Whether `answer` is a refusal for want of credentials or permission.
fn refused(answer: &str) -> bool {
    answer.ends_with("etcdserver: user name is empty")
        || answer.ends_with("etcdserver: permission denied")
}

/// Whether etcd's answers to a row agree with the need the table declares.
fn as_declared(need: Need, answers: &[String; 4]) -> bool {
    let allowed = |w: Who| match need {
        Nothing => true,
        User => w != Who::Anon,
        Key => matches!(w, Who::Alice | Who::Root),
        Root => w == Who::Root,
        RootOrEmptyName => matches!(w, Who::Anon | Who::Root),
    };
    CALLERS.iter().zip(answers).all(|(w, a)| allowed(*w) != refused(a))
}

/// Compares mem_etcd's answers with etcd's, row by row; returns the failures.
fn compare(at: Deployment, etcd: &[(Rpc, [String; 4])], mem: &[(Rpc, [String; 4])]) -> Vec<String> {
    let mut failures = Vec::new();
    for (((rpc, want), (_, got)), (_, need)) in etcd.iter().zip(mem).zip(MATRIX) {
        if !as_declared(*need, want) {
            failures.push(format!("{at:?} {rpc:?}: etcd's answers {want:?} are not {need:?}"));
        }
        for (i, who) in CALLERS.iter().enumerate() {
            let (w, g) = (&want[i], &got[i]);
            let known = KNOWN.iter().find(|k| k.0 == at && k.1 == *rpc && k.2 == *who);
            match known {
                // Both must refuse, and mem_etcd exactly as listed.
                Some((.., answer, why)) if g != answer || w == "ok" || g == "ok" => {
                    failures.push(format!(
                        "{at:?} {rpc:?} as {who:?} (known: {why}):\n  etcd:     {w}\n  \
                         mem_etcd: {g}\n  listed:   {answer}"
                    ))
                }
                Some(_) => {}
                None if w != g => failures
                    .push(format!("{at:?} {rpc:?} as {who:?}:\n  etcd:     {w}\n  mem_etcd: {g}")),
                None => {}
            }
        }
    }
    failures
}

fn report(failures: Vec<String>, rows: &[(Rpc, [String; 4])]) {
    let table: Vec<String> = rows
        .iter()
        .map(|(rpc, a)| {
            format!("{rpc:?}: anon {} | alice {} | bob {} | root {}", a[0], a[1], a[2], a[3])
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} differences:\n{}\n\netcd's matrix:\n{}",
        failures.len(),
        failures.join("\n"),
        table.join("\n")
    );
}

/// The peer URL a member alone lists for itself (etcd's harness default if none).
async fn own_peer_url(raw: &mut Raw) -> String {
    let l = raw.cluster.member_list(pb::MemberListRequest { linearizable: false }).await;
    l.ok()
        .and_then(|l| l.into_inner().members.first().and_then(|m| m.peer_ur_ls.first().cloned()))
        .unwrap_or_else(|| "http://127.0.0.1:2380".into())
}

async fn matrix_alone(kind: Kind) -> Option<(Server, Vec<(Rpc, [String; 4])>)> {
    let s = Server::start(kind, &[]).await?;
    let mut raw = s.raw_clients().await;
    let peer = own_peer_url(&mut raw).await;
    let ctx = set_up(raw, peer).await;
    let rows = run(ctx).await;
    Some((s, rows))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_matrix_on_a_member_alone() {
    let Some((_e, want)) = matrix_alone(Kind::Etcd).await else { return };
    let Some((_m, got)) = matrix_alone(Kind::MemEtcd).await else { return };
    report(compare(Deployment::Alone, &want, &got), &want);
}

async fn matrix_follower(kind: Kind) -> Option<(Cluster, Vec<(Rpc, [String; 4])>)> {
    let c = Cluster::start(kind, 3, &[]).await?;
    // Found before auth is on: the harness asks Status without credentials.
    let follower = (c.leader().await + 1) % 3;
    let mut raw = c.raw(follower).await;
    let peer = {
        let l = raw.cluster.member_list(pb::MemberListRequest { linearizable: true }).await;
        l.unwrap().into_inner().members[0].peer_ur_ls[0].clone()
    };
    let ctx = set_up(raw, peer).await;
    // Membership changes need every member connected for etcd's health interval (5 s).
    c.healthy().await;
    let rows = run(ctx).await;
    Some((c, rows))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_matrix_on_a_cluster_follower() {
    let Some((_e, want)) = matrix_follower(Kind::Etcd).await else { return };
    let Some((_m, got)) = matrix_follower(Kind::MemEtcd).await else { return };
    report(compare(Deployment::Follower, &want, &got), &want);
}

// ----- the JSON gateway -----

use crate::tools::gateway::{b64, request};

/// Gateway paths (etcd's grpc-gateway) and bodies, with what the call needs; each is made as
/// the four callers, the token in `Authorization`. The gateway makes the gRPC calls in
/// process, so its answers must be etcd's gateway's (HTTP status, and the error's JSON).
fn gateway_matrix() -> Vec<(&'static str, String, Need)> {
    let key = |k: &str| format!(r#"{{"key":"{}"}}"#, b64(k));
    vec![
        ("/v3/kv/range", key("/app/a"), Key),
        ("/v3/kv/put", format!(r#"{{"key":"{}","value":"{}"}}"#, b64("/app/a"), b64("v")), Key),
        ("/v3/kv/deleterange", key("/app/none"), Key),
        ("/v3/kv/compaction", r#"{"revision":"1000000"}"#.into(), Root),
        ("/v3/lease/grant", r#"{"TTL":"600"}"#.into(), User),
        ("/v3/lease/revoke", format!(r#"{{"ID":"{NO_LEASE}"}}"#), User),
        ("/v3/lease/leases", "{}".into(), User),
        ("/v3/maintenance/status", "{}".into(), User),
        ("/v3/maintenance/alarm", r#"{"action":"GET"}"#.into(), User),
        ("/v3/maintenance/hash", "{}".into(), Root),
        ("/v3/maintenance/hashkv", r#"{"revision":"0"}"#.into(), Root),
        ("/v3/maintenance/defragment", "{}".into(), Root),
        ("/v3/maintenance/transfer-leadership", format!(r#"{{"targetID":"{NO_MEMBER}"}}"#), Root),
        ("/v3/cluster/member/list", "{}".into(), User),
        ("/v3/auth/status", "{}".into(), Root),
        ("/v3/auth/user/list", "{}".into(), Root),
        ("/v3/auth/role/add", r#"{"name":"gw"}"#.into(), Root),
        ("/v3/auth/authenticate", r#"{"name":"alice","password":"alicepw"}"#.into(), Nothing),
        ("/v3/lock/unlock", key("/app/none"), Key),
        ("/v3/election/leader", format!(r#"{{"name":"{}"}}"#, b64("/app/e")), Key),
    ]
}

/// The answers over the gateway at `addr`: "ok", or the HTTP status and the error's JSON.
async fn gateway_run(addr: std::net::SocketAddr, ctx: &Ctx) -> Vec<[String; 4]> {
    let mut out = Vec::new();
    for (path, body, _) in gateway_matrix() {
        let mut answers = Vec::new();
        for who in CALLERS {
            let r = ctx.by(who, ());
            let token = r.metadata().get("token").map(|t| t.to_str().unwrap().to_string());
            let headers: Vec<(&str, &str)> =
                token.iter().map(|t| ("Authorization", t.as_str())).collect();
            let reply = request(addr, "POST", path, &headers, &body).await;
            answers.push(if reply.status == 200 {
                "ok".to_string()
            } else {
                let j = reply.json();
                let message = j["message"].as_str().unwrap_or("");
                format!("HTTP {} code {}: {message}", reply.status, j["code"])
            });
        }
        out.push(answers.try_into().unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_matrix_over_the_gateway() {
    // etcd's gateway dials etcd's own listen address: give it a real port.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let flags = [
        "--listen-client-urls",
        &url,
        "--advertise-client-urls",
        &url,
        "--enable-grpc-gateway=true",
    ];
    let Some(etcd) = Server::start(Kind::Etcd, &flags).await else { return };
    let Some(mem) = Server::start(Kind::MemEtcd, &[]).await else { return };
    let mut answers = Vec::new();
    for s in [&etcd, &mem] {
        let mut raw = s.raw_clients().await;
        let peer = own_peer_url(&mut raw).await;
        let ctx = set_up(raw, peer).await;
        answers.push(gateway_run(s.addr(), &ctx).await);
    }
    let mut failures = Vec::new();
    let rows = gateway_matrix().into_iter().zip(&answers[0]).zip(&answers[1]);
    for (((path, _, need), want), got) in rows {
        if !as_declared(need, want) {
            failures.push(format!("{path}: etcd's answers {want:?} are not {need:?}"));
        }
        for (i, who) in CALLERS.iter().enumerate() {
            if want[i] != got[i] {
                failures.push(format!(
                    "{path} as {who:?}:\n  etcd:     {}\n  mem_etcd: {}",
                    want[i], got[i]
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}
