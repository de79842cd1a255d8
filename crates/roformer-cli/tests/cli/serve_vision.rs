//! `roformer serve --vision` end to end: the built-in Fashion-MNIST model over HTTP answers the
//! committed PNGs with the labels `roformer vision classify` prints for them, embeds them as
//! `roformer vision embed` does, refuses malformed and oversized bodies with a JSON reason and
//! keeps serving, and lists its routes in `/info`.

use std::path::Path;

use serde_json::Value;

use crate::common::roformer_ok;
use crate::serve_child::{exchange, ServeChild};

/// A committed test image (28 x 28 grey PNG) by name.
fn image(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/images");
    path.join(format!("{name}.png")).display().to_string()
}

/// `POST path` with the bytes of an image file: the status and the body as JSON (null when
/// it is not JSON).
fn post_image(s: &ServeChild, path: &str, kind: &str, bytes: &[u8]) -> (u16, Value) {
    let (status, text) = exchange(s.addr(), "POST", path, kind, bytes);
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The JSON lines a `roformer` command printed.
fn json_lines(args: &[&str]) -> Vec<Value> {
    let out = roformer_ok(args);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn serve_vision_classifies_and_embeds_as_the_vision_commands_do() {
    let s = ServeChild::start(&["--vision"]);
    let names = ["ankle-boot", "trouser", "bag"];
    let paths: Vec<String> = names.iter().map(|n| image(n)).collect();
    let mut classify = vec!["vision", "classify", "--json"];
    classify.extend(paths.iter().map(String::as_str));
    let mut embed = vec!["vision", "embed"];
    embed.extend(paths.iter().map(String::as_str));
    for ((path, printed), embedded) in paths
        .iter()
        .zip(json_lines(&classify))
        .zip(json_lines(&embed))
    {
        let bytes = std::fs::read(path).unwrap();
        let (status, labels) = post_image(&s, "/image-classification", "image/png", &bytes);
        assert_eq!(status, 200, "{labels}");
        let expected = printed["labels"].as_array().unwrap();
        let got = labels.as_array().unwrap();
        assert_eq!(got.len(), expected.len(), "top 5 both");
        for (g, e) in got.iter().zip(expected) {
            assert_eq!(g["label"], e["label"], "{path}: {labels} vs {printed}");
            let (g, e) = (g["score"].as_f64().unwrap(), e["score"].as_f64().unwrap());
            assert!((g - e).abs() < 1e-5, "{path}: {g} vs {e}");
        }
        let (status, vector) = post_image(&s, "/embed_image?normalize=false", "image/png", &bytes);
        assert_eq!(status, 200);
        let expected = embedded["embedding"].as_array().unwrap();
        let got = vector.as_array().unwrap();
        assert_eq!(got.len(), expected.len());
        for (g, e) in got.iter().zip(expected) {
            assert!((g.as_f64().unwrap() - e.as_f64().unwrap()).abs() < 1e-5);
        }
    }

    let good = std::fs::read(&paths[0]).unwrap();
    let bad: [(&[u8], u16); 2] = [(b"these bytes are no image", 400), (&good[..100], 400)];
    for (bytes, status) in bad {
        let (got, e) = post_image(&s, "/image-classification", "image/png", bytes);
        assert_eq!(got, status, "{e}");
        assert_eq!(e["error_type"], "Validation", "{e}");
    }
    // Over the default --max-body-bytes (2 MB): refused before any decoding.
    let huge = vec![0u8; 2_000_001];
    let (status, e) = post_image(&s, "/embed_image", "application/octet-stream", &huge);
    assert_eq!(status, 413, "{e}");
    assert_eq!(e["error_type"], "PayloadTooLarge");
    let (status, labels) = post_image(&s, "/image-classification?top_k=1", "image/png", &good);
    assert_eq!(status, 200, "still serving: {labels}");
    assert_eq!(labels[0]["label"], "Ankle boot");

    let (status, info) = exchange(s.addr(), "GET", "/info", "application/json", b"");
    assert_eq!(status, 200);
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(
        info["vision_model"]["model_id"],
        "<built-in Fashion-MNIST model>"
    );
    let routes = info["routes"].to_string();
    assert!(routes.contains("POST /image-classification") && routes.contains("POST /embed_image"));
    let log = s.log();
    assert!(log.contains("POST /image-classification 200"), "{log}");
}

#[test]
fn serve_without_vision_flags_serves_no_image_routes() {
    let s = ServeChild::start(&[]);
    let bytes = std::fs::read(image("bag")).unwrap();
    let (status, e) = post_image(&s, "/embed_image", "image/png", &bytes);
    assert_eq!(status, 404);
    assert!(e["error"].as_str().unwrap().contains("--vision"), "{e}");
}
