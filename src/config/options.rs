//! What the configuration means for the layers it sets up: the Raft node (its options are
//! assembled here, when the server starts it, since they depend on the data directory's state
//! and on the founding members, which v3 discovery may find at start), the member's ids, and
//! auto-compaction.

use std::time::Duration;

use super::flags::member::ClusterState;
use super::flags::storage::AutoCompactionMode;
use super::runtime::Config;
use crate::duration::parse_duration;

/// What auto-compaction does, from `--auto-compaction-mode` and `--auto-compaction-retention`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoCompaction {
    /// Keep at least this much time of history.
    Periodic(Duration),
    /// Keep this many revisions, checking every `every`.
    Revision { retention: i64, every: Duration },
}

/// Who founds the cluster: `--initial-cluster` and `--initial-cluster-token` as given
/// ([`Config::founders`]), or what v3 discovery found in their place (`embed::discovery`). Kept
/// apart from [`Config`], which nothing changes once it is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Founders {
    /// `name=peerURL,...`; `None`: this member alone, at its advertised peer URLs.
    pub initial_cluster: Option<String>,
    /// What the member and cluster ids derive from, with the founders' peer URLs.
    pub token: String,
}

impl Config {
    /// The founders these flags name (see [`Founders`]).
    pub fn founders(&self) -> Founders {
        Founders {
            initial_cluster: self.initial_cluster.clone(),
            token: self.initial_cluster_token.clone(),
        }
    }

    /// The auto-compaction these flags ask for (`None`: off), or why they make no sense. As in
    /// etcd, a plain number is hours in periodic mode; unlike etcd, a duration is refused in
    /// revision mode rather than read as nanoseconds' worth of revisions.
    pub fn auto_compaction(&self) -> Result<Option<AutoCompaction>, String> {
        let r = self.auto_compaction_retention.trim();
        let plain = r.parse::<i64>().ok();
        let policy = match (self.auto_compaction_mode, plain) {
            (_, Some(n)) if n < 0 => None,
            (AutoCompactionMode::Revision, Some(n)) => Some(AutoCompaction::Revision {
                retention: n,
                every: self.auto_compaction_revision_interval,
            }),
            (AutoCompactionMode::Revision, None) => None,
            (AutoCompactionMode::Periodic, Some(h)) => {
                Some(AutoCompaction::Periodic(Duration::from_secs(h as u64 * 3600)))
            }
            (AutoCompactionMode::Periodic, None) => {
                parse_duration(r).ok().map(AutoCompaction::Periodic)
            }
        };
        let Some(policy) = policy else {
            return Err(format!(
                "--auto-compaction-retention {r:?}: expected {} for --auto-compaction-mode {}",
                match self.auto_compaction_mode {
                    AutoCompactionMode::Periodic => "a duration (5m, 1h) or a number of hours",
                    AutoCompactionMode::Revision => "a number of revisions",
                },
                match self.auto_compaction_mode {
                    AutoCompactionMode::Periodic => "periodic",
                    AutoCompactionMode::Revision => "revision",
                },
            ));
        };
        Ok(match policy {
            AutoCompaction::Periodic(d) if d.is_zero() => None,
            AutoCompaction::Revision { retention: 0, .. } => None,
            p => Some(p),
        })
    }

    /// The Raft node these flags ask for, or `None` for a member alone (no Raft: the default).
    /// A member runs Raft when `--initial-cluster` names other members, when it joins a
    /// running cluster (`--initial-cluster-state existing`), or when its data directory
    /// already holds a cluster member's state (then the `--initial-*` flags are ignored, as
    /// etcd ignores them). An error says which flags disagree.
    pub fn cluster(&self, founders: &Founders) -> Result<Option<crate::raft::NodeOptions>, String> {
        self.node_options(founders, false)
    }

    /// The Raft node of this member alone grown into a cluster of itself (by its first
    /// `member add`, see `etcdserver::grow`): these flags' node, with the (cluster id, member id)
    /// it answers with (kept from its first start).
    pub fn grown_cluster(&self, ids: (u64, u64)) -> Result<crate::raft::NodeOptions, String> {
        let mut o = self.node_options(&self.founders(), true)?.ok_or("not a member alone")?;
        (o.cluster_id, o.member_id) = ids;
        let me = crate::raft::membership::InitialMember {
            name: self.name.clone(),
            peer_urls: o.peer_urls.clone(),
        };
        o.initial = std::collections::BTreeMap::from([(o.member_id, me)]);
        Ok(o)
    }

