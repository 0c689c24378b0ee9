//! `mem_etcd snapshot restore|status|export`: offline tools for the snapshots
//! `etcdctl snapshot save` saves, shaped like etcdutl's commands of the same names. They take
//! an etcd snapshot.db (a bbolt file: what Maintenance.Snapshot streams, from etcd or from
//! mem_etcd), which is how a cluster moves from etcd with its revisions, and the backups older
//! mem_etcds streamed in their own format; `export` turns those into an etcd snapshot.db.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use std::io::Write;
use std::path::Path;

use crate::backend::schema;
use crate::data_dir::DataDir;
use crate::raft::membership::{InitialMember, cluster_id, initial_members, parse_initial_cluster};
use crate::raft::restore::{founding, write_member};
use crate::wal::backup;
use crate::wal::backup::BackupError;

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
        /// The members of the cluster to found from the snapshot, as for `mem_etcd`
        /// (`name=peer-url,...`). With more than one member, DIR becomes member `--name`'s data
        /// directory; restore every member's from the same file with the same flags, then start
        /// each with its usual flags. Without it, DIR is a member alone's.
        #[arg(long)]
        initial_cluster: Option<String>,
        /// This member's name in `--initial-cluster`.
        #[arg(long, default_value = "default")]
        name: String,
        /// As given to the members; the ids derive from it.
        #[arg(long, default_value = "etcd-cluster")]
        initial_cluster_token: String,
    },
    /// Verifies a snapshot file (mem_etcd's or etcd's) and prints what it holds.
    Status { file: PathBuf },
    /// Writes a snapshot an older mem_etcd saved in its own format as an etcd snapshot.db,
    /// with the same keys, revisions, compaction, leases and auth state, for `etcdutl snapshot
    /// restore` (snapshots saved now are etcd snapshot.db files already).
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

/// Writes `dir` as member `name`'s data directory of a cluster founded from `file` (see
/// `raft::restore`). Every member's directory holds the same state and membership.
fn restore_member(
    file: &Path,
    dir: &Path,
    skip_hash_check: bool,
    initial: &[InitialMember],
    name: &str,
    token: &str,
) -> Result<backup::Summary, BackupError> {
    let members = initial_members(initial, token);
    let Some((&me, _)) = members.iter().find(|(_, m)| m.name == name) else {
        return Err(BackupError(format!(
            "--initial-cluster has no member named {name:?} (--name)"
        )));
    };
    let ids: Vec<u64> = members.keys().copied().collect();
    let urls = members.iter().map(|(id, m)| (*id, m.peer_urls.clone())).collect();
    // The machine's bytes: its state besides keys and leases (alarms and member attributes
    // come with use), then the backup. The auth state, from either kind of snapshot, goes with
    // the machine's state, where a Raft snapshot carries it.
    let mut machine_state = crate::proto::memetcdpb::MachineState::default();
    let (backup_bytes, summary) = if schema::is_db(file) {
        let (state, summary) = schema::read(file, skip_hash_check)?;
        if !state.auth.is_empty() {
            machine_state.auth = Some(crate::auth::codec::to_proto(&state.auth.to_auth()));
        }
        (schema::to_backup(&state), summary)
    } else {
        let summary = backup::read(file, skip_hash_check, &mut |_| Ok(()))?;
        let in_file = |e: std::io::Error| BackupError(format!("{}: {e}", file.display()));
        if let Some(state) = &summary.auth {
            let auth = decode_auth(state).map_err(in_file)?;
            machine_state.auth = Some(crate::auth::codec::to_proto(&auth));
        }
        (std::fs::read(file).map_err(in_file)?, summary)
    };
    let machine_state = prost::Message::encode_to_vec(&machine_state);
    backup::into_new_dir(dir, &mut |dir| {
        let raft_dir = DataDir::new(dir).raft();
        let write = &mut |out: &mut dyn Write| {
            out.write_all(&(machine_state.len() as u32).to_le_bytes())?;
            out.write_all(&machine_state)?;
            out.write_all(&backup_bytes)
        };
        write_member(&raft_dir, me, cluster_id(&ids), &urls, founding(), write)
            .map_err(|e| BackupError(format!("{}: {e}", raft_dir.display())))?;
        Ok(summary.clone())
    })
}

