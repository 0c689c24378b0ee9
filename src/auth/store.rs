//! The auth store (etcd's `server/auth/store.go`): users, roles, the enabled flag and the auth
//! revision, and the checks every request goes through while auth is enabled.
//!
//! State changes come in as [`Op`]s, applied in one order on every member (a member alone
//! applies them as they come; a cluster applies them from the Raft log), so every member holds
//! the same users, roles, revision and simple tokens. Passwords arrive already hashed: hashing
//! is done once, by the member a client called, so that every member stores the same hash.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock, RwLockReadGuard};

use super::jwt::{Jwt, TokenKind};
use super::perm::Intervals;
use crate::error::{Error, Result};

/// The user and role that may do everything (etcd's names).
pub const ROOT: &str = "root";

/// What a permission allows (authpb's values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PermType {
    Read = 0,
    Write = 1,
    ReadWrite = 2,
}

impl PermType {
    pub fn from_i32(v: i32) -> PermType {
        match v {
            1 => PermType::Write,
            2 => PermType::ReadWrite,
            _ => PermType::Read,
        }
    }

    fn reads(self) -> bool {
        matches!(self, PermType::Read | PermType::ReadWrite)
    }

    fn writes(self) -> bool {
        matches!(self, PermType::Write | PermType::ReadWrite)
    }
}

/// A key range a role may read or write: `range_end` empty is the one key, `"\0"` every key
/// from `key` on (etcd's conventions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permission {
    pub perm_type: PermType,
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    /// The bcrypt hash (`$2a$...`); empty for a user without password.
    pub password: Vec<u8>,
    /// Sorted, as etcd keeps them.
    pub roles: Vec<String>,
    pub no_password: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    /// Sorted by key.
    pub permissions: Vec<Permission>,
}

/// The whole persisted auth state: what a snapshot or backup carries, and what etcd keeps in
/// its `auth`, `authUsers` and `authRoles` buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthState {
    pub enabled: bool,
    pub revision: u64,
    pub users: Vec<User>,
    pub roles: Vec<Role>,
}

/// Who a request comes from: a user and the auth revision their credentials were checked at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthInfo {
    pub username: String,
    pub revision: u64,
}

/// A change of auth state, as it goes through the log. Passwords only ever as hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Enable,
    Disable,
    UserAdd {
        name: String,
        hash: Vec<u8>,
        no_password: bool,
    },
    UserDelete {
        name: String,
    },
    UserChangePassword {
        name: String,
        hash: Vec<u8>,
    },
    UserGrantRole {
        user: String,
        role: String,
    },
    UserRevokeRole {
        name: String,
        role: String,
    },
    RoleAdd {
        name: String,
    },
    RoleDelete {
        role: String,
    },
    RoleGrantPermission {
        name: String,
        perm: Option<Permission>,
    },
    RoleRevokePermission {
        role: String,
        key: Vec<u8>,
        range_end: Vec<u8>,
    },
    /// Issues a token to a user whose password the proposing member checked: with simple
    /// tokens, `token`, made whole by the proposing member ([`AuthStore::new_simple_token`]),
    /// so that every member holds the same one whatever its own history (a member that joined
    /// through a snapshot or restarted has applied other entries than its peers). etcd numbers
    /// it with the entry's Raft index instead, which the state machine is not given.
    Authenticate {
        name: String,
        token: String,
    },
}

impl Op {
    /// etcd's `needAdminPermission`: every change but Authenticate needs the root role.
    fn needs_admin(&self) -> bool {
        !matches!(self, Op::Authenticate { .. })
    }
}

/// Users, roles and permissions, with each user's merged permissions.
#[derive(Debug, Default)]
struct State {
    users: BTreeMap<String, User>,
    roles: BTreeMap<String, Role>,
    /// Per user: merged read and write ranges of all their roles (etcd's rangePermCache),
    /// rebuilt on every change, which is rare, so that a check is one binary search.
    perms: HashMap<String, (Intervals, Intervals)>,
}

