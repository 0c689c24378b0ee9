//! The data directory (`--data-dir`): where every file a member keeps lives, and how its small
//! files are replaced.
//!
//! It exists so that the layout is written down once: the WAL, the Raft state, the restore
//! tool and the server all find their files here, rather than each joining names onto the
//! directory (which had let two writers of one file disagree on whether to fsync it).
//!
//! ```text
//! <data-dir>/LOCK          held while a server runs on the directory
//! <data-dir>/wal/          a member alone's write-ahead log (`wal`), a stream per directory
//! <data-dir>/snap/         a member alone's snapshots (`wal::snapshot`)
//! <data-dir>/auth          a member alone's auth state
//! <data-dir>/raft/         a cluster member's Raft state (see [`RaftDir`])
//! <data-dir>/raft.new/     a replacement of it being written (`raft::restore`)
//! <data-dir>/raft.old/     the replaced one, until it is removed
//! <data-dir>/fixtures/     --auto-tls and --peer-auto-tls certificates (`client/`, `peer/`)
//! <data-dir>/member/       an etcd member's data, if mem_etcd was started on an etcd data
//!                          directory (`etcdserver::bootstrap::etcd_data_dir` imports it once, then leaves it)
//! ```
//! The files inside `wal/`, `snap/` and `raft/{log,snap}/` are named by the modules that write
//! them (`wal::segment`, `wal::snapshot`, `raft::log_store`, `raft::state_machine`).
//!
//! Depends on nothing above `std`: the WAL, Raft and the server all use it.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A member's data directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.root
    }

    pub fn display(&self) -> std::path::Display<'_> {
        self.root.display()
    }

    /// The file a running server holds locked.
    pub fn lock_file(&self) -> PathBuf {
        self.root.join("LOCK")
    }

    /// A member alone's write-ahead log: one directory per stream.
    pub fn wal(&self) -> PathBuf {
        self.root.join("wal")
    }

    /// A member alone's snapshots: one directory per snapshot.
    pub fn snapshots(&self) -> PathBuf {
        self.root.join("snap")
    }

    /// A member alone's auth state (a cluster member's is in its Raft state).
    pub fn auth_file(&self) -> PathBuf {
        self.root.join("auth")
    }

    /// A member alone's member and cluster ids, fixed at its first start: as etcd keeps the
    /// ids it was created with in its data, later starts keep them whatever the flags say (a
    /// cluster member's are in its Raft member file).
    fn ids_file(&self) -> PathBuf {
        self.root.join("ids")
    }

    /// Writes a member alone's ids (atomically and durably, see [`write_atomic`]).
    pub fn write_alone_ids(&self, member_id: u64, cluster_id: u64) -> io::Result<()> {
        write_ids(&self.ids_file(), member_id, cluster_id)
    }

    /// A member alone's (member id, cluster id), if an earlier start fixed them.
    pub fn read_alone_ids(&self) -> Result<Option<(u64, u64)>, String> {
        read_ids(&self.ids_file())
    }

    /// Removes what a member alone keeps (its WAL, snapshots, auth file and ids), once a
    /// cluster member's Raft state holds all of it or the member's state is dropped.
    pub fn remove_alone_state(&self) -> io::Result<()> {
        for dir in [self.wal(), self.snapshots()] {
            if dir.exists() {
                fs::remove_dir_all(&dir)?;
            }
        }
        for file in [self.auth_file(), self.ids_file()] {
            match fs::remove_file(file) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        sync_dir(self.path())
    }

    /// A cluster member's Raft state.
    pub fn raft(&self) -> RaftDir {
        RaftDir::new(self.root.join("raft"))
    }

    /// Where the self-signed certificates of --auto-tls and --peer-auto-tls go.
    pub fn fixtures(&self) -> PathBuf {
        self.root.join("fixtures")
    }

    /// Whether this holds an etcd member's data (its WAL is `member/wal`) and none of
    /// mem_etcd's yet (`etcdserver::bootstrap::etcd_data_dir` imports it).
    pub fn is_etcd(&self) -> bool {
        self.etcd_wal().exists()
            && !self.wal().exists()
            && !self.snapshots().exists()
            && !self.raft().path().exists()
    }

    /// An etcd member's WAL.
    pub fn etcd_wal(&self) -> PathBuf {
        self.root.join("member").join("wal")
    }

    /// An etcd member's database.
    pub fn etcd_db(&self) -> PathBuf {
        self.root.join("member").join("snap").join("db")
    }
}

/// A cluster member's Raft state: `<data-dir>/raft`, or a replacement being written beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftDir {
    root: PathBuf,
}

