//! Train/validation split by a stable hash of each document's text.
//!
//! A document belongs to the validation set when the hash of its text, read as a number in
//! `[0, 1)`, is below the validation fraction. Membership depends on the text alone: not on
//! the order of the corpus, the other documents, the process or the machine, and two copies
//! of one text always land on the same side.

use super::corpus::Document;

/// FNV-1a 64-bit offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a (64-bit) of `bytes`: `h = 0xcbf29ce484222325`, then for each byte
/// `h = (h ^ byte) * 0x100000001b3` (wrapping).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// MurmurHash3's 64-bit finaliser: spreads every input bit over the whole output (FNV-1a's
/// high bits change little with the last bytes of short texts).
fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The stable hash of a document text: `mix64(fnv1a64(utf8 bytes of text))`, where `mix64` is
/// MurmurHash3's `fmix64` finaliser. The text is hashed as given (no trimming or
/// normalisation).
pub fn text_hash(text: &str) -> u64 {
    mix64(fnv1a64(text.as_bytes()))
}

/// The position of `text` in `[0, 1)`: the top 53 bits of [`text_hash`] divided by `2^53`.
pub fn text_position(text: &str) -> f64 {
    (text_hash(text) >> 11) as f64 / (1u64 << 53) as f64
}

/// Whether `text` goes to the validation set: `text_position(text) < fraction`. A fraction of
/// 0 or less (or NaN) puts nothing there, 1 or more puts everything there.
pub fn is_validation(text: &str, fraction: f64) -> bool {
    text_position(text) < fraction
}

/// Splits documents into `(train, validation)` by [`is_validation`], keeping their order.
pub fn split_documents(documents: Vec<Document>, fraction: f64) -> (Vec<Document>, Vec<Document>) {
    documents
        .into_iter()
        .partition(|doc| !is_validation(&doc.text, fraction))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        // From the FNV reference test suite (Landon Curt Noll's fnv test vectors).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_hash_is_pinned() {
        // Fixed values (also computed independently in Python): a change here would move
        // documents between train and validation.
        assert_eq!(text_hash(""), 0xefd0_1f60_ba99_2926);
        assert_eq!(text_hash("foobar"), 0x2c22_1949_22d1_672b);
        assert_eq!(text_hash("床前明月光"), 0x7e4a_f054_d4cb_04ea);
        assert_ne!(text_hash("床前明月光"), text_hash("床前明月光 "));
        assert!((text_position("床前明月光") - 0.493_330_975_256_679).abs() < 1e-12);
        assert!(is_validation("foobar", 0.18) && !is_validation("foobar", 0.17));
    }

    #[test]
    fn the_fraction_is_close_to_the_request() {
        // 20000 docs: the validation count is Binomial(20000, f); its standard deviation is at
        // most sqrt(20000 * 0.25) ~ 71, so +-0.015 (300 docs) is over 4 sigma.
        let docs: Vec<String> = (0..20_000)
            .map(|i| format!("document number {i}"))
            .collect();
        for fraction in [0.01, 0.05, 0.1, 0.5] {
            let chosen = docs.iter().filter(|d| is_validation(d, fraction)).count();
            let share = chosen as f64 / docs.len() as f64;
            assert!((share - fraction).abs() < 0.015, "{fraction}: {share}");
        }
        assert!(docs.iter().all(|d| !is_validation(d, 0.0)));
        assert!(docs.iter().all(|d| is_validation(d, 1.0)));
        assert!(docs.iter().all(|d| !is_validation(d, f64::NAN)));
    }

    #[test]
    fn membership_does_not_depend_on_order() {
        let docs: Vec<Document> = (0..500).map(|i| Document::new(format!("诗 {i}"))).collect();
        let (train, valid) = split_documents(docs.clone(), 0.2);
        assert_eq!(train.len() + valid.len(), 500);
        let mut reversed = docs;
        reversed.reverse();
        let (train_r, mut valid_r) = split_documents(reversed, 0.2);
        valid_r.reverse();
        assert_eq!(valid, valid_r);
        assert_eq!(train.len(), train_r.len());
        // Larger fractions only add documents.
        let (_, more) = split_documents(train.iter().chain(&valid).cloned().collect(), 0.3);
        assert!(valid.iter().all(|doc| more.contains(doc)));
    }
}
