//! Network faults between members, injected by tests (`--peer-failpoint FILE`, hidden).
//!
//! etcd's robustness tests cut members apart with a proxy between them; here every member's
//! peer traffic arrives on its one peer listener from unnamed loopback ports, so a proxy could
//! not tell who is calling. The receiving side can: every peer call carries the caller's
//! member id. The file lists member ids (hex, whitespace-separated) whose calls this member
//! refuses, as if the network dropped them; an empty or missing file refuses nothing. Listing
//! each other on both sides is a symmetric partition, since every exchange is a call that one
//! side makes and the other answers. The file is read every 20 ms, so a test can cut and heal
//! while the members run, without a control port that production would carry.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

/// The callers to refuse, as last read from the file.
#[derive(Debug)]
pub struct PeerFaults {
    /// Read on every peer call, written by the poller alone: a read lock is uncontended.
    refused: RwLock<Vec<u64>>,
}

impl PeerFaults {
    /// Starts polling `path`.
    pub fn start(path: PathBuf) -> Arc<Self> {
        let faults = Arc::new(Self { refused: RwLock::new(Vec::new()) });
        let f = faults.clone();
        tokio::spawn(async move {
            loop {
                let ids: Vec<u64> = std::fs::read_to_string(&path)
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|w| u64::from_str_radix(w, 16).ok())
                    .collect();
                if *f.refused.read() != ids {
                    tracing::warn!(refused = ?ids, "peer failpoint: refusing calls from members");
                    *f.refused.write() = ids;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        faults
    }

    /// Whether a call from member `from` is to be dropped.
    pub fn refuses(&self, from: u64) -> bool {
        self.refused.read().contains(&from)
    }
}
