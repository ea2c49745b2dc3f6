//! `iris ls`, `cat`, `rm` and `mkdir`: looking at and shaping the file tree inside a volume.
//! (Copying in and out is `put` and `get`.) Verbs that change the volume commit before exiting.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use iris_fs::{Cred, Errno, Fs, Inode, PATH_MAX, ROOT_INO};

use crate::failure::{errno_text, stdout_failed, Failure, Outcome};
use crate::units::utc_time;
use crate::volume::{caller, commit, dir_entries, join, label, last_name, open_fs, path_failure};

/// Bytes read from the volume per call in `cat`.
const CAT_CHUNK_BYTES: usize = 1 << 20;
/// Mode of the parent directories `mkdir -p` creates.
const PARENT_DIR_MODE: u32 = 0o755;

/// Arguments of `iris ls`.
#[derive(Args, Debug)]
pub struct LsArgs {
    /// Long listing: type and mode, links, owner, group, size, modification time (UTC), name,
    /// and where a symlink points.
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// The volume.
    volume: PathBuf,
    /// Paths inside the volume (directories are listed, sorted by name).
    #[arg(default_value = "/", value_name = "PATH")]
    paths: Vec<String>,
}

/// Arguments of `iris cat`.
#[derive(Args, Debug)]
pub struct CatArgs {
    /// The volume.
    volume: PathBuf,
    /// Files inside the volume, printed one after another.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<String>,
}

/// Arguments of `iris rm`.
#[derive(Args, Debug)]
pub struct RmArgs {
    /// Remove directories and everything under them.
    #[arg(short, long)]
    recursive: bool,
    /// Ignore paths that do not exist.
    #[arg(short, long)]
    force: bool,
    /// The volume.
    volume: PathBuf,
    /// Paths inside the volume.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<String>,
}

/// Arguments of `iris mkdir`.
#[derive(Args, Debug)]
pub struct MkdirArgs {
    /// Create missing parent directories too, and accept directories that exist.
    #[arg(short, long)]
    parents: bool,
    /// Permission bits of the new directories, in octal.
    #[arg(short, long, default_value = "755", value_parser = parse_mode)]
    mode: u32,
    /// The volume.
    volume: PathBuf,
    /// Directories to create inside the volume.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<String>,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("bad mode {s:?} (octal, e.g. 755)"))
}

