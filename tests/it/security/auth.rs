//! Authentication and authorization: the etcdctl auth battery against mem_etcd and a real
//! etcd 3.6 (same outputs), bad tokens and passwords, denied watches and lease revokes, auth
//! state across a restart, and on a 3-member cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use crate::tools::etcdctl::{ID_FIELDS, etcdctl, mask_numbers_after};

const ROOT: &str = "--user=root:rootpw";
const ALICE: &str = "--user=alice:alicepw";

/// The battery: (args, stdin), run in order against both servers.
fn battery() -> Vec<(Vec<&'static str>, Option<&'static str>)> {
    let c = |a: &[&'static str]| (a.to_vec(), None);
    vec![
        c(&["auth", "status"]),
        c(&["auth", "enable"]),
        c(&["user", "add", "root", "--new-user-password=rootpw"]),
        c(&["user", "add", "root", "--new-user-password=rootpw"]),
        c(&["auth", "enable"]),
        c(&["auth", "status", ROOT]),
        c(&["auth", "status", "-w", "json", ROOT]),
        c(&["put", "foo", "bar"]),
        c(&["get", "foo"]),
        c(&["put", "foo", "bar", ROOT]),
        c(&["user", "add", "alice", "--new-user-password=alicepw", ROOT]),
        c(&["user", "add", "nopw", "--no-password", ROOT]),
        c(&["role", "add", "app", ROOT]),
        c(&["role", "add", "app", ROOT]),
        c(&["role", "grant-permission", "app", "readwrite", "/app/", "--prefix", ROOT]),
        c(&["role", "grant-permission", "app", "read", "/shared", ROOT]),
        c(&["role", "grant-permission", "app", "write", "/w/", "/w0", ROOT]),
        c(&["role", "grant-permission", "nosuch", "read", "x", ROOT]),
        c(&["user", "grant-role", "alice", "app", ROOT]),
        c(&["user", "grant-role", "alice", "nosuch", ROOT]),
        c(&["user", "grant-role", "nosuch", "app", ROOT]),
        c(&["user", "get", "alice", ROOT]),
        c(&["user", "get", "alice", "--detail", ROOT]),
        c(&["user", "get", "alice", ALICE]),
        c(&["user", "get", "root", ALICE]),
        c(&["user", "list", ROOT]),
        c(&["user", "list", ALICE]),
        c(&["role", "list", ROOT]),
        c(&["role", "get", "app", ROOT]),
        c(&["role", "get", "app", ALICE]),
        c(&["role", "get", "root", ROOT]),
        c(&["role", "get", "nosuch", ROOT]),
        c(&["put", "/app/x", "1", ALICE]),
        c(&["put", "/other", "1", ALICE]),
        c(&["put", "/shared", "s", ROOT]),
        c(&["put", "/shared", "s2", ALICE]),
        c(&["get", "/shared", ALICE]),
        c(&["get", "/other", ALICE]),
        c(&["get", "/app/", "--prefix", ALICE]),
        c(&["get", "/app/", "--prefix", "--keys-only", ROOT]),
        c(&["get", "", "--prefix", ALICE]),
        c(&["del", "/app/x", ALICE]),
        c(&["del", "/shared", ALICE]),
        c(&["put", "/w/a", "1", ALICE]),
        c(&["get", "/w/a", ALICE]),
        (vec!["txn", ALICE], Some("\n\nput /app/t 1\n\nput /other 2\n\n")),
        (vec!["txn", ALICE], Some("value(\"/app/t\") = \"1\"\n\nget /other\n\n\n")),
        c(&["get", "foo", "--user=alice:wrong"]),
        c(&["get", "foo", "--user=nobody:x"]),
        c(&["get", "foo", "--user=nopw:x"]),
        c(&["endpoint", "status", ALICE]),
        c(&["endpoint", "status"]),
        c(&["alarm", "list", ALICE]),
        c(&["endpoint", "hashkv", ALICE]),
        c(&["user", "delete", "root", ROOT]),
        c(&["role", "delete", "root", ROOT]),
        c(&["user", "revoke-role", "root", "root", ROOT]),
        c(&["role", "add", "x", ALICE]),
        (vec!["user", "passwd", "alice", "--interactive=false", ROOT], Some("alicepw2\n")),
        c(&["get", "/app/x", ALICE]),
        c(&["get", "/app/x", "--user=alice:alicepw2"]),
        c(&["user", "revoke-role", "alice", "app", ROOT]),
        c(&["user", "revoke-role", "alice", "app", ROOT]),
        c(&["get", "/app/x", "--user=alice:alicepw2"]),
        c(&["role", "revoke-permission", "app", "/shared", ROOT]),
        c(&["role", "revoke-permission", "app", "/shared", ROOT]),
        c(&["role", "revoke-permission", "app", "/app/", "--prefix", ROOT]),
        c(&["role", "get", "app", ROOT]),
        c(&["role", "delete", "app", ROOT]),
        c(&["role", "delete", "app", ROOT]),
        c(&["user", "delete", "alice", ROOT]),
        c(&["user", "delete", "alice", ROOT]),
        c(&["user", "list", ROOT]),
        c(&["auth", "status", ROOT]),
        c(&["auth", "disable", "--user=nopw:"]),
        c(&["auth", "disable", ROOT]),
        c(&["auth", "status"]),
        c(&["put", "foo", "after"]),
        c(&["get", "foo"]),
        c(&["user", "list"]),
        c(&["auth", "disable"]),
    ]
}

#[derive(Debug, PartialEq, Eq)]
struct Out {
    code: Option<i32>,
    stdout: String,
    errors: Vec<String>,
}

fn masked(o: (Option<i32>, String, String)) -> Out {
    Out {
        code: o.0,
        stdout: mask_numbers_after(&o.1, &ID_FIELDS),
        errors: o.2.lines().filter(|l| l.starts_with("Error:")).map(str::to_string).collect(),
    }
}

/// Runs `etcdctl watch` for a moment: a denied watch ends by itself, an allowed one is killed.
fn watch_briefly(bin: &Path, endpoint: &str, args: &[&str]) -> Out {
    let mut child = Command::new(bin)
        .arg(format!("--endpoints={endpoint}"))
        .arg("watch")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn etcdctl");
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    masked((
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    ))
}

fn ctl() -> Option<PathBuf> {
    peer_binary("etcdctl")
}

#[tokio::test]
async fn etcdctl_battery_same_as_etcd() {
    let Some(bin) = ctl() else { return };
    let etcd = server_of!(Kind::Etcd);
    let tgt = server_of!(Kind::MemEtcd);
    let (e_ep, t_ep) = (etcd.addr().to_string(), tgt.addr().to_string());
    let results = tokio::task::spawn_blocking(move || {
        let mut results = Vec::new();
        // Each command runs on both servers at once: they share nothing, and an etcdctl run
        // mostly waits (its start, bcrypt on the server).
        let both = |f: &(dyn Fn(&str) -> Out + Sync)| {
            std::thread::scope(|s| {
                let want = s.spawn(|| f(&e_ep));
                let got = f(&t_ep);
                (want.join().expect("etcdctl against etcd"), got)
            })
        };
        for (args, stdin) in battery() {
            let (mut want, mut got) = both(&|ep| masked(etcdctl(&bin, ep, &args, stdin)));
            if args[..2] == ["endpoint", "status"] {
                // Sizes and indexes differ by nature: whether it is allowed is the point.
                want.stdout.clear();
                got.stdout.clear();
            }
            results.push((args.join(" "), want, got));
            // Right after `auth enable` and the grants: the watches.
            if args == ["get", "/w/a", ALICE] {
                for w in [vec!["/other", ALICE], vec!["/other"], vec!["/x", "--user=alice:bad"]] {
                    let (want, got) = both(&|ep| watch_briefly(&bin, ep, &w));
                    results.push((format!("watch {}", w.join(" ")), want, got));
                }
            }
        }
        results
    })
    .await
    .unwrap();
    let failures: Vec<String> = results
        .iter()
        .filter(|(_, w, g)| w != g)
        .map(|(cmd, w, g)| format!("etcdctl {cmd}:\n  etcd:   {w:?}\n  target: {g:?}"))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} commands differ:\n{}",
        failures.len(),
        results.len(),
        failures.join("\n")
    );
}

