//! Tenants that come and go on a running store (`--tenants-from-auth`): the user, role and
//! grant Kamaji provisions make a tenant, with its quota and its own compaction, from the next
//! request on; deleting them forgets it. The same steps against a shared etcd 3.6, where a
//! tenant is only a user. And across a restart: the auth state the tenants come from persists.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, DeleteOptions, Permission};

use crate::operations::http_get;
use crate::support::*;

const QUOTA: usize = 400_000;

fn a_key(n: usize) -> String {
    format!("/tenant-a/configmaps/default/cm-{n}")
}

fn outcome<T>(r: Result<T, etcd_client::Error>) -> String {
    match r {
        Ok(_) => "Ok".into(),
        Err(e) => format!("{:?}", status_of(&e)),
    }
}

async fn as_user(endpoint: &str, user: &str) -> Client {
    let opts = ConnectOptions::new().with_user(user, format!("{user}pw"));
    Client::connect([endpoint], Some(opts)).await.unwrap()
}

/// Kamaji's provisioning of tenant `t`: a user, a role granting READWRITE on `/<t>/`, the grant.
async fn provision(root: &mut Client, t: &str) {
    root.user_add(t, format!("{t}pw"), None).await.unwrap();
    root.role_add(t).await.unwrap();
    let perm = Permission::read_write(format!("/{t}/")).with_range_end(format!("/{t}0"));
    root.role_grant_permission(t, perm).await.unwrap();
    root.user_grant_role(t, t).await.unwrap();
}

/// The tenants `/metrics` lists, by their `mem_etcd_tenant_quota_bytes` samples.
async fn listed(addr: std::net::SocketAddr) -> Vec<String> {
    let page = http_get(addr, "/metrics").await.body;
    page.lines()
        .filter(|l| l.starts_with("mem_etcd_tenant_quota_bytes{"))
        .map(String::from)
        .collect()
}

/// Puts of 20 KB under `/tenant-a/` past the quota: `Ok`, or the first put refused.
async fn fill(root: &mut Client) -> String {
    let big = "x".repeat(20_000);
    for n in 0..(QUOTA / big.len() + 5) {
        let r = outcome(root.put(a_key(n), big.as_str(), None).await);
        if r != "Ok" {
            return format!("put {n}: {r}");
        }
    }
    "Ok".into()
}

/// Root fills `/tenant-a/` past the quota before the tenant exists, the tenant is provisioned,
/// writes, compacts, frees its keys, and is deleted. Returns what each step answered.
async fn steps(endpoint: &str, addr: std::net::SocketAddr, with_metrics: bool) -> Vec<String> {
    let mut log = Vec::new();
    let mut root = Client::connect([endpoint], None).await.unwrap();
    root.user_add("root", "rootpw", None).await.unwrap();
    root.role_add("root").await.unwrap();
    root.user_grant_role("root", "root").await.unwrap();
    root.auth_enable().await.unwrap();
    let mut root = as_user(endpoint, "root").await;
    let big = "x".repeat(20_000);
    log.push(format!("root fills /tenant-a/ before the tenant exists: {}", fill(&mut root).await));
    provision(&mut root, "tenant-a").await;
    provision(&mut root, "tenant-b").await;
    if with_metrics {
        log.push(format!("listed: {:?}", listed(addr).await));
    }
    let mut a = as_user(endpoint, "tenant-a").await;
    let mut b = as_user(endpoint, "tenant-b").await;
    log.push(format!("A's put: {}", outcome(a.put(a_key(0), big.as_str(), None).await)));
    log.push(format!(
        "B's put: {}",
        outcome(b.put("/tenant-b/configmaps/default/cm", "1", None).await)
    ));
    let cur = current_rev(&mut root).await;
    log.push(format!("A compacts: {}", outcome(a.compact(cur, None).await)));
    let all = DeleteOptions::new().with_prefix();
    log.push(format!("A deletes its keys: {}", outcome(a.delete("/tenant-a/", Some(all)).await)));
    // A compaction keeps its own revision's events (a watch may start there): one more write,
    // so that A's next compaction leaves its deleted values behind.
    log.push(format!(
        "B's put: {}",
        outcome(b.put("/tenant-b/configmaps/default/cm", "2", None).await)
    ));
    let cur = current_rev(&mut root).await;
    log.push(format!("A compacts again: {}", outcome(a.compact(cur, None).await)));
    log.push(format!("A's put after: {}", outcome(a.put(a_key(0), big.as_str(), None).await)));
    // The tenant's removal: its user and role go (Kamaji's deletion of a DataStore's tenant).
    root.user_delete("tenant-a").await.unwrap();
    root.role_delete("tenant-a").await.unwrap();
    if with_metrics {
        log.push(format!("listed after removal: {:?}", listed(addr).await));
    }
    log.push(format!("root fills /tenant-a/ after its removal: {}", fill(&mut root).await));
    log
}

