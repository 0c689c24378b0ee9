//! The Auth service, and who a request comes from (etcd's `v3rpc/auth.go` and
//! `AuthInfoFromCtx`): the token in gRPC metadata `token`, checked against the auth store.
//!
//! Changes of auth state go through the one apply path (`server::apply` in a cluster, through
//! the Raft log; on a member alone applied here and written to the auth file before the
//! answer). Passwords are hashed here, by the member the client called, before proposing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::{Shared, apply};
use crate::auth::{self, AuthInfo, Op, PermType, Permission};
use crate::error::{Error, Result};
use crate::proto::etcdserverpb as pb;
use crate::proto::memetcdpb as mpb;
use crate::proto::memetcdpb::request::Request as Req;
use crate::proto::memetcdpb::response::Response as Resp;

/// The metadata key etcd's clients put the token under, and the gateway's alternative.
const TOKEN_KEY: &str = "token";
const AUTHORIZATION_KEY: &str = "authorization";

/// What a request carries to say who sent it: a token, and the common name of a verified client
/// certificate. Read once per request (or per stream) only while auth is enabled.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    token: Option<Result<String>>,
    common_name: Option<String>,
}

/// The credentials of `req` (its metadata, and its connection's certificate with
/// --client-cert-auth).
pub fn credentials<T>(s: &Shared, req: &Request<T>) -> Credentials {
    let common_name = if s.config.client_cert_auth {
        req.extensions().get::<super::tls::TlsConnectInfo>().and_then(|i| i.common_name.clone())
    } else {
        None
    };
    Credentials { token: token_of(req.metadata()), common_name }
}

/// The caller of `req`; `None` while auth is disabled (nothing is read: the hot path) or
/// without credentials.
pub async fn caller<T>(s: &Shared, req: &Request<T>) -> Result<Option<AuthInfo>> {
    if !s.auth.is_enabled() {
        return Ok(None);
    }
    identify(s, &credentials(s, req)).await
}

/// etcd's `AuthInfoFromCtx`: the token if there is one (an invalid one is an error), else the
/// certificate's common name, checked at the current auth revision.
pub async fn identify(s: &Shared, c: &Credentials) -> Result<Option<AuthInfo>> {
    if !s.auth.is_enabled() {
        return Ok(None);
    }
    match (&c.token, &c.common_name) {
        (Some(Err(e)), _) => Err(e.clone()),
        (Some(Ok(t)), _) => by_token(s, t).await.map(Some),
        (None, Some(cn)) => {
            Ok(Some(AuthInfo { username: cn.clone(), revision: s.auth.revision() }))
        }
        (None, None) => Ok(None),
    }
}

/// The token in `md`, if any (an unreadable one is an invalid token).
fn token_of(md: &MetadataMap) -> Option<Result<String>> {
    let token = md.get(TOKEN_KEY).or_else(|| md.get(AUTHORIZATION_KEY))?;
    Some(match token.to_str() {
        Ok(t) => Ok(t.strip_prefix("Bearer ").unwrap_or(t).to_string()),
        Err(_) => Err(Error::InvalidAuthToken),
    })
}

/// The user `token` stands for.
pub async fn by_token(s: &Shared, token: &str) -> Result<AuthInfo> {
    if let Some(info) = s.auth.token_info(token) {
        return Ok(info);
    }
    // In a cluster the token may have been issued through the log by an entry this member
    // has not applied yet (etcd waits for the index in the token): catch up, look again.
    // A JWT needs no state: refused is refused.
    if s.raft().is_some()
        && !s.auth.uses_jwt()
        && apply::linearizable(s).await.is_ok()
        && let Some(info) = s.auth.token_info(token)
    {
        return Ok(info);
    }
    Err(Error::InvalidAuthToken)
}

/// etcd's `requireAuthInfo`: with auth enabled, a request must come from someone.
pub fn require(s: &Shared, who: &Option<AuthInfo>) -> Result<()> {
    if s.auth.is_enabled() && who.is_none() {
        return Err(Error::UserEmpty);
    }
    Ok(())
}

/// The caller of `req`, who must be someone while auth is enabled ([`require`]): the check of
/// the calls any authenticated user may make (lease grant and revoke, Status, alarm list,
/// member list).
pub async fn authenticated<T>(s: &Shared, req: &Request<T>) -> Result<Option<AuthInfo>> {
    let who = caller(s, req).await?;
    require(s, &who)?;
    Ok(who)
}