use crate::cluster::harness::Cluster;
use tonic::Request;

fn put(k: &str) -> pb::PutRequest {
    pb::PutRequest { key: k.to_string().into(), value: "v".into(), ..Default::default() }
}

fn range(k: &str) -> pb::RangeRequest {
    pb::RangeRequest { key: k.to_string().into(), ..Default::default() }
}

/// `m` with `token` in the metadata key etcd's clients use.
fn with_token<T>(token: &str, m: T) -> Request<T> {
    let mut r = Request::new(m);
    r.metadata_mut().insert("token", token.parse().unwrap());
    r
}

/// root (role root), alice (role app: readwrite on /app/ prefix), auth enabled.
async fn set_up(raw: &mut Raw) {
    let a = &mut raw.auth;
    let add = |n: &str, p: &str| pb::AuthUserAddRequest {
        name: n.into(),
        password: p.into(),
        ..Default::default()
    };
    a.user_add(add("root", "rootpw")).await.unwrap();
    a.role_add(pb::AuthRoleAddRequest { name: "root".into() }).await.unwrap();
    a.user_grant_role(pb::AuthUserGrantRoleRequest { user: "root".into(), role: "root".into() })
        .await
        .unwrap();
    a.user_add(add("alice", "alicepw")).await.unwrap();
    a.role_add(pb::AuthRoleAddRequest { name: "app".into() }).await.unwrap();
    let perm = mem_etcd::proto::authpb::Permission {
        perm_type: 2,
        key: "/app/".into(),
        range_end: "/app0".into(),
    };
    a.role_grant_permission(pb::AuthRoleGrantPermissionRequest {
        name: "app".into(),
        perm: Some(perm),
    })
    .await
    .unwrap();
    a.user_grant_role(pb::AuthUserGrantRoleRequest { user: "alice".into(), role: "app".into() })
        .await
        .unwrap();
    a.auth_enable(pb::AuthEnableRequest {}).await.unwrap();
}