impl State {
    fn refresh(&mut self) {
        let mut perms = HashMap::with_capacity(self.users.len());
        for u in self.users.values() {
            let granted: Vec<&Permission> = u
                .roles
                .iter()
                .filter_map(|r| self.roles.get(r))
                .flat_map(|r| r.permissions.iter())
                .collect();
            let pick = |f: fn(PermType) -> bool| {
                Intervals::build(
                    granted
                        .iter()
                        .filter(|p| f(p.perm_type))
                        .map(|p| (&p.key[..], &p.range_end[..])),
                )
            };
            perms.insert(u.name.clone(), (pick(PermType::reads), pick(PermType::writes)));
        }
        self.perms = perms;
    }
}

/// [`AuthStore::owns_only`] for user `u` (not root), under the state's lock.
fn owns_only_locked(st: &State, u: &User, key: &[u8], range_end: &[u8]) -> bool {
    let inside = |p: &Permission| {
        let end_inside = match &p.range_end[..] {
            [] => p.key.as_slice() < range_end,
            [0] => false,
            end => end <= range_end,
        };
        p.key.as_slice() >= key && end_inside
    };
    let granted = u.roles.iter().filter_map(|r| st.roles.get(r)).flat_map(|r| &r.permissions);
    granted.clone().next().is_some()
        && granted.into_iter().all(inside)
        && st.perms.get(&u.name).is_some_and(|(_, w)| w.covers(key, range_end))
}

fn has_root(u: &User) -> bool {
    u.roles.binary_search_by(|r| r.as_str().cmp(ROOT)).is_ok()
}

/// etcd's `isValidPermissionRange`.
fn valid_range(key: &[u8], range_end: &[u8]) -> bool {
    !key.is_empty() && (range_end.is_empty() || key < range_end || range_end == [0])
}

/// Simple tokens, kept in memory with a TTL renewed on every use (etcd's `simple_token.go`).
/// Lost on restart, as in etcd.
#[derive(Debug, Default)]
struct Tokens {
    by_token: HashMap<String, (String, Instant)>,
}

/// The auth store. Shared by every service; see the module comment.
#[derive(Debug)]
pub struct AuthStore {
    /// Whether auth is enabled: read by every request without a lock, so that with auth
    /// disabled a request pays one atomic load. Written under `state`'s write lock.
    enabled: AtomicBool,
    /// The auth revision, bumped by every change but enable (etcd's rule); read lock-free by
    /// the stale-revision checks. Written under `state`'s write lock.
    revision: AtomicU64,
    /// Bumped by every change of users and roles, a restore or undo included (which may set
    /// `revision` back): what tenants derived from the auth state (`--tenants-from-auth`)
    /// compare, lock-free, to know theirs are current. Written under `state`'s write lock.
    changes: AtomicU64,
    /// Users and roles: read by permission checks (only while enabled), written by [`Op`]s.
    state: RwLock<State>,
    /// Orders a member alone's checked writes with changes of auth state: a write holds it
    /// shared from its permission check until it is applied, a change holds it exclusively,
    /// so no write checked against the old permissions lands after a change that revokes
    /// them (a cluster needs none: it checks in log order, at apply). Taken before `state`.
    /// Only while auth is enabled: the disabled hot path never touches it.
    gate: RwLock<()>,
    /// Simple tokens: looked up and refreshed by every authenticated request, so a mutex of
    /// its own rather than `state`'s lock.
    tokens: Mutex<Tokens>,
    /// Simple tokens this member made for the Authenticate calls it answered: the number after
    /// a token's random prefix, for etcd's shape (`<prefix>.<number>`); the prefix alone makes
    /// a token unique. Atomic: Authenticate calls make tokens concurrently.
    issued: AtomicU64,
    /// With `--auth-token jwt,...`: tokens are signed and checked with its key instead, and
    /// `tokens` stays empty.
    jwt: Option<Box<Jwt>>,
    token_ttl: Duration,
    bcrypt_cost: u32,
}

/// etcd's default `--bcrypt-cost` and its bounds (Go's bcrypt.MinCost and MaxCost).
pub const DEFAULT_BCRYPT_COST: u32 = 10;
const MIN_BCRYPT_COST: u32 = 4;
const MAX_BCRYPT_COST: u32 = 31;