/// List directories (and name files) inside the volume.
pub fn ls(args: LsArgs) -> Outcome {
    let volume = &args.volume;
    let fs = open_fs(volume)?;
    let cred = caller();
    let fail = |path: &[u8], e: Errno| path_failure(volume, path, e);
    let mut out = std::io::stdout().lock();
    let headed = args.paths.len() > 1;
    for (i, path) in args.paths.iter().enumerate() {
        let path = path.as_bytes();
        // Like ls: a symlink argument is followed, except in a long listing.
        let ino = fs
            .resolve(&cred, ROOT_INO, path, !args.long)
            .map_err(|e| fail(path, e))?;
        let inode = fs.getattr(ino).map_err(|e| fail(path, e))?;
        if !inode.is_dir() {
            let line = entry_line(&fs, &cred, path, path, &inode, args.long);
            writeln!(out, "{line}").map_err(stdout_failed)?;
            continue;
        }
        if headed {
            let gap = if i > 0 { "\n" } else { "" };
            writeln!(out, "{gap}{}:", String::from_utf8_lossy(path)).map_err(stdout_failed)?;
        }
        for entry in dir_entries(&fs, ino).map_err(|e| fail(path, e))? {
            let child_path = join(path, &entry.name);
            let child = fs.getattr(entry.ino).map_err(|e| fail(&child_path, e))?;
            let line = entry_line(&fs, &cred, &child_path, &entry.name, &child, args.long);
            writeln!(out, "{line}").map_err(stdout_failed)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line of `ls`: the name, or with `long` the `ls -l` columns.
fn entry_line(fs: &Fs, cred: &Cred, path: &[u8], name: &[u8], inode: &Inode, long: bool) -> String {
    let name = String::from_utf8_lossy(name);
    if !long {
        return name.into_owned();
    }
    let mut line = format!(
        "{} {:>3} {:>5} {:>5} {:>10} {} {name}",
        mode_string(inode.mode),
        inode.nlink,
        inode.uid,
        inode.gid,
        inode.size,
        utc_time(inode.mtime_ns)
    );
    if inode.is_symlink() {
        let target = fs
            .readlink(cred, ROOT_INO, path)
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .unwrap_or_else(|e| format!("? ({})", errno_text(e)));
        line.push_str(" -> ");
        line.push_str(&target);
    }
    line
}

/// `ls -l`'s "drwxr-xr-x": file type, then read/write/execute for owner, group and others, with
/// set-user-id, set-group-id and sticky shown as s/S and t/T.
fn mode_string(mode: u32) -> String {
    let kind = match mode & libc::S_IFMT {
        libc::S_IFDIR => 'd',
        libc::S_IFREG => '-',
        libc::S_IFLNK => 'l',
        libc::S_IFIFO => 'p',
        libc::S_IFSOCK => 's',
        libc::S_IFCHR => 'c',
        libc::S_IFBLK => 'b',
        _ => '?',
    };
    let bit = |mask: u32, c: char| if mode & mask != 0 { c } else { '-' };
    let exec = |x_mask: u32, special_mask: u32, set: char, unset: char| match (
        mode & x_mask != 0,
        mode & special_mask != 0,
    ) {
        (true, true) => set,
        (false, true) => unset,
        (true, false) => 'x',
        (false, false) => '-',
    };
    [
        kind,
        bit(0o400, 'r'),
        bit(0o200, 'w'),
        exec(0o100, libc::S_ISUID, 's', 'S'),
        bit(0o040, 'r'),
        bit(0o020, 'w'),
        exec(0o010, libc::S_ISGID, 's', 'S'),
        bit(0o004, 'r'),
        bit(0o002, 'w'),
        exec(0o001, libc::S_ISVTX, 't', 'T'),
    ]
    .iter()
    .collect()
}

/// Print files of the volume to stdout.
pub fn cat(args: CatArgs) -> Outcome {
    let volume = &args.volume;
    let fs = open_fs(volume)?;
    let cred = caller();
    let mut buf = vec![0u8; CAT_CHUNK_BYTES];
    let mut out = std::io::stdout().lock();
    for path in &args.paths {
        let path = path.as_bytes();
        let fail = |e: Errno| path_failure(volume, path, e);
        let inode = fs
            .open(&cred, ROOT_INO, path, libc::O_RDONLY, 0)
            .map_err(fail)?;
        if inode.is_dir() {
            return Err(fail(Errno::EISDIR).into());
        }
        // Bounded by the size at open: a file growing meanwhile is printed as it was.
        let mut off = 0u64;
        while off < inode.size {
            let n = fs.read(inode.ino, off, &mut buf).map_err(fail)?;
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n]).map_err(stdout_failed)?;
            off += n as u64;
        }
    }
    out.flush().map_err(stdout_failed)?;
    Ok(ExitCode::SUCCESS)
}

/// Remove files, symlinks and (with -r) directory trees, then commit.
pub fn rm(args: RmArgs) -> Outcome {
    let volume = &args.volume;
    let fs = open_fs(volume)?;
    let remover = Remover {
        fs: &fs,
        cred: caller(),
        recursive: args.recursive,
    };
    let mut result = Ok(());
    for path in &args.paths {
        let path = path.as_bytes();
        if last_name(path).is_none() {
            result = Err(format!(
                "{}: refusing to remove the root or a '..' path",
                label(volume, path)
            ));
            break;
        }
        match remover.remove(path) {
            Err(RemoveError::Missing(_)) if args.force => {}
            Err(e) => {
                result = Err(e.to_line(volume));
                break;
            }
            Ok(()) => {}
        }
    }
    commit(&fs, volume)?;
    result?;
    Ok(ExitCode::SUCCESS)
}

/// Why a removal stopped, and where.
enum RemoveError {
    /// The path given does not exist.
    Missing(Vec<u8>),
    /// Anything else, at this path.
    At(Vec<u8>, Errno),
    /// A directory without -r.
    IsDirectory(Vec<u8>),
}

impl RemoveError {
    fn to_line(&self, volume: &Path) -> String {
        match self {
            RemoveError::Missing(p) => path_failure(volume, p, Errno::ENOENT),
            RemoveError::At(p, e) => path_failure(volume, p, *e),
            RemoveError::IsDirectory(p) => {
                format!("{}: is a directory (use -r)", label(volume, p))
            }
        }
    }
}

struct Remover<'a> {
    fs: &'a Fs,
    cred: Cred,
    recursive: bool,
}