async fn token(raw: &mut Raw, name: &str, password: &str) -> String {
    let r = pb::AuthenticateRequest { name: name.into(), password: password.into() };
    raw.auth.authenticate(r).await.unwrap().into_inner().token
}

fn outcome<T>(r: Result<tonic::Response<T>, tonic::Status>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("{:?}: {}", e.code(), e.message()),
    }
}

/// Bad passwords and tokens, missing credentials, a denied lease revoke and admin-only calls,
/// by raw gRPC: the codes and messages of etcd.
async fn errors_of(s: &Server) -> Vec<(&'static str, String)> {
    let mut raw = s.raw_clients().await;
    set_up(&mut raw).await;
    let mut out = Vec::new();
    let authn = |n: &str, p: &str| pb::AuthenticateRequest { name: n.into(), password: p.into() };
    out.push(("wrong password", outcome(raw.auth.authenticate(authn("alice", "x")).await)));
    out.push(("unknown user", outcome(raw.auth.authenticate(authn("bob", "x")).await)));
    let root = token(&mut raw, "root", "rootpw").await;
    let alice = token(&mut raw, "alice", "alicepw").await;
    out.push(("bad token", outcome(raw.kv.range(with_token("garbage.1", range("/app/a"))).await)));
    out.push(("no token put", outcome(raw.kv.put(put("/app/a")).await)));
    out.push(("no token get", outcome(raw.kv.range(range("/app/a")).await)));
    out.push(("alice put", outcome(raw.kv.put(with_token(&alice, put("/app/a"))).await)));
    out.push(("alice put out", outcome(raw.kv.put(with_token(&alice, put("/b"))).await)));
    let prefix =
        pb::RangeRequest { key: "/app/".into(), range_end: "/app1".into(), ..Default::default() };
    out.push(("alice wide get", outcome(raw.kv.range(with_token(&alice, prefix)).await)));
    let del = pb::DeleteRangeRequest { key: "/app/a".into(), prev_kv: true, ..Default::default() };
    out.push(("alice delete", outcome(raw.kv.delete_range(with_token(&alice, del)).await)));
    let mut lease = pb::lease_client::LeaseClient::new(raw.channel.clone());
    let g = lease
        .lease_grant(with_token(&root, pb::LeaseGrantRequest { ttl: 100, id: 0 }))
        .await
        .unwrap()
        .into_inner();
    let mut attached = put("/secret");
    attached.lease = g.id;
    raw.kv.put(with_token(&root, attached)).await.unwrap();
    let ttl = pb::LeaseTimeToLiveRequest { id: g.id, keys: true };
    out.push(("alice ttl keys", outcome(lease.lease_time_to_live(with_token(&alice, ttl)).await)));
    let revoke = pb::LeaseRevokeRequest { id: g.id };
    out.push(("alice revoke", outcome(lease.lease_revoke(with_token(&alice, revoke)).await)));
    out.push(("root revoke", outcome(lease.lease_revoke(with_token(&root, revoke)).await)));
    let m = &mut raw.maint;
    out.push((
        "alice hashkv",
        outcome(m.hash_kv(with_token(&alice, pb::HashKvRequest::default())).await),
    ));
    out.push(("no token status", outcome(m.status(pb::StatusRequest {}).await)));
    out.push(("alice status", outcome(m.status(with_token(&alice, pb::StatusRequest {})).await)));
    let a = &mut raw.auth;
    out.push((
        "alice user list",
        outcome(a.user_list(with_token(&alice, pb::AuthUserListRequest {})).await),
    ));
    let add = pb::AuthRoleAddRequest { name: "r2".into() };
    out.push(("root role add", outcome(a.role_add(with_token(&root, add)).await)));
    // The auth state changed: alice's token still works (simple tokens are checked at the
    // current revision), and a deleted user's token is gone.
    out.push(("alice after change", outcome(raw.kv.put(with_token(&alice, put("/app/b"))).await)));
    let del = pb::AuthUserDeleteRequest { name: "alice".into() };
    out.push(("delete alice", outcome(raw.auth.user_delete(with_token(&root, del)).await)));
    out.push(("deleted alice", outcome(raw.kv.put(with_token(&alice, put("/app/c"))).await)));
    let st = raw.auth.auth_status(with_token(&root, pb::AuthStatusRequest {})).await.unwrap();
    out.push(("status", format!("{} {}", st.get_ref().enabled, st.get_ref().auth_revision)));
    out.push((
        "disable",
        outcome(raw.auth.auth_disable(with_token(&root, pb::AuthDisableRequest {})).await),
    ));
    out.push(("after disable", outcome(raw.kv.put(put("/b")).await)));
    out
}

