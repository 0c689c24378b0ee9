//! The auth state's persisted form: etcd's `authpb` messages (what etcd keeps in its auth
//! buckets), wrapped in `memetcdpb::AuthSnapshot`. Used by Raft snapshots and by a member
//! alone's auth file.

use bytes::Bytes;
use prost::Message;

use super::store::{AuthState, PermType, Permission, Role, User};
use crate::proto::authpb;
use crate::proto::memetcdpb as mpb;

pub fn to_proto(s: &AuthState) -> mpb::AuthSnapshot {
    mpb::AuthSnapshot {
        enabled: s.enabled,
        revision: s.revision,
        users: s
            .users
            .iter()
            .map(|u| authpb::User {
                name: Bytes::from(u.name.clone().into_bytes()),
                password: Bytes::from(u.password.clone()),
                roles: u.roles.clone(),
                options: Some(authpb::UserAddOptions { no_password: u.no_password }),
            })
            .collect(),
        roles: s
            .roles
            .iter()
            .map(|r| authpb::Role {
                name: Bytes::from(r.name.clone().into_bytes()),
                key_permission: r
                    .permissions
                    .iter()
                    .map(|p| authpb::Permission {
                        perm_type: p.perm_type as i32,
                        key: Bytes::from(p.key.clone()),
                        range_end: Bytes::from(p.range_end.clone()),
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub fn from_proto(s: mpb::AuthSnapshot) -> AuthState {
    AuthState {
        enabled: s.enabled,
        revision: s.revision,
        users: s
            .users
            .into_iter()
            .map(|u| User {
                name: String::from_utf8_lossy(&u.name).into_owned(),
                password: u.password.to_vec(),
                roles: u.roles,
                no_password: u.options.is_some_and(|o| o.no_password),
            })
            .collect(),
        roles: s
            .roles
            .into_iter()
            .map(|r| Role {
                name: String::from_utf8_lossy(&r.name).into_owned(),
                permissions: r
                    .key_permission
                    .into_iter()
                    .map(|p| Permission {
                        perm_type: PermType::from_i32(p.perm_type),
                        key: p.key.to_vec(),
                        range_end: p.range_end.to_vec(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub fn encode(s: &AuthState) -> Vec<u8> {
    to_proto(s).encode_to_vec()
}

pub fn decode(b: &[u8]) -> Option<AuthState> {
    mpb::AuthSnapshot::decode(b).ok().map(from_proto)
}