/// The caller of `req`, who must have the root role while auth is enabled (etcd's
/// `AuthAdmin.isPermitted` and `checkMembershipOperationPermission`): the check of the calls
/// only root may make outside the auth store (compaction, membership changes, the
/// maintenance calls that read or change the whole store).
pub async fn admin<T>(s: &Shared, req: &Request<T>) -> Result<Option<AuthInfo>> {
    let who = caller(s, req).await?;
    s.auth.check_admin(who.as_ref())?;
    Ok(who)
}

/// The proposal header for `who` (absent while auth is disabled or for no credentials).
pub fn header(who: &Option<AuthInfo>) -> Option<mpb::AuthHeader> {
    who.as_ref().map(|w| mpb::AuthHeader { username: w.username.clone(), revision: w.revision })
}

/// The identity a member's own proposals carry (lease expiry: etcd's `WithRoot`).
pub fn root_header() -> mpb::AuthHeader {
    mpb::AuthHeader { username: auth::store::ROOT.into(), revision: u64::MAX }
}

pub fn from_header(h: &Option<mpb::AuthHeader>) -> Option<AuthInfo> {
    h.as_ref().map(|h| AuthInfo { username: h.username.clone(), revision: h.revision })
}

// ----- permission checks of writes (etcd's authApplierV3), at apply time -----

/// A lease's keys may be written by `who` (root may always): attaching to it or revoking it.
fn check_lease(s: &Shared, who: Option<&AuthInfo>, id: i64) -> Result<()> {
    if id == 0 {
        return Ok(());
    }
    let Some(ttl) = s.lessor.time_to_live(id, true) else { return Ok(()) };
    if s.auth.check_admin(who).is_ok() {
        return Ok(());
    }
    for k in &ttl.keys {
        s.auth.check_range(who, k, b"", true)?;
    }
    Ok(())
}

pub fn check_put(s: &Shared, who: Option<&AuthInfo>, r: &pb::PutRequest) -> Result<()> {
    s.auth.check_range(who, &r.key, b"", true)?;
    check_lease(s, who, r.lease)?;
    if r.prev_kv {
        s.auth.check_range(who, &r.key, b"", false)?;
    }
    Ok(())
}

pub fn check_delete(s: &Shared, who: Option<&AuthInfo>, r: &pb::DeleteRangeRequest) -> Result<()> {
    s.auth.check_range(who, &r.key, &r.range_end, true)?;
    if r.prev_kv {
        s.auth.check_range(who, &r.key, &r.range_end, false)?;
    }
    Ok(())
}

pub fn check_txn(s: &Shared, who: Option<&AuthInfo>, t: &pb::TxnRequest) -> Result<()> {
    use pb::request_op::Request as Op;
    for c in &t.compare {
        s.auth.check_range(who, &c.key, &c.range_end, false)?;
    }
    for op in t.success.iter().chain(&t.failure) {
        match &op.request {
            Some(Op::RequestRange(r)) => s.auth.check_range(who, &r.key, &r.range_end, false)?,
            Some(Op::RequestPut(p)) => check_put(s, who, p)?,
            Some(Op::RequestDeleteRange(d)) => check_delete(s, who, d)?,
            Some(Op::RequestTxn(t)) => check_txn(s, who, t)?,
            None => {}
        }
    }
    Ok(())
}

pub fn check_lease_revoke(s: &Shared, who: Option<&AuthInfo>, id: i64) -> Result<()> {
    if !s.auth.is_enabled() {
        return Ok(());
    }
    // etcd's check at apply: only when the lease exists; revision and user are checked by
    // the key checks (or by the admin check).
    if s.auth.check_admin(who).is_err() {
        let ttl = s.lessor.time_to_live(id, true);
        for k in ttl.iter().flat_map(|t| &t.keys) {
            s.auth.check_range(who, k, b"", true)?;
        }
    }
    Ok(())
}

// ----- changes of auth state -----