#[tokio::test]
async fn errors_same_as_etcd() {
    let etcd = server_of!(Kind::Etcd);
    let tgt = server_of!(Kind::MemEtcd);
    let want = errors_of(&etcd).await;
    let got = errors_of(&tgt).await;
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(w, g, "\nall of etcd's:  {want:#?}\nall of target's: {got:#?}");
    }
    assert_eq!(want.len(), got.len());
}

/// A member alone keeps users, roles, permissions, the enabled flag and the auth revision
/// across a restart on its data directory (tokens, as in etcd, do not survive).
#[tokio::test]
async fn auth_state_survives_restart() {
    let dir = DataDir::new();
    let args = ["--wal-mode", "buffered"];
    let s = dir.start(&args).await;
    let mut raw = s.raw_clients().await;
    set_up(&mut raw).await;
    // Only root may read the auth status while auth is enabled (etcd's rule).
    let root = token(&mut raw, "root", "rootpw").await;
    let before = raw.auth.auth_status(with_token(&root, pb::AuthStatusRequest {})).await;
    let alice = token(&mut raw, "alice", "alicepw").await;
    drop(raw);
    s.stop(Duration::from_secs(10)).await;
    let s = dir.start(&args).await;
    let mut raw = s.raw_clients().await;
    let root = token(&mut raw, "root", "rootpw").await;
    let st = raw.auth.auth_status(with_token(&root, pb::AuthStatusRequest {})).await.unwrap();
    let before = before.unwrap().into_inner();
    assert_eq!((st.get_ref().enabled, st.get_ref().auth_revision), (true, before.auth_revision));
    let e = raw.kv.put(with_token(&alice, put("/app/a"))).await.expect_err("old token");
    assert_eq!(e.message(), "etcdserver: invalid auth token");
    let alice = token(&mut raw, "alice", "alicepw").await;
    raw.kv.put(with_token(&alice, put("/app/a"))).await.expect("alice writes /app/");
    let e = raw.kv.put(with_token(&alice, put("/b"))).await.expect_err("not /b");
    assert_eq!(e.message(), "etcdserver: permission denied");
    let users = raw.auth.user_list(with_token(&root, pb::AuthUserListRequest {})).await.unwrap();
    assert_eq!(users.into_inner().users, ["alice", "root"]);
}

/// On a member alone, a change of auth state that cannot be written to the auth file is
/// answered with an error and undone: the role is not there, and it still is not after a
/// restart; once the file can be written again, the same change goes through.
#[tokio::test]
async fn an_auth_change_that_cannot_be_written_is_undone() {
    let dir = DataDir::new();
    let args = ["--wal-mode", "buffered"];
    let s = dir.start(&args).await;
    let mut raw = s.raw_clients().await;
    set_up(&mut raw).await;
    let root = token(&mut raw, "root", "rootpw").await;
    // The file is written as auth.tmp, then renamed: a directory in the way fails the write.
    let blocker = dir.path().join("auth.tmp");
    std::fs::create_dir(&blocker).unwrap();
    let add = || pb::AuthRoleAddRequest { name: "r2".into() };
    let e = raw.auth.role_add(with_token(&root, add())).await.expect_err("unwritable");
    assert!(e.message().starts_with("etcdserver: WAL write failed"), "{}", e.message());
    let roles = |r: Result<tonic::Response<pb::AuthRoleListResponse>, tonic::Status>| {
        r.unwrap().into_inner().roles
    };
    let list = || with_token(&root, pb::AuthRoleListRequest {});
    assert_eq!(roles(raw.auth.role_list(list()).await), ["app", "root"]);
    drop(raw);
    s.stop(Duration::from_secs(10)).await;
    let s = dir.start(&args).await;
    let mut raw = s.raw_clients().await;
    let root = token(&mut raw, "root", "rootpw").await;
    let list = || with_token(&root, pb::AuthRoleListRequest {});
    assert_eq!(roles(raw.auth.role_list(list()).await), ["app", "root"]);
    std::fs::remove_dir(&blocker).unwrap();
    raw.auth.role_add(with_token(&root, add())).await.expect("writable again");
    assert_eq!(roles(raw.auth.role_list(list()).await), ["app", "r2", "root"]);
}

