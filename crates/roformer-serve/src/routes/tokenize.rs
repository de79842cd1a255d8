//! `POST /tokenize` (TEI): `{"inputs", "add_special_tokens" (true)}` -> per text
//! `[{"id", "text", "special", "start", "stop"}, ...]`, always a list of lists. `start` and
//! `stop` are byte offsets into the input (0 and 0 for `[CLS]` and `[SEP]`); `text` is the
//! token as the vocabulary writes it (a continuation keeps its `##`).

use axum::extract::State;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

use crate::access_log::Usage;
use crate::error::ApiError;
use crate::request::{Inputs, JsonBody};
use crate::state::AppState;

/// The body of `POST /tokenize`.
#[derive(Debug, Deserialize)]
pub struct TokenizeRequest {
    /// One text or a list.
    pub inputs: Inputs,
    /// Include `[CLS]` and `[SEP]` (default true).
    #[serde(default = "yes")]
    pub add_special_tokens: bool,
}

fn yes() -> bool {
    true
}

/// One token.
#[derive(Debug, Serialize)]
pub struct Token {
    id: u32,
    text: String,
    special: bool,
    start: usize,
    stop: usize,
}

/// The handler (no model run: answered here, not by the batcher).
pub async fn tokenize(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<TokenizeRequest>,
) -> Result<(Extension<Usage>, Json<Vec<Vec<Token>>>), ApiError> {
    let texts = req.inputs.texts(state.config.max_client_batch_size)?;
    let _permit = state.admission.admit()?;
    let tokenizer = &state.backend.tokenizer;
    let special = tokenizer.special_tokens();
    let mut answer = Vec::with_capacity(texts.len());
    let mut tokens = 0;
    for text in &texts {
        let e = tokenizer.encode(text);
        let bytes: Vec<usize> = text
            .char_indices()
            .map(|(b, _)| b)
            .chain([text.len()])
            .collect();
        let byte = |c: usize| bytes.get(c).copied().unwrap_or(text.len());
        let framed = 0..e.len();
        let kept = if req.add_special_tokens {
            framed
        } else {
            1..e.len().saturating_sub(1).max(1)
        };
        let list: Vec<Token> = kept
            .map(|i| Token {
                id: e.ids[i],
                text: e.tokens[i].clone(),
                special: special.contains(e.ids[i]),
                start: byte(e.offsets[i].0),
                stop: byte(e.offsets[i].1),
            })
            .collect();
        tokens += list.len();
        answer.push(list);
    }
    let usage = Usage {
        inputs: texts.len(),
        tokens,
        texts: if state.config.log_inputs {
            texts
        } else {
            Vec::new()
        },
    };
    Ok((Extension(usage), Json(answer)))
}
