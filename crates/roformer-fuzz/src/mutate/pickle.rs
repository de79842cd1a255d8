//! Structure-aware mutations of a `torch.save` archive (`pytorch_model.bin`): the zip is
//! opened, its `data.pkl` pickle (or another entry) is changed, and the entries are zipped
//! again, so that the archive's CRCs stay valid and the mutation reaches the pickle reader.
//!
//! Pickle mutations work on opcode boundaries: an opcode swapped for another, integers set
//! to extremes (sizes, strides, storage offsets; `LONG1` wider than 8 bytes), string lengths
//! set to extremes, containers nested deeply, memo indices out of range, ops deleted or
//! copied.

use std::io::{Cursor, Read, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use super::bytes;
use crate::rng::Rng;

/// Opcodes to swap in: the ones candle's reader knows, and some it refuses (`INST`,
/// `STACK_GLOBAL`, `SHORT_BINUNICODE`, `FRAME`, `MEMOIZE`, `PERSID`, `OBJ`).
const OPCODES: &[u8] = &[
    0x80, b'c', b'q', b'r', b')', b'R', b'(', b'X', b'J', b't', b'Q', b'K', b'M', b'N', 0x85, 0x86,
    0x87, 0x88, 0x89, b'h', b'j', b's', b'u', b'}', b'd', b'b', b'.', 0x81, b']', b'G', b'a', b'e',
    0x8a, b'i', 0x93, 0x8c, 0x95, 0x94, b'P', b'o',
];

/// Nesting depths: shallow, near a default 2 MiB stack's limit, and far past it.
const DEPTHS: &[usize] = &[100, 10_000, 100_000, 200_000];

/// One opcode of a pickle: its position and its length with arguments.
#[derive(Debug, Clone, Copy)]
struct Op {
    at: usize,
    len: usize,
    code: u8,
}

/// Applies one mutation to a `torch.save` zip, or returns `None` when `data` is not a zip.
pub fn mutate(rng: &mut Rng, data: &[u8]) -> Option<Vec<u8>> {
    let mut entries = unzip(data)?;
    let pickle = entries
        .iter()
        .position(|(name, _)| name.ends_with("data.pkl"));
    match (pickle, rng.below(5)) {
        (Some(i), 0..=2) => mutate_pickle(rng, &mut entries[i].1),
        _ => mutate_entries(rng, &mut entries),
    }
    rezip(&entries)
}

/// The names and contents of a zip's entries, in order.
pub fn unzip(data: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    let mut archive = ZipArchive::new(Cursor::new(data)).ok()?;
    let mut entries = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let mut file = archive.by_index(i).ok()?;
        let name = file.name().ok()?.to_string();
        let mut content = Vec::new();
        file.read_to_end(&mut content).ok()?;
        entries.push((name, content));
    }
    Some(entries)
}

/// A zip of stored (uncompressed) entries, as `torch.save` writes; `None` if the zip writer
/// refuses the entries (a duplicate name).
pub fn rezip(entries: &[(String, Vec<u8>)]) -> Option<Vec<u8>> {
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Stored);
    for (name, content) in entries {
        zip.start_file(name.as_str(), options).ok()?;
        zip.write_all(content).ok()?;
    }
    Some(zip.finish().ok()?.into_inner())
}

/// Changes the archive's entries: a tensor's storage cut, emptied or grown, an entry
/// dropped or renamed.
fn mutate_entries(rng: &mut Rng, entries: &mut Vec<(String, Vec<u8>)>) {
    if entries.is_empty() {
        return;
    }
    let i = rng.below(entries.len());
    match rng.below(5) {
        0 => {
            let len = rng.below(entries[i].1.len() + 1);
            entries[i].1.truncate(len);
        }
        1 => entries[i].1.clear(),
        2 => {
            let extra = rng.length(4096);
            entries[i].1.extend(std::iter::repeat_n(0xff, extra));
        }
        3 => {
            entries.remove(i);
        }
        _ => {
            let name = &entries[i].0;
            let renamed = match rng.below(3) {
                0 => name.replace("data/", "data/9"),
                1 => format!("other/{name}"),
                _ => name.rsplit('/').next().unwrap_or_default().to_string(),
            };
            if entries.iter().all(|(n, _)| *n != renamed) {
                entries[i].0 = renamed;
            }
        }
    }
}

/// Applies one opcode-aware (or, one time in eight, format-blind) mutation to a pickle.
pub fn mutate_pickle(rng: &mut Rng, pkl: &mut Vec<u8>) {
    let ops = ops(pkl);
    if ops.is_empty() || rng.one_in(8) {
        let other = pkl.clone();
        bytes::mutate(rng, pkl, &other, 1 << 22);
        return;
    }
    let op = *rng.pick(&ops);
    match rng.below(8) {
        0 => pkl[op.at] = *rng.pick(OPCODES),
        1 | 2 => {
            let ints: Vec<Op> = ops
                .iter()
                .copied()
                .filter(|o| matches!(o.code, b'K' | b'M' | b'J' | 0x8a))
                .collect();
            let target = if ints.is_empty() {
                op
            } else {
                *rng.pick(&ints)
            };
            pkl.splice(target.at..target.at + target.len, extreme_int(rng));
        }
        3 => set_string_length(rng, pkl, &ops),
        4 => {
            let nest = nesting(rng);
            pkl.splice(op.at..op.at, nest);
        }
        5 => set_memo_index(rng, pkl, &ops),
        6 => {
            pkl.drain(op.at..op.at + op.len);
        }
        _ => {
            let from = rng.below(ops.len());
            let to = (from + rng.length(16)).min(ops.len());
            let (start, end) = (ops[from].at, ops[to - 1].at + ops[to - 1].len);
            let chunk = pkl[start..end].to_vec();
            let at = rng.pick(&ops).at;
            pkl.splice(at..at, chunk);
        }
    }
}

