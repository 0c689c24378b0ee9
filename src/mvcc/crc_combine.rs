//! Joining CRC-32C values of consecutive pieces, for HashKV.
//!
//! HashKV hashes every retained version in revision order, but the store keeps versions by key:
//! each version's CRC is taken where it lies and the CRCs are then joined in revision order.
//! The `crc32c` crate's `crc32c_combine` builds the shift for each join from scratch, squaring
//! 32x32 bit matrices (microseconds per join): a compaction of a million revisions spent seconds
//! there, most of its time, with a write lock waiting on the same walk at restart. Here a shift
//! by `len` bytes is a multiplication by x^(8 len) modulo the polynomial; the factor is made
//! from precomputed powers x^(2^k) and cached per length, because versions of one kind of
//! object mostly share a few lengths.

use hashbrown::HashMap;

/// CRC-32C's polynomial, bit-reflected (bit 31 is the coefficient of x^0).
const POLY: u32 = 0x82F6_3B78;

/// `a * b mod P`, both bit-reflected.
fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut bit = 1u32 << 31;
    while bit != 0 {
        if a & bit != 0 {
            product ^= b;
        }
        bit >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

/// x^(2^k) mod P for k = 0..64: x^(2^(k+1)) is the square of x^(2^k).
fn powers() -> [u32; 64] {
    let mut p = [0u32; 64];
    p[0] = 1 << 30; // x^1
    for k in 1..64 {
        p[k] = mul_mod(p[k - 1], p[k - 1]);
    }
    p
}

/// Joins CRCs: [`Combiner::append`] gives the CRC of A followed by B from A's CRC, B's CRC and
/// B's length, as `crc32c_combine` does.
#[derive(Debug)]
pub struct Combiner {
    powers: [u32; 64],
    /// x^(8 len) mod P by `len`.
    shifts: HashMap<usize, u32>,
}

impl Default for Combiner {
    fn default() -> Self {
        Self::new()
    }
}

impl Combiner {
    pub fn new() -> Self {
        Self { powers: powers(), shifts: HashMap::new() }
    }

    /// The CRC of A || B.
    pub fn append(&mut self, crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
        let powers = &self.powers;
        let shift = *self.shifts.entry(len_b).or_insert_with(|| {
            // x^(8 len) = the product of x^(2^k) over the set bits k of 8 len.
            let bits = (len_b as u64) << 3;
            let mut factor = 1u32 << 31; // x^0
            for (k, power) in powers.iter().enumerate() {
                if bits >> k == 0 {
                    break;
                }
                if bits >> k & 1 != 0 {
                    factor = mul_mod(*power, factor);
                }
            }
            factor
        });
        mul_mod(shift, crc_a) ^ crc_b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_as_the_crc_of_the_whole() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let mut c = Combiner::new();
        for split in [0, 1, 2, 7, 8, 100, 1024, 4095, 4999, 5000] {
            let (a, b) = data.split_at(split);
            let joined = c.append(crc32c::crc32c(a), crc32c::crc32c(b), b.len());
            assert_eq!(joined, crc32c::crc32c(&data), "split at {split}");
            assert_eq!(
                joined,
                crc32c::crc32c_combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len())
            );
        }
        // Many pieces, with lengths repeating (the cache) and not.
        let mut crc = crc32c::crc32c(b"key");
        let mut whole = b"key".to_vec();
        for (i, piece) in data.chunks(37).chain(data.chunks(512)).enumerate() {
            let piece = &piece[..piece.len() - i % 3];
            crc = c.append(crc, crc32c::crc32c(piece), piece.len());
            whole.extend_from_slice(piece);
        }
        assert_eq!(crc, crc32c::crc32c(&whole));
    }
}
