//! `iris snapshot create|list|delete|rollback`: named, kept-alive committed states of a volume.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;

use iris_media::MediaError;
use iris_store::{OpenOptions, Store, StoreError};

use crate::failure::{host_failure, say, stdout_failed, Outcome};
use crate::units::utc_time;
use crate::volume::{open_store, store_failure};

/// Arguments of `iris snapshot`.
#[derive(Args, Debug)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    action: SnapshotAction,
}

/// What to do with snapshots.
#[derive(Subcommand, Debug)]
enum SnapshotAction {
    /// Commit, then keep the volume's current state under NAME (1 to 24 bytes).
    Create {
        /// The volume.
        volume: PathBuf,
        /// Name of the new snapshot.
        name: String,
    },
    /// List snapshots: name, generation and when each was taken (UTC).
    List {
        /// Print a JSON array instead of text.
        #[arg(long)]
        json: bool,
        /// The volume.
        volume: PathBuf,
    },
    /// Delete snapshot NAME and free the space only it held.
    Delete {
        /// The volume.
        volume: PathBuf,
        /// The snapshot.
        name: String,
    },
    /// Make snapshot NAME the volume's current state.
    ///
    /// Changes made since the snapshot was taken are lost; the snapshot itself stays. No
    /// program may have the volume open meanwhile.
    Rollback {
        /// The volume.
        volume: PathBuf,
        /// The snapshot.
        name: String,
    },
}

/// Run one snapshot action.
pub fn run(args: SnapshotArgs) -> Outcome {
    match args.action {
        SnapshotAction::Create { volume, name } => {
            let store = open_store(&volume)?;
            store
                .snapshot_create(&name)
                .map_err(|e| store_failure(&volume, &e))?;
            let generation = store
                .snapshot_list()
                .map_err(|e| store_failure(&volume, &e))?
                .into_iter()
                .find(|s| s.name == name)
                .map_or(0, |s| s.generation);
            say(&format!(
                "created snapshot {name} (generation {generation})"
            ))?;
        }
        SnapshotAction::List { json, volume } => {
            let store = open_store(&volume)?;
            let snaps = store
                .snapshot_list()
                .map_err(|e| store_failure(&volume, &e))?;
            let mut out = std::io::stdout().lock();
            if json {
                let doc: Vec<_> = snaps
                    .iter()
                    .map(|s| {
                        json!({
                            "name": s.name,
                            "generation": s.generation,
                            "time_ns": s.time_ns,
                        })
                    })
                    .collect();
                writeln!(out, "{:#}", json!(doc)).map_err(stdout_failed)?;
            } else {
                for s in &snaps {
                    let taken = utc_time(i64::try_from(s.time_ns).unwrap_or(i64::MAX));
                    writeln!(
                        out,
                        "{:<24} generation {:<10} {taken} UTC",
                        s.name, s.generation
                    )
                    .map_err(stdout_failed)?;
                }
            }
        }
        SnapshotAction::Delete { volume, name } => {
            let store = open_store(&volume)?;
            store
                .snapshot_delete(&name)
                .map_err(|e| store_failure(&volume, &e))?;
            say(&format!("deleted snapshot {name}"))?;
        }
        SnapshotAction::Rollback { volume, name } => {
            // Alone: running programs would find their open files changed or gone under them
            // (a mounted file system is not rolled back either).
            std::fs::metadata(&volume).map_err(|e| host_failure(&volume, &e))?;
            let store = Store::open_alone(&volume, &OpenOptions::default()).map_err(|e| {
                let why = store_failure(&volume, &e);
                match e {
                    StoreError::Media(MediaError::InUse { .. }) => {
                        format!("{why}; end the programs using it, then roll back")
                    }
                    _ => why,
                }
            })?;
            store
                .snapshot_rollback(&name)
                .map_err(|e| store_failure(&volume, &e))?;
            // The shadows of mapped files hold the bytes from before.
            iris_fs::host_files::discard_shadows(store.volume_id());
            say(&format!("rolled back to snapshot {name}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
