//! The Auth service, and who a request comes from (etcd's `v3rpc/auth.go` and
//! `AuthInfoFromCtx`): the token in gRPC metadata `token`, checked against the auth store.
//!
//! Changes of auth state are submitted as every change of state is (`etcdserver::submit`: through
//! the Raft log in a cluster; on a member alone applied in place and written to its auth file
//! before the answer). Passwords are hashed here, by the member the client called, before the
//! change is submitted.

use std::sync::Arc;

use bytes::Bytes;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use crate::auth::AuthInfo;
use crate::error::{Error, Result};
use crate::proto::etcdserverpb as pb;
use crate::proto::memetcdpb as mpb;
use crate::server::etcdserver::apply;
use crate::server::etcdserver::member::Member;
use crate::server::etcdserver::submit::submit;

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
pub fn credentials<T>(s: &Member, req: &Request<T>) -> Credentials {
    let common_name = if s.config.client_cert_auth {
        req.extensions().get::<crate::tls::TlsConnectInfo>().and_then(|i| i.common_name.clone())
    } else {
        None
    };
    Credentials { token: token_of(req.metadata()), common_name }
}

/// The caller of `req`; `None` while auth is disabled (nothing is read: the hot path) or
/// without credentials.
pub async fn caller<T>(s: &Member, req: &Request<T>) -> Result<Option<AuthInfo>> {
    if !s.auth.is_enabled() {
        return Ok(None);
    }
    identify(s, &credentials(s, req)).await
}

/// etcd's `AuthInfoFromCtx`: the token if there is one (an invalid one is an error), else the
/// certificate's common name, checked at the current auth revision.
pub async fn identify(s: &Member, c: &Credentials) -> Result<Option<AuthInfo>> {
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
pub async fn by_token(s: &Member, token: &str) -> Result<AuthInfo> {
    if let Some(info) = s.auth.token_info(token) {
        return Ok(info);
    }
    // In a cluster the token may have been issued through the log by an entry this member
    // has not applied yet (etcd waits for the index in the token): catch up (nothing to catch
    // up with on a member alone), look again. A JWT needs no state: refused is refused.
    if !s.auth.uses_jwt()
        && apply::linearizable(s).await.is_ok()
        && let Some(info) = s.auth.token_info(token)
    {
        return Ok(info);
    }
    Err(Error::InvalidAuthToken)
}

/// etcd's `requireAuthInfo`: with auth enabled, a request must come from someone.
pub fn require(s: &Member, who: &Option<AuthInfo>) -> Result<()> {
    if s.auth.is_enabled() && who.is_none() {
        return Err(Error::UserEmpty);
    }
    Ok(())
}

/// The caller of `req`, who must be someone while auth is enabled ([`require`]): the check of
/// the calls any authenticated user may make (lease grant and revoke, Status, alarm list,
/// member list).
pub async fn authenticated<T>(s: &Member, req: &Request<T>) -> Result<Option<AuthInfo>> {
    let who = caller(s, req).await?;
    require(s, &who)?;
    Ok(who)
}

/// The caller of `req`, who must have the root role while auth is enabled (etcd's
/// `AuthAdmin.isPermitted` and `checkMembershipOperationPermission`): the check of the calls
/// only root may make outside the auth store (compaction, membership changes, the
/// maintenance calls that read or change the whole store).
pub async fn admin<T>(s: &Member, req: &Request<T>) -> Result<Option<AuthInfo>> {
    let who = caller(s, req).await?;
    s.auth.check_admin(who.as_ref())?;
    Ok(who)
}

/// Makes a change of auth state as `who` ([`submit`]); returns Authenticate's token.
async fn change(
    s: &Arc<Member>,
    who: &Option<AuthInfo>,
    r: mpb::auth_request::Op,
) -> Result<String> {
    submit(s, who, mpb::AuthRequest { op: Some(r) }).await
}

#[derive(Debug)]
pub struct AuthService {
    shared: Arc<Member>,
}

impl AuthService {
    pub fn new(shared: Arc<Member>) -> Self {
        Self { shared }
    }

    /// A change whose answer is only a header.
    async fn simple<Q, T>(&self, req: &Request<Q>, r: mpb::auth_request::Op) -> Result<T, Status>
    where
        T: Default + HasHeader,
    {
        let s = &self.shared;
        let who = caller(s, req).await?;
        change(s, &who, r).await?;
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
async fn hash(s: &Arc<Member>, password: String) -> Result<String> {
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
                token: s.auth.new_simple_token(),
            };
            let op = mpb::auth_request::Op::Authenticate(a);
            let token = change(s, &None, op).await?;
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
        change(&self.shared, &who, mpb::auth_request::Op::UserAdd(r)).await?;
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
        change(&self.shared, &who, op).await?;
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