/// On a 3-member cluster: users added through one member exist on all, a token from one
/// member works on the others, and permissions are enforced on every member.
#[tokio::test]
async fn cluster_shares_users_and_tokens() {
    let Some(c) = Cluster::start(Kind::MemEtcd, 3, &["--wal-mode=buffered"]).await else {
        return;
    };
    let mut r0 = c.raw(0).await;
    set_up(&mut r0).await;
    let alice = token(&mut r0, "alice", "alicepw").await;
    let root = token(&mut r0, "root", "rootpw").await;
    for i in 1..3 {
        let mut r = c.raw(i).await;
        let users = r.auth.user_list(with_token(&root, pb::AuthUserListRequest {})).await;
        assert_eq!(users.unwrap().into_inner().users, ["alice", "root"], "member {i}");
        r.kv.put(with_token(&alice, put("/app/x")))
            .await
            .unwrap_or_else(|e| panic!("member {i}: {e}"));
        let e = r.kv.put(with_token(&alice, put("/b"))).await.expect_err("denied");
        assert_eq!(e.message(), "etcdserver: permission denied", "member {i}");
        let e = r.kv.range(pb::RangeRequest { key: "/app/x".into(), ..Default::default() }).await;
        assert_eq!(e.expect_err("no token").message(), "etcdserver: user name is empty");
        // A token obtained from this member works on member 0.
        let t = token(&mut r, "alice", "alicepw").await;
        r0.kv.put(with_token(&t, put("/app/y"))).await.unwrap_or_else(|e| panic!("from {i}: {e}"));
    }
    // A lease expires while auth is enabled: the leader revokes it through the log as root,
    // and its key goes on every member.
    let mut lease = pb::lease_client::LeaseClient::new(r0.channel.clone());
    let g = lease.lease_grant(with_token(&alice, pb::LeaseGrantRequest { ttl: 3, id: 0 })).await;
    let mut leased = put("/app/leased");
    leased.lease = g.unwrap().into_inner().id;
    r0.kv.put(with_token(&alice, leased)).await.unwrap();
    wait_until("the leased key to go on member 1 (TTL 3)", Duration::from_secs(15), || async {
        let r = c.raw(1).await.kv.range(with_token(&root, range("/app/leased"))).await.unwrap();
        r.get_ref().kvs.is_empty()
    })
    .await;
    // A user added on member 2 exists everywhere, with the same hash (it authenticates on
    // every member).
    let mut r2 = c.raw(2).await;
    let add = pb::AuthUserAddRequest {
        name: "bob".into(),
        password: "bobpw".into(),
        ..Default::default()
    };
    r2.auth.user_add(with_token(&root, add)).await.unwrap();
    for i in 0..3 {
        let mut r = c.raw(i).await;
        let _ = token(&mut r, "bob", "bobpw").await;
    }
}

/// With --client-cert-auth, a client certificate's common name is the user when no token is
/// given (etcd's CN identity); a token, when given, wins.
#[tokio::test]
async fn client_certificate_common_name_is_the_user() {
    let Some(bin) = ctl() else { return };
    let certs = crate::security::tls::Certs::new();
    let (s, https) = crate::security::tls::start_tls(&certs.server_flags(true)).await;
    let mut raw = s.raw_clients().await;
    set_up(&mut raw).await;
    let root = token(&mut raw, "root", "rootpw").await;
    // The client certificate's common name is `client`.
    let add = pb::AuthUserAddRequest {
        name: "client".into(),
        options: Some(mem_etcd::proto::authpb::UserAddOptions { no_password: true }),
        ..Default::default()
    };
    raw.auth.user_add(with_token(&root, add)).await.unwrap();
    let grant = pb::AuthUserGrantRoleRequest { user: "client".into(), role: "app".into() };
    raw.auth.user_grant_role(with_token(&root, grant)).await.unwrap();
    let tls: Vec<String> =
        [("--cacert", "ca.crt"), ("--cert", "client.crt"), ("--key", "client.key")]
            .iter()
            .map(|(f, n)| certs.arg(f, n))
            .collect();
    let ep = format!("https://{https}");
    let out = tokio::task::spawn_blocking(move || {
        let run = |extra: &[&str]| {
            let mut args: Vec<&str> = tls.iter().map(String::as_str).collect();
            args.extend_from_slice(extra);
            let (code, out, err) = etcdctl(&bin, &ep, &args, None);
            (
                code,
                out.trim().to_string(),
                err.lines().filter(|l| l.starts_with("Error:")).collect::<Vec<_>>().join(""),
            )
        };
        vec![
            run(&["put", "/app/cn", "v"]),
            run(&["put", "/b", "v"]),
            run(&["get", "/app/cn", "--print-value-only"]),
            run(&["put", "/b", "v", "--user=root:rootpw"]),
        ]
    })
    .await
    .unwrap();
    assert_eq!(out[0], (Some(0), "OK".into(), String::new()));
    assert_eq!(out[1], (Some(1), String::new(), "Error: etcdserver: permission denied".into()));
    assert_eq!(out[2], (Some(0), "v".into(), String::new()));
    assert_eq!(out[3], (Some(0), "OK".into(), String::new()), "the token wins");
    // Without a certificate (the plain listener) there is no user.
    let e = raw.kv.put(put("/app/cn")).await.expect_err("no credentials");
    assert_eq!(e.message(), "etcdserver: user name is empty");
}

