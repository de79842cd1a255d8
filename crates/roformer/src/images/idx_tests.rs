//! IDX round trips, plain and gzipped, and every lying or unsupported header.

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use proptest::prelude::*;
use test_support::Scratch;

use super::*;

/// `bytes` gzipped.
fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// An IDX header: magic `00 00 code rank` and the dimensions.
fn header(code: u8, dims: &[u32]) -> Vec<u8> {
    let mut out = vec![0, 0, code, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out
}

/// Reads `bytes` plain and gzipped with the cap `max`; both answers must agree in kind.
fn both(bytes: &[u8], max: u64) -> [Result<IdxArray, IdxError>; 2] {
    [read_idx(bytes, max), read_idx(&gzip(bytes)[..], max)]
}

proptest! {
    #[test]
    fn arrays_round_trip_plain_and_gzipped(
        dims in prop::collection::vec(0usize..6, 1..=4),
        seed in any::<u8>(),
    ) {
        let len: usize = dims.iter().product();
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
        let array = IdxArray::new(dims, data).unwrap();
        let bytes = array.to_bytes();
        for read in both(&bytes, bytes.len() as u64) {
            prop_assert_eq!(read.unwrap(), array.clone());
        }
    }

    #[test]
    fn any_cut_is_an_error(cut in 0usize..(16 + 2 * 3 * 4)) {
        let array = IdxArray::new(vec![2, 3, 4], (0..24).collect()).unwrap();
        let bytes = array.to_bytes();
        for read in both(&bytes[..cut], 1 << 20) {
            let cut_short = matches!(
                read,
                Err(IdxError::ShortHeader { .. } | IdxError::Truncated { .. })
            );
            prop_assert!(cut_short, "{:?}", read);
        }
    }
}

#[test]
fn mnist_shaped_files_read() {
    let array = IdxArray::new(vec![2, 28, 28], vec![7; 2 * 28 * 28]).unwrap();
    let bytes = array.to_bytes();
    assert_eq!(&bytes[..8], &[0, 0, 8, 3, 0, 0, 0, 2]);
    let read = read_idx(&gzip(&bytes)[..], 1 << 20).unwrap();
    assert_eq!(read.dims(), &[2, 28, 28]);
    assert_eq!(read.into_parts().1.len(), 2 * 28 * 28);
}

#[test]
fn the_magic_type_and_rank_are_checked() {
    for read in both(&[0, 1, 8, 1, 0, 0, 0, 0], 100) {
        assert!(matches!(read, Err(IdxError::NotIdx(0, 1))));
    }
    for read in both(&header(0x0D, &[1]), 100) {
        assert!(matches!(
            read,
            Err(IdxError::UnsupportedType {
                code: 0x0D,
                name: "32-bit float"
            })
        ));
    }
    for read in both(&header(0x42, &[1]), 100) {
        assert!(matches!(
            read,
            Err(IdxError::UnsupportedType {
                name: "unknown",
                ..
            })
        ));
    }
    for read in both(&header(8, &[]), 100) {
        assert!(matches!(
            read,
            Err(IdxError::UnsupportedRank { rank: 0, .. })
        ));
    }
    for read in both(&header(8, &[1; 9]), 100) {
        assert!(matches!(
            read,
            Err(IdxError::UnsupportedRank { rank: 9, .. })
        ));
    }
    for read in both(&[0, 0, 8], 100) {
        assert!(matches!(
            read,
            Err(IdxError::ShortHeader {
                needed: 4,
                found: 3
            })
        ));
    }
    for read in both(&[0, 0, 8, 2, 0, 0, 0, 1, 0], 100) {
        assert!(matches!(
            read,
            Err(IdxError::ShortHeader {
                needed: 12,
                found: 9
            })
        ));
    }
    assert!(matches!(
        read_idx(&[][..], 100),
        Err(IdxError::ShortHeader { found: 0, .. })
    ));
}

#[test]
fn sizes_are_checked_before_allocating() {
    // 2^32-1 cubed overflows 64 bits.
    for read in both(&header(8, &[u32::MAX; 3]), u64::MAX) {
        assert!(matches!(read, Err(IdxError::Overflow { .. })));
    }
    // 60000 x 28 x 28 declared, a few bytes present: refused by the cap, not allocated.
    let lying = header(8, &[60_000, 28, 28]);
    for read in both(&lying, 1 << 20) {
        assert!(matches!(
            read,
            Err(IdxError::TooLarge {
                declared: 47_040_016,
                limit: 1_048_576
            })
        ));
    }
    // Under a large cap the same header is a truncated file.
    for read in both(&lying, 1 << 30) {
        assert!(matches!(
            read,
            Err(IdxError::Truncated {
                declared: 47_040_000,
                found: 0
            })
        ));
    }
    // The cap counts the header: exactly header + data passes, one byte less does not.
    let bytes = IdxArray::new(vec![10], vec![1; 10]).unwrap().to_bytes();
    assert!(read_idx(&bytes[..], 18).is_ok());
    assert!(matches!(
        read_idx(&bytes[..], 17),
        Err(IdxError::TooLarge { .. })
    ));
}

#[test]
fn data_longer_than_declared_is_refused() {
    let mut bytes = IdxArray::new(vec![3], vec![1, 2, 3]).unwrap().to_bytes();
    bytes.push(4);
    for read in both(&bytes, 100) {
        assert!(matches!(read, Err(IdxError::TrailingData { declared: 3 })));
    }
}

#[test]
fn a_gzip_bomb_stops_at_the_cap() {
    // A header declaring 16 bytes followed by 64 MiB of zeros (gzipped to about 64 KiB): the
    // reader stops one byte past the declared data.
    let mut bytes = header(8, &[16]);
    bytes.resize(bytes.len() + (64 << 20), 0);
    let bomb = gzip(&bytes);
    assert!(bomb.len() < 1 << 20);
    assert!(matches!(
        read_idx(&bomb[..], 1 << 20),
        Err(IdxError::TrailingData { declared: 16 })
    ));
    // A header declaring the whole 64 MiB is refused by a 1 MiB cap before reading any data.
    let mut honest = header(8, &[64 << 20]);
    honest.resize(honest.len() + (64 << 20), 0);
    assert!(matches!(
        read_idx(&gzip(&honest)[..], 1 << 20),
        Err(IdxError::TooLarge { .. })
    ));
}

#[test]
fn corrupt_gzip_is_a_read_error() {
    let bytes = IdxArray::new(vec![100], vec![9; 100]).unwrap().to_bytes();
    let mut packed = gzip(&bytes);
    let n = packed.len();
    packed[n - 6] ^= 0xff; // inside the CRC-32 trailer
    assert!(matches!(
        read_idx(&packed[..], 1000),
        Err(IdxError::Read(_))
    ));
    // A cut gzip stream is a short or unreadable file, never a success.
    assert!(read_idx(&packed[..n / 2], 1000).is_err());
}

#[test]
fn arrays_check_their_layout() {
    assert!(matches!(
        IdxArray::new(vec![2, 2], vec![0; 3]),
        Err(IdxError::Layout { len: 3, .. })
    ));
    assert!(matches!(
        IdxArray::new(vec![], vec![]),
        Err(IdxError::UnsupportedRank { .. })
    ));
    assert!(IdxArray::new(vec![1 << 33, 0], vec![]).is_err());
}

#[test]
fn files_are_read_and_missing_ones_named() {
    let dir = Scratch::new("roformer-idx", "files");
    let path = dir.join("labels-idx1-ubyte.gz");
    let array = IdxArray::new(vec![4], vec![0, 1, 2, 3]).unwrap();
    std::fs::write(&path, gzip(&array.to_bytes())).unwrap();
    assert_eq!(read_idx_file(&path, 100).unwrap(), array);
    let missing = dir.join("nothing");
    assert!(
        matches!(read_idx_file(&missing, 100), Err(IdxError::Io { path, .. }) if path == missing)
    );
}
