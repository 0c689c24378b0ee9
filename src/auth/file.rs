//! A member alone's auth file: its whole auth state (a cluster member keeps it in its Raft log
//! and snapshots instead), replaced atomically on each change.

use std::path::Path;

use super::{AuthState, codec};

/// Reads a member alone's auth state, if it has one.
pub fn load(path: &Path) -> std::io::Result<Option<AuthState>> {
    match std::fs::read(path) {
        Ok(b) => codec::decode(&b)
            .map(Some)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad auth file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces the file atomically (the data directory's one write of small files), so that a
/// crash leaves either the old or the new state, never a mix.
pub fn save(path: &Path, state: &AuthState) -> std::io::Result<()> {
    crate::data_dir::write_atomic(path, &codec::encode(state))
}