const NOSPACE: &str = "(ResourceExhausted, \"etcdserver: mvcc: database space exceeded\")";
const DENIED: &str = "(PermissionDenied, \"etcdserver: permission denied\")";

fn quota_line(t: &str, q: usize) -> String {
    format!("mem_etcd_tenant_quota_bytes{{tenant=\"{t}\"}} {q}")
}

#[tokio::test]
async fn a_tenant_comes_and_goes_with_its_user_on_a_running_member() {
    let dir = DataDir::new();
    let quota = format!("--tenant-quota-backend-bytes={QUOTA}");
    let flags = ["--tenants-from-auth", quota.as_str()];
    let mem = dir.start(&flags).await;
    assert_eq!(listed(mem.addr()).await, Vec::<String>::new(), "no tenant before any user");
    let mem_steps = steps(&mem.endpoint(), mem.addr(), true).await;
    assert_eq!(
        mem_steps,
        [
            "root fills /tenant-a/ before the tenant exists: Ok".to_string(),
            format!("listed: {:?}", [quota_line("tenant-a", QUOTA), quota_line("tenant-b", QUOTA)]),
            format!("A's put: {NOSPACE}"),
            "B's put: Ok".into(),
            "A compacts: Ok".into(),
            "A deletes its keys: Ok".into(),
            "B's put: Ok".into(),
            "A compacts again: Ok".into(),
            "A's put after: Ok".into(),
            format!("listed after removal: {:?}", [quota_line("tenant-b", QUOTA)]),
            "root fills /tenant-a/ after its removal: Ok".into(),
        ],
        "mem_etcd"
    );
    // The tenants come from the auth state, which persists: B is still one after a restart,
    // and A is not.
    mem.stop(Duration::from_secs(10)).await;
    let mem = dir.start(&flags).await;
    assert_eq!(listed(mem.addr()).await, [quota_line("tenant-b", QUOTA)], "after a restart");
    let mut b = as_user(&mem.endpoint(), "tenant-b").await;
    let big = "x".repeat(20_000);
    let mut n = 0;
    let refused = loop {
        n += 1;
        assert!(n < 100, "B wrote {n} puts of 20 KB past its quota");
        if let Err(e) =
            b.put(format!("/tenant-b/configmaps/default/cm-{n}"), big.as_str(), None).await
        {
            break format!("{:?}", status_of(&e));
        }
    };
    assert_eq!(refused, NOSPACE, "B past its quota after the restart");

    let etcd = server_of!(Kind::Etcd);
    let etcd_steps = steps(&etcd.endpoint(), etcd.addr(), false).await;
    assert_eq!(
        etcd_steps,
        [
            "root fills /tenant-a/ before the tenant exists: Ok".to_string(),
            "A's put: Ok".into(),
            "B's put: Ok".into(),
            format!("A compacts: {DENIED}"),
            "A deletes its keys: Ok".into(),
            "B's put: Ok".into(),
            format!("A compacts again: {DENIED}"),
            "A's put after: Ok".into(),
            "root fills /tenant-a/ after its removal: Ok".into(),
        ],
        "etcd"
    );
}
