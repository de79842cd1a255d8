//! Request bodies: JSON decoding with the contract's statuses (400 for a body that is not JSON
//! or not the request's shape, 413 for one over `--max-body-bytes`), `inputs` as one string or
//! a list, and the checks every text route shares (count, empty texts, token limit).

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::header;
use futures_util::StreamExt;
use roformer::{Encoding, RoFormerTokenizer};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::error::ApiError;
use crate::state::AppState;

/// A JSON body of type `T`; any content type is read as JSON (as curl's `-d` sends it).
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let limit = state.config.max_body_bytes;
        let length = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let bytes = read_body(req.into_body(), length, limit).await?;
        decode(&bytes).map(JsonBody)
    }
}

/// The most bytes past `--max-body-bytes` read (and thrown away) before a 413.
pub const DRAIN_BYTES: u64 = 64 << 20;
/// The longest time spent reading them.
pub const DRAIN_TIME: Duration = Duration::from_secs(2);

/// Reads a body of at most `limit` bytes (`length`: its `Content-Length`, if sent).
///
/// A larger body is refused with 413, but only once it has been read to its end (at most
/// [`DRAIN_BYTES`] more, for at most [`DRAIN_TIME`]), as nginx's lingering close does: a server
/// that answers and closes while the client is still sending leaves unread bytes in its socket,
/// so the kernel resets the connection, and the client may see the reset instead of the 413
/// (the transport errors of issue 37's soak, 13 in 36,327 requests, each a 3 MB body). Read to
/// its end, the connection stays clean and the client reads its answer. A body announced as
/// larger than the limit plus [`DRAIN_BYTES`] is refused at once: its client may see a reset.
///
/// # Errors
/// [`ApiError::BodyTooLarge`]; [`ApiError::Malformed`] when the body cannot be read (the
/// client went away, or broke the framing).
pub async fn read_body(body: Body, length: Option<u64>, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::BodyTooLarge { limit };
    let limit_u64 = u64::try_from(limit).unwrap_or(u64::MAX);
    if length.is_some_and(|n| n > limit_u64.saturating_add(DRAIN_BYTES)) {
        return Err(too_large());
    }
    let announced = length.map_or(0, |n| usize::try_from(n).unwrap_or(limit));
    let mut kept = Vec::with_capacity(announced.min(limit));
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::Malformed(format!("cannot read the request body: {e}")))?;
        if kept.len() + chunk.len() > limit {
            let rest = async {
                let mut drained = chunk.len() as u64;
                while drained <= DRAIN_BYTES {
                    match stream.next().await {
                        Some(Ok(chunk)) => drained += chunk.len() as u64,
                        _ => break,
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, rest).await;
            return Err(too_large());
        }
        kept.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(kept))
}

/// Decodes a request body: 400 with serde's reason (line and column) for anything that is not
/// a `T`.
///
/// # Errors
/// [`ApiError::Malformed`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Data => "the JSON does not have the request's shape",
            _ => "the body is not valid JSON",
        };
        ApiError::Malformed(format!("{what}: {e}"))
    })
}

/// `inputs`: one text or a list of texts.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged, expecting = "a string or a list of strings")]
pub enum Inputs {
    /// One text: the answer is for one text.
    One(String),
    /// A list: the answer is a list.
    Many(Vec<String>),
}

impl Inputs {
    /// Whether one text was sent (not a list).
    pub fn is_single(&self) -> bool {
        matches!(self, Inputs::One(_))
    }

    /// The texts, checked: at least one, at most `max` (`--max-client-batch-size`), none
    /// empty.
    ///
    /// # Errors
    /// [`ApiError::Empty`] for no text or an empty one, [`ApiError::Validation`] for too many.
    pub fn texts(self, max: usize) -> Result<Vec<String>, ApiError> {
        let texts = match self {
            Inputs::One(text) => vec![text],
            Inputs::Many(texts) => texts,
        };
        if texts.is_empty() {
            return Err(ApiError::Empty(
                "inputs is an empty list: send at least one text".into(),
            ));
        }
        if texts.len() > max {
            return Err(ApiError::Validation(format!(
                "{} inputs in one request, more than the limit of {max} \
                 (--max-client-batch-size): split the request",
                texts.len()
            )));
        }
        if let Some(i) = texts.iter().position(|t| t.trim().is_empty()) {
            return Err(ApiError::Empty(format!(
                "input {i} is empty: every input must hold a text"
            )));
        }
        Ok(texts)
    }
}

