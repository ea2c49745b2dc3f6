//! `iris put`: import host files, symlinks and (with -r) directory trees into a volume, keeping
//! permission bits and access/modification times, and owners when run as root. Symlinks are
//! copied as symlinks, never followed. Whole zero chunks are left as holes. Hard links arrive as
//! separate files; fifos, sockets and devices are skipped with a warning (and exit 1).

use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use iris_fs::{Cred, Errno, Fs, Inode, ROOT_INO};

use crate::failure::{host_failure, Outcome};
use crate::progress::{Plan, Progress};
use crate::units::time_ns;
use crate::volume::{caller, commit, join, label, open_fs, path_failure};

/// Bytes copied per read and per file-system write.
const CHUNK_BYTES: usize = 1 << 20;

/// Arguments of `iris put`.
#[derive(Args, Debug)]
pub struct PutArgs {
    /// Copy directories and everything under them.
    #[arg(short, long)]
    recursive: bool,
    /// The volume.
    volume: PathBuf,
    /// Host files, symlinks or directories to import.
    #[arg(required = true, value_name = "HOST_PATH")]
    host_paths: Vec<PathBuf>,
    /// Where they go in the volume. An existing directory receives each one under its own name;
    /// otherwise the single source is copied to this path.
    volume_path: String,
}

/// Import the sources, then commit.
pub fn run(args: PutArgs) -> Outcome {
    let volume = &args.volume;
    let volume_meta = std::fs::metadata(volume).map_err(|e| host_failure(volume, &e))?;
    let fs = open_fs(volume)?;
    let cred = caller();
    let dest = args.volume_path.as_bytes();
    // Every source must exist (and be copyable) before anything is copied.
    let mut sources = Vec::with_capacity(args.host_paths.len());
    for host in &args.host_paths {
        let meta = std::fs::symlink_metadata(host).map_err(|e| host_failure(host, &e))?;
        if meta.is_dir() && !args.recursive {
            return Err(format!("{}: is a directory (use -r)", host.display()).into());
        }
        sources.push((host.as_path(), meta));
    }
    let into_dir = match fs.resolve(&cred, ROOT_INO, dest, true) {
        Ok(ino) => fs
            .getattr(ino)
            .map_err(|e| path_failure(volume, dest, e))?
            .is_dir(),
        Err(Errno::ENOENT) => false,
        Err(e) => return Err(path_failure(volume, dest, e).into()),
    };
    if !into_dir && sources.len() > 1 {
        return Err(format!(
            "{}: not a directory (several sources need one)",
            label(volume, dest)
        )
        .into());
    }
    let progress = Progress::for_copy(args.recursive, || plan(&args.host_paths, args.recursive));
    let mut importer = Importer {
        fs: &fs,
        cred: &cred,
        volume,
        volume_meta,
        chunk: vec![0u8; CHUNK_BYTES],
        progress,
        skipped_count: 0,
    };
    let mut result = Ok(());
    for (host, meta) in &sources {
        let target = match (into_dir, host_name(host)) {
            (true, Some(name)) => join(dest, name.as_bytes()),
            // A source without a name of its own ("/") merges into the destination.
            _ => dest.to_vec(),
        };
        result = importer.import(host, meta, &target);
        if result.is_err() {
            break;
        }
    }
    importer.progress.finish();
    commit(&fs, volume)?;
    result?;
    if importer.skipped_count > 0 {
        return Err(format!(
            "{} special files (fifos, sockets, devices) were not copied",
            importer.skipped_count
        )
        .into());
    }
    Ok(ExitCode::SUCCESS)
}

/// The name a host source is copied under: its last component, or the canonical path's for "."
/// and "..". `None` for "/".
fn host_name(host: &Path) -> Option<OsString> {
    if let Some(name) = host.file_name() {
        return Some(name.to_os_string());
    }
    std::fs::canonicalize(host)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_os_string()))
}

