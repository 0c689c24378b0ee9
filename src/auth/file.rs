//! A member alone's auth file: its whole auth state (a cluster member keeps it in its Raft log
//! and snapshots instead), replaced atomically on each change.

use std::io::Write;
use std::path::Path;

use super::{AuthState, codec};

/// The file's name in the data directory.
pub const NAME: &str = "auth";

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

/// Writes the state to a new file, syncs it and renames it over the old one, so that a crash
/// leaves either the old or the new state, never a mix.
pub fn save(path: &Path, state: &AuthState) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&codec::encode(state))?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