/// The log's form of a change (passwords already hashed).
pub fn to_op(r: mpb::AuthRequest) -> Option<Op> {
    use mpb::auth_request::Op as A;
    Some(match r.op? {
        A::Enable(_) => Op::Enable,
        A::Disable(_) => Op::Disable,
        A::UserAdd(u) => Op::UserAdd {
            name: u.name,
            hash: u.hashed_password.into_bytes(),
            no_password: u.options.is_some_and(|o| o.no_password),
        },
        A::UserDelete(u) => Op::UserDelete { name: u.name },
        A::UserChangePassword(u) => {
            Op::UserChangePassword { name: u.name, hash: u.hashed_password.into_bytes() }
        }
        A::UserGrantRole(g) => Op::UserGrantRole { user: g.user, role: g.role },
        A::UserRevokeRole(g) => Op::UserRevokeRole { name: g.name, role: g.role },
        A::RoleAdd(r) => Op::RoleAdd { name: r.name },
        A::RoleDelete(r) => Op::RoleDelete { role: r.role },
        A::RoleGrantPermission(g) => Op::RoleGrantPermission {
            name: g.name,
            perm: g.perm.map(|p| Permission {
                perm_type: PermType::from_i32(p.perm_type),
                key: p.key.to_vec(),
                range_end: p.range_end.to_vec(),
            }),
        },
        A::RoleRevokePermission(r) => Op::RoleRevokePermission {
            role: r.role,
            key: r.key.to_vec(),
            range_end: r.range_end.to_vec(),
        },
        A::Authenticate(a) => Op::Authenticate { name: a.name, prefix: a.token_prefix },
    })
}

/// The auth file of a member alone: the whole auth state, replaced atomically on each change.
pub fn auth_file(s: &Shared) -> Option<PathBuf> {
    let o = s.config.wal_options();
    (o.mode != crate::wal::Mode::None).then(|| o.dir.auth_file())
}