/// The opcodes of `pkl` up to the first unknown one or a truncated argument.
fn ops(pkl: &[u8]) -> Vec<Op> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(&code) = pkl.get(at) {
        let Some(len) = op_len(code, &pkl[at + 1..]) else {
            break;
        };
        if at + len > pkl.len() {
            break;
        }
        out.push(Op { at, len, code });
        at += len;
    }
    out
}

/// The length of an op with opcode `code` whose arguments start `rest`, or `None` for an
/// opcode this module does not know.
fn op_len(code: u8, rest: &[u8]) -> Option<usize> {
    let u32_at = |i: usize| -> Option<usize> {
        let b = rest.get(i..i + 4)?;
        Some(u32::from_le_bytes(b.try_into().ok()?) as usize)
    };
    let arg = match code {
        0x80 | b'q' | b'K' | b'h' => 1,
        b'r' | b'J' | b'j' => 4,
        b'M' => 2,
        b'G' => 8,
        b'X' => 4 + u32_at(0)?,
        0x8a => 1 + usize::from(*rest.first()?),
        b'c' => {
            let first = rest.iter().position(|&b| b == b'\n')? + 1;
            first + rest[first..].iter().position(|&b| b == b'\n')? + 1
        }
        b')' | b'R' | b'(' | b't' | b'Q' | b'N' | 0x85 | 0x86 | 0x87 | 0x88 | 0x89 | b's'
        | b'u' | b'}' | b'd' | b'b' | b'.' | 0x81 | b']' | b'a' | b'e' => 0,
        _ => return None,
    };
    Some(1 + arg)
}

/// An integer op with an extreme value: `BININT` at the edges of i32, `BININT2` 0xffff,
/// `BININT1` 0xff, or `LONG1` at the edges of i64 or wider than 8 bytes.
fn extreme_int(rng: &mut Rng) -> Vec<u8> {
    match rng.below(4) {
        0 => {
            let v = *rng.pick(&[i32::MIN, -1, i32::MAX, 0, 1 << 30]);
            [&[b'J'][..], &v.to_le_bytes()].concat()
        }
        1 => vec![b'M', 0xff, 0xff],
        2 => vec![b'K', *rng.pick(&[0u8, 1, 0xff])],
        _ => {
            let width = *rng.pick(&[8usize, 9, 16, 33, 255]);
            let fill = *rng.pick(&[0x00u8, 0x7f, 0x80, 0xff]);
            let mut op = vec![0x8a, width as u8];
            op.extend(std::iter::repeat_n(fill, width));
            op
        }
    }
}

/// Sets the length of a `BINUNICODE` string to an extreme or off by one.
fn set_string_length(rng: &mut Rng, pkl: &mut [u8], ops: &[Op]) {
    let strings: Vec<&Op> = ops.iter().filter(|o| o.code == b'X').collect();
    if strings.is_empty() {
        return;
    }
    let op = *rng.pick(&strings);
    let len = (op.len - 5) as u32;
    let value = *rng.pick(&[u32::MAX, 0x7fff_ffff, len + 1, 0, 1 << 30]);
    pkl[op.at + 1..op.at + 5].copy_from_slice(&value.to_le_bytes());
}

/// Points a memo op (`BINGET`, `LONG_BINGET`, `BINPUT`, `LONG_BINPUT`) at an extreme index.
fn set_memo_index(rng: &mut Rng, pkl: &mut [u8], ops: &[Op]) {
    let memo: Vec<&Op> = ops
        .iter()
        .filter(|o| matches!(o.code, b'q' | b'h' | b'r' | b'j'))
        .collect();
    if memo.is_empty() {
        return;
    }
    let op = *rng.pick(&memo);
    for b in &mut pkl[op.at + 1..op.at + op.len] {
        *b = 0xff;
    }
}

/// Ops that build one deeply nested value: lists appended into lists, tuples of tuples, or
/// marks closed into tuples.
fn nesting(rng: &mut Rng) -> Vec<u8> {
    let depth = *rng.pick(DEPTHS);
    match rng.below(3) {
        0 => [vec![b']'; depth], vec![b'a'; depth - 1]].concat(),
        1 => [vec![b')'], vec![0x85; depth]].concat(),
        _ => [vec![b'('; depth], vec![b't'; depth]].concat(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{"a": 1}` as protocol 2 pickles it.
    const PICKLE: &[u8] = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s.";

    #[test]
    fn ops_split_a_pickle_at_its_opcodes() {
        let codes: Vec<u8> = ops(PICKLE).iter().map(|o| o.code).collect();
        assert_eq!(codes, b"\x80}qXqKs.");
    }

    #[test]
    fn a_mutated_archive_is_still_a_zip() {
        let entries = vec![
            ("archive/data.pkl".to_string(), PICKLE.to_vec()),
            ("archive/data/0".to_string(), vec![0; 8]),
        ];
        let zip = rezip(&entries).unwrap();
        assert_eq!(unzip(&zip).unwrap(), entries);
        let mut rng = Rng::new(11);
        for _ in 0..200 {
            let out = mutate(&mut rng, &zip).unwrap();
            assert!(unzip(&out).is_some());
        }
    }
}
