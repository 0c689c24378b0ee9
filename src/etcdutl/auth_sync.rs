//! `follow` keeps the source's auth state on the copy: the watch does not carry it, so it is
//! read as etcd's API allows (root's calls) whenever the source's auth revision moves, and
//! the copy is brought to it: roles and their permissions, users and their roles. Whether
//! auth is enabled is reported, not switched (switched on, the copy would refuse `follow`'s
//! own calls made without a login). Passwords cannot be read: a user the source added after the snapshot is
//! added to the copy without a password (its client certificate still logs it in), and a
//! password changed after the snapshot is not seen; both are printed for the operator to set
//! on the copy before the cut-over (`etcdctl user passwd`).

use std::collections::{BTreeMap, BTreeSet};

use super::client::Conn;
use crate::proto::authpb;
use crate::proto::etcdserverpb as pb;

type Client = pb::auth_client::AuthClient<Conn>;

/// A permission as (type, key, range end), ordered so two roles' lists compare.
type Perm = (i32, Vec<u8>, Vec<u8>);

/// One store's auth state, as its API shows it.
#[derive(Debug, PartialEq, Eq, Default)]
struct AuthState {
    enabled: bool,
    roles: BTreeMap<String, BTreeSet<Perm>>,
    users: BTreeMap<String, BTreeSet<String>>,
}

/// What `follow` keeps of the auth state between syncs.
#[derive(Debug, Default)]
pub(super) struct AuthSync {
    /// The source's auth revision last brought to the copy (0: never).
    synced: u64,
    /// Whether reading the auth state was refused (no root login on a store with auth
    /// enabled): printed once, then auth is left as it is.
    given_up: bool,
}

impl AuthSync {
    /// Brings the copy's auth state to the source's, if the source's auth revision moved.
    /// A refusal to read it is printed once and auth left alone from then; another error
    /// (a store not answering) is printed and tried again at the next call.
    pub(super) async fn sync(&mut self, source: &Conn, target: &Conn) {
        if self.given_up {
            return;
        }
        if let Err(e) = self.try_sync(source, target).await {
            let refused = ["permission denied", "user name is empty", "invalid auth token"];
            if refused.iter().any(|r| e.contains(r)) {
                println!("auth is not followed: {e} (follow with --user root to follow it)");
                self.given_up = true;
            } else {
                println!("auth: {e}; trying again");
            }
        }
    }

    async fn try_sync(&mut self, source: &Conn, target: &Conn) -> Result<(), String> {
        let (mut s, mut t) = (Client::new(source.clone()), Client::new(target.clone()));
        let status = s.auth_status(pb::AuthStatusRequest {}).await;
        let at = status.map_err(|e| format!("source: AuthStatus: {}", e.message()))?;
        let at = at.into_inner().auth_revision;
        if at == self.synced {
            return Ok(());
        }
        let want = read(&mut s, "source").await?;
        let have = read(&mut t, "target").await?;
        if want != have {
            apply(&mut t, &have, &want).await?;
        } else if self.synced != 0 {
            println!(
                "auth: the source's auth revision moved to {at} with the same users and roles: \
                 if a password changed, set it on the copy (passwords cannot be read)"
            );
        }
        self.synced = at;
        Ok(())
    }
}

async fn read(c: &mut Client, who: &str) -> Result<AuthState, String> {
    let e = |call: &str, e: tonic::Status| format!("{who}: {call}: {}", e.message());
    let enabled = c.auth_status(pb::AuthStatusRequest {}).await.map_err(|x| e("AuthStatus", x))?;
    let mut st = AuthState { enabled: enabled.into_inner().enabled, ..Default::default() };
    let roles = c.role_list(pb::AuthRoleListRequest {}).await.map_err(|x| e("RoleList", x))?;
    for role in roles.into_inner().roles {
        let r = c.role_get(pb::AuthRoleGetRequest { role: role.clone() }).await;
        let perms = r.map_err(|x| e("RoleGet", x))?.into_inner().perm;
        let perms = perms.into_iter().map(|p| (p.perm_type, p.key.to_vec(), p.range_end.to_vec()));
        st.roles.insert(role, perms.collect());
    }
    let users = c.user_list(pb::AuthUserListRequest {}).await.map_err(|x| e("UserList", x))?;
    for name in users.into_inner().users {
        let u = c.user_get(pb::AuthUserGetRequest { name: name.clone() }).await;
        let roles = u.map_err(|x| e("UserGet", x))?.into_inner().roles;
        st.users.insert(name, roles.into_iter().collect());
    }
    Ok(st)
}

