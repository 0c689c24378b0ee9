//! The real etcdctl 3.6 against the target and against a real etcd: the same command sequence
//! must print the same thing (after masking cluster_id, member_id and raft_term), and the
//! cluster-level commands must work against the target.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::*;

#[derive(Debug, PartialEq, Eq)]
struct CtlOutput {
    code: Option<i32>,
    stdout: String,
    /// Only the `Error: ...` lines (etcdctl also logs retries with timestamps and addresses).
    errors: Vec<String>,
}

pub fn etcdctl(
    bin: &Path,
    endpoint: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--endpoints={endpoint}"))
        .arg("--command-timeout=10s")
        .arg("--dial-timeout=5s")
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("ETCD")) {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Replaces the number after each of `names` (as in `"member_id":123` or `"MemberID" : 123`)
/// with `N`.
pub fn mask_numbers_after(text: &str, names: &[&str]) -> String {
    let mut out = text.to_string();
    for name in names {
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(name) {
            let after = at + name.len();
            result.push_str(&rest[..after]);
            rest = &rest[after..];
            let sep = rest.len() - rest.trim_start_matches(['"', ' ', ':']).len();
            result.push_str(&rest[..sep]);
            rest = &rest[sep..];
            let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            if digits > 0 {
                result.push('N');
                rest = &rest[digits..];
            }
        }
        result.push_str(rest);
        out = result;
    }
    out
}

/// The fields of etcdctl's json and fields output that differ between any two servers.
pub const ID_FIELDS: [&str; 6] = [
    "\"cluster_id\"",
    "\"member_id\"",
    "\"raft_term\"",
    "\"ClusterID\"",
    "\"MemberID\"",
    "\"RaftTerm\"",
];

fn masked(o: (Option<i32>, String, String)) -> CtlOutput {
    CtlOutput {
        code: o.0,
        stdout: mask_numbers_after(&o.1, &ID_FIELDS),
        errors: o.2.lines().filter(|l| l.starts_with("Error:")).map(str::to_string).collect(),
    }
}

#[test]
fn masking() {
    let json = r#"{"header":{"cluster_id":123,"member_id":456,"revision":7,"raft_term":2}}"#;
    assert_eq!(
        mask_numbers_after(json, &["\"cluster_id\"", "\"member_id\"", "\"raft_term\""]),
        r#"{"header":{"cluster_id":N,"member_id":N,"revision":7,"raft_term":N}}"#
    );
    let fields = "\"ClusterID\" : 14841639068965178418\n\"MemberID\" : 10276657743932975437\n\"Revision\" : 5\n";
    assert_eq!(
        mask_numbers_after(fields, &["\"ClusterID\"", "\"MemberID\""]),
        "\"ClusterID\" : N\n\"MemberID\" : N\n\"Revision\" : 5\n"
    );
}

/// (args, stdin) pairs run in order against both servers.
fn script() -> Vec<(Vec<&'static str>, Option<&'static str>)> {
    let c = |a: &[&'static str]| (a.to_vec(), None);
    vec![
        c(&["put", "foo", "bar"]),
        c(&["put", "foo", "bar2", "--prev-kv"]),
        c(&["put", "foo2", "x", "-w", "json"]),
        c(&["put", "/registry/pods/ns/a", "1"]),
        c(&["put", "/registry/pods/ns/b", "2"]),
        c(&["put", "/registry/podtemplates/ns/t", "3"]),
        c(&["put", "/registry/pods0", "4"]),
        c(&["put", "zzz", "last", "-w", "fields"]),
        c(&["put", "foo", "bar3", "--prev-kv", "-w", "json"]),
        c(&["get", "foo"]),
        c(&["get", "foo", "-w", "json"]),
        c(&["get", "foo", "-w", "fields"]),
        c(&["get", "foo", "--prefix"]),
        c(&["get", "", "--prefix"]),
        c(&["get", "/registry/", "--prefix", "--limit", "2"]),
        c(&["get", "/registry/", "--prefix", "--limit", "2", "-w", "json"]),
        c(&["get", "/registry/", "--prefix", "--keys-only"]),
        c(&["get", "/registry/", "--prefix", "--count-only", "-w", "json"]),
        c(&["get", "/registry/", "--prefix", "--count-only", "-w", "fields"]),
        c(&["get", "/registry/pods/", "/registry/pods0"]),
        c(&["get", "foo", "--rev", "2"]),
        c(&["get", "foo", "--rev", "3", "-w", "json"]),
        c(&["get", "foo", "--rev", "100"]),
        c(&["get", "/registry/", "--prefix", "--print-value-only"]),
        c(&["get", "", "--prefix", "--sort-by=MODIFY", "--order=DESCEND"]),
        c(&["get", "", "--prefix", "--sort-by=VERSION", "--order=ASCEND", "--keys-only"]),
        c(&["get", "", "--prefix", "--sort-by=VALUE"]),
        c(&["get", "", "--prefix", "--sort-by=CREATE", "--order=DESCEND", "-w", "json"]),
        c(&["get", "", "--prefix", "--sort-by=KEY", "--order=DESCEND", "--limit", "3"]),
        c(&["get", "foo", "--from-key"]),
        c(&["get", "foo", "--from-key", "--keys-only", "--limit", "2", "-w", "fields"]),
        c(&["get", "/registry/", "--prefix", "-w", "fields"]),
        c(&["get", "", "--prefix", "--consistency=s"]),
        c(&["get", "nothing"]),
        c(&["get", "nothing", "-w", "json"]),
        c(&["del", "nothing"]),
        c(&["del", "foo2"]),
        c(&["del", "/registry/pods/", "--prefix", "--prev-kv"]),
        c(&["del", "/registry/", "--prefix", "--prev-kv", "-w", "json"]),
        c(&["del", "zz", "--from-key", "-w", "fields"]),
        (
            vec!["txn"],
            Some(
                "mod(\"foo\") > \"0\"\nvalue(\"foo\") = \"bar3\"\n\nput foo from-txn\nget foo\nput t1 1\n\nget foo\n\n",
            ),
        ),
        (
            vec!["txn", "-w", "json"],
            Some("version(\"foo\") = \"1\"\n\nput foo never\n\nget foo --prefix\ndel nothing\n\n"),
        ),
        (vec!["txn", "-w", "fields"], Some("create(\"t1\") = \"0\"\n\nput t1 x\n\nput t2 2\n\n")),
        (vec!["txn"], Some("\n\nput foo again\ndel t1\n\n\n")),
        c(&["put", "counter", "1"]),
        c(&["put", "counter", "2"]),
        c(&["compaction", "5"]),
        c(&["compaction", "5"]),
        c(&["compaction", "1000"]),
        c(&["get", "foo", "--rev", "4"]),
        c(&["get", "foo", "--rev", "5", "-w", "json"]),
        c(&["compaction", "--physical", "7"]),
        c(&["get", "", "--prefix", "-w", "json"]),
        c(&["get", "", "--prefix", "--rev", "7", "-w", "fields"]),
    ]
}

struct Peers {
    etcdctl: PathBuf,
}

fn peers() -> Option<Peers> {
    Some(Peers { etcdctl: peer_binary("etcdctl")? })
}

#[tokio::test]
async fn same_output_as_against_etcd() {
    let Some(p) = peers() else { return };
    let etcd = server_of!(Kind::Etcd);
    let tgt = server!();
    let ctl = p.etcdctl.clone();
    let (e_ep, t_ep) = (etcd.addr().to_string(), tgt.addr().to_string());
    let results = tokio::task::spawn_blocking(move || {
        script()
            .into_iter()
            .map(|(args, stdin)| {
                let want = masked(etcdctl(&ctl, &e_ep, &args, stdin));
                let got = masked(etcdctl(&ctl, &t_ep, &args, stdin));
                (args, want, got)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let mut failures = Vec::new();
    for (args, want, got) in &results {
        if want != got {
            failures.push(format!(
                "etcdctl {}:\n  etcd:   {want:?}\n  target: {got:?}",
                args.join(" ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} commands differ:\n{}",
        failures.len(),
        results.len(),
        failures.join("\n")
    );
    // Sanity: the script exercised both successes and errors.
    assert!(
        results.iter().any(|(_, w, _)| w.code == Some(0))
            && results.iter().any(|(_, w, _)| w.code != Some(0))
    );
}

#[tokio::test]
async fn endpoint_and_member_commands_work() {
    let Some(p) = peers() else { return };
    let advertised = "http://127.0.0.1:12379";
    let s = server!(["--advertise-client-urls", advertised]);
    let ep = s.addr().to_string();
    let ctl = p.etcdctl.clone();
    let run = move |args: &[&str]| etcdctl(&ctl, &ep, args, None);
    let out = tokio::task::spawn_blocking(move || {
        [
            vec!["endpoint", "status"],
            vec!["endpoint", "status", "-w", "json"],
            vec!["endpoint", "health"],
            vec!["endpoint", "health", "-w", "json"],
            vec!["member", "list"],
            vec!["member", "list", "-w", "json"],
            vec!["alarm", "list"],
            vec!["endpoint", "hashkv"],
        ]
        .into_iter()
        .map(|a| (a.join(" "), run(&a)))
        .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for (cmd, (code, stdout, stderr)) in &out {
        assert_eq!(*code, Some(0), "etcdctl {cmd} failed:\nstdout: {stdout}\nstderr: {stderr}");
    }
    let text = |cmd: &str| out.iter().find(|(c, _)| c == cmd).map(|(_, o)| o.1.clone()).unwrap();
    let addr = s.addr().to_string();
    assert!(text("endpoint status").starts_with(&addr), "{}", text("endpoint status"));
    assert!(
        text("endpoint health").contains(&format!("{addr} is healthy")),
        "{}",
        text("endpoint health")
    );
    let members = text("member list");
    assert_eq!(members.lines().count(), 1, "{members}");
    assert!(members.contains(", started, it, ") && members.contains(advertised), "{members}");
    assert!(members.trim_end().ends_with(", false"), "not a learner: {members}");
    assert_eq!(text("alarm list"), "");
    let status: serde_json::Value = serde_json::from_str(&text("endpoint status -w json")).unwrap();
    let st = &status[0]["Status"];
    assert_eq!(st["leader"], st["header"]["member_id"], "{status}");
    assert!(
        st["dbSize"].as_i64().unwrap_or(0) > 0 || st["dbSize"].as_u64().unwrap_or(0) > 0,
        "{status}"
    );
    let health: serde_json::Value = serde_json::from_str(&text("endpoint health -w json")).unwrap();
    assert_eq!(health[0]["health"], true, "{health}");
}