/// A mem_etcd backup's auth state (see `wal::backup`).
fn decode_auth(state: &[u8]) -> std::io::Result<crate::auth::AuthState> {
    crate::auth::codec::decode(state).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "its auth state does not decode")
    })
}

/// Runs `mem_etcd snapshot <args>` (`args` starts with "snapshot"); returns the exit code.
pub fn run(args: impl IntoIterator<Item = OsString>) -> i32 {
    let cmd = Cmd::parse_from(args);
    let result = match cmd.command {
        Command::Restore {
            file,
            data_dir,
            skip_hash_check,
            initial_cluster,
            name,
            initial_cluster_token,
        } => {
            let etcd = schema::is_db(&file);
            let cluster = match initial_cluster.as_deref().map(parse_initial_cluster) {
                Some(Err(e)) => Err(BackupError(format!("--initial-cluster: {e}"))),
                Some(Ok(members)) if members.len() > 1 => Ok(Some(members)),
                _ => Ok(None),
            };
            let member_of = cluster.as_ref().ok().and_then(|c| c.as_ref().map(Vec::len));
            let restored = match cluster {
                Err(e) => Err(e),
                Ok(Some(members)) => restore_member(
                    &file,
                    &data_dir,
                    skip_hash_check,
                    &members,
                    &name,
                    &initial_cluster_token,
                ),
                // A member alone keeps its auth state in a file of its own.
                Ok(None) if etcd => {
                    let auth = |dir: &Path, a: &schema::AuthState| {
                        crate::auth::file::save(&DataDir::new(dir).auth_file(), &a.to_auth())
                    };
                    schema::restore(&file, &data_dir, skip_hash_check, &auth)
                }
                Ok(None) => {
                    let auth = |dir: &Path, state: &bytes::Bytes| {
                        let path = DataDir::new(dir).auth_file();
                        crate::auth::file::save(&path, &decode_auth(state)?)
                    };
                    backup::restore(&file, &data_dir, skip_hash_check, &auth)
                }
            };
            restored.map(|s| {
                let start = match member_of {
                    Some(n) => format!(
                        "member {name} of a cluster of {n}: restore every member's data dir \
                         from this file with the same --initial-cluster and token, then start \
                         each with its cluster flags and --data-dir"
                    ),
                    None => format!("Start it with: mem_etcd --data-dir {}", data_dir.display()),
                };
                println!(
                    "restored {}{} into {}: revision {}, compacted at {}, {} keys ({} versions), \
                     {} leases. {start}",
                    if etcd { "etcd snapshot " } else { "" },
                    file.display(),
                    data_dir.display(),
                    s.rev,
                    s.compacted,
                    s.keys,
                    s.versions,
                    s.leases.len(),
                )
            })
        }
        Command::Status { file } => {
            let etcd = schema::is_db(&file);
            let read = if etcd {
                schema::read(&file, false).map(|(state, s)| (s, Some(state.auth.to_auth())))
            } else {
                backup::read(&file, false, &mut |_| Ok(())).and_then(|s| {
                    let auth = s.auth.as_deref().map(decode_auth).transpose();
                    let auth = auth.map_err(|e| BackupError(format!("{}: {e}", file.display())));
                    Ok((s, auth?))
                })
            };
            read.map(|(s, auth)| {
                println!("format: {}", if etcd { "etcd (bbolt)" } else { "mem_etcd" });
                println!("revision: {}", s.rev);
                println!("compact revision: {}", s.compacted);
                println!("keys: {} ({} versions)", s.keys, s.versions);
                println!("leases: {}", s.leases.len());
                match auth {
                    Some(a) => println!(
                        "auth: {}, revision {}, {} users, {} roles",
                        if a.enabled { "enabled" } else { "disabled" },
                        a.revision,
                        a.users.len(),
                        a.roles.len()
                    ),
                    None => println!("auth: none (saved by a mem_etcd that did not keep it)"),
                }
                println!("size: {} bytes", s.size);
                println!("sha256: {}", s.sha256);
            })
        }
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
