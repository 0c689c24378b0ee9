//! The loader and the derivation, end to end: flags in, the server's configuration out.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::flags::Flags;
use super::loader::{from_flags, load};
use super::options::AutoCompaction;
use super::runtime::{AutoTls, Config, DefaultHost};

/// The configuration `args` (flags only, no program name) give.
fn config(args: &[&str]) -> Config {
    from_flags(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>()).unwrap()
}

#[test]
fn auto_compaction_reads_retention_as_etcd_does() {
    let policy = |args: &[&str]| config(args).auto_compaction();
    assert_eq!(policy(&[]), Ok(None));
    let hours = policy(&["--auto-compaction-retention", "2"]);
    assert_eq!(hours, Ok(Some(AutoCompaction::Periodic(Duration::from_secs(7200)))));
    let mins = policy(&["--auto-compaction-retention", "5m"]);
    assert_eq!(mins, Ok(Some(AutoCompaction::Periodic(Duration::from_secs(300)))));
    let revs =
        policy(&["--auto-compaction-mode", "revision", "--auto-compaction-retention", "1000"]);
    assert_eq!(
        revs,
        Ok(Some(AutoCompaction::Revision { retention: 1000, every: Duration::from_secs(300) }))
    );
    assert_eq!(policy(&["--auto-compaction-mode", "revision"]), Ok(None));
    assert!(
        policy(&["--auto-compaction-mode", "revision", "--auto-compaction-retention", "5m"])
            .is_err()
    );
    assert!(policy(&["--auto-compaction-retention", "soon"]).is_err());
    assert!(policy(&["--auto-compaction-retention=-1"]).is_err());
}

#[test]
fn defaults_serve_on_localhost_2379() {
    let c = config(&[]);
    assert_eq!(c.listen_client_urls, ["http://127.0.0.1:2379"]);
    assert_eq!(c.max_request_bytes, 1_572_864);
    // etcd 3.6 with its default flags: member 8e9e05c52164694d, cluster cdf818194e3a8c32.
    let (cluster, member) = c.ids(&c.founders());
    assert_eq!((cluster, member), (0xcdf818194e3a8c32, 0x8e9e05c52164694d));
}

#[test]
fn default_advertised_urls_on_any_address_take_the_default_host_as_etcds_do() {
    let host = || Some(std::net::Ipv4Addr::new(192, 0, 2, 7));
    let flags = |args: &[&str]| {
        Flags::try_parse_from(std::iter::once("mem_etcd").chain(args.iter().copied())).unwrap()
    };
    let derive = |f: Flags, h: Option<DefaultHost>| Config::new(f, h, AutoTls::default());
    let f = flags(&["--listen-peer-urls=http://0.0.0.0:12380"]);
    let h = DefaultHost::resolve(&f, host);
    assert_eq!(h.as_ref().map(|h| h.host.as_str()), Some("192.0.2.7"));
    let c = derive(f, h);
    assert_eq!(c.initial_advertise_peer_urls, ["http://192.0.2.7:12380"]);
    // The id then follows the rewritten URL, as etcd's (sha1 of it and the token).
    let id = crate::raft::membership::member_id(
        &["http://192.0.2.7:12380".to_string()],
        "etcd-cluster",
        None,
    );
    assert_eq!(c.ids(&c.founders()).1, id);
    // Clients too, when their advertised URL is etcd's default.
    let f = flags(&[
        "--listen-client-urls=http://0.0.0.0:12379",
        "--advertise-client-urls=http://localhost:2379",
    ]);
    let h = DefaultHost::resolve(&f, host);
    assert_eq!(h.as_ref().map(|h| h.host.as_str()), Some("192.0.2.7"));
    let c = derive(f, h);
    assert_eq!(c.advertise_client_urls, ["http://192.0.2.7:12379"]);
    assert_eq!(c.initial_advertise_peer_urls, ["http://localhost:2380"]);
    // An advertised URL given, or a listen URL on a named host: left alone, and the
    // default host is not even looked for.
    for args in [
        ["--listen-peer-urls=http://0.0.0.0:12380", "--initial-advertise-peer-urls=http://a:2380"],
        ["--listen-peer-urls=http://127.0.0.1:12380", "--name=x"],
    ] {
        let f = flags(&args);
        assert_eq!(DefaultHost::resolve(&f, || panic!("not asked")), None);
    }
    // No default route: nothing changes.
    let f = flags(&["--listen-peer-urls=http://0.0.0.0:12380"]);
    assert_eq!(DefaultHost::resolve(&f, || None), None);
    assert_eq!(derive(f, None).initial_advertise_peer_urls, ["http://localhost:2380"]);
}

#[test]
fn ids_of_etcds_e2e_member_are_the_bytes_its_tests_expect() {
    // etcd's e2e TestCtlV3GetFormat runs one member as its framework starts it (peer auto
    // TLS: https peer URLs on localhost, base port 20000, token "new") and finds these
    // bytes in `etcdctl get -w protobuf`: the header's cluster_id (field 1) and the start
    // of its member_id (field 2), as protobuf varints.
    let name = "TestCtlV3GetFormat-test-0";
    let c = config(&[
        &format!("--name={name}"),
        "--listen-client-urls=http://localhost:20000",
        "--listen-peer-urls=https://localhost:20001",
        "--initial-advertise-peer-urls=https://localhost:20001",
        "--initial-cluster-token=new",
        &format!("--initial-cluster={name}=https://localhost:20001"),
        "--initial-cluster-state=new",
    ]);
    let (cluster, member) = c.ids(&c.founders());
    let varint = |mut v: u64| {
        let mut out = Vec::new();
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        out
    };
    let mut header = vec![0x08];
    header.extend(varint(cluster));
    header.push(0x10);
    header.extend(varint(member));
    let want = b"\x08\x93\xe7\xf6\x93\xd4\xc5\x86\xe1\x34\x10\xed";
    assert_eq!(&header[..want.len()], want, "{cluster:x} {member:x}");
}

