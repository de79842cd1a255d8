//! Fixed-length blocks of token ids for masked-LM training: packed, or one document each.

use super::error::DataError;
use super::tokenize::TokenizedDoc;
use crate::tokenizer::SpecialTokens;

/// The shortest block: `[CLS]`, one token, `[SEP]`.
pub const MIN_SEQ_LEN: usize = 3;

/// One training sequence of exactly `seq_len` tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Token ids, `[seq_len]`, starting with `[CLS]`; padding (line-by-line only) at the end.
    pub input_ids: Vec<u32>,
    /// Word index per token, `[seq_len]`, numbered 0, 1, ... within the block: two tokens
    /// share an index exactly when they are pieces of the same word of the same document
    /// (see [`TokenizedDoc::words`]). Each special token and each pad has an index of its
    /// own.
    pub word_ids: Vec<u32>,
    /// Number of real (non-pad) tokens: the attention mask is 1 on `0..len`, 0 after.
    pub len: usize,
}

impl Block {
    /// Number of positions (real tokens and padding).
    pub fn seq_len(&self) -> usize {
        self.input_ids.len()
    }
}

/// How documents become blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockMode {
    /// Documents concatenated and cut into full blocks (see [`pack_blocks`]).
    Packed,
    /// One document per block, truncated and padded (see [`line_blocks`]).
    LineByLine,
}

/// Blocks of `seq_len` tokens from `docs`, by `mode`.
///
/// # Errors
/// [`DataError::SeqLenTooSmall`] if `seq_len < MIN_SEQ_LEN`.
pub fn make_blocks(
    docs: &[TokenizedDoc],
    mode: BlockMode,
    seq_len: usize,
    specials: &SpecialTokens,
) -> Result<Vec<Block>, DataError> {
    match mode {
        BlockMode::Packed => pack_blocks(docs, seq_len, specials),
        BlockMode::LineByLine => line_blocks(docs, seq_len, specials),
    }
}

fn check_seq_len(seq_len: usize) -> Result<(), DataError> {
    if seq_len < MIN_SEQ_LEN {
        return Err(DataError::SeqLenTooSmall {
            seq_len,
            min: MIN_SEQ_LEN,
        });
    }
    Ok(())
}

/// Packing: the documents, in order, each followed by `[SEP]`, form one stream
/// `d0 [SEP] d1 [SEP] d2 [SEP] ...` (documents without tokens are skipped). The stream is cut
/// into consecutive bodies of `seq_len - 2` tokens, and block `k` is
/// `[CLS] stream[k(seq_len-2) .. (k+1)(seq_len-2)] [SEP]`: every block is full, starts with
/// `[CLS]` and ends with `[SEP]` (two `[SEP]` when its body ends at a document's end); a
/// document may continue from one block into the next. The last, partial body is dropped, so
/// a stream shorter than `seq_len - 2` gives no block. `len` is `seq_len` (no padding).
///
/// # Errors
/// [`DataError::SeqLenTooSmall`] if `seq_len < MIN_SEQ_LEN`.
pub fn pack_blocks(
    docs: &[TokenizedDoc],
    seq_len: usize,
    specials: &SpecialTokens,
) -> Result<Vec<Block>, DataError> {
    check_seq_len(seq_len)?;
    // The stream, with a key per token that changes exactly at word boundaries.
    let total: usize = docs.iter().map(|doc| doc.len() + 1).sum();
    let mut ids = Vec::with_capacity(total);
    let mut keys: Vec<u64> = Vec::with_capacity(total);
    let mut key = 0u64;
    for doc in docs.iter().filter(|doc| !doc.is_empty()) {
        let mut previous = None;
        for (&id, &word) in doc.ids.iter().zip(&doc.words) {
            if previous != Some(word) {
                key += 1;
                previous = Some(word);
            }
            ids.push(id);
            keys.push(key);
        }
        key += 1;
        ids.push(specials.sep);
        keys.push(key);
    }
    let body = seq_len - 2;
    let blocks = ids
        .chunks_exact(body)
        .zip(keys.chunks_exact(body))
        .map(|(body_ids, body_keys)| {
            let mut block = BlockBuilder::new(seq_len, specials.cls);
            let mut previous = None;
            for (&id, &key) in body_ids.iter().zip(body_keys) {
                block.push(id, previous != Some(key));
                previous = Some(key);
            }
            block.push(specials.sep, true);
            block.finish(seq_len, specials.pad)
        })
        .collect();
    Ok(blocks)
}

/// Line by line: one block per document with tokens, in order:
/// `[CLS] doc[..seq_len - 2] [SEP] [PAD]...` (a longer document is truncated, its tail
/// dropped), padded to `seq_len`. `len` counts `[CLS]`, the kept tokens and `[SEP]`.
///
/// # Errors
/// [`DataError::SeqLenTooSmall`] if `seq_len < MIN_SEQ_LEN`.
pub fn line_blocks(
    docs: &[TokenizedDoc],
    seq_len: usize,
    specials: &SpecialTokens,
) -> Result<Vec<Block>, DataError> {
    check_seq_len(seq_len)?;
    let blocks = docs
        .iter()
        .filter(|doc| !doc.is_empty())
        .map(|doc| {
            let kept = doc.len().min(seq_len - 2);
            let mut block = BlockBuilder::new(seq_len, specials.cls);
            let mut previous = None;
            for (&id, &word) in doc.ids[..kept].iter().zip(&doc.words) {
                block.push(id, previous != Some(word));
                previous = Some(word);
            }
            block.push(specials.sep, true);
            block.finish(seq_len, specials.pad)
        })
        .collect();
    Ok(blocks)
}

