//! Directory entries. Each name lives under (dir, Dirent, hash(name)); the value lists every
//! entry whose name has that hash (nearly always one): `[ino u64][type u8][len u8][name]...`.
//! The hash is also the readdir cookie, so cookies stay valid while entries come and go.

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The name (no slash, no NUL, 1 to 255 bytes).
    pub name: Vec<u8>,
    /// Inode it names.
    pub ino: u64,
    /// `DT_REG`, `DT_DIR`, `DT_LNK`, ...
    pub kind: u8,
    /// Cookie of the position after this entry (for telldir/seekdir and getdents).
    pub next: u64,
}

/// Decode a dirent value into (name, ino, type) triples; stops at a malformed tail.
pub(crate) fn decode(v: &[u8]) -> Vec<(Vec<u8>, u64, u8)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 10 <= v.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&v[at..at + 8]);
        let ino = u64::from_le_bytes(w);
        let kind = v[at + 8];
        let len = v[at + 9] as usize;
        if at + 10 + len > v.len() {
            break;
        }
        out.push((v[at + 10..at + 10 + len].to_vec(), ino, kind));
        at += 10 + len;
    }
    out
}

/// The inode `name` names in a dirent value, without decoding the others.
pub(crate) fn find(v: &[u8], name: &[u8]) -> Option<u64> {
    let mut at = 0;
    while at + 10 <= v.len() {
        let len = v[at + 9] as usize;
        if at + 10 + len > v.len() {
            break;
        }
        if &v[at + 10..at + 10 + len] == name {
            let mut w = [0u8; 8];
            w.copy_from_slice(&v[at..at + 8]);
            return Some(u64::from_le_bytes(w));
        }
        at += 10 + len;
    }
    None
}

/// Encode entries into a dirent value.
pub(crate) fn encode(entries: &[(Vec<u8>, u64, u8)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, ino, kind) in entries {
        out.extend_from_slice(&ino.to_le_bytes());
        out.push(*kind);
        out.push(name.len() as u8);
        out.extend_from_slice(name);
    }
    out
}

/// The `DT_*` type of a mode.
pub(crate) fn dtype(mode: u32) -> u8 {
    match mode & libc::S_IFMT {
        libc::S_IFREG => libc::DT_REG,
        libc::S_IFDIR => libc::DT_DIR,
        libc::S_IFLNK => libc::DT_LNK,
        libc::S_IFIFO => libc::DT_FIFO,
        libc::S_IFSOCK => libc::DT_SOCK,
        libc::S_IFCHR => libc::DT_CHR,
        libc::S_IFBLK => libc::DT_BLK,
        _ => libc::DT_UNKNOWN,
    }
}
