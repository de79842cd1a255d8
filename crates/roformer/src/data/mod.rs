//! The data side of masked-LM pre-training: from corpus files to masked batches.
//!
//! The pipeline:
//! 1. [`corpus`]: read documents (lines, paragraphs, JSON Lines, chinese-poetry JSON);
//! 2. [`split`]: send each document to training or validation by a stable hash of its text;
//! 3. [`script`]: optionally, add simplified copies of traditional documents (each on its
//!    original's side of the split); [`lines`]: optionally, add the lines of some documents
//!    as documents without punctuation;
//! 4. [`vocab_builder`]: optionally, build a `vocab.txt` from the training documents;
//! 5. [`tokenize`]: token ids with word indices, on all cores;
//! 6. [`blocks`]: fixed-length blocks, packed or one document each;
//! 7. [`masking`] and [`batches`]: masked batches addressed by training step, a pure function
//!    of `(seed, step)`, so that training resumes bit for bit.

pub mod batches;
pub mod blocks;
pub mod corpus;
pub mod error;
pub mod lines;
pub mod masking;
#[cfg(test)]
mod pipeline_tests;
pub(crate) mod rng;
pub mod script;
pub mod split;
#[cfg(test)]
mod test_util;
pub mod tokenize;
pub mod vocab_builder;

pub use batches::{EvalBatches, MlmBatch, MlmBatches};
pub use blocks::{line_blocks, make_blocks, pack_blocks, Block, BlockMode};
pub use corpus::{read_corpus, CorpusFormat, Document};
pub use error::{DataError, Record};
pub use lines::{lines_of, split_alone, with_lines};
pub use masking::{Masked, Masker, MaskingOptions, IGNORE_LABEL};
pub use script::{to_simplified, with_simplified};
pub use split::{is_validation, split_documents, text_hash};
pub use tokenize::{tokenize_documents, TokenizedDoc};
pub use vocab_builder::{build_vocab, write_vocab_dir, BuiltVocab, VocabOptions, VocabStats};
