//! `POST /fill-mask` (Hugging Face inference format): `{"inputs", "parameters": {"top_k"}}`.
//! For one text with one mask, `[{"score", "token", "token_str", "sequence"}, ...]`; with
//! several masks, one such list per mask; for a list of texts, one of those per text. A text
//! without a mask token is refused (422). `sequence` is the text with that mask replaced by the
//! candidate (other masks kept), cut from the text so spacing and case stay the caller's.

use axum::extract::State;
use axum::{Extension, Json};
use roformer::pipeline::{fill, MaskCandidates};
use roformer::Encoding;
use serde::{Deserialize, Serialize};

use super::{mismatch, prepare};
use crate::access_log::Usage;
use crate::batcher::{Output, Task, MAX_TOP_K};
use crate::error::ApiError;
use crate::request::{Inputs, JsonBody};
use crate::state::AppState;

/// `parameters`.
#[derive(Debug, Deserialize)]
pub struct Parameters {
    /// Candidates per mask, 1 to 100 (default 5).
    #[serde(default = "five")]
    pub top_k: usize,
}

impl Default for Parameters {
    fn default() -> Self {
        Parameters { top_k: five() }
    }
}

fn five() -> usize {
    5
}

/// The body of `POST /fill-mask`.
#[derive(Debug, Deserialize)]
pub struct FillMaskRequest {
    /// One text or a list, each with at least one mask token.
    pub inputs: Inputs,
    /// Options.
    #[serde(default)]
    pub parameters: Parameters,
}

/// One candidate.
#[derive(Debug, Serialize)]
pub struct Candidate {
    score: f64,
    token: u32,
    token_str: String,
    sequence: String,
}

/// The answer for one text: one list, or one list per mask.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum TextAnswer {
    /// The text has one mask.
    One(Vec<Candidate>),
    /// The text has several.
    Several(Vec<Vec<Candidate>>),
}

/// The answer: for one text, or a list for a list.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum FillMaskResponse {
    /// One text was sent.
    One(TextAnswer),
    /// A list was sent.
    Many(Vec<TextAnswer>),
}

/// The handler.
pub async fn fill_mask(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<FillMaskRequest>,
) -> Result<(Extension<Usage>, Json<FillMaskResponse>), ApiError> {
    if state.backend.masked_lm().is_none() {
        return Err(ApiError::NotFound(format!(
            "{} has no masked-LM head: /fill-mask needs a checkpoint saved from \
             RoFormerForMaskedLM",
            state.backend.model_id
        )));
    }
    let top_k = req.parameters.top_k;
    if !(1..=MAX_TOP_K).contains(&top_k) {
        return Err(ApiError::Validation(format!(
            "parameters.top_k is {top_k}: expected 1 to {MAX_TOP_K}"
        )));
    }
    let single = req.inputs.is_single();
    let texts = req.inputs.texts(state.config.max_client_batch_size)?;
    let prepared = prepare(&state, texts.clone(), false)?;
    let mask = state.backend.tokenizer.special_tokens().mask;
    if let Some(i) = prepared
        .encodings
        .iter()
        .position(|e| mask.is_none_or(|m| !e.ids.contains(&m)))
    {
        return Err(ApiError::Validation(format!(
            "input {i} has no mask token: write {} where a token should be predicted",
            state.backend.tokenizer.config().mask_token
        )));
    }
    let Output::Masks(masks) = prepared.run(&state, Task::FillMask { top_k }).await? else {
        return Err(mismatch());
    };
    let answers: Vec<TextAnswer> = texts
        .iter()
        .zip(&prepared.encodings)
        .zip(masks)
        .map(|((text, encoding), masks)| answer(&state, text, encoding, masks))
        .collect();
    let response = if single {
        FillMaskResponse::One(answers.into_iter().next().ok_or_else(mismatch)?)
    } else {
        FillMaskResponse::Many(answers)
    };
    Ok((Extension(prepared.usage.clone()), Json(response)))
}

/// The candidates of one text's masks, with their tokens and filled sequences.
fn answer(
    state: &AppState,
    text: &str,
    encoding: &Encoding,
    masks: Vec<MaskCandidates>,
) -> TextAnswer {
    let tokenizer = &state.backend.tokenizer;
    let mut lists: Vec<Vec<Candidate>> = masks
        .into_iter()
        .map(|mask| {
            let span = encoding
                .offsets
                .get(mask.position)
                .copied()
                .unwrap_or((0, 0));
            mask.candidates
                .into_iter()
                .map(|c| {
                    let token_str = tokenizer.id_to_token(c.id).unwrap_or_default().to_owned();
                    Candidate {
                        score: c.score,
                        token: c.id,
                        sequence: fill(text, span, &token_str),
                        token_str,
                    }
                })
                .collect()
        })
        .collect();
    if lists.len() == 1 {
        TextAnswer::One(lists.remove(0))
    } else {
        TextAnswer::Several(lists)
    }
}
