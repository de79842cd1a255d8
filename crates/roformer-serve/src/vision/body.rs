//! The body of an image route, as the Hugging Face inference API sends it: the image file's
//! bytes (PNG or JPEG), with `Content-Type` `image/*`, `application/octet-stream` or none.
//! Its size is checked against `--max-body-bytes` while it is read, before any decoding (413).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header;

use crate::error::ApiError;
use crate::request::read_body;
use crate::state::AppState;

/// The bytes of an image file, at most `--max-body-bytes`.
#[derive(Debug)]
pub struct ImageBody(pub Bytes);

impl FromRequest<AppState> for ImageBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or("(not text)").to_owned());
        if let Some(kind) = content_type.filter(|t| !is_image_type(t)) {
            return Err(ApiError::UnsupportedMediaType(format!(
                "Content-Type {kind:?}: send the image file's bytes as the body, with \
                 Content-Type image/png, image/jpeg or application/octet-stream"
            )));
        }
        let length = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let bytes = read_body(req.into_body(), length, state.config.max_body_bytes).await?;
        if bytes.is_empty() {
            return Err(ApiError::Empty(
                "the body is empty: send the image file's bytes".into(),
            ));
        }
        Ok(ImageBody(bytes))
    }
}

/// Whether a `Content-Type` may carry an image file: `image/*` or
/// `application/octet-stream`, with any parameters, in any case.
fn is_image_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence.starts_with("image/") || essence == "application/octet-stream"
}

#[cfg(test)]
mod tests {
    use super::is_image_type;

    #[test]
    fn image_and_octet_stream_types_are_taken_and_others_refused() {
        for taken in [
            "image/png",
            "IMAGE/JPEG",
            "application/octet-stream",
            "image/png; charset=binary",
        ] {
            assert!(is_image_type(taken), "{taken}");
        }
        for refused in [
            "application/json",
            "text/plain",
            "multipart/form-data; boundary=x",
            "",
        ] {
            assert!(!is_image_type(refused), "{refused}");
        }
    }
}