#[test]
fn go_flag_syntax_and_the_last_of_a_repeat_wins() {
    let c = load([
        "mem_etcd",
        "-name",
        "a",
        "--name=b",
        "--max-snapshots=1",
        "--max-snapshots",
        "2",
        "--snapshot-count=1",
        "--snapshot-count",
        "2",
    ])
    .expect("parses");
    assert_eq!(c.flags.member.name, "b");
    assert_eq!(c.flags.cluster.snapshot_count, 2);
    assert_eq!(c.no_effect, ["max-snapshots"]);
    let c = load([
        "mem_etcd",
        "--listen-client-urls=http://127.0.0.1:1,http://127.0.0.1:2",
        "--listen-client-urls=http://127.0.0.1:3",
        "--client-cert-auth=true",
        "--client-cert-auth=false",
        "-auto-tls",
    ])
    .expect("parses");
    assert_eq!(c.flags.member.listen_client_urls, ["http://127.0.0.1:3"]);
    assert!(!c.flags.client_tls.client_cert_auth && c.flags.client_tls.auto_tls);
}

#[test]
fn feature_gates_as_etcd_reads_them() {
    let gates = |args: &[&str]| {
        let f = Flags::parse_from(std::iter::once("mem_etcd").chain(args.iter().copied()));
        f.experimental.feature_gates_state()
    };
    let g = gates(&["--feature-gates=InitialCorruptCheck=true"]).unwrap();
    assert!(g["InitialCorruptCheck"]);
    assert!(g["TxnModeWriteWithSharedBuffer"]);
    let g = gates(&["--experimental-initial-corrupt-check"]).unwrap();
    assert!(g["InitialCorruptCheck"]);
    assert_eq!(
        gates(&["--feature-gates=Foo=true"]).unwrap_err(),
        "invalid value \"Foo=true\" for flag -feature-gates: unrecognized feature gate: Foo"
    );
    assert!(
        gates(&[
            "--feature-gates=InitialCorruptCheck=true",
            "--experimental-initial-corrupt-check"
        ])
        .unwrap_err()
        .starts_with("cannot specify both flags")
    );
}

#[test]
fn config_file_ignores_the_command_line() {
    let dir = std::env::temp_dir().join(format!("mem_etcd-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("etcd.yaml");
    std::fs::write(
        &file,
        "name: yaml\nlisten-client-urls: http://127.0.0.1:1,http://127.0.0.1:2\n\
         client-transport-security:\n  cert-file: /c\n  key-file: /k\n  client-cert-auth: true\n\
         peer-transport-security:\n  allowed-cn: m\nbogus: 1\n",
    )
    .unwrap();
    let arg = format!("--config-file={}", file.display());
    let c = load(["mem_etcd", &arg, "--name=cmdline", "--max-txn-ops=5"]).expect("parses");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(c.flags.member.name, "yaml");
    assert_eq!(c.flags.limits.max_txn_ops, 128);
    assert_eq!(c.flags.member.listen_client_urls.len(), 2);
    assert_eq!(c.flags.client_tls.cert_file, Some(PathBuf::from("/c")));
    assert!(c.flags.client_tls.client_cert_auth);
    assert_eq!(c.flags.peer_tls.peer_cert_allowed_cn, ["m"]);
    assert_eq!(c.unknown_keys, ["bogus"]);
}

#[test]
fn tenants_are_prefixes_each_with_its_quota_or_the_default_one() {
    use super::TenantSpec;
    let spec = |p: &str, q: u64| TenantSpec { prefix: p.into(), quota_bytes: q };
    let c = config(&[
        "--tenant=/tenant-a=1000,/tenant-b/",
        "--tenant",
        "/tenant-c",
        "--tenant-quota-backend-bytes=50",
    ]);
    assert_eq!(c.tenants, [spec("/tenant-a", 1000), spec("/tenant-b", 50), spec("/tenant-c", 50)]);
    assert!(config(&[]).tenants.is_empty());
    assert_eq!(c.tenants_from_auth, None);
    let from_auth = config(&["--tenants-from-auth", "--tenant-quota-backend-bytes=70"]);
    assert_eq!(from_auth.tenants_from_auth, Some(70));
    assert!(from_auth.tenants.is_empty());
    let refused = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let flags = Flags::try_parse_from(std::iter::once("mem_etcd".to_string()).chain(args));
        flags.expect("parsed").validate().expect_err("refused")
    };
    assert!(refused(&["--tenant=tenant-a"]).contains("--etcd-prefix"));
    assert!(refused(&["--tenant=/"]).contains("--etcd-prefix"));
    assert!(refused(&["--tenant=/a=lots"]).contains("number of bytes"));
    assert!(refused(&["--tenant=/a,/a/"]).contains("declared twice"));
}
