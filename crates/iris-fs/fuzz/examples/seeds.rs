//! Writes seed images for the `fs_ops` target into the directory named by the first argument:
//! small file systems (512 B and 1 KiB blocks) with directories, small and multi-block files,
//! a hole, a symlink, a hard link, extended attributes and a removed file, some of it
//! committed and some only in the working tree.
//! Run with `cargo run --example seeds -- corpus/fs_ops` from crates/iris-fs/fuzz.

use std::sync::Arc;

use iris_fs::{Cred, Fs, ROOT_INO};
use iris_media::SimMedia;
use iris_store::{CreateOptions, OpenOptions, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: seeds DIR")?;
    std::fs::create_dir_all(&dir)?;
    for (bs, blocks) in [(512u32, 400u64), (1024, 300)] {
        let len = u64::from(bs) * blocks;
        let sim = Arc::new(SimMedia::new(len));
        let create = CreateOptions {
            block_size: bs,
            size_limit_bytes: len,
            initial_bytes: len,
            ..CreateOptions::default()
        };
        // (Another boot than the target's 7: it then trusts nothing of the working header.)
        let open = OpenOptions {
            boot_id: Some(1),
            commit_interval: None,
        };
        let store = Store::create_on(Box::new(Arc::clone(&sim)), &create, &open)?;
        let fs = Fs::on_store(store).map_err(|e| format!("fs: {e:?}"))?;
        let c = Cred::root();
        let err = |e| format!("{e:?}");
        fs.mkdir(&c, ROOT_INO, b"d", 0o755).map_err(err)?;
        fs.mkdir(&c, ROOT_INO, b"d/sub", 0o700).map_err(err)?;
        let f = fs
            .open(&c, ROOT_INO, b"d/f", libc::O_CREAT | libc::O_RDWR, 0o644)
            .map_err(err)?;
        fs.write(f.ino, 0, b"hello, fuzz").map_err(err)?;
        let big = fs
            .open(&c, ROOT_INO, b"big", libc::O_CREAT | libc::O_RDWR, 0o600)
            .map_err(err)?;
        fs.write(big.ino, 0, &[0xabu8; 3000]).map_err(err)?;
        fs.write(big.ino, 9000, &[0xcdu8; 700]).map_err(err)?;
        fs.symlink(&c, b"d/f", ROOT_INO, b"s").map_err(err)?;
        fs.link(&c, ROOT_INO, b"d/f", ROOT_INO, b"d/sub/l", false)
            .map_err(err)?;
        fs.setxattr(&c, f.ino, b"user.a", b"attribute", 0)
            .map_err(err)?;
        fs.sync().map_err(err)?;
        let gone = fs
            .open(&c, ROOT_INO, b"gone", libc::O_CREAT | libc::O_RDWR, 0o644)
            .map_err(err)?;
        fs.write(gone.ino, 0, &[1u8; 1500]).map_err(err)?;
        fs.unlink(&c, ROOT_INO, b"gone").map_err(err)?;
        fs.write(f.ino, 5, b"again").map_err(err)?;
        drop(fs);
        let path = format!("{dir}/seed-{bs}");
        std::fs::write(&path, sim.working_image())?;
        println!("{path}: {len} bytes");
    }
    Ok(())
}