/// Encodes each text as `[CLS] text [SEP]`; one longer than `limit` tokens is cut to it with
/// `truncate`, and an error otherwise.
///
/// # Errors
/// [`ApiError::InputTooLong`] naming the first text over the limit.
pub fn encode_all(
    tokenizer: &RoFormerTokenizer,
    texts: &[String],
    limit: usize,
    truncate: bool,
) -> Result<Vec<Encoding>, ApiError> {
    texts
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let limited = tokenizer
                .encode_limited(text, Some(limit))
                .map_err(|e| ApiError::Backend(format!("tokenizer: {e}")))?;
            if limited.was_cut() && !truncate {
                return Err(ApiError::InputTooLong {
                    index,
                    tokens: limited.untruncated_len,
                    limit,
                });
            }
            Ok(limited.encoding)
        })
        .collect()
}

/// Encodes `query` paired with each text as `[CLS] query [SEP] text [SEP]` (types 0 then 1);
/// a pair longer than `limit` tokens is cut to it with `truncate` (the longer of the two
/// texts first, as transformers' `longest_first`), and an error otherwise.
///
/// # Errors
/// [`ApiError::InputTooLong`] naming the first pair over the limit; [`ApiError::Validation`]
/// when `limit` leaves no room for a pair (below 3 tokens).
pub fn encode_pairs(
    tokenizer: &RoFormerTokenizer,
    query: &str,
    texts: &[String],
    limit: usize,
    truncate: bool,
) -> Result<Vec<Encoding>, ApiError> {
    texts
        .iter()
        .enumerate()
        .map(|(index, text)| {
            if truncate {
                // Bounded: only a window of each text is tokenised.
                return tokenizer
                    .encode_truncated(query, Some(text), limit)
                    .map_err(|e| ApiError::Validation(format!("pair {index}: {e}")));
            }
            let pair = tokenizer.encode_pair(query, text);
            if pair.len() > limit {
                return Err(ApiError::InputTooLong {
                    index,
                    tokens: pair.len(),
                    limit,
                });
            }
            Ok(pair)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Req {
        inputs: Inputs,
        #[serde(default)]
        truncate: bool,
    }

    #[test]
    fn decodes_one_text_or_a_list_and_rejects_other_shapes() {
        let r: Req = decode(br#"{"inputs": "a"}"#).unwrap();
        assert_eq!(r.inputs, Inputs::One("a".into()));
        assert!(!r.truncate);
        let r: Req = decode(br#"{"inputs": ["a", "b"], "truncate": true}"#).unwrap();
        assert_eq!(r.inputs, Inputs::Many(vec!["a".into(), "b".into()]));
        for bad in [
            &b"{"[..],
            b"",
            b"[]",
            br#"{"inputs": 3}"#,
            br#"{"inputs": "a", "truncate": 1}"#,
        ] {
            let e = decode::<Req>(bad).unwrap_err();
            assert!(matches!(e, ApiError::Malformed(_)), "{e:?}");
        }
    }

    #[test]
    fn texts_are_counted_and_must_not_be_empty() {
        let many = |n: usize| Inputs::Many(vec!["x".into(); n]);
        assert_eq!(many(3).texts(3).unwrap().len(), 3);
        assert!(matches!(many(4).texts(3), Err(ApiError::Validation(_))));
        assert!(matches!(many(0).texts(3), Err(ApiError::Empty(_))));
        assert!(matches!(
            Inputs::One(" ".into()).texts(3),
            Err(ApiError::Empty(_))
        ));
    }
}
