//! The small valid files fuzzing starts from: the `roformer` crate's test fixtures (tiny
//! checkpoints of 2 layers, hidden size 32, vocabulary 97), built into the binary.

macro_rules! fixture {
    ($kind:ident, $path:literal) => {
        $kind!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../roformer/tests/fixtures/",
            $path
        ))
    };
}

/// `config.json` of a masked-LM checkpoint (GELU, tied decoder).
pub const MLM_CONFIG: &str = fixture!(include_str, "model/mlm_gelu/config.json");
/// Its `model.safetensors`.
pub const MLM_SAFETENSORS: &[u8] = fixture!(include_bytes, "model/mlm_gelu/model.safetensors");
/// `config.json` of a bare encoder with the causal mask (`is_decoder`).
pub const DECODER_CONFIG: &str = fixture!(include_str, "model/decoder/config.json");
/// Its `model.safetensors`.
pub const DECODER_SAFETENSORS: &[u8] = fixture!(include_bytes, "model/decoder/model.safetensors");
/// `config.json` of a masked-LM checkpoint saved by `torch.save` (ReLU).
pub const PICKLE_CONFIG: &str = fixture!(include_str, "model/mlm_pickle_relu/config.json");
/// Its `pytorch_model.bin`: a zip archive holding `data.pkl` and one entry per storage.
pub const PICKLE_BIN: &[u8] = fixture!(include_bytes, "model/mlm_pickle_relu/pytorch_model.bin");
/// Other configs, as seeds of the config target: RoFormer-V2 (RMS norm, no biases), SiLU with
/// rotary values, sequence and token classification.
pub const OTHER_CONFIGS: &[&str] = &[
    fixture!(include_str, "model/v2_mlm/config.json"),
    fixture!(include_str, "model/base_long_silu/config.json"),
    fixture!(include_str, "model/seq_cls/config.json"),
    fixture!(include_str, "model/token_cls/config.json"),
    fixture!(include_str, "model/decoder/config.json"),
];
/// A Chinese `vocab.txt` with the special tokens.
pub const VOCAB: &str = fixture!(include_str, "tokenizer/vocab.txt");
/// Its `tokenizer_config.json`.
pub const TOKENIZER_CONFIG: &str = fixture!(include_str, "tokenizer/tokenizer_config.json");

/// The tiny LLaMA GGUF file of the `llama` crate's tests (2 layers, width 64, Q8_0 weights,
/// a 64-token byte-level BPE vocabulary), written by gguf-py.
pub const TINY_GGUF: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../llama/tests/fixtures/tiny-llama/tiny.gguf"
));

/// A real tiny `train mlm` run (`fixtures/resume/`, made by the command in its README): the
/// inputs, `run.json` and the checkpoint `--resume` continues from, each file as a
/// `(path in the run's directory, bytes)` pair.
pub mod resume {
    macro_rules! run_file {
        ($path:literal) => {
            (
                $path,
                include_bytes!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/fixtures/resume/",
                    $path
                ))
                .as_slice(),
            )
        };
    }

    /// `run.json`: the run's arguments (relative paths) and fingerprint.
    pub const RUN_JSON: (&str, &[u8]) = run_file!("run/run.json");
    /// `checkpoint/trainer_state.json` (step 2 of 2).
    pub const TRAINER_STATE: (&str, &[u8]) = run_file!("run/checkpoint/trainer_state.json");
    /// `checkpoint/optimizer.safetensors`: AdamW's moments and step counts.
    pub const OPTIMIZER: (&str, &[u8]) = run_file!("run/checkpoint/optimizer.safetensors");
    /// `checkpoint/config.json` (hidden 16, 1 layer, 2 heads, vocabulary 175).
    pub const CONFIG: (&str, &[u8]) = run_file!("run/checkpoint/config.json");
    /// `checkpoint/model.safetensors`.
    pub const MODEL: (&str, &[u8]) = run_file!("run/checkpoint/model.safetensors");

    /// Every file of the run's directory and of its inputs (`config.json`, `vocab.txt` and
    /// `corpus.txt` beside `run/`).
    pub const ALL: &[(&str, &[u8])] = &[
        run_file!("config.json"),
        run_file!("vocab.txt"),
        run_file!("corpus.txt"),
        RUN_JSON,
        TRAINER_STATE,
        OPTIMIZER,
        CONFIG,
        MODEL,
        run_file!("run/checkpoint/tokenizer_config.json"),
        run_file!("run/checkpoint/vocab.txt"),
    ];
}