/// Reads a member alone's auth state, if it has one.
pub fn load(path: &Path) -> std::io::Result<Option<auth::AuthState>> {
    match std::fs::read(path) {
        Ok(b) => auth::codec::decode(&b)
            .map(Some)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad auth file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces the auth file with `state` atomically: a crash leaves either the old or the new
/// state, never a mix.
pub fn save(path: &Path, state: &auth::AuthState) -> std::io::Result<()> {
    crate::data_dir::write_atomic(path, &auth::codec::encode(state))
}

/// Makes a change of auth state as `who`: through the log in a cluster; on a member alone
/// applied and written to the auth file before answering. Returns Authenticate's token.
async fn change(s: &Shared, who: &Option<AuthInfo>, r: mpb::AuthRequest) -> Result<String> {
    // A member alone stays one until the change is written (see `Shared::alone`).
    let _alone = s.alone_writes().await;
    if s.raft().is_some() {
        return match apply::propose_as(s, Req::Auth(r), header(who)).await? {
            Resp::Auth(token) => Ok(token),
            _ => Err(Error::Internal),
        };
    }
    let op = to_op(r).ok_or(Error::Internal)?;
    // Tokens are not persisted (they go with a restart, as in etcd): nothing to write.
    let persists = !matches!(op, Op::Authenticate { .. });
    // One change at a time: the file is written in the order the changes were applied.
    let _g = s.auth_changes.lock().await;
    let caller = who.clone().unwrap_or_default();
    let path = auth_file(s).filter(|_| persists);
    // The state before, to go back to if the change cannot be written: a change answered
    // with an error must not stay in force (changes are rare; the copy is cheap).
    let before = path.as_ref().map(|_| s.auth.export());
    let token = s.auth.apply(&caller, op)?;
    if let (Some(path), Some(before)) = (path, before) {
        let state = s.auth.export();
        let written = tokio::task::block_in_place(|| save(&path, &state));
        if let Err(e) = written {
            tracing::error!(error = %e, path = %path.display(), "auth: the auth file could not be written; the change is undone");
            s.auth.undo(before);
            return Err(Error::WalUnavailable);
        }
    }
    Ok(token)
}

#[derive(Debug)]
pub struct AuthService {
    shared: Arc<Shared>,
}

impl AuthService {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// A change whose answer is only a header.
    async fn simple<Q, T>(&self, req: &Request<Q>, r: mpb::auth_request::Op) -> Result<T, Status>
    where
        T: Default + HasHeader,
    {
        let s = &self.shared;
        let who = caller(s, req).await?;
        change(s, &who, mpb::AuthRequest { op: Some(r) }).await?;
        let mut resp = T::default();
        *resp.header_mut() = s.header(0);
        Ok(resp)
    }

    /// A read of auth state: linearizable in a cluster, as etcd serves these through its log.
    async fn read_as<Q>(&self, req: &Request<Q>) -> Result<Option<AuthInfo>, Status> {
        let s = &self.shared;
        let who = caller(s, req).await?;
        apply::linearizable(s).await?;
        Ok(who)
    }
}

/// Responses that carry a header.
pub trait HasHeader {
    fn header_mut(&mut self) -> &mut Option<pb::ResponseHeader>;
}

macro_rules! has_header {
    ($($t:ident),*) => {$(
        impl HasHeader for pb::$t {
            fn header_mut(&mut self) -> &mut Option<pb::ResponseHeader> {
                &mut self.header
            }
        }
    )*};
}

has_header!(
    AuthEnableResponse,
    AuthDisableResponse,
    AuthUserAddResponse,
    AuthUserDeleteResponse,
    AuthUserChangePasswordResponse,
    AuthUserGrantRoleResponse,
    AuthUserRevokeRoleResponse,
    AuthRoleAddResponse,
    AuthRoleDeleteResponse,
    AuthRoleGrantPermissionResponse,
    AuthRoleRevokePermissionResponse
);

/// Hashes `password` off the runtime's threads (bcrypt is slow on purpose).
async fn hash(s: &Arc<Shared>, password: String) -> Result<String> {
    let s = s.clone();
    let h = tokio::task::spawn_blocking(move || s.auth.hash_password(&password))
        .await
        .map_err(|_| Error::Internal)??;
    String::from_utf8(h).map_err(|_| Error::Internal)
}

#[tonic::async_trait]
impl pb::auth_server::Auth for AuthService {
    async fn auth_status(
        &self,
        req: Request<pb::AuthStatusRequest>,
    ) -> Result<Response<pb::AuthStatusResponse>, Status> {
        // Only root may read it (etcd's needAdminPermission), checked in log order.
        let who = self.read_as(&req).await?;
        self.shared.auth.check_admin(who.as_ref())?;
        Ok(Response::new(pb::AuthStatusResponse {
            header: self.shared.header(0),
            enabled: self.shared.auth.is_enabled(),
            auth_revision: self.shared.auth.revision(),
        }))
    }

    async fn auth_enable(
        &self,
        req: Request<pb::AuthEnableRequest>,
    ) -> Result<Response<pb::AuthEnableResponse>, Status> {
        let r = *req.get_ref();
        self.simple(&req, mpb::auth_request::Op::Enable(r)).await.map(Response::new)
    }

    async fn auth_disable(
        &self,
        req: Request<pb::AuthDisableRequest>,
    ) -> Result<Response<pb::AuthDisableResponse>, Status> {
        let r = *req.get_ref();
        self.simple(&req, mpb::auth_request::Op::Disable(r)).await.map(Response::new)
    }

    async fn authenticate(
        &self,
        req: Request<pb::AuthenticateRequest>,
    ) -> Result<Response<pb::AuthenticateResponse>, Status> {
        let s = &self.shared;
        apply::linearizable(s).await?;
        let r = req.into_inner();
        loop {
            let checked = {
                let (s, name, password) = (s.clone(), r.name.clone(), r.password.clone());
                tokio::task::spawn_blocking(move || s.auth.check_password(&name, &password))
                    .await
                    .map_err(|_| Error::Internal)??
            };
            let a = mpb::InternalAuthenticate {
                name: r.name.clone(),
                token_prefix: auth::AuthStore::token_prefix(),
            };
            let op = mpb::auth_request::Op::Authenticate(a);
            let token = change(s, &None, mpb::AuthRequest { op: Some(op) }).await?;
            // The password was checked against a state that changed meanwhile: check again
            // (etcd's loop).
            if checked == s.auth.revision() {
                return Ok(Response::new(pb::AuthenticateResponse { header: s.header(0), token }));
            }
        }
    }

    async fn user_add(
        &self,
        req: Request<pb::AuthUserAddRequest>,
    ) -> Result<Response<pb::AuthUserAddResponse>, Status> {
        let who = caller(&self.shared, &req).await?;
        let mut r = req.into_inner();
        if !r.options.as_ref().is_some_and(|o| o.no_password) {
            // Checked before the slow hash, as the apply would refuse it anyway.
            if !r.name.is_empty() {
                self.shared.auth.check_admin(who.as_ref())?;
            }
            r.hashed_password = hash(&self.shared, std::mem::take(&mut r.password)).await?;
        } else {
            r.password.clear();
            r.hashed_password.clear();
        }
        change(
            &self.shared,
            &who,
            mpb::AuthRequest { op: Some(mpb::auth_request::Op::UserAdd(r)) },
        )
        .await?;
        Ok(Response::new(pb::AuthUserAddResponse { header: self.shared.header(0) }))
    }

    async fn user_change_password(
        &self,
        req: Request<pb::AuthUserChangePasswordRequest>,
    ) -> Result<Response<pb::AuthUserChangePasswordResponse>, Status> {
        let who = caller(&self.shared, &req).await?;
        let mut r = req.into_inner();
        if !r.password.is_empty() {
            self.shared.auth.check_admin(who.as_ref())?;
            r.hashed_password = hash(&self.shared, std::mem::take(&mut r.password)).await?;
        }
        let op = mpb::auth_request::Op::UserChangePassword(r);
        change(&self.shared, &who, mpb::AuthRequest { op: Some(op) }).await?;
        Ok(Response::new(pb::AuthUserChangePasswordResponse { header: self.shared.header(0) }))
    }

    async fn user_get(
        &self,
        req: Request<pb::AuthUserGetRequest>,
    ) -> Result<Response<pb::AuthUserGetResponse>, Status> {
        let who = self.read_as(&req).await?;
        let roles = self.shared.auth.user_get(who.as_ref(), &req.get_ref().name)?;
        Ok(Response::new(pb::AuthUserGetResponse { header: self.shared.header(0), roles }))
    }

    async fn user_list(
        &self,
        req: Request<pb::AuthUserListRequest>,
    ) -> Result<Response<pb::AuthUserListResponse>, Status> {
        let who = self.read_as(&req).await?;
        let users = self.shared.auth.user_list(who.as_ref())?;
        Ok(Response::new(pb::AuthUserListResponse { header: self.shared.header(0), users }))
    }

    async fn user_delete(
        &self,
        req: Request<pb::AuthUserDeleteRequest>,
    ) -> Result<Response<pb::AuthUserDeleteResponse>, Status> {
        let r = req.get_ref().clone();
        self.simple(&req, mpb::auth_request::Op::UserDelete(r)).await.map(Response::new)
    }

    async fn user_grant_role(
        &self,
        req: Request<pb::AuthUserGrantRoleRequest>,
    ) -> Result<Response<pb::AuthUserGrantRoleResponse>, Status> {
        let r = req.get_ref().clone();
        let op = mpb::auth_request::Op::UserGrantRole(r);
        self.simple(&req, op).await.map(Response::new)
    }

    async fn user_revoke_role(
        &self,
        req: Request<pb::AuthUserRevokeRoleRequest>,
    ) -> Result<Response<pb::AuthUserRevokeRoleResponse>, Status> {
        let r = req.get_ref().clone();
        let op = mpb::auth_request::Op::UserRevokeRole(r);
        self.simple(&req, op).await.map(Response::new)
    }

    async fn role_add(
        &self,
        req: Request<pb::AuthRoleAddRequest>,
    ) -> Result<Response<pb::AuthRoleAddResponse>, Status> {
        let r = req.get_ref().clone();
        self.simple(&req, mpb::auth_request::Op::RoleAdd(r)).await.map(Response::new)
    }

    async fn role_get(
        &self,
        req: Request<pb::AuthRoleGetRequest>,
    ) -> Result<Response<pb::AuthRoleGetResponse>, Status> {
        let who = self.read_as(&req).await?;
        let perms = self.shared.auth.role_get(who.as_ref(), &req.get_ref().role)?;
        let perm = perms
            .into_iter()
            .map(|p| crate::proto::authpb::Permission {
                perm_type: p.perm_type as i32,
                key: Bytes::from(p.key),
                range_end: Bytes::from(p.range_end),
            })
            .collect();
        Ok(Response::new(pb::AuthRoleGetResponse { header: self.shared.header(0), perm }))
    }

    async fn role_list(
        &self,
        req: Request<pb::AuthRoleListRequest>,
    ) -> Result<Response<pb::AuthRoleListResponse>, Status> {
        let who = self.read_as(&req).await?;
        let roles = self.shared.auth.role_list(who.as_ref())?;
        Ok(Response::new(pb::AuthRoleListResponse { header: self.shared.header(0), roles }))
    }

    async fn role_delete(
        &self,
        req: Request<pb::AuthRoleDeleteRequest>,
    ) -> Result<Response<pb::AuthRoleDeleteResponse>, Status> {
        let r = req.get_ref().clone();
        self.simple(&req, mpb::auth_request::Op::RoleDelete(r)).await.map(Response::new)
    }

    async fn role_grant_permission(
        &self,
        req: Request<pb::AuthRoleGrantPermissionRequest>,
    ) -> Result<Response<pb::AuthRoleGrantPermissionResponse>, Status> {
        let r = req.get_ref().clone();
        let op = mpb::auth_request::Op::RoleGrantPermission(r);
        self.simple(&req, op).await.map(Response::new)
    }

    async fn role_revoke_permission(
        &self,
        req: Request<pb::AuthRoleRevokePermissionRequest>,
    ) -> Result<Response<pb::AuthRoleRevokePermissionResponse>, Status> {
        let r = req.get_ref().clone();
        let op = mpb::auth_request::Op::RoleRevokePermission(r);
        self.simple(&req, op).await.map(Response::new)
    }
}