/// Count what `sources` hold, for the progress bar. Unreadable parts count as nothing: the copy
/// reports them.
fn plan(sources: &[PathBuf], recursive: bool) -> Plan {
    let mut plan = Plan::default();
    let mut pending: Vec<PathBuf> = sources.to_vec();
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        plan.entry_count += 1;
        if meta.is_file() {
            plan.size_bytes += meta.len();
        } else if meta.is_dir() && recursive {
            if let Ok(entries) = std::fs::read_dir(&path) {
                pending.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
    plan
}

/// One import: where to, as whom, and the copy buffer.
struct Importer<'a> {
    fs: &'a Fs,
    cred: &'a Cred,
    volume: &'a Path,
    /// The volume file's own metadata: a tree holding the volume must not import it into itself.
    volume_meta: Metadata,
    chunk: Vec<u8>,
    progress: Progress,
    skipped_count: u64,
}

impl Importer<'_> {
    /// Copy `host` (described by `meta`, not following a symlink) to `target` in the volume.
    fn import(&mut self, host: &Path, meta: &Metadata, target: &[u8]) -> Result<(), String> {
        let kind = meta.file_type();
        if kind.is_symlink() {
            self.import_symlink(host, meta, target)?;
        } else if kind.is_file() {
            if meta.dev() == self.volume_meta.dev() && meta.ino() == self.volume_meta.ino() {
                self.progress.warn(&format!(
                    "{}: skipped: it is the volume itself",
                    host.display()
                ));
            } else {
                self.import_file(host, meta, target)?;
            }
        } else if kind.is_dir() {
            self.import_dir(host, meta, target)?;
        } else {
            self.skipped_count += 1;
            self.progress.warn(&format!(
                "{}: skipped: not a regular file, directory or symlink",
                host.display()
            ));
        }
        self.progress.entry_done();
        Ok(())
    }

    fn fail(&self, path: &[u8], e: Errno) -> String {
        path_failure(self.volume, path, e)
    }

    /// What `target` names now (a final symlink itself), if anything.
    fn existing(&self, target: &[u8]) -> Result<Option<Inode>, String> {
        match self.fs.resolve(self.cred, ROOT_INO, target, false) {
            Ok(ino) => self
                .fs
                .getattr(ino)
                .map(Some)
                .map_err(|e| self.fail(target, e)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(self.fail(target, e)),
        }
    }

    /// Make room at `target` for a non-directory from `host`: remove a symlink or special file
    /// there; refuse to replace a directory. Returns whether a regular file stays to overwrite.
    fn clear_for_non_dir(&self, host: &Path, target: &[u8]) -> Result<bool, String> {
        match self.existing(target)? {
            None => Ok(false),
            Some(i) if i.is_dir() => Err(format!(
                "{}: is a directory; cannot replace it with {}",
                label(self.volume, target),
                host.display()
            )),
            Some(i) if i.is_file() => Ok(true),
            Some(_) => {
                self.fs
                    .unlink(self.cred, ROOT_INO, target)
                    .map_err(|e| self.fail(target, e))?;
                Ok(false)
            }
        }
    }

    fn import_file(&mut self, host: &Path, meta: &Metadata, target: &[u8]) -> Result<(), String> {
        self.clear_for_non_dir(host, target)?;
        let mut file = File::open(host).map_err(|e| host_failure(host, &e))?;
        let inode = self
            .fs
            .open(
                self.cred,
                ROOT_INO,
                target,
                libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
                0o600,
            )
            .map_err(|e| self.fail(target, e))?;
        let mut off = 0u64;
        loop {
            let n = read_full(&mut file, &mut self.chunk).map_err(|e| host_failure(host, &e))?;
            if n == 0 {
                break;
            }
            let data = &self.chunk[..n];
            if data.iter().any(|b| *b != 0) {
                write_all(self.fs, inode.ino, off, data).map_err(|e| self.fail(target, e))?;
            }
            off += n as u64;
            self.progress.copied(n as u64);
        }
        // Trailing zeros were skipped: the size says where the file ends.
        let size = self
            .fs
            .getattr(inode.ino)
            .map_err(|e| self.fail(target, e))?
            .size;
        if size != off {
            self.fs
                .truncate(inode.ino, off)
                .map_err(|e| self.fail(target, e))?;
        }
        self.set_metadata(inode.ino, meta, target, true)
    }

    fn import_symlink(
        &mut self,
        host: &Path,
        meta: &Metadata,
        target: &[u8],
    ) -> Result<(), String> {
        let link = std::fs::read_link(host).map_err(|e| host_failure(host, &e))?;
        if self.clear_for_non_dir(host, target)? {
            self.fs
                .unlink(self.cred, ROOT_INO, target)
                .map_err(|e| self.fail(target, e))?;
        }
        let ino = self
            .fs
            .symlink(self.cred, link.as_os_str().as_bytes(), ROOT_INO, target)
            .map_err(|e| self.fail(target, e))?;
        self.set_metadata(ino, meta, target, false)
    }

    /// Copy a directory and everything under it. Its own mode and times are set last, once
    /// adding entries no longer changes them (and a read-only mode no longer blocks them).
    fn import_dir(&mut self, host: &Path, meta: &Metadata, target: &[u8]) -> Result<(), String> {
        debug_assert!(meta.is_dir());
        let ino = match self.existing(target)? {
            Some(i) if i.is_dir() => i.ino,
            Some(_) => {
                return Err(format!(
                    "{}: exists and is not a directory; cannot replace it with {}",
                    label(self.volume, target),
                    host.display()
                ))
            }
            None => self
                .fs
                .mkdir(self.cred, ROOT_INO, target, 0o700)
                .map_err(|e| self.fail(target, e))?,
        };
        let mut names = Vec::new();
        for entry in std::fs::read_dir(host).map_err(|e| host_failure(host, &e))? {
            names.push(entry.map_err(|e| host_failure(host, &e))?.file_name());
        }
        names.sort();
        // Recursion depth is bounded by PATH_MAX: the file system refuses longer targets.
        for name in names {
            let child = host.join(&name);
            let child_meta =
                std::fs::symlink_metadata(&child).map_err(|e| host_failure(&child, &e))?;
            self.import(&child, &child_meta, &join(target, name.as_bytes()))?;
        }
        self.set_metadata(ino, meta, target, true)
    }

    /// Owner (as root), permission bits (not for a symlink, which has none) and times from the
    /// host. Owner first: chown clears set-user-id and set-group-id bits.
    fn set_metadata(
        &self,
        ino: u64,
        meta: &Metadata,
        target: &[u8],
        with_mode: bool,
    ) -> Result<(), String> {
        if self.cred.uid == 0 {
            self.fs
                .chown(self.cred, ino, meta.uid(), meta.gid())
                .map_err(|e| self.fail(target, e))?;
        }
        if with_mode {
            self.fs
                .chmod(self.cred, ino, meta.mode() & 0o7777)
                .map_err(|e| self.fail(target, e))?;
        }
        self.fs
            .utimens(
                self.cred,
                ino,
                Some(time_ns(meta.atime(), meta.atime_nsec())),
                Some(time_ns(meta.mtime(), meta.mtime_nsec())),
                true,
            )
            .map_err(|e| self.fail(target, e))
    }
}

/// Read until `buf` is full or the file ends; returns the bytes read.
fn read_full(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Write all of `data` at `off` of file `ino`.
fn write_all(fs: &Fs, ino: u64, off: u64, data: &[u8]) -> Result<(), Errno> {
    let mut done = 0usize;
    while done < data.len() {
        let n = fs.write(ino, off + done as u64, &data[done..])?;
        if n == 0 {
            // No progress would loop forever; the file system wrote nothing and said nothing.
            return Err(Errno::EIO);
        }
        done += n;
    }
    Ok(())
}