    /// `--initial-advertise-peer-urls`, normalized as etcd's URL parser leaves them, or which
    /// one is not a peer URL.
    pub fn advertised_peer_urls(&self) -> Result<Vec<String>, String> {
        self.initial_advertise_peer_urls
            .iter()
            .map(|u| {
                crate::raft::membership::normalize_url(u).ok_or_else(|| {
                    format!("--initial-advertise-peer-urls: {u:?} is not an http(s) or unix URL")
                })
            })
            .collect()
    }

    fn node_options(
        &self,
        founders: &Founders,
        grow: bool,
    ) -> Result<Option<crate::raft::NodeOptions>, String> {
        use crate::raft::membership;
        let wal = self.wal_options();
        let dir = wal.dir.raft();
        let existing_state = wal.mode != crate::wal::Mode::None && dir.has_member();
        let advertised = self.advertised_peer_urls()?;
        let initial = match &founders.initial_cluster {
            Some(c) => membership::parse_initial_cluster(c)?,
            None => vec![membership::InitialMember {
                name: self.name.clone(),
                peer_urls: advertised.clone(),
            }],
        };
        let join = self.initial_cluster_state == ClusterState::Existing;
        if initial.len() < 2 && !join && !existing_state && !grow {
            return Ok(None);
        }
        let Some(me) = initial.iter().find(|m| m.name == self.name) else {
            return Err(format!(
                "--initial-cluster has no member named {:?} (--name): it must list this member",
                self.name
            ));
        };
        let (mut mine, mut adv) = (me.peer_urls.clone(), advertised.clone());
        mine.sort();
        adv.sort();
        if mine != adv {
            return Err(format!(
                "--initial-cluster gives {:?} the peer URLs {:?}, --initial-advertise-peer-urls                  gives {:?}: they must match",
                self.name, me.peer_urls, advertised
            ));
        }
        let token = &founders.token;
        let members = membership::initial_members(&initial, token);
        let member_id = membership::member_id(&advertised, token, None);
        let ids: Vec<u64> = members.keys().copied().collect();
        Ok(Some(crate::raft::NodeOptions {
            name: self.name.clone(),
            // A joining member learns its id and its cluster's from the running cluster.
            member_id: if join { 0 } else { member_id },
            cluster_id: if join { 0 } else { membership::cluster_id(&ids) },
            peer_urls: advertised,
            initial: members,
            new_cluster: !join,
            dir,
            mode: wal.mode,
            segment_bytes: wal.segment_bytes,
            flush_interval: wal.flush_interval,
            snapshot_bytes: wal.snapshot_bytes,
            keep_in_memory: self.snapshot_count,
            heartbeat: Duration::from_millis(self.heartbeat_interval.max(1)),
            election: Duration::from_millis(self.election_timeout.max(1)),
            // The caller's: TLS settings are the server's to build (`tls::peer_client`).
            tls: None,
            failpoint: self.peer_failpoint.clone(),
            initial_corrupt_check: self.gate("InitialCorruptCheck"),
            corrupt_check: Some(self.corrupt_check_time).filter(|t| !t.is_zero()),
            compact_hash_check: self
                .gate("CompactHashCheck")
                .then(|| self.compact_hash_check_time.max(Duration::from_millis(1))),
        }))
    }

    /// A member alone's cluster and member ids, derived from its flags and `founders` as etcd
    /// derives them (so that the same flags give the same ids as an etcd member would show):
    /// the member's from its peer URLs in `--initial-cluster` (by default `<name>=` each
    /// `--initial-advertise-peer-urls`) and `--initial-cluster-token`, the cluster's from every
    /// member `--initial-cluster` names.
    pub fn ids(&self, founders: &Founders) -> (u64, u64) {
        use crate::raft::membership::{self, InitialMember, normalize_url};
        let advertised: Vec<String> = self
            .initial_advertise_peer_urls
            .iter()
            .map(|u| normalize_url(u).unwrap_or_else(|| u.trim().to_string()))
            .collect();
        let initial = founders
            .initial_cluster
            .as_deref()
            .and_then(|c| membership::parse_initial_cluster(c).ok())
            .unwrap_or_else(|| {
                vec![InitialMember { name: self.name.clone(), peer_urls: advertised.clone() }]
            });
        let token = &founders.token;
        let mine = initial
            .iter()
            .find(|m| m.name == self.name)
            .map_or(advertised, |m| m.peer_urls.clone());
        let founding_ids: Vec<u64> =
            membership::initial_members(&initial, token).keys().copied().collect();
        (membership::cluster_id(&founding_ids), membership::member_id(&mine, token, None))
    }
}