/// Builds a block token by token, numbering its words.
struct BlockBuilder {
    input_ids: Vec<u32>,
    word_ids: Vec<u32>,
    next_word: u32,
}

impl BlockBuilder {
    /// A block holding `[CLS]` (word 0).
    fn new(seq_len: usize, cls: u32) -> Self {
        let mut builder = Self {
            input_ids: Vec::with_capacity(seq_len),
            word_ids: Vec::with_capacity(seq_len),
            next_word: 0,
        };
        builder.push(cls, true);
        builder
    }

    /// Appends a token, starting a new word or continuing the last one.
    fn push(&mut self, id: u32, new_word: bool) {
        if new_word || self.word_ids.is_empty() {
            self.word_ids.push(self.next_word);
            self.next_word += 1;
        } else {
            self.word_ids.push(self.next_word - 1);
        }
        self.input_ids.push(id);
    }

    /// Pads to `seq_len` (each pad a word of its own).
    fn finish(mut self, seq_len: usize, pad: u32) -> Block {
        let len = self.input_ids.len();
        while self.input_ids.len() < seq_len {
            self.push(pad, true);
        }
        Block {
            input_ids: self.input_ids,
            word_ids: self.word_ids,
            len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::{TokenizerConfig, Vocab};

    /// `[PAD]`=0, `[UNK]`=1, `[CLS]`=2, `[SEP]`=3, `[MASK]`=4.
    fn specials() -> SpecialTokens {
        let vocab = Vocab::from_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]);
        SpecialTokens::new(&vocab, &TokenizerConfig::default()).unwrap()
    }

    fn doc(ids: &[u32], words: &[u32]) -> TokenizedDoc {
        TokenizedDoc {
            ids: ids.to_vec(),
            words: words.to_vec(),
        }
    }

    #[test]
    fn packing_layout() {
        // Stream: 10 11 12 SEP 20 21 SEP 30 31 SEP; bodies of 3; the partial body (SEP) dropped.
        let docs = [
            doc(&[10, 11, 12], &[0, 0, 1]),
            doc(&[], &[]),
            doc(&[20, 21], &[0, 1]),
            doc(&[30, 31], &[0, 0]),
        ];
        let blocks = pack_blocks(&docs, 5, &specials()).unwrap();
        let ids: Vec<&[u32]> = blocks.iter().map(|b| b.input_ids.as_slice()).collect();
        assert_eq!(
            ids,
            [
                &[2, 10, 11, 12, 3][..],
                &[2, 3, 20, 21, 3],
                &[2, 3, 30, 31, 3]
            ]
        );
        assert_eq!(blocks[0].word_ids, [0, 1, 1, 2, 3]);
        assert_eq!(blocks[1].word_ids, [0, 1, 2, 3, 4]);
        assert_eq!(blocks[2].word_ids, [0, 1, 2, 2, 3]);
        assert!(blocks.iter().all(|b| b.len == 5));
    }

    #[test]
    fn a_word_cut_by_a_block_boundary_is_split_between_blocks() {
        let docs = [doc(&[10, 11, 12, 13], &[0, 0, 0, 0])];
        let blocks = pack_blocks(&docs, 4, &specials()).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].input_ids, [2, 10, 11, 3]);
        assert_eq!(blocks[0].word_ids, [0, 1, 1, 2]);
        assert_eq!(blocks[1].input_ids, [2, 12, 13, 3]);
        assert_eq!(blocks[1].word_ids, [0, 1, 1, 2]);
        // Too little for one body.
        assert!(pack_blocks(&docs, 9, &specials()).unwrap().is_empty());
    }

    #[test]
    fn line_by_line_truncates_and_pads() {
        let docs = [
            doc(&[10, 11, 12, 13, 14], &[0, 1, 1, 2, 3]),
            doc(&[20], &[0]),
            doc(&[], &[]),
        ];
        let blocks = line_blocks(&docs, 6, &specials()).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].input_ids, [2, 10, 11, 12, 13, 3]);
        assert_eq!(blocks[0].word_ids, [0, 1, 2, 2, 3, 4]);
        assert_eq!(blocks[0].len, 6);
        assert_eq!(blocks[1].input_ids, [2, 20, 3, 0, 0, 0]);
        assert_eq!(blocks[1].word_ids, [0, 1, 2, 3, 4, 5]);
        assert_eq!(blocks[1].len, 3);
        assert_eq!(blocks[1].seq_len(), 6);
    }

    #[test]
    fn tiny_seq_len_is_an_error() {
        for mode in [BlockMode::Packed, BlockMode::LineByLine] {
            let err = make_blocks(&[doc(&[5], &[0])], mode, 2, &specials()).unwrap_err();
            assert!(
                matches!(err, DataError::SeqLenTooSmall { seq_len: 2, min: 3 }),
                "{err:?}"
            );
        }
    }
}
