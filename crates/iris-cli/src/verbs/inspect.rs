//! `iris stat` and `iris df`: what a volume holds and how full it is, as text or JSON. Both only
//! read the volume.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use iris_store::Stats;
use serde_json::json;

use crate::failure::{stdout_failed, Outcome};
use crate::units::{human_bytes, utc_time};
use crate::volume::{open_store, store_failure};

/// Arguments of `iris stat`.
#[derive(Args, Debug)]
pub struct StatArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// The volume.
    volume: PathBuf,
}

/// Arguments of `iris df`.
#[derive(Args, Debug)]
pub struct DfArgs {
    /// Print one JSON object (sizes in bytes) instead of text.
    #[arg(long)]
    json: bool,
    /// The volume.
    volume: PathBuf,
}

/// Print usage counters, commits, tree shape and snapshots.
pub fn stat(args: StatArgs) -> Outcome {
    let volume = &args.volume;
    let store = open_store(volume)?;
    let st = store.stats().map_err(|e| store_failure(volume, &e))?;
    let shape = store.shape().map_err(|e| store_failure(volume, &e))?;
    let snaps = store
        .snapshot_list()
        .map_err(|e| store_failure(volume, &e))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = json!({
            "volume": volume.display().to_string(),
            "block_size": st.block_size,
            "buffer_bytes": store.buffer_bytes(),
            "max_blocks": st.max_blocks,
            "backed_blocks": st.backed_blocks,
            "used_blocks": st.used_blocks,
            "free_blocks": st.free_blocks,
            "pending_free_blocks": st.pending_free_blocks,
            "snapshot_held_blocks": st.snapshot_held_blocks,
            "committed_generation": st.committed_generation,
            "commits": st.commits,
            "bytes_persisted": st.bytes_persisted,
            "last_commit_ns": st.last_commit_ns,
            "dirty": st.dirty,
            "tree": {
                "height": shape.height,
                "leaf_nodes": shape.leaf_nodes,
                "inner_nodes": shape.inner_nodes,
                "entries": shape.entries,
                "data_blocks": shape.data_blocks,
                "buffered_messages": shape.messages,
            },
            "snapshots": snaps.iter().map(|s| json!({
                "name": s.name,
                "generation": s.generation,
                "time_ns": s.time_ns,
            })).collect::<Vec<_>>(),
        });
        writeln!(out, "{doc:#}").map_err(stdout_failed)?;
        return Ok(ExitCode::SUCCESS);
    }
    let last_commit = if st.last_commit_ns == 0 {
        "never (since recovery)".to_string()
    } else {
        format!("{} UTC", utc_time(ns_as_i64(st.last_commit_ns)))
    };
    let lines = [
        format!("volume:          {}", volume.display()),
        format!("block size:      {}", st.block_size),
        format!(
            "tree kind:       {}",
            match store.buffer_bytes() {
                0 => "B+-tree".to_string(),
                n => format!("Bε-tree, {n}-byte buffers"),
            }
        ),
        format!("size limit:      {} blocks", st.max_blocks),
        format!("backed:          {} blocks", st.backed_blocks),
        format!("used:            {} blocks", st.used_blocks),
        format!("free:            {} blocks", st.free_blocks),
        format!("pending free:    {} blocks", st.pending_free_blocks),
        format!("snapshot-held:   {} blocks", st.snapshot_held_blocks),
        format!("generation:      {}", st.committed_generation),
        format!(
            "commits:         {} ({} persisted) since recovery",
            st.commits,
            human_bytes(st.bytes_persisted)
        ),
        format!("last commit:     {last_commit}"),
        format!("uncommitted:     {}", if st.dirty { "yes" } else { "no" }),
        match st.log_capacity {
            0 => "intent log:      none (format 7: every sync commits)".to_string(),
            n => format!(
                "intent log:      {} of {n} slots taken since the last commit",
                st.log_records.min(n)
            ),
        },
        format!(
            "tree:            height {}, {} leaves, {} internal, {} entries, {} data blocks, \
             {} buffered messages",
            shape.height,
            shape.leaf_nodes,
            shape.inner_nodes,
            shape.entries,
            shape.data_blocks,
            shape.messages
        ),
    ];
    for line in lines {
        writeln!(out, "{line}").map_err(stdout_failed)?;
    }
    for s in snaps {
        writeln!(
            out,
            "snapshot:        {} (generation {})",
            s.name, s.generation
        )
        .map_err(stdout_failed)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Sizes of one volume in bytes, as `df` reports them.
struct Usage {
    size_bytes: u64,
    used_bytes: u64,
    free_bytes: u64,
    snapshot_held_bytes: u64,
    backed_bytes: u64,
}

impl Usage {
    fn of(st: &Stats) -> Usage {
        let bs = u64::from(st.block_size);
        Usage {
            size_bytes: st.max_blocks.saturating_mul(bs),
            used_bytes: st.used_blocks.saturating_mul(bs),
            free_bytes: st.free_blocks.saturating_mul(bs),
            snapshot_held_bytes: st.snapshot_held_blocks.saturating_mul(bs),
            backed_bytes: st.backed_blocks.saturating_mul(bs),
        }
    }

    /// Used share of the size, rounded up as `df` does.
    fn use_percent(&self) -> u64 {
        if self.size_bytes == 0 {
            return 0;
        }
        let used = u128::from(self.used_bytes) * 100;
        used.div_ceil(u128::from(self.size_bytes)) as u64
    }
}

/// Print size, used, free and snapshot-held space.
pub fn df(args: DfArgs) -> Outcome {
    let volume = &args.volume;
    let store = open_store(volume)?;
    let st = store.stats().map_err(|e| store_failure(volume, &e))?;
    let usage = Usage::of(&st);
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = json!({
            "volume": volume.display().to_string(),
            "block_size": st.block_size,
            "size_bytes": usage.size_bytes,
            "used_bytes": usage.used_bytes,
            "free_bytes": usage.free_bytes,
            "snapshot_held_bytes": usage.snapshot_held_bytes,
            "backed_bytes": usage.backed_bytes,
            "use_percent": usage.use_percent(),
        });
        writeln!(out, "{doc:#}").map_err(stdout_failed)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{:<24} {:>7} {:>7} {:>7} {:>13} {:>7} {:>4}",
        "Volume", "Size", "Used", "Free", "Snapshot-held", "Backed", "Use%"
    )
    .map_err(stdout_failed)?;
    writeln!(
        out,
        "{:<24} {:>7} {:>7} {:>7} {:>13} {:>7} {:>3}%",
        volume.display(),
        human_bytes(usage.size_bytes),
        human_bytes(usage.used_bytes),
        human_bytes(usage.free_bytes),
        human_bytes(usage.snapshot_held_bytes),
        human_bytes(usage.backed_bytes),
        usage.use_percent()
    )
    .map_err(stdout_failed)?;
    Ok(ExitCode::SUCCESS)
}

/// A counter of nanoseconds as the signed time `utc_time` takes (saturating past year 2262).
fn ns_as_i64(time_ns: u64) -> i64 {
    i64::try_from(time_ns).unwrap_or(i64::MAX)
}
