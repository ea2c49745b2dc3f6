//! CRC-32C with the CRC32 instruction in three lanes over one piece, joined by carry-less
//! multiplication. The instruction's latency is three cycles and its throughput one per
//! cycle, so one serial stream runs at a third of its speed: the `crc32c` crate runs three
//! streams only over 768-byte rounds and the rest of each piece serially, which on a 4 KiB node
//! checksummed in three pieces (see `Node::compute_checksum`) was close to half its time. Here
//! each piece of at least [`MIN_LANES_BYTES`] is cut into three equal lanes (up to
//! [`MAX_LANE_WORDS`] words each, round after round), and only the last few words run serially:
//! a 4 KiB node in three pieces 306-317 -> 162-176 ns on AMD EPYC (AVX2, no AVX-512).
//!
//! Joining: the CRC of lane A followed by lane B is `crc(A) * x^(8 * len(B)) + crc(B)` modulo the
//! polynomial. A carry-less product of two 32-bit reflected values stands for their product
//! times x; the CRC32 instruction over that 64-bit product with a zero CRC multiplies it by x^32
//! and reduces it. So multiplying by the constant x^(8n - 33) mod P, then the instruction,
//! shifts a CRC over n zero bytes ([`shift_constant`]).

use std::sync::OnceLock;

/// CRC-32C's polynomial, bit-reflected.
const POLY: u32 = 0x82F6_3B78;
/// Most 8-byte words in one lane of a round.
const MAX_LANE_WORDS: usize = 256;
/// Pieces shorter than this run serially: the join costs about as much as a few words.
pub(crate) const MIN_LANES_BYTES: usize = 3 * 8 * 8;

/// Whether this CPU has both instructions the lanes need.
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            std::arch::is_x86_feature_detected!("sse4.2")
                && std::arch::is_x86_feature_detected!("pclmulqdq")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// x^k mod POLY, bit-reflected (bit 31 stands for x^0).
fn x_pow(k: u64) -> u32 {
    let mut v: u32 = 1 << 31;
    for _ in 0..k {
        v = (v >> 1) ^ if v & 1 != 0 { POLY } else { 0 };
    }
    v
}

/// The constant that shifts a CRC over `words` 8-byte words of zeros (see the module doc), for
/// every lane length up to [`MAX_LANE_WORDS`]; index 0 unused.
fn shift_constants() -> &'static [u32; MAX_LANE_WORDS + 1] {
    static TABLE: OnceLock<[u32; MAX_LANE_WORDS + 1]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0u32; MAX_LANE_WORDS + 1];
        // x^(64 n - 33) for n = 1, then times x^64 for each next n.
        let mut v = x_pow(64 - 33);
        for c in t.iter_mut().skip(1) {
            *c = v;
            for _ in 0..64 {
                v = (v >> 1) ^ if v & 1 != 0 { POLY } else { 0 };
            }
        }
        t
    })
}

/// CRC-32C of `bytes` continuing from `crc` (the value of the bytes before them, as
/// `crc32c::crc32c_append` takes it). Only where [`available`] says so.
pub(crate) fn append(crc: u32, bytes: &[u8]) -> u32 {
    debug_assert!(available());
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the caller checked (`available`) that the CPU has SSE4.2 and PCLMULQDQ, the
        // only features the function is compiled for.
        unsafe { x86::append(crc, bytes, shift_constants()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = shift_constants;
        crc32c::crc32c_append(crc, bytes)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MAX_LANE_WORDS, MIN_LANES_BYTES};
    use std::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_crc32_u64, _mm_crc32_u8, _mm_cvtsi128_si64, _mm_cvtsi32_si128,
    };

    /// `crc` shifted over the zero bytes `k` stands for (see `shift_constants`).
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    fn shift(crc: u64, k: u32) -> u64 {
        let product = _mm_clmulepi64_si128(
            _mm_cvtsi32_si128(crc as u32 as i32),
            _mm_cvtsi32_si128(k as i32),
            0,
        );
        _mm_crc32_u64(0, _mm_cvtsi128_si64(product) as u64)
    }

    /// Word `i` of `b` (little-endian, as the instruction takes it).
    #[inline(always)]
    fn word(b: &[u8], i: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    }

    /// See `lanes::append`.
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    pub(super) fn append(crc: u32, bytes: &[u8], k: &[u32; MAX_LANE_WORDS + 1]) -> u32 {
        let mut c0 = u64::from(!crc);
        let mut rest = bytes;
        while rest.len() >= MIN_LANES_BYTES {
            let lane = (rest.len() / 24).min(MAX_LANE_WORDS);
            let (round, after) = rest.split_at(lane * 24);
            let (a, bc) = round.split_at(lane * 8);
            let (b, c) = bc.split_at(lane * 8);
            let (mut c1, mut c2) = (0u64, 0u64);
            for i in 0..lane {
                c0 = _mm_crc32_u64(c0, word(a, i));
                c1 = _mm_crc32_u64(c1, word(b, i));
                c2 = _mm_crc32_u64(c2, word(c, i));
            }
            c0 = shift(c0, k[lane]) ^ c1;
            c0 = shift(c0, k[lane]) ^ c2;
            rest = after;
        }
        let words = rest.len() / 8;
        for i in 0..words {
            c0 = _mm_crc32_u64(c0, word(rest, i));
        }
        let mut c = c0 as u32;
        for &byte in &rest[words * 8..] {
            c = _mm_crc32_u8(c, byte);
        }
        !c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn lanes_give_the_crc32c_of_every_length_start_and_prefix() {
        if !available() {
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let buf: Vec<u8> = (0..70_000).map(|_| rng.gen()).collect();
        // Every length across the serial/lanes boundary and the first rounds, then random ones
        // (several rounds of the longest lane), at every start modulo 8, after a prefix.
        let lengths = (0..2 * 24 * MAX_LANE_WORDS + 64)
            .filter(|n| *n < 1024 || n % 7 == 0)
            .chain((0..300).map(|_| rng.gen_range(0..60_000)));
        for (j, len) in lengths.enumerate() {
            let start = j % 8;
            let b = &buf[start..start + len];
            assert_eq!(append(0, b), crc32c::crc32c(b), "len {len} at {start}");
            let prefix = crc32c::crc32c(&buf[..start + 3]);
            assert_eq!(
                append(prefix, b),
                crc32c::crc32c_append(prefix, b),
                "len {len} after a prefix"
            );
        }
    }

    #[test]
    fn the_shift_constants_are_powers_of_x() {
        let t = shift_constants();
        assert_eq!(t[1], x_pow(64 - 33));
        assert_eq!(t[MAX_LANE_WORDS], x_pow(64 * MAX_LANE_WORDS as u64 - 33));
    }
}