/// A simple token lapses --auth-token-ttl seconds after its last use (etcd's simple token
/// keeper); using it renews it.
#[tokio::test]
async fn simple_tokens_expire_unless_used() {
    let s = server!(["--auth-token-ttl", "2"]);
    let mut raw = s.raw_clients().await;
    set_up(&mut raw).await;
    let used = token(&mut raw, "alice", "alicepw").await;
    let idle = token(&mut raw, "alice", "alicepw").await;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(800)).await;
        raw.kv.put(with_token(&used, put("/app/a"))).await.expect("a token in use stays valid");
    }
    let e = raw.kv.put(with_token(&idle, put("/app/a"))).await.expect_err("lapsed");
    assert_eq!(
        (e.code(), e.message()),
        (tonic::Code::Unauthenticated, "etcdserver: invalid auth token")
    );
}

// ----- JWT tokens (--auth-token jwt,...) -----

/// The `--auth-token` value for `method` with the test keys in tests/fixtures/jwt (an empty
/// name leaves that key out).
fn jwt_flag(method: &str, private: &str, public: &str, ttl: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jwt");
    let mut flag = format!("--auth-token=jwt,sign-method={method},ttl={ttl}");
    if !private.is_empty() {
        flag += &format!(",priv-key={dir}/{private}");
    }
    if !public.is_empty() {
        flag += &format!(",pub-key={dir}/{public}");
    }
    flag
}

/// The claims of a JWT, as JSON.
fn claims(token: &str) -> serde_json::Value {
    use base64::Engine as _;
    let part = token.split('.').nth(1).expect("a JWT has three parts");
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part).expect("base64url");
    serde_json::from_slice(&json).expect("JSON claims")
}

/// With JWT tokens the error battery gives etcd's answers, among them a token gone stale when
/// the auth state changes after it was issued (simple tokens do not).
#[tokio::test]
async fn jwt_errors_same_as_etcd() {
    let flag = jwt_flag("RS256", "rsa.key", "rsa.pub", "5m");
    let etcd = server_of!(Kind::Etcd, [flag.as_str()]);
    let tgt = server_of!(Kind::MemEtcd, [flag.as_str()]);
    let want = errors_of(&etcd).await;
    let got = errors_of(&tgt).await;
    assert_eq!(want, got);
    let stale = got.iter().find(|(what, _)| *what == "alice after change").unwrap();
    assert_eq!(stale.1, "InvalidArgument: etcdserver: revision of auth store is old");
}

