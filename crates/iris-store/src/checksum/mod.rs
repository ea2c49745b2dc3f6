//! CRC-32C (Castagnoli), the checksum of every committed node and superblock. Three
//! implementations give the same values, and the fastest one for the CPU is chosen once: the
//! `crc-fast` crate folds with carry-less multiplication, 4 KiB in about 85 ns where the CPU has
//! AVX-512 VPCLMULQDQ against 180-220 ns for the CRC32 instruction the `crc32c` crate uses; on
//! a CPU without AVX-512 its fallback is the slower one (a 4 KiB node in three pieces: 333-389 ns
//! against 258-265 ns for `crc32c`, AMD EPYC with AVX2 only). There the CRC32 instruction in
//! three lanes over each whole piece ([`lanes`]) takes 162-176 ns; the `crc32c` crate is left
//! for CPUs without carry-less multiplication. A commit checksums every node it writes: a
//! quarter of a synchronous 4 KiB write's time was these checksums there.

mod lanes;

use crc_fast::{CrcAlgorithm, Digest};

/// Whether `crc-fast` is the faster implementation on this CPU (its AVX-512 folding).
fn folding_is_faster() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static FASTER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *FASTER.get_or_init(|| {
            std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("vpclmulqdq")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        true
    }
}

/// The CRC-32C of `bytes`.
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    if folding_is_faster() {
        // CRC-32C is 32 bits wide: the crate returns it in the low half of a u64.
        crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32
    } else {
        instruction(0, bytes)
    }
}

/// CRC-32C of `bytes` after `crc` with the CRC32 instruction: in lanes where the CPU allows.
fn instruction(crc: u32, bytes: &[u8]) -> u32 {
    if lanes::available() {
        lanes::append(crc, bytes)
    } else {
        crc32c::crc32c_append(crc, bytes)
    }
}

/// A CRC-32C over several pieces, fed in order: the same value as [`crc32c`] of their
/// concatenation. (On the stack for one checksum: boxing the big variant would allocate per
/// node sealed.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum Pieces {
    /// Folding (`crc-fast`).
    Folding(Digest),
    /// The CRC32 instruction (see [`instruction`]): the CRC of the pieces so far.
    Instruction(u32),
}

impl Pieces {
    /// No bytes yet.
    pub(crate) fn new() -> Self {
        if folding_is_faster() {
            Pieces::Folding(Digest::new(CrcAlgorithm::Crc32Iscsi))
        } else {
            Pieces::Instruction(0)
        }
    }

    /// Append `bytes`.
    pub(crate) fn add(&mut self, bytes: &[u8]) -> &mut Self {
        match self {
            Pieces::Folding(d) => d.update(bytes),
            Pieces::Instruction(crc) => *crc = instruction(*crc, bytes),
        }
        self
    }

    /// The checksum of everything added.
    pub(crate) fn value(&self) -> u32 {
        match self {
            Pieces::Folding(d) => d.finalize() as u32,
            Pieces::Instruction(crc) => *crc,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Both implementations, whichever this CPU would choose.
    fn both() -> [Pieces; 2] {
        [
            Pieces::Folding(Digest::new(CrcAlgorithm::Crc32Iscsi)),
            Pieces::Instruction(0),
        ]
    }

    #[test]
    fn values_are_crc32c_whatever_the_length_and_alignment() {
        // The published check value of CRC-32C.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        for mut p in both() {
            assert_eq!(p.add(b"123456789").value(), 0xE306_9283);
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let buf: Vec<u8> = (0..70_000).map(|_| rng.gen()).collect();
        for _ in 0..500 {
            let start = rng.gen_range(0..64);
            let len = rng.gen_range(0..buf.len() - start);
            let b = &buf[start..start + len];
            let folded = crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, b) as u32;
            assert_eq!(folded, crc32c::crc32c(b), "len {len} at {start}");
            assert_eq!(crc32c(b), folded, "len {len} at {start}");
        }
    }

    #[test]
    fn pieces_checksum_their_concatenation() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        let buf: Vec<u8> = (0..9000).map(|_| rng.gen()).collect();
        for _ in 0..200 {
            let mut cuts: Vec<usize> = (0..3).map(|_| rng.gen_range(0..=buf.len())).collect();
            cuts.sort_unstable();
            for mut p in both().into_iter().chain([Pieces::new()]) {
                p.add(&buf[..cuts[0]])
                    .add(&buf[cuts[0]..cuts[1]])
                    .add(&buf[cuts[1]..cuts[2]])
                    .add(&buf[cuts[2]..]);
                assert_eq!(p.value(), crc32c(&buf));
            }
        }
    }
}