impl RaftDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    pub fn display(&self) -> std::path::Display<'_> {
        self.root.display()
    }

    /// The data directory this is in.
    pub fn data_dir(&self) -> DataDir {
        DataDir::new(self.root.parent().unwrap_or(Path::new(".")))
    }

    /// `raft.new` (`suffix` ".new", a replacement being written) or `raft.old` (".old", the
    /// replaced state until it is removed), beside this one.
    pub fn beside(&self, suffix: &str) -> RaftDir {
        let mut name = self.root.file_name().unwrap_or_default().to_os_string();
        name.push(suffix);
        RaftDir::new(self.root.with_file_name(name))
    }

    /// The Raft log's segments (`raft::log_store`).
    pub fn log(&self) -> PathBuf {
        self.root.join("log")
    }

    /// The Raft snapshots (`raft::state_machine`).
    pub fn snapshots(&self) -> PathBuf {
        self.root.join("snap")
    }

    /// The file holding the member's id and its cluster's once it has joined a cluster. Its
    /// presence is what makes a start resume rather than found or join.
    fn member_file(&self) -> PathBuf {
        self.root.join("member")
    }

    /// Whether this holds a cluster member's state (its member file).
    pub fn has_member(&self) -> bool {
        self.member_file().exists()
    }

    /// Writes the member file (atomically and durably, see [`write_atomic`]).
    pub fn write_member(&self, member_id: u64, cluster_id: u64) -> io::Result<()> {
        write_ids(&self.member_file(), member_id, cluster_id)
    }

    /// The member's id and its cluster's, if the member file exists.
    pub fn read_member(&self) -> Result<Option<(u64, u64)>, String> {
        read_ids(&self.member_file())
    }

    /// Removes the member file: what is left of the directory is then ignored by a start.
    pub fn remove_member(&self) -> io::Result<()> {
        fs::remove_file(self.member_file())
    }

    /// Drops the whole state (a removed member's, which its cluster refuses for good). It is
    /// renamed to `raft.old` first, which a start's `raft::restore::settle` puts back if a
    /// crash left it there: a crash leaves the whole state or none, never a part.
    pub fn discard(&self) -> io::Result<()> {
        let old = self.beside(".old");
        if old.path().exists() {
            fs::remove_dir_all(old.path())?;
        }
        fs::rename(self.path(), old.path())?;
        sync_dir(self.path().parent().unwrap_or(Path::new(".")))?;
        fs::remove_dir_all(old.path())
    }
}

/// The one format of a file of ids: the member's and its cluster's, in hex.
fn write_ids(path: &Path, member_id: u64, cluster_id: u64) -> io::Result<()> {
    write_atomic(path, format!("{member_id:x} {cluster_id:x}\n").as_bytes())
}

fn read_ids(file: &Path) -> Result<Option<(u64, u64)>, String> {
    let text = match fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let ids: Vec<u64> =
        text.split_whitespace().filter_map(|w| u64::from_str_radix(w, 16).ok()).collect();
    match ids[..] {
        [member, cluster] => Ok(Some((member, cluster))),
        _ => Err(format!("{}: not a member file", file.display())),
    }
}

/// Replaces the small file `path` with `bytes` so that a crash leaves the old content or the
/// new, never a mix or nothing, and the new one survives a power loss once this returns: written
/// to `<path>.tmp`, synced, renamed over `path`, then the directory synced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => sync_dir(dir),
        _ => sync_dir(Path::new(".")),
    }
}

/// Makes a directory's entries (created, renamed or removed files) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_member_file_is_replaced_whole_and_reads_back() {
        let d = tempfile::tempdir().unwrap();
        let raft = DataDir::new(d.path()).raft();
        fs::create_dir_all(raft.path()).unwrap();
        assert_eq!(raft.read_member().unwrap(), None);
        assert!(!raft.has_member());
        raft.write_member(0xabc, 0x123).unwrap();
        raft.write_member(0x2, 0x9).unwrap();
        assert_eq!(raft.read_member().unwrap(), Some((2, 9)));
        assert_eq!(fs::read_to_string(d.path().join("raft/member")).unwrap(), "2 9\n");
        assert!(!d.path().join("raft/member.tmp").exists());
        fs::write(d.path().join("raft/member"), "2\n").unwrap();
        assert!(raft.read_member().unwrap_err().contains("not a member file"));
        assert_eq!(raft.beside(".new").path(), d.path().join("raft.new"));
        assert_eq!(raft.beside(".new").data_dir(), DataDir::new(d.path()));
    }

    #[test]
    fn a_dropped_member_leaves_nothing_of_its_state_but_the_lock() {
        let d = tempfile::tempdir().unwrap();
        let dir = DataDir::new(d.path());
        let raft = dir.raft();
        for sub in [raft.log(), raft.snapshots(), dir.wal().join("_default"), dir.snapshots()] {
            fs::create_dir_all(sub).unwrap();
        }
        raft.write_member(2, 9).unwrap();
        dir.write_alone_ids(2, 9).unwrap();
        fs::write(dir.auth_file(), b"auth").unwrap();
        fs::write(dir.lock_file(), b"").unwrap();
        // A leftover of a crash in an earlier drop goes too.
        fs::create_dir_all(raft.beside(".old").path()).unwrap();
        dir.remove_alone_state().unwrap();
        raft.discard().unwrap();
        let left: Vec<_> =
            fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["LOCK"]);
        // Nothing to remove is not an error.
        dir.remove_alone_state().unwrap();
    }
}