/// Brings the target from `have` to `want`: what is added first (roles, then users), what is
/// taken away after, auth's switch last (enabling it needs the root user and role in place).
async fn apply(t: &mut Client, have: &AuthState, want: &AuthState) -> Result<(), String> {
    let e = |call: &str, e: tonic::Status| format!("target: {call}: {}", e.message());
    let none = BTreeSet::new();
    for (role, perms) in &want.roles {
        let had = have.roles.get(role);
        if had.is_none() {
            let r = t.role_add(pb::AuthRoleAddRequest { name: role.clone() }).await;
            r.map_err(|x| e("RoleAdd", x))?;
            println!("auth: role {role} added, as the source's");
        }
        let had = had.unwrap_or(&none);
        for (perm_type, key, range_end) in perms.difference(had) {
            let perm = authpb::Permission {
                perm_type: *perm_type,
                key: key.clone().into(),
                range_end: range_end.clone().into(),
            };
            let req = pb::AuthRoleGrantPermissionRequest { name: role.clone(), perm: Some(perm) };
            t.role_grant_permission(req).await.map_err(|x| e("RoleGrantPermission", x))?;
        }
        for (_, key, range_end) in had.difference(perms) {
            let req = pb::AuthRoleRevokePermissionRequest {
                role: role.clone(),
                key: key.clone().into(),
                range_end: range_end.clone().into(),
            };
            t.role_revoke_permission(req).await.map_err(|x| e("RoleRevokePermission", x))?;
        }
    }
    let no_roles = BTreeSet::new();
    for (user, roles) in &want.users {
        let had = have.users.get(user);
        if had.is_none() {
            let req = pb::AuthUserAddRequest {
                name: user.clone(),
                options: Some(authpb::UserAddOptions { no_password: true }),
                ..Default::default()
            };
            t.user_add(req).await.map_err(|x| e("UserAdd", x))?;
            println!(
                "auth: user {user} added without a password (the source's cannot be read): \
                 set it on the copy before the cut-over if it logs in with one"
            );
        }
        let had = had.unwrap_or(&no_roles);
        for role in roles.difference(had) {
            let req = pb::AuthUserGrantRoleRequest { user: user.clone(), role: role.clone() };
            t.user_grant_role(req).await.map_err(|x| e("UserGrantRole", x))?;
        }
        for role in had.difference(roles) {
            let req = pb::AuthUserRevokeRoleRequest { name: user.clone(), role: role.clone() };
            t.user_revoke_role(req).await.map_err(|x| e("UserRevokeRole", x))?;
        }
    }
    for user in have.users.keys().filter(|u| !want.users.contains_key(*u)) {
        let r = t.user_delete(pb::AuthUserDeleteRequest { name: user.clone() }).await;
        r.map_err(|x| e("UserDelete", x))?;
        println!("auth: user {user} deleted, as on the source");
    }
    for role in have.roles.keys().filter(|r| !want.roles.contains_key(*r)) {
        let r = t.role_delete(pb::AuthRoleDeleteRequest { role: role.clone() }).await;
        r.map_err(|x| e("RoleDelete", x))?;
        println!("auth: role {role} deleted, as on the source");
    }
    if have.enabled != want.enabled {
        let (on, to) = if want.enabled { ("enabled", "enable") } else { ("disabled", "disable") };
        println!(
            "auth: {on} on the source, not on the copy: {to} it on the copy at the cut-over \
             (etcdctl auth {to})"
        );
    }
    Ok(())
}
