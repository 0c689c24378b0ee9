//! The Auth service. Authentication is never enabled (Kubernetes secures etcd with mutual TLS),
//! so AuthStatus says so and every other call gets etcd's "not enabled" error.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::Shared;
use crate::error::Error;
use crate::proto::etcdserverpb as pb;

#[derive(Debug)]
pub struct AuthService {
    shared: Arc<Shared>,
}

impl AuthService {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

/// Methods that all answer "authentication is not enabled". Written in the form
/// `#[async_trait]` expands to, because that attribute does not see into macro output.
macro_rules! not_enabled {
    ($($name:ident($req:ident) -> $resp:ident;)*) => {
        $(
            fn $name<'a, 'b>(
                &'a self,
                _: Request<pb::$req>,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<Response<pb::$resp>, Status>> + Send + 'b>,
            >
            where
                'a: 'b,
                Self: 'b,
            {
                Box::pin(std::future::ready(Err(Error::AuthNotEnabled.into())))
            }
        )*
    };
}

#[tonic::async_trait]
impl pb::auth_server::Auth for AuthService {
    async fn auth_status(
        &self,
        _: Request<pb::AuthStatusRequest>,
    ) -> Result<Response<pb::AuthStatusResponse>, Status> {
        Ok(Response::new(pb::AuthStatusResponse {
            header: self.shared.header(0),
            enabled: false,
            // etcd's auth store starts at revision 1.
            auth_revision: 1,
        }))
    }

    not_enabled! {
        auth_enable(AuthEnableRequest) -> AuthEnableResponse;
        auth_disable(AuthDisableRequest) -> AuthDisableResponse;
        authenticate(AuthenticateRequest) -> AuthenticateResponse;
        user_add(AuthUserAddRequest) -> AuthUserAddResponse;
        user_get(AuthUserGetRequest) -> AuthUserGetResponse;
        user_list(AuthUserListRequest) -> AuthUserListResponse;
        user_delete(AuthUserDeleteRequest) -> AuthUserDeleteResponse;
        user_change_password(AuthUserChangePasswordRequest) -> AuthUserChangePasswordResponse;
        user_grant_role(AuthUserGrantRoleRequest) -> AuthUserGrantRoleResponse;
        user_revoke_role(AuthUserRevokeRoleRequest) -> AuthUserRevokeRoleResponse;
        role_add(AuthRoleAddRequest) -> AuthRoleAddResponse;
        role_get(AuthRoleGetRequest) -> AuthRoleGetResponse;
        role_list(AuthRoleListRequest) -> AuthRoleListResponse;
        role_delete(AuthRoleDeleteRequest) -> AuthRoleDeleteResponse;
        role_grant_permission(AuthRoleGrantPermissionRequest) -> AuthRoleGrantPermissionResponse;
        role_revoke_permission(AuthRoleRevokePermissionRequest) -> AuthRoleRevokePermissionResponse;
    }
}