/// For every method both implement, a JWT issued by etcd works on mem_etcd holding the same key
/// and the other way round, with the same claims; a member given only the public key checks
/// tokens but refuses to issue one, with etcd's error; an expired token is refused.
#[tokio::test]
async fn jwt_tokens_move_between_etcd_and_mem_etcd() {
    let methods = [
        ("RS256", "rsa.key", "rsa.pub"),
        ("PS384", "rsa-pkcs8.key", ""),
        ("ES256", "ec256.key", "ec256.pub"),
        ("ES384", "ec384.key", "ec384.pub"),
        ("ES512", "ec521.key", "ec521.pub"),
        ("EdDSA", "ed25519.key", "ed25519.pub"),
        ("HS256", "hmac.secret", ""),
    ];
    for (method, private, public) in methods {
        let flag = jwt_flag(method, private, public, "5m");
        // Both servers start and are set up at once (they share nothing; bcrypt and the
        // starts are most of this test's time).
        let args = [flag.as_str()];
        let (etcd, tgt) =
            tokio::join!(Server::start(Kind::Etcd, &args), Server::start(Kind::MemEtcd, &args));
        let (Some(etcd), Some(tgt)) = (etcd, tgt) else { return };
        let (mut e, mut t) = (etcd.raw_clients().await, tgt.raw_clients().await);
        tokio::join!(set_up(&mut e), set_up(&mut t));
        let (from_etcd, from_tgt) =
            tokio::join!(token(&mut e, "alice", "alicepw"), token(&mut t, "alice", "alicepw"));
        let (ce, ct) = (claims(&from_etcd), claims(&from_tgt));
        assert_eq!(ce["username"], ct["username"], "{method}");
        assert_eq!(ce["revision"], ct["revision"], "{method}");
        let exp = |c: &serde_json::Value| c["exp"].as_i64().expect("exp");
        assert!((exp(&ce) - exp(&ct)).abs() < 30, "{method}: {ce} vs {ct}");
        assert_eq!(from_etcd.split('.').next(), from_tgt.split('.').next(), "{method}: header");
        t.kv.put(with_token(&from_etcd, put("/app/from-etcd")))
            .await
            .unwrap_or_else(|e| panic!("{method}: etcd's token on mem_etcd: {e}"));
        e.kv.put(with_token(&from_tgt, put("/app/from-mem_etcd")))
            .await
            .unwrap_or_else(|e| panic!("{method}: mem_etcd's token on etcd: {e}"));
        let denied = t.kv.put(with_token(&from_etcd, put("/b"))).await;
        assert_eq!(outcome(denied), "PermissionDenied: etcdserver: permission denied");
        if public.is_empty() {
            continue;
        }
        // Verify-only members: the public key alone.
        let flag = jwt_flag(method, "", public, "5m");
        let etcd_v = server_of!(Kind::Etcd, [flag.as_str()]);
        let tgt_v = server_of!(Kind::MemEtcd, [flag.as_str()]);
        let (mut ev, mut tv) = (etcd_v.raw_clients().await, tgt_v.raw_clients().await);
        set_up(&mut ev).await;
        set_up(&mut tv).await;
        let authn = || pb::AuthenticateRequest { name: "alice".into(), password: "alicepw".into() };
        let want = outcome(ev.auth.authenticate(authn()).await);
        assert_eq!(outcome(tv.auth.authenticate(authn()).await), want, "{method}");
        assert_eq!(want, "Unknown: auth: token signing attempted with verify-only key");
        tv.kv
            .put(with_token(&from_etcd, put("/app/checked")))
            .await
            .unwrap_or_else(|e| panic!("{method}: verify-only member: {e}"));
    }
    // Expiry (golang-jwt checks `exp` to the second).
    let flag = jwt_flag("HS256", "hmac.secret", "", "1s");
    let etcd = server_of!(Kind::Etcd, [flag.as_str()]);
    let tgt = server_of!(Kind::MemEtcd, [flag.as_str()]);
    let mut answers = Vec::new();
    for s in [&etcd, &tgt] {
        let mut r = s.raw_clients().await;
        set_up(&mut r).await;
        let t = token(&mut r, "alice", "alicepw").await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        answers.push(outcome(r.kv.range(with_token(&t, range("/app/a"))).await));
    }
    assert_eq!(answers[0], "Unauthenticated: etcdserver: invalid auth token");
    assert_eq!(answers[0], answers[1]);
}

/// Bad JWT options stop mem_etcd at start with etcd's reason, as they stop etcd.
#[tokio::test]
async fn jwt_options_are_checked_at_start() {
    for (flag, reason) in [
        (jwt_flag("RS256", "", "", "5m"), "auth: missing key data"),
        (jwt_flag("XS256", "rsa.key", "", "5m"), "auth: invalid auth signature method"),
        (
            jwt_flag("RS256", "rsa-pkcs8.key", "rsa.pub", "5m"),
            "auth: public and private keys don't match",
        ),
        ("--auth-token=jwt,sign-method".to_string(), "auth: invalid auth options"),
        ("--auth-token=bogus".to_string(), "auth: invalid auth options"),
    ] {
        let dir = DataDir::new();
        let exited = dir.start_expecting_failure(&[flag.as_str()]).await;
        assert!(!exited.status.success(), "{flag}");
        assert!(!exited.grep(reason).is_empty(), "{flag}: want {reason:?} in\n{}", exited.output());
    }
}

/// On a 3-member cluster with JWT tokens: a token issued by one member works on every member,
/// and goes stale on every member once the auth state changes.
#[tokio::test]
async fn jwt_tokens_on_a_cluster() {
    let flag = jwt_flag("ES256", "ec256.key", "ec256.pub", "5m");
    let Some(c) = Cluster::start(Kind::MemEtcd, 3, &["--wal-mode=buffered", flag.as_str()]).await
    else {
        return;
    };
    let mut r0 = c.raw(0).await;
    set_up(&mut r0).await;
    let alice = token(&mut r0, "alice", "alicepw").await;
    let root = token(&mut c.raw(2).await, "root", "rootpw").await;
    for i in 0..3 {
        let mut r = c.raw(i).await;
        r.kv.put(with_token(&alice, put("/app/x")))
            .await
            .unwrap_or_else(|e| panic!("member {i}: {e}"));
    }
    let add = pb::AuthRoleAddRequest { name: "r2".into() };
    c.raw(1).await.auth.role_add(with_token(&root, add)).await.unwrap();
    for i in 0..3 {
        let mut r = c.raw(i).await;
        // The change reaches every member; a linearizable read makes sure it is applied.
        let _ = r.auth.auth_status(with_token(&root, pb::AuthStatusRequest {})).await;
        let stale = outcome(r.kv.put(with_token(&alice, put("/app/y"))).await);
        assert_eq!(
            stale, "InvalidArgument: etcdserver: revision of auth store is old",
            "member {i}"
        );
    }
    let fresh = token(&mut c.raw(1).await, "alice", "alicepw").await;
    c.raw(2).await.kv.put(with_token(&fresh, put("/app/z"))).await.unwrap();
}

