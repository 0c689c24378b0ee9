//! Who is in the cluster (etcd's `api/membership`): parsing `--initial-cluster`, and member and
//! cluster ids derived exactly as etcd derives them, so the same flags give the same ids as an
//! etcd cluster would show.

use std::collections::BTreeMap;

use sha1::{Digest, Sha1};

/// A member of `--initial-cluster`: its name and peer URLs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitialMember {
    pub name: String,
    pub peer_urls: Vec<String>,
}

/// Parses etcd's `--initial-cluster` (`name=url,name=url,...`; a name given twice has several
/// peer URLs). Members come out in the order first named.
pub fn parse_initial_cluster(s: &str) -> Result<Vec<InitialMember>, String> {
    let mut out: Vec<InitialMember> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, url) = part
            .split_once('=')
            .ok_or_else(|| format!("--initial-cluster: {part:?} is not name=peerURL"))?;
        let url = normalize_url(url)
            .ok_or_else(|| format!("--initial-cluster: {url:?} is not an http(s) or unix URL"))?;
        match out.iter_mut().find(|m| m.name == name) {
            Some(m) => m.peer_urls.push(url),
            None => out.push(InitialMember { name: name.to_string(), peer_urls: vec![url] }),
        }
    }
    if out.is_empty() {
        return Err("--initial-cluster names no member".into());
    }
    Ok(out)
}

/// A peer URL as etcd keeps it once parsed, the string its ids are derived from: the scheme in
/// lower case (Go's URL parser lowers it), then `host:port` for `http`/`https` (without the
/// trailing slash etcd would refuse as a path), or the socket's path for `unix` (etcd's unix
/// socket peers: `unix://localhost:2380` is the socket `localhost:2380` in the working
/// directory) and `unixs` (the same with TLS). `None` for anything else.
pub fn normalize_url(url: &str) -> Option<String> {
    let url = url.trim();
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    match scheme.as_str() {
        "http" | "https" => {
            let rest = rest.trim_end_matches('/');
            let (host, port) = rest.rsplit_once(':')?;
            if host.is_empty() || port.parse::<u16>().is_err() || rest.contains('/') {
                return None;
            }
            Some(format!("{scheme}://{rest}"))
        }
        "unix" | "unixs" if !rest.is_empty() => Some(format!("{scheme}://{rest}")),
        _ => None,
    }
}

/// The unix socket a `unix://` or `unixs://` URL names, as etcd reads it: what follows the
/// scheme (a path relative to the working directory unless it starts with `/`).
pub fn unix_socket_path(url: &str) -> Option<&str> {
    url.strip_prefix("unix://").or_else(|| url.strip_prefix("unixs://")).filter(|p| !p.is_empty())
}

/// etcd's member id: the first 8 bytes (big endian) of the sha1 of the sorted peer URLs
/// joined, the cluster token, and (for members added later) the time in Unix seconds.
pub fn member_id(peer_urls: &[String], token: &str, unix_secs: Option<i64>) -> u64 {
    let mut urls = peer_urls.to_vec();
    urls.sort();
    let mut h = Sha1::new();
    h.update(urls.concat().as_bytes());
    h.update(token.as_bytes());
    if let Some(t) = unix_secs {
        h.update(t.to_string().as_bytes());
    }
    u64::from_be_bytes(h.finalize()[..8].try_into().expect("sha1 is 20 bytes"))
}

/// etcd's cluster id: the first 8 bytes (big endian) of the sha1 of the founding members' ids,
/// sorted, each as 8 bytes big endian.
pub fn cluster_id(member_ids: &[u64]) -> u64 {
    let mut ids = member_ids.to_vec();
    ids.sort_unstable();
    let mut h = Sha1::new();
    for id in ids {
        h.update(id.to_be_bytes());
    }
    u64::from_be_bytes(h.finalize()[..8].try_into().expect("sha1 is 20 bytes"))
}

/// The founding members with their ids, by id.
pub fn initial_members(members: &[InitialMember], token: &str) -> BTreeMap<u64, InitialMember> {
    members.iter().map(|m| (member_id(&m.peer_urls, token, None), m.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_cluster_parses_as_etcd_reads_it() {
        let m = parse_initial_cluster(
            "infra0=http://10.0.1.10:2380,infra1=http://10.0.1.11:2380,infra0=http://10.0.2.10:2380/",
        )
        .unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].peer_urls, ["http://10.0.1.10:2380", "http://10.0.2.10:2380"]);
        assert!(parse_initial_cluster("a").is_err());
        assert!(parse_initial_cluster("a=ftp://x:1").is_err());
        assert!(parse_initial_cluster("").is_err());
        let m = parse_initial_cluster("a=unix://localhost:20001,b=HTTP://127.0.0.1:1").unwrap();
        assert_eq!(m[0].peer_urls, ["unix://localhost:20001"]);
        assert_eq!(m[1].peer_urls, ["http://127.0.0.1:1"]);
    }

    #[test]
    fn ids_are_etcds() {
        // etcd 3.6: `etcd --name default` with its default flags reports member id
        // 8e9e05c52164694d and cluster id cdf818194e3a8c32.
        let id = member_id(&["http://localhost:2380".into()], "etcd-cluster", None);
        assert_eq!(format!("{id:x}"), "8e9e05c52164694d");
        assert_eq!(format!("{:x}", cluster_id(&[id])), "cdf818194e3a8c32");
        assert_ne!(member_id(&["http://localhost:2380".into()], "other", None), id);
        assert_ne!(member_id(&["http://localhost:2380".into()], "", Some(1)), id);
    }
}