impl AuthStore {
    /// An empty store at revision 1 (etcd's starting revision), auth disabled.
    pub fn new(bcrypt_cost: u32, token_ttl: Duration) -> Self {
        let bcrypt_cost = if (MIN_BCRYPT_COST..=MAX_BCRYPT_COST).contains(&bcrypt_cost) {
            bcrypt_cost
        } else {
            tracing::warn!(
                given = bcrypt_cost,
                default = DEFAULT_BCRYPT_COST,
                "auth: invalid --bcrypt-cost; using the default"
            );
            DEFAULT_BCRYPT_COST
        };
        let token_ttl = if token_ttl.is_zero() { Duration::from_secs(300) } else { token_ttl };
        Self {
            enabled: AtomicBool::new(false),
            revision: AtomicU64::new(1),
            changes: AtomicU64::new(0),
            state: RwLock::new(State::default()),
            gate: RwLock::new(()),
            tokens: Mutex::new(Tokens::default()),
            issued: AtomicU64::new(0),
            jwt: None,
            token_ttl,
            bcrypt_cost,
        }
    }

    /// The store handing out tokens of `kind` (simple ones by default).
    pub fn with_tokens(mut self, kind: TokenKind) -> Self {
        self.jwt = match kind {
            TokenKind::Simple => None,
            TokenKind::Jwt(j) => Some(j),
        };
        self
    }

    /// Whether tokens are JWTs, which every member checks on its own.
    pub fn uses_jwt(&self) -> bool {
        self.jwt.is_some()
    }

