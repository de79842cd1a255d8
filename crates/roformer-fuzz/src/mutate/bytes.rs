//! Format-blind mutations of a byte string: bit flips, interesting bytes and integers,
//! truncation, insertion and deletion of runs, copies within the input, splices with another
//! input, and decimal numbers swapped for extremes.

use crate::rng::Rng;

/// Bytes at the edges of signed and unsigned ranges, and the JSON and pickle bytes most likely
/// to change how the rest is read.
const BYTES: &[u8] = &[
    0x00, 0x01, 0x02, 0x7f, 0x80, 0x81, 0xfe, 0xff, b'"', b'\\', b'[', b']', b'{', b'}', b',',
    b':', b'\n', b'.', b'(', b')',
];

/// Integers at the edges of 16, 32 and 64-bit ranges, and sizes that overflow when multiplied.
const INTEGERS: &[u64] = &[
    0,
    1,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 32,
    1 << 40,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
    u64::MAX - 1,
];

/// Decimal texts that replace a number: extremes of every integer width, floats that
/// overflow, underflow or are not numbers to JSON at all.
pub const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "-0",
    "2",
    "3",
    "65535",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "4000000000",
    "1099511627776",
    "9007199254740993",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551614",
    "18446744073709551615",
    "18446744073709551616",
    "1e18",
    "1e308",
    "-1e308",
    "1e309",
    "1e-320",
    "0.5",
    "-0.0",
    "NaN",
    "Infinity",
    "-Infinity",
];

/// Applies one random format-blind mutation to `data`, which stays at most `max_len` bytes
/// long; `other` (another corpus input) feeds splices.
pub fn mutate(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8], max_len: usize) {
    match rng.below(10) {
        0 => flip_bit(rng, data),
        1 => set_byte(rng, data),
        2 => set_integer(rng, data),
        3 => truncate(rng, data),
        4 => insert_run(rng, data),
        5 => delete_run(rng, data),
        6 => copy_within(rng, data),
        7 => splice(rng, data, other),
        _ => replace_number(rng, data),
    }
    data.truncate(max_len);
}

fn flip_bit(rng: &mut Rng, data: &mut [u8]) {
    if data.is_empty() {
        return;
    }
    let i = rng.below(data.len());
    data[i] ^= 1 << rng.below(8);
}

fn set_byte(rng: &mut Rng, data: &mut [u8]) {
    if data.is_empty() {
        return;
    }
    let i = rng.below(data.len());
    data[i] = if rng.one_in(4) {
        rng.byte()
    } else {
        *rng.pick(BYTES)
    };
}

/// Writes an interesting integer, 1, 2, 4 or 8 bytes wide, little or big endian.
fn set_integer(rng: &mut Rng, data: &mut [u8]) {
    let width = *rng.pick(&[1usize, 2, 4, 8]);
    if data.len() < width {
        return;
    }
    let mut value = *rng.pick(INTEGERS);
    if rng.one_in(4) {
        value = value.wrapping_neg();
    }
    let bytes = if rng.one_in(2) {
        value.to_le_bytes()
    } else {
        value.to_be_bytes()
    };
    let at = rng.below(data.len() - width + 1);
    let src = if rng.one_in(2) { 0 } else { 8 - width };
    data[at..at + width].copy_from_slice(&bytes[src..src + width]);
}

fn truncate(rng: &mut Rng, data: &mut Vec<u8>) {
    let len = rng.below(data.len() + 1);
    data.truncate(len);
}

/// Inserts a run of one repeated byte or of random bytes, usually short, up to 64 KiB.
fn insert_run(rng: &mut Rng, data: &mut Vec<u8>) {
    let len = rng.length(1 << 16);
    let at = rng.below(data.len() + 1);
    let run: Vec<u8> = if rng.one_in(2) {
        let b = if rng.one_in(2) {
            *rng.pick(BYTES)
        } else {
            rng.byte()
        };
        vec![b; len]
    } else {
        (0..len).map(|_| rng.byte()).collect()
    };
    data.splice(at..at, run);
}

fn delete_run(rng: &mut Rng, data: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    let at = rng.below(data.len());
    let len = rng.length(data.len() - at);
    data.drain(at..at + len);
}

/// Copies a chunk of the input over or into another place of itself.
fn copy_within(rng: &mut Rng, data: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    let from = rng.below(data.len());
    let len = rng.length(data.len() - from);
    let chunk = data[from..from + len].to_vec();
    let to = rng.below(data.len() + 1);
    if rng.one_in(2) {
        data.splice(to..to, chunk);
    } else {
        let end = (to + len).min(data.len());
        data.splice(to..end, chunk);
    }
}

/// Keeps a prefix of `data` and continues with a suffix of `other`.
fn splice(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8]) {
    let cut = rng.below(data.len() + 1);
    let from = rng.below(other.len() + 1);
    data.truncate(cut);
    data.extend_from_slice(&other[from..]);
}

/// Replaces one run of ASCII digits (with its sign, point and exponent) by one of [`NUMBERS`].
fn replace_number(rng: &mut Rng, data: &mut Vec<u8>) {
    let digit_at = |i: usize| data.get(i).is_some_and(u8::is_ascii_digit);
    let starts: Vec<usize> = (0..data.len())
        .filter(|&i| digit_at(i) || (data[i] == b'-' && digit_at(i + 1)))
        .filter(|&i| i == 0 || !is_number_byte(data[i - 1]))
        .collect();
    if starts.is_empty() {
        return;
    }
    let start = *rng.pick(&starts);
    let end = (start + 1..data.len())
        .find(|&i| !is_number_byte(data[i]))
        .unwrap_or(data.len());
    data.splice(start..end, rng.pick(NUMBERS).bytes());
}

fn is_number_byte(b: u8) -> bool {
    b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_respect_the_length_cap() {
        let mut rng = Rng::new(3);
        let seed = br#"{"hidden_size": 32, "vocab_size": 97}"#;
        for _ in 0..2000 {
            let mut data = seed.to_vec();
            mutate(&mut rng, &mut data, b"other input", 64);
            assert!(data.len() <= 64);
        }
    }

    #[test]
    fn a_number_is_replaced_whole() {
        let mut rng = Rng::new(5);
        let mut data = b"[-12.5e3]".to_vec();
        replace_number(&mut rng, &mut data);
        let text = String::from_utf8(data).unwrap();
        let inner = &text[1..text.len() - 1];
        assert!(NUMBERS.contains(&inner), "{text}");
    }
}
