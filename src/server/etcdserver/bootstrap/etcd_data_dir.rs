//! Starting on an etcd data directory. A member alone whose `--data-dir` holds an etcd
//! member's data (what `etcdutl snapshot restore` writes, or a cleanly stopped etcd's) and none
//! of mem_etcd's imports etcd's database (`member/snap/db`) into its own files beside it, then
//! starts on those: the keys with their revisions and history since the compaction, the
//! leases, the auth state. etcd's files are left as they were (etcd can still start on them);
//! later starts use mem_etcd's files.
//!
//! etcd applies its WAL to the database as it goes and commits the database at least every
//! 100 ms and when it stops, so a cleanly stopped etcd's database holds everything. One killed
//! may hold less than its WAL, which mem_etcd does not replay: such a directory is refused
//! (etcd's `consistent_index`, the last entry its database applied, is behind the WAL's last
//! entry) rather than started without acknowledged writes.

use crate::backend::{etcd_wal, schema};
use crate::data_dir::DataDir;
use crate::mvcc::persist::OpenError;

/// Imports `dir`'s etcd database into mem_etcd's files if `dir` holds etcd's data and not yet
/// mem_etcd's; does nothing otherwise.
pub fn import(dir: &DataDir) -> Result<(), OpenError> {
    if !dir.is_etcd() {
        return Ok(());
    }
    let db = dir.etcd_db();
    if !db.exists() {
        return Err(format!(
            "{} holds an etcd WAL but no database ({}): nothing to start from",
            dir.display(),
            db.display()
        )
        .into());
    }
    let started = std::time::Instant::now();
    let (state, summary) = schema::read(&db, true).map_err(|e| e.to_string())?;
    let wal = dir.etcd_wal();
    let last = etcd_wal::last_entry_index(&wal).map_err(|e| format!("{}: {e}", wal.display()))?;
    if let Some(last) = last.filter(|&l| l > state.consistent_index) {
        return Err(format!(
            "{}: etcd's WAL holds entries up to index {last}, its database only up to {}: etcd \
             was not stopped cleanly, and mem_etcd reads only the database. Start etcd on it and \
             stop it cleanly, or move the data with etcdctl snapshot save and mem_etcd snapshot \
             restore",
            dir.display(),
            state.consistent_index
        )
        .into());
    }
    // The auth state first: the log's snapshot is what marks the import done.
    if !state.auth.is_empty() {
        let path = dir.auth_file();
        crate::auth::file::save(&path, &state.auth.to_auth())
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let mut keys = state.keys.into_iter();
    crate::wal::backup::write_data_dir(
        dir.path(),
        state.rev,
        state.compacted,
        &mut keys,
        &state.leases,
    )
    .map_err(|e| e.to_string())?;
    tracing::info!(
        data_dir = %dir.display(),
        revision = summary.rev,
        compacted = summary.compacted,
        keys = summary.keys,
        leases = summary.leases.len(),
        seconds = format!("{:.3}", started.elapsed().as_secs_f64()),
        "imported etcd's database (member/snap/db) into mem_etcd's files beside it"
    );
    Ok(())
}