    /// While auth is enabled, a guard to hold from a write's permission check until the write
    /// is applied (see `gate`); `None` while disabled.
    pub fn write_gate(&self) -> Option<RwLockReadGuard<'_, ()>> {
        if !self.is_enabled() {
            return None;
        }
        Some(self.gate.read())
    }

    /// The hot path's check.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    pub fn revision(&self) -> u64 {
        self.revision.load(Ordering::Acquire)
    }

    /// Counts the changes of users and roles (see `AuthStore::changes`).
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// The prefixes `/<x>/` that some user owns and nothing else (see
    /// [`owns_only`](Self::owns_only)), whether or not auth is enabled, in order: the tenants
    /// of `--tenants-from-auth`. A candidate is a READWRITE grant of a whole prefix ending in a
    /// slash, as Kamaji grants its tenant's user.
    pub fn sole_prefixes(&self) -> Vec<Vec<u8>> {
        let st = self.state.read();
        let mut out: Vec<Vec<u8>> = Vec::new();
        for u in st.users.values().filter(|u| !has_root(u)) {
            let granted =
                u.roles.iter().filter_map(|r| st.roles.get(r)).flat_map(|r| &r.permissions);
            for p in granted.clone() {
                let whole =
                    crate::keyspace::prefix_end(&p.key).is_some_and(|e| e[..] == p.range_end[..]);
                if whole
                    && p.key.len() > 2
                    && p.key.starts_with(b"/")
                    && p.key.ends_with(b"/")
                    && owns_only_locked(&st, u, &p.key, &p.range_end)
                {
                    out.push(p.key.clone());
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The persisted form of the whole state.
    pub fn export(&self) -> AuthState {
        let st = self.state.read();
        AuthState {
            enabled: self.is_enabled(),
            revision: self.revision(),
            users: st.users.values().cloned().collect(),
            roles: st.roles.values().cloned().collect(),
        }
    }

    /// Replaces the whole state (recovery, a snapshot from the leader, a restored backup).
    /// Simple tokens go: they were issued against the state replaced.
    pub fn restore(&self, s: AuthState) {
        self.replace(s);
        *self.tokens.lock() = Tokens::default();
    }

    /// Puts back the state from before a change that could not be persisted. Tokens stay:
    /// none was issued by the change, and those it invalidated stay invalid.
    pub fn undo(&self, before: AuthState) {
        let _gate = self.gate.write();
        self.replace(before);
    }

    fn replace(&self, s: AuthState) {
        let mut st = self.state.write();
        st.users = s
            .users
            .into_iter()
            .map(|mut u| {
                u.roles.sort();
                (u.name.clone(), u)
            })
            .collect();
        st.roles = s.roles.into_iter().map(|r| (r.name.clone(), r)).collect();
        st.refresh();
        self.changes.fetch_add(1, Ordering::AcqRel);
        self.revision.store(s.revision.max(1), Ordering::Release);
        self.enabled.store(s.enabled, Ordering::Release);
    }

    /// A bcrypt hash of `password` at this member's cost (slow on purpose: call off the
    /// async runtime's threads).
    pub fn hash_password(&self, password: &str) -> Result<Vec<u8>> {
        let h = bcrypt::hash_with_result(password, self.bcrypt_cost).map_err(|e| {
            tracing::error!(error = %e, "auth: bcrypt failed");
            Error::Internal
        })?;
        Ok(h.format_for_version(bcrypt::Version::TwoA).into_bytes())
    }

    /// etcd's `CheckPassword`: the auth revision the password was checked at. Slow (bcrypt).
    pub fn check_password(&self, name: &str, password: &str) -> Result<u64> {
        if !self.is_enabled() {
            return Err(Error::AuthNotEnabled);
        }
        let (hash, revision) = {
            let st = self.state.read();
            let u = st.users.get(name).ok_or(Error::AuthFailed)?;
            if u.no_password {
                return Err(Error::NoPasswordUser);
            }
            (u.password.clone(), self.revision())
        };
        let ok = std::str::from_utf8(&hash)
            .ok()
            .and_then(|h| bcrypt::verify(password, h).ok())
            .unwrap_or(false);
        if !ok {
            // The user name only: never the password.
            tracing::info!(user = name, "auth: invalid password");
            return Err(Error::AuthFailed);
        }
        Ok(revision)
    }

    /// A fresh simple token for [`Op::Authenticate`], made by the member that proposes it:
    /// etcd's shape, 16 random letters, a dot and a number (etcd's number is the entry's Raft
    /// index; here this member's count of the tokens it made).
    pub fn new_simple_token(&self) -> String {
        const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let mut raw = [0u8; 16];
        // Without OS randomness no token could be trusted: nothing sensible to go on with.
        getrandom::fill(&mut raw).expect("the OS random source");
        // 256 is not a multiple of 52: a slight bias, as harmless as for any 90-bit secret.
        let mut token: String =
            raw.iter().map(|b| LETTERS[*b as usize % LETTERS.len()] as char).collect();
        let n = self.issued.fetch_add(1, Ordering::Relaxed) + 1;
        token.push('.');
        token.push_str(&n.to_string());
        token
    }

    /// The user a token stands for. A simple token is checked at the current auth revision
    /// (it carries none) and its TTL renewed; a JWT carries the revision it was issued at, so
    /// any change of auth state since makes it stale. `None`: unknown, expired or forged.
    pub fn token_info(&self, token: &str) -> Option<AuthInfo> {
        if let Some(jwt) = &self.jwt {
            return jwt.check(token);
        }
        let now = Instant::now();
        let mut t = self.tokens.lock();
        let (name, deadline) = t.by_token.get_mut(token)?;
        if *deadline < now {
            t.by_token.remove(token);
            return None;
        }
        *deadline = now + self.token_ttl;
        let username = name.clone();
        drop(t);
        Some(AuthInfo { username, revision: self.revision() })
    }

    /// Applies one change, checking that `caller` may make it. Returns the token issued by
    /// [`Op::Authenticate`], else an empty string.
    pub fn apply(&self, caller: &AuthInfo, op: Op) -> Result<String> {
        let _gate = self.gate.write();
        let mut st = self.state.write();
        if op.needs_admin() {
            self.admin_locked(&st, Some(caller))?;
        }
        let enabled = self.is_enabled();
        let mut changed = true;
        match op {
            Op::Enable => {
                if enabled {
                    return Ok(String::new());
                }
                let root = st.users.get(ROOT).ok_or(Error::RootUserNotExist)?;
                if !has_root(root) {
                    return Err(Error::RootRoleNotExist);
                }
                self.enabled.store(true, Ordering::Release);
                tracing::info!("auth: enabled authentication");
                // etcd's enable keeps the revision.
                changed = false;
            }
            Op::Disable => {
                if !enabled {
                    return Ok(String::new());
                }
                self.enabled.store(false, Ordering::Release);
                *self.tokens.lock() = Tokens::default();
                tracing::info!("auth: disabled authentication");
            }
            Op::UserAdd { name, hash, no_password } => {
                if name.is_empty() {
                    return Err(Error::UserEmpty);
                }
                if st.users.contains_key(&name) {
                    return Err(Error::UserAlreadyExist);
                }
                let password = if no_password { Vec::new() } else { hash };
                tracing::info!(user = %name, "auth: added a user");
                st.users
                    .insert(name.clone(), User { name, password, roles: Vec::new(), no_password });
            }
            Op::UserDelete { name } => {
                if enabled && name == ROOT {
                    return Err(Error::InvalidAuthMgmt);
                }
                st.users.remove(&name).ok_or(Error::UserNotFound)?;
                self.invalidate_user(&name);
                tracing::info!(user = %name, "auth: deleted a user");
            }
            Op::UserChangePassword { name, hash } => {
                let u = st.users.get_mut(&name).ok_or(Error::UserNotFound)?;
                if !u.no_password {
                    u.password = hash;
                }
                self.invalidate_user(&name);
                tracing::info!(user = %name, "auth: changed a user's password");
            }
            Op::UserGrantRole { user, role } => {
                if role != ROOT && !st.roles.contains_key(&role) {
                    if !st.users.contains_key(&user) {
                        return Err(Error::UserNotFound);
                    }
                    return Err(Error::RoleNotFound);
                }
                let u = st.users.get_mut(&user).ok_or(Error::UserNotFound)?;
                match u.roles.binary_search(&role) {
                    // etcd ignores a second grant, without a new revision.
                    Ok(_) => return Ok(String::new()),
                    Err(i) => u.roles.insert(i, role.clone()),
                }
                tracing::info!(user = %user, role = %role, "auth: granted a role to a user");
            }
            Op::UserRevokeRole { name, role } => {
                if enabled && name == ROOT && role == ROOT {
                    return Err(Error::InvalidAuthMgmt);
                }
                let u = st.users.get_mut(&name).ok_or(Error::UserNotFound)?;
                let before = u.roles.len();
                u.roles.retain(|r| *r != role);
                if u.roles.len() == before {
                    return Err(Error::RoleNotGranted);
                }
                tracing::info!(user = %name, role = %role, "auth: revoked a role from a user");
            }
            Op::RoleAdd { name } => {
                if name.is_empty() {
                    return Err(Error::RoleEmpty);
                }
                if st.roles.contains_key(&name) {
                    return Err(Error::RoleAlreadyExist);
                }
                tracing::info!(role = %name, "auth: added a role");
                st.roles.insert(name.clone(), Role { name, permissions: Vec::new() });
            }
            Op::RoleDelete { role } => {
                if enabled && role == ROOT {
                    return Err(Error::InvalidAuthMgmt);
                }
                st.roles.remove(&role).ok_or(Error::RoleNotFound)?;
                for u in st.users.values_mut() {
                    u.roles.retain(|r| *r != role);
                }
                tracing::info!(role = %role, "auth: deleted a role");
            }
            Op::RoleGrantPermission { name, perm } => {
                let perm = perm.ok_or(Error::PermissionNotGiven)?;
                if !valid_range(&perm.key, &perm.range_end) {
                    return Err(Error::InvalidAuthMgmt);
                }
                let r = st.roles.get_mut(&name).ok_or(Error::RoleNotFound)?;
                let i = r.permissions.partition_point(|p| p.key < perm.key);
                match r.permissions.get_mut(i) {
                    Some(p) if p.key == perm.key && p.range_end == perm.range_end => {
                        p.perm_type = perm.perm_type
                    }
                    _ => {
                        r.permissions.push(perm);
                        r.permissions.sort_by(|a, b| a.key.cmp(&b.key));
                    }
                }
                tracing::info!(role = %name, "auth: granted a permission to a role");
            }
            Op::RoleRevokePermission { role, key, range_end } => {
                let r = st.roles.get_mut(&role).ok_or(Error::RoleNotFound)?;
                let before = r.permissions.len();
                r.permissions.retain(|p| p.key != key || p.range_end != range_end);
                if r.permissions.len() == before {
                    return Err(Error::PermissionNotGranted);
                }
                tracing::info!(role = %role, "auth: revoked a permission from a role");
            }
            Op::Authenticate { name, token } => {
                if !enabled {
                    return Err(Error::AuthNotEnabled);
                }
                match st.users.get(&name) {
                    Some(u) if !u.no_password => {}
                    _ => return Err(Error::AuthFailed),
                }
                if let Some(jwt) = &self.jwt {
                    // Signed at apply with the revision of this point in the log, as etcd
                    // does; every member signs, the proposer's answer is the one used.
                    return jwt.sign(&name, self.revision());
                }
                // Only a member that made none (a bug) proposes an empty one, which would be
                // the token of every request with an empty one: refused on every member alike.
                if token.is_empty() {
                    return Err(Error::Internal);
                }
                let mut t = self.tokens.lock();
                let deadline = Instant::now() + self.token_ttl;
                t.by_token.insert(token.clone(), (name, deadline));
                // Expired tokens go here, on the rare path, rather than on a timer.
                let now = Instant::now();
                t.by_token.retain(|_, (_, d)| *d >= now);
                return Ok(token);
            }
        }
        if changed {
            st.refresh();
            self.changes.fetch_add(1, Ordering::AcqRel);
            self.revision.fetch_add(1, Ordering::AcqRel);
        }
        Ok(String::new())
    }

    fn invalidate_user(&self, name: &str) {
        self.tokens.lock().by_token.retain(|_, (n, _)| n != name);
    }

    fn admin_locked(&self, st: &State, who: Option<&AuthInfo>) -> Result<()> {
        if !self.is_enabled() {
            return Ok(());
        }
        let who = who.filter(|w| !w.username.is_empty()).ok_or(Error::UserEmpty)?;
        let u = st.users.get(&who.username).ok_or(Error::UserNotFound)?;
        if !has_root(u) {
            return Err(Error::PermissionDenied);
        }
        Ok(())
    }

    /// etcd's `IsAdminPermitted`: whether `who` has the root role (anyone, while disabled).
    pub fn check_admin(&self, who: Option<&AuthInfo>) -> Result<()> {
        if !self.is_enabled() {
            return Ok(());
        }
        self.admin_locked(&self.state.read(), who)
    }

    /// etcd's `isOpPermitted`: may `who` read (or write) the keys in `[key, range_end)`.
    pub fn check_range(
        &self,
        who: Option<&AuthInfo>,
        key: &[u8],
        range_end: &[u8],
        write: bool,
    ) -> Result<()> {
        if !self.is_enabled() {
            return Ok(());
        }
        let who = who.filter(|w| w.revision != 0).ok_or(Error::UserEmpty)?;
        if who.revision < self.revision() {
            return Err(Error::AuthOldRevision);
        }
        let st = self.state.read();
        let u = st.users.get(&who.username).ok_or(Error::PermissionDenied)?;
        if has_root(u) {
            return Ok(());
        }
        let ok = st.perms.get(&who.username).is_some_and(|(read, written)| {
            if write { written.covers(key, range_end) } else { read.covers(key, range_end) }
        });
        if ok { Ok(()) } else { Err(Error::PermissionDenied) }
    }

    /// Whether `who` owns the keys in `[key, range_end)` and nothing else: every permission of
    /// its roles lies inside the range, and it may write all of it (a hosted control plane's
    /// user, as Kamaji provisions one per tenant prefix). Never root; false while disabled.
    pub fn owns_only(&self, who: Option<&AuthInfo>, key: &[u8], range_end: &[u8]) -> bool {
        let Some(who) = who.filter(|_| self.is_enabled()) else { return false };
        let st = self.state.read();
        let Some(u) = st.users.get(&who.username).filter(|u| !has_root(u)) else { return false };
        owns_only_locked(&st, u, key, range_end)
    }

    /// UserGet: the user's roles; root, or the user asking about themselves.
    pub fn user_get(&self, who: Option<&AuthInfo>, name: &str) -> Result<Vec<String>> {
        let st = self.state.read();
        // No credentials are the empty user name, as in etcd (which then looks the name up).
        if let Err(e) = self.admin_locked(&st, who)
            && who.map_or("", |w| w.username.as_str()) != name
        {
            return Err(e);
        }
        Ok(st.users.get(name).ok_or(Error::UserNotFound)?.roles.clone())
    }

    /// RoleGet: the role's permissions (root's: everything); root, or a user with the role.
    pub fn role_get(&self, who: Option<&AuthInfo>, role: &str) -> Result<Vec<Permission>> {
        let st = self.state.read();
        if let Err(e) = self.admin_locked(&st, who) {
            let has = who
                .and_then(|w| st.users.get(&w.username))
                .is_some_and(|u| u.roles.iter().any(|r| r == role));
            if !has {
                return Err(e);
            }
        }
        let r = st.roles.get(role).ok_or(Error::RoleNotFound)?;
        if r.name == ROOT {
            return Ok(vec![Permission {
                perm_type: PermType::ReadWrite,
                key: Vec::new(),
                range_end: vec![0],
            }]);
        }
        Ok(r.permissions.clone())
    }

    pub fn user_list(&self, who: Option<&AuthInfo>) -> Result<Vec<String>> {
        let st = self.state.read();
        self.admin_locked(&st, who)?;
        Ok(st.users.keys().cloned().collect())
    }

    pub fn role_list(&self, who: Option<&AuthInfo>) -> Result<Vec<String>> {
        let st = self.state.read();
        self.admin_locked(&st, who)?;
        Ok(st.roles.keys().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> AuthInfo {
        AuthInfo { username: ROOT.into(), revision: u64::MAX }
    }

    #[test]
    fn a_change_waits_for_the_writes_checked_before_it() {
        let s = std::sync::Arc::new(AuthStore::new(4, Duration::from_secs(300)));
        let anyone = AuthInfo::default();
        let add = |n: &str| Op::UserAdd { name: n.into(), hash: Vec::new(), no_password: true };
        assert!(s.write_gate().is_none(), "disabled: no gate");
        s.apply(&anyone, add(ROOT)).unwrap();
        s.apply(&anyone, Op::UserGrantRole { user: ROOT.into(), role: ROOT.into() }).unwrap();
        s.apply(&root(), Op::Enable).unwrap();
        let checked = s.write_gate().expect("enabled: a gate");
        let (s2, (tx, rx)) = (s.clone(), std::sync::mpsc::channel());
        let change = std::thread::spawn(move || {
            s2.apply(&root(), Op::RoleAdd { name: "r".into() }).unwrap();
            tx.send(()).unwrap();
        });
        // The write checked under the gate is not yet applied: the change must wait for it.
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "the change did not wait");
        let before = s.revision();
        drop(checked);
        rx.recv_timeout(Duration::from_secs(5)).expect("the change went on");
        change.join().unwrap();
        assert_eq!(s.revision(), before + 1);
    }

    /// Every member keeps the token the proposer made, whatever it applied before: one that
    /// restored a snapshot (no tokens, no history) holds the same as one that issued many.
    #[test]
    fn a_token_is_the_same_on_every_member() {
        let anyone = AuthInfo::default();
        let busy = AuthStore::new(4, Duration::from_secs(300));
        let hash = busy.hash_password("pw").unwrap();
        let add = Op::UserAdd { name: ROOT.into(), hash, no_password: false };
        busy.apply(&anyone, add).unwrap();
        busy.apply(&anyone, Op::UserGrantRole { user: ROOT.into(), role: ROOT.into() }).unwrap();
        busy.apply(&root(), Op::Enable).unwrap();
        let auth = |token: String| Op::Authenticate { name: ROOT.into(), token };
        for _ in 0..3 {
            busy.apply(&anyone, auth(busy.new_simple_token())).unwrap();
        }
        let joined = AuthStore::new(4, Duration::from_secs(300));
        joined.restore(busy.export());
        let token = joined.new_simple_token();
        let (prefix, n) = token.split_once('.').expect("etcd's shape");
        assert!(prefix.len() == 16 && prefix.bytes().all(|b| b.is_ascii_alphabetic()), "{token}");
        assert!(n.parse::<u64>().is_ok(), "{token}");
        for s in [&busy, &joined] {
            assert_eq!(s.apply(&anyone, auth(token.clone())), Ok(token.clone()));
            assert_eq!(s.token_info(&token).map(|i| i.username), Some(ROOT.to_string()));
        }
        assert_eq!(busy.apply(&anyone, auth(String::new())), Err(Error::Internal));
        assert!(busy.token_info("").is_none());
    }

    #[test]
    fn enable_needs_root_then_checks_ranges() {
        let s = AuthStore::new(4, Duration::from_secs(300));
        let anyone = AuthInfo::default();
        assert_eq!(s.apply(&anyone, Op::Enable), Err(Error::RootUserNotExist));
        let add = |n: &str| Op::UserAdd { name: n.into(), hash: Vec::new(), no_password: true };
        s.apply(&anyone, add(ROOT)).unwrap();
        assert_eq!(s.apply(&anyone, Op::Enable), Err(Error::RootRoleNotExist));
        s.apply(&anyone, Op::UserGrantRole { user: ROOT.into(), role: ROOT.into() }).unwrap();
        s.apply(&anyone, add("u")).unwrap();
        s.apply(&anyone, Op::RoleAdd { name: "r".into() }).unwrap();
        let perm =
            Permission { perm_type: PermType::Read, key: b"a".to_vec(), range_end: b"b".to_vec() };
        s.apply(&anyone, Op::RoleGrantPermission { name: "r".into(), perm: Some(perm) }).unwrap();
        s.apply(&anyone, Op::UserGrantRole { user: "u".into(), role: "r".into() }).unwrap();
        let rev = s.revision();
        s.apply(&anyone, Op::Enable).unwrap();
        assert_eq!(s.revision(), rev, "enable keeps the revision");
        assert_eq!(s.apply(&anyone, Op::RoleAdd { name: "x".into() }), Err(Error::UserEmpty));
        let u = AuthInfo { username: "u".into(), revision: s.revision() };
        assert_eq!(s.check_range(Some(&u), b"a1", b"", false), Ok(()));
        assert_eq!(s.check_range(Some(&u), b"a1", b"", true), Err(Error::PermissionDenied));
        assert_eq!(s.check_range(None, b"a1", b"", false), Err(Error::UserEmpty));
        // No credentials are the empty name: refused for others, but "themselves" (etcd's
        // UserGet), a user that does not exist.
        assert_eq!(s.user_get(None, "u"), Err(Error::UserEmpty));
        assert_eq!(s.user_get(None, ""), Err(Error::UserNotFound));
        assert_eq!(s.user_get(Some(&u), "u"), Ok(vec!["r".to_string()]));
        assert_eq!(s.apply(&u, Op::Disable), Err(Error::PermissionDenied));
        s.apply(&root(), Op::RoleAdd { name: "x".into() }).unwrap();
        assert_eq!(s.check_range(Some(&u), b"a1", b"", false), Err(Error::AuthOldRevision));
        assert_eq!(
            s.apply(&root(), Op::UserDelete { name: ROOT.into() }),
            Err(Error::InvalidAuthMgmt)
        );
        let exported = s.export();
        let t = AuthStore::new(4, Duration::from_secs(300));
        t.restore(exported.clone());
        assert_eq!(t.export(), exported);
        assert!(t.is_enabled());
    }

    #[test]
    fn a_prefix_is_a_tenant_while_one_user_owns_it_and_nothing_else() {
        let s = AuthStore::new(4, Duration::from_secs(300));
        let anyone = AuthInfo::default();
        let apply = |op| s.apply(&anyone, op).unwrap();
        let grant = |role: &str, t: PermType, key: &str, end: &str| {
            let perm = Permission { perm_type: t, key: key.into(), range_end: end.into() };
            apply(Op::RoleGrantPermission { name: role.into(), perm: Some(perm) });
        };
        for (user, role) in [("a", "a"), ("b", "b"), ("c", "c"), ("d", "d"), ("r", ROOT)] {
            apply(Op::UserAdd { name: user.into(), hash: Vec::new(), no_password: true });
            apply(Op::RoleAdd { name: role.into() });
            apply(Op::UserGrantRole { user: user.into(), role: role.into() });
        }
        let before = s.changes();
        grant("a", PermType::ReadWrite, "/a/", "/a0");
        // b owns /b/ but also reads /other/: not a tenant's user.
        grant("b", PermType::ReadWrite, "/b/", "/b0");
        grant("b", PermType::Read, "/other/", "/other0");
        // c may only read its prefix; d's prefix does not end a segment.
        grant("c", PermType::Read, "/c/", "/c0");
        grant("d", PermType::ReadWrite, "/d", "/e");
        grant(ROOT, PermType::ReadWrite, "/r/", "/r0");
        assert!(s.changes() > before, "each grant is a change");
        assert_eq!(s.sole_prefixes(), [b"/a/".to_vec()]);
        // A second user of the same prefix changes nothing; the last one to go ends it.
        apply(Op::UserAdd { name: "a2".into(), hash: Vec::new(), no_password: true });
        apply(Op::UserGrantRole { user: "a2".into(), role: "a".into() });
        assert_eq!(s.sole_prefixes(), [b"/a/".to_vec()]);
        apply(Op::UserDelete { name: "a".into() });
        assert_eq!(s.sole_prefixes(), [b"/a/".to_vec()]);
        apply(Op::UserRevokeRole { name: "a2".into(), role: "a".into() });
        assert!(s.sole_prefixes().is_empty());
    }
}