/// Whether each of `tokens` (what, token) works on each member of `on` for a write and a
/// linearizable read: one line per token and member.
async fn tokens_work(c: &Cluster, tokens: &[(&str, &str)], on: &[usize]) -> Vec<String> {
    let mut out = Vec::new();
    for (what, t) in tokens {
        for &i in on {
            let mut r = c.raw(i).await;
            let put = outcome(r.kv.put(with_token(t, put("/app/t"))).await);
            let get = outcome(r.kv.range(with_token(t, range("/app/t"))).await);
            out.push(format!("{what} on m{i}: put {put}, get {get}"));
        }
    }
    out
}

/// Waits until the running members agree on a leader (at most 30 s), as
/// [`Cluster::leader`] does, but asking as root: Status needs a user while auth is enabled.
/// Each member is asked with a token it issued itself.
async fn agreed_leader(c: &Cluster) {
    wait_until("an agreed leader", Duration::from_secs(30), || async {
        let mut leaders = Vec::new();
        let mut last = String::new();
        for i in c.running() {
            let mut r = c.raw(i).await;
            let auth = pb::AuthenticateRequest { name: "root".into(), password: "rootpw".into() };
            let t = match r.auth.authenticate(auth).await {
                Ok(t) => t.into_inner().token,
                Err(e) => {
                    last = format!("m{i}: authenticate: {}", e.message());
                    continue;
                }
            };
            match r.maint.status(with_token(&t, pb::StatusRequest {})).await {
                Ok(st) => leaders.push(st.into_inner().leader),
                Err(e) => last = format!("m{i}: status: {}", e.message()),
            }
        }
        if leaders.len() == c.running().len() && leaders.iter().all(|l| *l != 0 && *l == leaders[0])
        {
            Ok(())
        } else {
            Err(format!("{leaders:x?}; {last}"))
        }
    })
    .await
}

/// Simple tokens across a growth and restarts, on `kind`: a member alone with auth enabled
/// gets a second member by `member add` (which joins through a snapshot on mem_etcd), then
/// each member is killed and restarted in turn. Returns what a client saw.
async fn tokens_session(kind: Kind) -> Option<Vec<String>> {
    let mut c = Cluster::start(kind, 1, &[]).await?;
    let mut log = Vec::new();
    let mut r0 = c.raw(0).await;
    set_up(&mut r0).await;
    let root = token(&mut r0, "root", "rootpw").await;
    let s1 = c.add_slot();
    let add = pb::MemberAddRequest { peer_ur_ls: vec![c.peer_url(s1)], is_learner: false };
    // A cluster of one that adds a voter needs it to commit anything from then on: started
    // while the add is answered.
    let adding = {
        let mut cl = r0.cluster.clone();
        let req = with_token(&root, add);
        tokio::spawn(async move { cl.member_add(req).await })
    };
    c.wait_listed(0, s1, Some(&root)).await;
    c.join(s1).await;
    adding.await.unwrap().unwrap_or_else(|e| panic!("{kind:?}: member add: {e}"));
    agreed_leader(&c).await;
    for (round, restarted) in
        [("joined", None), ("m1 restarted", Some(1)), ("m0 restarted", Some(0))]
    {
        if let Some(i) = restarted {
            let _ = c.kill9(i);
            c.restart(i).await;
            agreed_leader(&c).await;
        }
        // Issued now, through either member: each works on both. (Tokens issued earlier are
        // not compared: whether a member that joined or restarted knows them depends, on
        // etcd, on whether it re-applied their entries, i.e. on snapshot and commit timing.)
        let via0 = token(&mut c.raw(0).await, "alice", "alicepw").await;
        let via1 = token(&mut c.raw(1).await, "alice", "alicepw").await;
        log.push(format!("{round}:"));
        log.extend(tokens_work(&c, &[("via m0", &via0), ("via m1", &via1)], &[0, 1]).await);
    }
    say(&format!("{kind:?}: {}", log.join("\n")));
    Some(log)
}

/// A simple token is the same on every member, whatever each member's history: a member that
/// joined through a snapshot, or restarted, accepts the tokens issued since (it refused
/// them: each member numbered the tokens with its own counter, reset by a snapshot). As etcd.
#[tokio::test]
async fn simple_tokens_work_on_a_member_that_joined_or_restarted() {
    let Some(mem) = tokens_session(Kind::MemEtcd).await else { return };
    for line in mem.iter().filter(|l| l.contains(" on m")) {
        assert!(line.ends_with("put ok, get ok"), "{line}");
    }
    let Some(etcd) = tokens_session(Kind::Etcd).await else { return };
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right)");
}
