//! `iris get`: export files, symlinks and (with -r) directory trees from a volume to the host,
//! keeping permission bits and access/modification times, and owners when run as root. Symlinks
//! are copied as symlinks. Whole zero chunks become holes. An existing host symlink at a target
//! is replaced, never written through.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::{Metadata, Permissions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use filetime::FileTime;
use iris_fs::{Cred, Errno, Fs, Inode, PATH_MAX, ROOT_INO};

use crate::failure::{host_failure, Outcome};
use crate::progress::{Plan, Progress};
use crate::units::time_parts;
use crate::volume::{caller, dir_entries, join, label, last_name, open_fs, path_failure};

/// Bytes copied per file-system read and host write.
const CHUNK_BYTES: usize = 1 << 20;

/// Arguments of `iris get`.
#[derive(Args, Debug)]
pub struct GetArgs {
    /// Copy directories and everything under them.
    #[arg(short, long)]
    recursive: bool,
    /// The volume.
    volume: PathBuf,
    /// Files, symlinks or directories inside the volume to export.
    #[arg(required = true, value_name = "VOLUME_PATH")]
    volume_paths: Vec<String>,
    /// Where they go on the host. An existing directory receives each one under its own name;
    /// otherwise the single source is written to this path.
    host_path: PathBuf,
}

/// Export the sources.
pub fn run(args: GetArgs) -> Outcome {
    let volume = &args.volume;
    let volume_meta = std::fs::metadata(volume).map_err(|e| host_failure(volume, &e))?;
    let fs = open_fs(volume)?;
    let cred = caller();
    // Every source must exist (and be copyable) before anything is written.
    let mut sources = Vec::with_capacity(args.volume_paths.len());
    for path in &args.volume_paths {
        let path = path.as_bytes();
        let inode = fs
            .resolve(&cred, ROOT_INO, path, false)
            .and_then(|ino| fs.getattr(ino))
            .map_err(|e| path_failure(volume, path, e))?;
        if inode.is_dir() && !args.recursive {
            return Err(format!("{}: is a directory (use -r)", label(volume, path)).into());
        }
        sources.push((path, inode));
    }
    let host = &args.host_path;
    let into_dir = std::fs::metadata(host).is_ok_and(|m| m.is_dir());
    if !into_dir && sources.len() > 1 {
        return Err(format!(
            "{}: not a directory (several sources need one)",
            host.display()
        )
        .into());
    }
    let progress = Progress::for_copy(args.recursive, || plan(&fs, &sources, args.recursive));
    let mut exporter = Exporter {
        fs: &fs,
        cred: &cred,
        volume,
        volume_meta,
        chunk: vec![0u8; CHUNK_BYTES],
        progress,
        skipped_count: 0,
    };
    for (path, inode) in &sources {
        let target = match (into_dir, last_name(path)) {
            (true, Some(name)) => host.join(OsStr::from_bytes(name)),
            // A source without a name of its own ("/") merges into the destination.
            _ => host.clone(),
        };
        exporter.export(path, inode, &target)?;
    }
    exporter.progress.finish();
    if exporter.skipped_count > 0 {
        return Err(format!(
            "{} entries that are not files, directories or symlinks were not copied",
            exporter.skipped_count
        )
        .into());
    }
    Ok(ExitCode::SUCCESS)
}

/// Count what `sources` hold, for the progress bar. Unreadable parts count as nothing: the copy
/// reports them.
fn plan(fs: &Fs, sources: &[(&[u8], Inode)], recursive: bool) -> Plan {
    let mut plan = Plan::default();
    let mut pending: Vec<Inode> = sources.iter().map(|(_, i)| *i).collect();
    // Each directory once: a damaged volume could link one into its own subtree.
    let mut seen_dirs = HashSet::new();
    while let Some(inode) = pending.pop() {
        plan.entry_count += 1;
        if inode.is_file() {
            plan.size_bytes += inode.size;
        } else if inode.is_dir() && recursive && seen_dirs.insert(inode.ino) {
            for entry in dir_entries(fs, inode.ino).unwrap_or_default() {
                if let Ok(child) = fs.getattr(entry.ino) {
                    pending.push(child);
                }
            }
        }
    }
    plan
}

/// One export: from where, as whom, and the copy buffer.
struct Exporter<'a> {
    fs: &'a Fs,
    cred: &'a Cred,
    volume: &'a Path,
    /// The volume file's own metadata: an export must not overwrite the volume it reads.
    volume_meta: Metadata,
    chunk: Vec<u8>,
    progress: Progress,
    skipped_count: u64,
}

