//! `mem_etcd snapshot restore|status|export`: offline tools for the snapshots
//! Maintenance.Snapshot streams (`etcdctl snapshot save`), shaped like etcdutl's commands of
//! the same names. `restore` and `status` also take an etcd snapshot.db (a bbolt file), which
//! is how a cluster moves from etcd with its revisions; `export` goes the other way.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::backend::schema;
use crate::wal::backup::{self, BBOLT_MAGIC};

#[derive(Parser, Debug)]
#[command(
    name = "mem_etcd snapshot",
    bin_name = "mem_etcd snapshot",
    about = "Restore, inspect or export a snapshot file (mem_etcd's, or etcd's snapshot.db)"
)]
struct Cmd {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Writes a snapshot file as a new data directory for `mem_etcd --data-dir DIR`. An etcd
    /// snapshot.db keeps every key's create and mod revisions and versions, the revision, the
    /// compaction and the leases.
    Restore {
        /// The file `etcdctl snapshot save` wrote, from mem_etcd or from etcd.
        file: PathBuf,
        /// The data directory to create; it must not exist or be empty.
        #[arg(long)]
        data_dir: PathBuf,
        /// Restore without verifying the sha256 the snapshot ends with (each record's own
        /// checksum is still verified).
        #[arg(long)]
        skip_hash_check: bool,
    },
    /// Verifies a snapshot file (mem_etcd's or etcd's) and prints what it holds.
    Status { file: PathBuf },
    /// Writes a mem_etcd snapshot file as an etcd snapshot.db, with the same keys, revisions,
    /// compaction and leases, for `etcdutl snapshot restore` (the way back to etcd).
    Export {
        /// The file `etcdctl snapshot save` wrote from mem_etcd.
        file: PathBuf,
        /// The etcd snapshot.db to write; it must not exist.
        #[arg(long)]
        output: PathBuf,
        /// Export without verifying the sha256 the snapshot ends with.
        #[arg(long)]
        skip_hash_check: bool,
    },
}

/// Whether `file` is a bbolt database (an etcd snapshot.db): its first meta page's magic.
fn is_etcd(file: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 20];
    std::fs::File::open(file).and_then(|mut f| f.read_exact(&mut head)).is_ok()
        && head[16..20] == BBOLT_MAGIC
}

/// Runs `mem_etcd snapshot <args>` (`args` starts with "snapshot"); returns the exit code.
pub fn run(args: impl IntoIterator<Item = OsString>) -> i32 {
    let cmd = Cmd::parse_from(args);
    let result = match cmd.command {
        Command::Restore { file, data_dir, skip_hash_check } => {
            let etcd = is_etcd(&file);
            let restored = if etcd {
                schema::restore(&file, &data_dir, skip_hash_check)
            } else {
                backup::restore(&file, &data_dir, skip_hash_check)
            };
            restored.map(|s| {
                println!(
                    "restored {}{} into {}: revision {}, compacted at {}, {} keys ({} versions), \
                     {} leases. Start it with: mem_etcd --data-dir {}",
                    if etcd { "etcd snapshot " } else { "" },
                    file.display(),
                    data_dir.display(),
                    s.rev,
                    s.compacted,
                    s.keys,
                    s.versions,
                    s.leases.len(),
                    data_dir.display()
                )
            })
        }
        Command::Status { file } => if is_etcd(&file) {
            schema::read(&file, false).map(|(_, s)| s)
        } else {
            backup::read(&file, false, &mut |_| Ok(()))
        }
        .map(|s| {
            println!("format: {}", if is_etcd(&file) { "etcd (bbolt)" } else { "mem_etcd" });
            println!("revision: {}", s.rev);
            println!("compact revision: {}", s.compacted);
            println!("keys: {} ({} versions)", s.keys, s.versions);
            println!("leases: {}", s.leases.len());
            println!("size: {} bytes", s.size);
            println!("sha256: {}", s.sha256);
        }),
        Command::Export { file, output, skip_hash_check } => {
            schema::export(&file, &output, skip_hash_check).map(|s| {
                println!(
                    "exported {} as etcd snapshot {}: revision {}, compacted at {}, {} keys ({} \
                     versions), {} leases, {} bytes. Restore it with: etcdutl snapshot restore {}",
                    file.display(),
                    output.display(),
                    s.rev,
                    s.compacted,
                    s.keys,
                    s.versions,
                    s.leases.len(),
                    s.size,
                    output.display()
                )
            })
        }
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("Error: {e}");
            1
        }
    }
}
