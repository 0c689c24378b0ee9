//! `mem_etcd snapshot restore|status`: offline tools for the snapshots Maintenance.Snapshot
//! streams (`etcdctl snapshot save`), shaped like etcdutl's commands of the same names.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::wal::backup;

#[derive(Parser, Debug)]
#[command(
    name = "mem_etcd snapshot",
    bin_name = "mem_etcd snapshot",
    about = "Restore or inspect a mem_etcd snapshot file"
)]
struct Cmd {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Writes a snapshot file as a new data directory for `mem_etcd --data-dir DIR`.
    Restore {
        /// The file `etcdctl snapshot save` wrote from mem_etcd.
        file: PathBuf,
        /// The data directory to create; it must not exist or be empty.
        #[arg(long)]
        data_dir: PathBuf,
        /// Restore without verifying the sha256 the snapshot ends with (each record's own
        /// checksum is still verified).
        #[arg(long)]
        skip_hash_check: bool,
    },
    /// Verifies a snapshot file and prints what it holds.
    Status { file: PathBuf },
}

/// Runs `mem_etcd snapshot <args>` (`args` starts with "snapshot"); returns the exit code.
pub fn run(args: impl IntoIterator<Item = OsString>) -> i32 {
    let cmd = Cmd::parse_from(args);
    let result = match cmd.command {
        Command::Restore { file, data_dir, skip_hash_check } => {
            backup::restore(&file, &data_dir, skip_hash_check).map(|s| {
                println!(
                    "restored {} into {}: revision {}, compacted at {}, {} keys ({} versions), \
                     {} leases. Start it with: mem_etcd --data-dir {}",
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
        Command::Status { file } => backup::read(&file, false, &mut |_| Ok(())).map(|s| {
            println!("revision: {}", s.rev);
            println!("compact revision: {}", s.compacted);
            println!("keys: {} ({} versions)", s.keys, s.versions);
            println!("leases: {}", s.leases.len());
            println!("size: {} bytes", s.size);
            println!("sha256: {}", s.sha256);
        }),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("Error: {e}");
            1
        }
    }
}