impl Exporter<'_> {
    /// Copy `inode`, found at `path` in the volume, to `host`.
    fn export(&mut self, path: &[u8], inode: &Inode, host: &Path) -> Result<(), String> {
        if inode.is_symlink() {
            self.export_symlink(path, inode, host)?;
        } else if inode.is_file() {
            self.export_file(path, inode, host)?;
        } else if inode.is_dir() {
            self.export_dir(path, inode, host)?;
        } else {
            self.skipped_count += 1;
            self.progress.warn(&format!(
                "{}: skipped: not a regular file, directory or symlink",
                label(self.volume, path)
            ));
        }
        self.progress.entry_done();
        Ok(())
    }

    fn fail(&self, path: &[u8], e: Errno) -> String {
        path_failure(self.volume, path, e)
    }

    /// Make room at `host` for a non-directory from `path`: remove a symlink or special file
    /// there; refuse to replace a directory or the volume itself.
    fn clear_for_non_dir(&self, path: &[u8], host: &Path) -> Result<(), String> {
        match std::fs::symlink_metadata(host) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(host_failure(host, &e)),
            Ok(m) if m.is_dir() => Err(format!(
                "{}: is a directory; cannot replace it with {}",
                host.display(),
                label(self.volume, path)
            )),
            Ok(m) if m.dev() == self.volume_meta.dev() && m.ino() == self.volume_meta.ino() => {
                Err(format!(
                    "{}: is the volume itself; not overwriting it",
                    host.display()
                ))
            }
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => std::fs::remove_file(host).map_err(|e| host_failure(host, &e)),
        }
    }

    fn export_file(&mut self, path: &[u8], inode: &Inode, host: &Path) -> Result<(), String> {
        self.clear_for_non_dir(path, host)?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(host)
            .map_err(|e| host_failure(host, &e))?;
        // Bounded by the size at the start: a file growing meanwhile is copied as it was.
        let mut off = 0u64;
        while off < inode.size {
            let want = usize::try_from(inode.size - off)
                .unwrap_or(usize::MAX)
                .min(self.chunk.len());
            let n = self
                .fs
                .read(inode.ino, off, &mut self.chunk[..want])
                .map_err(|e| self.fail(path, e))?;
            if n == 0 {
                break;
            }
            let data = &self.chunk[..n];
            if data.iter().all(|b| *b == 0) {
                file.seek(SeekFrom::Current(n as i64))
                    .map_err(|e| host_failure(host, &e))?;
            } else {
                file.write_all(data).map_err(|e| host_failure(host, &e))?;
            }
            off += n as u64;
            self.progress.copied(n as u64);
        }
        // Skipped trailing zeros: the length says where the file ends.
        file.set_len(off).map_err(|e| host_failure(host, &e))?;
        drop(file);
        self.set_metadata(host, inode, false)
    }

    fn export_symlink(&mut self, path: &[u8], inode: &Inode, host: &Path) -> Result<(), String> {
        let target = self
            .fs
            .readlink(self.cred, ROOT_INO, path)
            .map_err(|e| self.fail(path, e))?;
        self.clear_for_non_dir(path, host)?;
        if std::fs::symlink_metadata(host).is_ok() {
            std::fs::remove_file(host).map_err(|e| host_failure(host, &e))?;
        }
        std::os::unix::fs::symlink(OsStr::from_bytes(&target), host)
            .map_err(|e| host_failure(host, &e))?;
        self.set_metadata(host, inode, true)
    }

    /// Copy a directory and everything under it. Its own mode and times are set last, once
    /// adding entries no longer changes them (and a read-only mode no longer blocks them).
    fn export_dir(&mut self, path: &[u8], inode: &Inode, host: &Path) -> Result<(), String> {
        // Bounds the recursion, even through a directory a damaged volume links into itself.
        if path.len() >= PATH_MAX {
            return Err(self.fail(path, Errno::ENAMETOOLONG));
        }
        match std::fs::symlink_metadata(host) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "{}: exists and is not a directory; cannot replace it with {}",
                    host.display(),
                    label(self.volume, path)
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
                .mode(0o700)
                .create(host)
                .map_err(|e| host_failure(host, &e))?,
            Err(e) => return Err(host_failure(host, &e)),
        }
        let entries = dir_entries(self.fs, inode.ino).map_err(|e| self.fail(path, e))?;
        for entry in entries {
            let child_path = join(path, &entry.name);
            // A damaged volume could hold a name that climbs out of the target on the host.
            if entry.name.is_empty() || entry.name.contains(&b'/') || entry.name.contains(&0) {
                self.skipped_count += 1;
                self.progress.warn(&format!(
                    "{}: skipped: invalid name",
                    label(self.volume, &child_path)
                ));
                continue;
            }
            let child = self
                .fs
                .getattr(entry.ino)
                .map_err(|e| self.fail(&child_path, e))?;
            self.export(
                &child_path,
                &child,
                &host.join(OsStr::from_bytes(&entry.name)),
            )?;
        }
        self.set_metadata(host, inode, false)
    }

    /// Owner (as root), permission bits (not for a symlink, which has none) and times from the
    /// volume. Owner first: chown clears set-user-id and set-group-id bits.
    fn set_metadata(&self, host: &Path, inode: &Inode, is_symlink: bool) -> Result<(), String> {
        let fail = |e: std::io::Error| host_failure(host, &e);
        if self.cred.uid == 0 {
            std::os::unix::fs::lchown(host, Some(inode.uid), Some(inode.gid)).map_err(fail)?;
        }
        let (atime_s, atime_ns) = time_parts(inode.atime_ns);
        let (mtime_s, mtime_ns) = time_parts(inode.mtime_ns);
        let atime = FileTime::from_unix_time(atime_s, atime_ns);
        let mtime = FileTime::from_unix_time(mtime_s, mtime_ns);
        if is_symlink {
            return filetime::set_symlink_file_times(host, atime, mtime).map_err(fail);
        }
        std::fs::set_permissions(host, Permissions::from_mode(inode.mode & 0o7777))
            .map_err(fail)?;
        filetime::set_file_times(host, atime, mtime).map_err(fail)
    }
}
