//! The dependencies an ELF object names for the dynamic loader: its `DT_NEEDED` libraries and
//! its search path (`DT_RPATH`, `DT_RUNPATH`). Read from bytes that may be anything (a file the
//! program asked to run): every offset is checked, and what does not parse gives nothing.

/// What the loader will look for, and where.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Dynamic {
    /// Library names (`DT_NEEDED`), in order.
    pub(crate) needed: Vec<Vec<u8>>,
    /// Directories of `DT_RPATH` then `DT_RUNPATH`, `$ORIGIN` not yet replaced.
    pub(crate) search: Vec<Vec<u8>>,
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// A program header: (type, file offset, virtual address, size in the file).
fn segments(elf: &[u8]) -> Option<Vec<(u32, u64, u64, u64)>> {
    let phoff = usize::try_from(u64_at(elf, 32)?).ok()?;
    let phentsize = usize::from(u16_at(elf, 54)?);
    let phnum = usize::from(u16_at(elf, 56)?);
    if phentsize < 56 {
        return None;
    }
    (0..phnum)
        .map(|i| {
            let at = phoff.checked_add(i.checked_mul(phentsize)?)?;
            Some((
                u32_at(elf, at)?,
                u64_at(elf, at + 8)?,
                u64_at(elf, at + 16)?,
                u64_at(elf, at + 32)?,
            ))
        })
        .collect()
}

/// The NUL-terminated string at `at` in `elf`.
fn string_at(elf: &[u8], at: u64) -> Option<Vec<u8>> {
    let rest = elf.get(usize::try_from(at).ok()?..)?;
    let end = rest.iter().position(|b| *b == 0)?;
    Some(rest[..end].to_vec())
}

/// The dependencies of a 64-bit little-endian ELF object; `None` for anything else.
pub(crate) fn dynamic(elf: &[u8]) -> Option<Dynamic> {
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let segs = segments(elf)?;
    let &(_, dyn_off, _, dyn_size) = segs.iter().find(|s| s.0 == PT_DYNAMIC)?;
    let mut entries = Vec::new();
    let mut at = usize::try_from(dyn_off).ok()?;
    let end = at.checked_add(usize::try_from(dyn_size).ok()?)?;
    while at + 16 <= end {
        let tag = u64_at(elf, at)?;
        if tag == DT_NULL {
            break;
        }
        entries.push((tag, u64_at(elf, at + 8)?));
        at += 16;
    }
    // The string table is named by its address: find the loaded segment that holds it.
    let strtab_addr = entries.iter().find(|e| e.0 == DT_STRTAB)?.1;
    let strtab = segs
        .iter()
        .filter(|s| s.0 == PT_LOAD)
        .find(|s| strtab_addr >= s.2 && strtab_addr - s.2 < s.3)
        .map(|s| s.1 + (strtab_addr - s.2))?;
    let mut out = Dynamic::default();
    for want in [DT_RPATH, DT_RUNPATH] {
        for &(_, off) in entries.iter().filter(|e| e.0 == want) {
            let path = string_at(elf, strtab.checked_add(off)?)?;
            out.search.extend(
                path.split(|b| *b == b':')
                    .filter(|d| !d.is_empty())
                    .map(<[u8]>::to_vec),
            );
        }
    }
    for &(_, off) in entries.iter().filter(|e| e.0 == DT_NEEDED) {
        out.needed.push(string_at(elf, strtab.checked_add(off)?)?);
    }
    Some(out)
}

/// `dir` with `$ORIGIN` and `${ORIGIN}` replaced by `origin` (the object's directory).
pub(crate) fn with_origin(dir: &[u8], origin: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(dir.len() + origin.len());
    let mut rest = dir;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix(b"${ORIGIN}") {
            out.extend_from_slice(origin);
            rest = after;
        } else if let Some(after) = rest.strip_prefix(b"$ORIGIN") {
            out.extend_from_slice(origin);
            rest = after;
        } else {
            out.push(rest[0]);
            rest = &rest[1..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_names_libc_and_garbage_names_nothing() {
        let me = std::fs::read("/proc/self/exe").expect("own binary");
        let d = dynamic(&me).expect("a dynamic ELF");
        assert!(d.needed.iter().any(|n| n.starts_with(b"libc.so")), "{d:?}");
        assert_eq!(dynamic(b"#!/bin/sh\n"), None);
        // Every truncation and a flipped byte at every place in the headers: no panic.
        for cut in (0..me.len().min(8192)).step_by(7) {
            let _ = dynamic(&me[..cut]);
        }
        let mut bent = me[..me.len().min(4096)].to_vec();
        for i in 0..bent.len().min(256) {
            bent[i] ^= 0xff;
            let _ = dynamic(&bent);
            bent[i] ^= 0xff;
        }
    }

    #[test]
    fn origin_is_replaced_in_both_spellings() {
        assert_eq!(
            with_origin(b"$ORIGIN/../lib", b"/iris/x"),
            b"/iris/x/../lib"
        );
        assert_eq!(with_origin(b"${ORIGIN}:/usr", b"/o"), b"/o:/usr");
        assert_eq!(with_origin(b"/plain", b"/o"), b"/plain");
    }
}