impl Remover<'_> {
    /// Remove what `path` names (a symlink itself, never its target).
    fn remove(&self, path: &[u8]) -> Result<(), RemoveError> {
        let ino = match self.fs.resolve(&self.cred, ROOT_INO, path, false) {
            Ok(ino) => ino,
            Err(Errno::ENOENT) => return Err(RemoveError::Missing(path.to_vec())),
            Err(e) => return Err(RemoveError::At(path.to_vec(), e)),
        };
        let inode = self
            .fs
            .getattr(ino)
            .map_err(|e| RemoveError::At(path.to_vec(), e))?;
        if !inode.is_dir() {
            return self
                .fs
                .unlink(&self.cred, ROOT_INO, path)
                .map_err(|e| RemoveError::At(path.to_vec(), e));
        }
        if !self.recursive {
            return Err(RemoveError::IsDirectory(path.to_vec()));
        }
        self.remove_tree(path, ino)
    }

    /// Remove directory `ino` at `path` and everything under it, deepest first.
    fn remove_tree(&self, path: &[u8], ino: u64) -> Result<(), RemoveError> {
        let at = |p: &[u8], e: Errno| RemoveError::At(p.to_vec(), e);
        // Bounds the recursion, even through a directory a damaged volume links into itself:
        // the file system resolves no longer path anyway.
        if path.len() >= PATH_MAX {
            return Err(at(path, Errno::ENAMETOOLONG));
        }
        for entry in dir_entries(self.fs, ino).map_err(|e| at(path, e))? {
            let child = join(path, &entry.name);
            if entry.kind == libc::DT_DIR {
                self.remove_tree(&child, entry.ino)?;
            } else {
                self.fs
                    .unlink(&self.cred, ROOT_INO, &child)
                    .map_err(|e| at(&child, e))?;
            }
        }
        self.fs
            .rmdir(&self.cred, ROOT_INO, path)
            .map_err(|e| at(path, e))?;
        Ok(())
    }
}

/// Create directories, then commit.
pub fn mkdir(args: MkdirArgs) -> Outcome {
    let volume = &args.volume;
    let fs = open_fs(volume)?;
    let cred = caller();
    let mut result: Result<(), Failure> = Ok(());
    for path in &args.paths {
        let path = path.as_bytes();
        let made = if args.parents {
            make_parents(&fs, &cred, path, args.mode)
        } else {
            fs.mkdir(&cred, ROOT_INO, path, args.mode)
                .map(|_| ())
                .map_err(|e| (path.to_vec(), e))
        };
        if let Err((at, e)) = made {
            result = Err(path_failure(volume, &at, e).into());
            break;
        }
    }
    commit(&fs, volume)?;
    result?;
    Ok(ExitCode::SUCCESS)
}

/// `mkdir -p`: create each missing component of `path`; directories that exist are fine.
fn make_parents(fs: &Fs, cred: &Cred, path: &[u8], mode: u32) -> Result<(), (Vec<u8>, Errno)> {
    let components: Vec<&[u8]> = path
        .split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect();
    let mut prefix = b"/".to_vec();
    for (i, name) in components.iter().enumerate() {
        prefix = join(&prefix, name);
        let this_mode = if i + 1 == components.len() {
            mode
        } else {
            PARENT_DIR_MODE
        };
        match fs.resolve(cred, ROOT_INO, &prefix, true) {
            Ok(ino) => {
                let inode = fs.getattr(ino).map_err(|e| (prefix.clone(), e))?;
                if !inode.is_dir() {
                    return Err((prefix, Errno::ENOTDIR));
                }
            }
            Err(Errno::ENOENT) => match fs.mkdir(cred, ROOT_INO, &prefix, this_mode) {
                // Another process made it meanwhile: as good.
                Ok(_) | Err(Errno::EEXIST) => {}
                Err(e) => return Err((prefix, e)),
            },
            Err(e) => return Err((prefix, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_print_like_ls() {
        assert_eq!(mode_string(libc::S_IFDIR | 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(libc::S_IFREG | 0o644), "-rw-r--r--");
        assert_eq!(mode_string(libc::S_IFLNK | 0o777), "lrwxrwxrwx");
        assert_eq!(mode_string(libc::S_IFREG | 0o4755), "-rwsr-xr-x");
        assert_eq!(mode_string(libc::S_IFREG | 0o2644), "-rw-r-Sr--");
        assert_eq!(mode_string(libc::S_IFDIR | 0o1777), "drwxrwxrwt");
        assert_eq!(mode_string(libc::S_IFDIR | 0o1770), "drwxrwx--T");
    }

    #[test]
    fn modes_parse_as_octal() {
        assert_eq!(parse_mode("755"), Ok(0o755));
        assert_eq!(parse_mode("0700"), Ok(0o700));
        assert!(parse_mode("8").is_err());
        assert!(parse_mode("17777").is_err());
    }
}
