//! The image routes: `/image-classification` and `/embed_image` answer as the library's
//! pipeline does on the same file, bad images get a 4xx JSON reason and the server keeps
//! serving, limits are 413, images of different sizes queued together answer as alone, and
//! images share the text routes' concurrency limit (429).

use roformer::images::decode::{decode_image, DecodeLimits};
use roformer::pipeline::image::{classify_image, embed_image, preprocessed};
use std::time::Duration;

use roformer_serve::ServeConfig;
use serde_json::{json, Value};

use crate::common::{
    config, error_of, floats, image_bytes, start, start_with_vision, vision_backend, Model, Vision,
    TOLERANCE,
};

/// The garments of the CLI's fixtures and their labels.
const GARMENTS: [(&str, &str); 3] = [
    ("cli/ankle-boot.png", "Ankle boot"),
    ("cli/trouser.png", "Trouser"),
    ("cli/bag.png", "Bag"),
];

/// The labels and scores of an answer.
fn labels(answer: &Value) -> Vec<(String, f64)> {
    answer
        .as_array()
        .unwrap_or_else(|| panic!("a list: {answer}"))
        .iter()
        .map(|l| {
            let label = l["label"].as_str().unwrap().to_owned();
            (label, l["score"].as_f64().unwrap())
        })
        .collect()
}

/// The Euclidean norm.
fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

#[tokio::test]
async fn image_classification_answers_as_the_pipeline_on_the_same_file() {
    let s = start_with_vision(Vision::Fashion, config()).await;
    let reference = vision_backend(Vision::Fashion);
    let model = reference.classifier().unwrap();
    for (file, label) in GARMENTS {
        let bytes = image_bytes(file);
        let (status, answer) = s
            .post_bytes("/image-classification", "image/png", bytes.clone())
            .await;
        assert_eq!(status, 200, "{answer}");
        let got = labels(&answer);
        assert_eq!(got.len(), 5, "the default top_k");
        assert_eq!(got[0].0, label, "{answer}");
        assert!(got.windows(2).all(|w| w[0].1 >= w[1].1), "{got:?}");
        // What `roformer vision classify` computes on the same file.
        let image = decode_image(&bytes, &DecodeLimits::default()).unwrap();
        let pixels = preprocessed(&image, &reference.processor, 1).unwrap();
        let expected = classify_image(model, &pixels, 5).unwrap();
        for ((name, score), e) in got.iter().zip(&expected) {
            assert_eq!(name, &e.label);
            assert!(
                (score - f64::from(e.score)).abs() < TOLERANCE,
                "{score} {e:?}"
            );
        }
    }
    let boot = image_bytes("cli/ankle-boot.png");
    for (query, count) in [("?top_k=1", 1), ("?top_k=3", 3), ("?top_k=100", 10)] {
        let path = format!("/image-classification{query}");
        let (status, answer) = s.post_bytes(&path, "image/png", boot.clone()).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(labels(&answer).len(), count, "{query}");
        assert_eq!(labels(&answer)[0].0, "Ankle boot");
    }
    // The bytes are sniffed: any image type, octet-stream or no type at all is read.
    for kind in ["application/octet-stream", "image/jpeg", ""] {
        let (status, answer) = s
            .post_bytes("/image-classification", kind, boot.clone())
            .await;
        assert_eq!(status, 200, "{kind:?}: {answer}");
    }
    let (status, e) = s
        .post_bytes("/image-classification?top_k=0", "image/png", boot.clone())
        .await;
    assert_eq!(status, 422);
    assert!(error_of(&e, "Validation").contains("top_k"));
    let (status, e) = s
        .post_bytes("/image-classification?top_k=many", "image/png", boot)
        .await;
    assert_eq!(status, 400);
    assert!(error_of(&e, "Validation").contains("query"), "{e}");
    let log = s.log_text();
    assert!(
        log.contains("POST /image-classification 200") && log.contains("inputs=1 tokens=54"),
        "one input of 1 CLS, 4 registers and 7 x 7 patches: {log}"
    );
    s.stop().await;
}

#[tokio::test]
async fn embed_image_pools_the_cls_token_or_the_patches() {
    let s = start_with_vision(Vision::Fashion, config()).await;
    let reference = vision_backend(Vision::Fashion);
    let bytes = image_bytes("cli/bag.png");
    let (status, raw) = s
        .post_bytes("/embed_image?normalize=false", "image/png", bytes.clone())
        .await;
    assert_eq!(status, 200, "{raw}");
    let raw = floats(&raw);
    // What `roformer vision embed` computes on the same file: the pooled CLS token.
    let image = decode_image(&bytes, &DecodeLimits::default()).unwrap();
    let pixels = preprocessed(&image, &reference.processor, 1).unwrap();
    let expected = embed_image(reference.model(), &pixels).unwrap();
    assert_eq!(raw.len(), expected.len());
    for (a, b) in raw.iter().zip(&expected) {
        assert!((a - f64::from(*b)).abs() < TOLERANCE, "{a} {b}");
    }
    let (status, unit) = s
        .post_bytes("/embed_image", "image/png", bytes.clone())
        .await;
    assert_eq!(status, 200);
    let unit = floats(&unit);
    assert!((norm(&unit) - 1.0).abs() < 1e-5, "normalised by default");
    for (u, r) in unit.iter().zip(&raw) {
        assert!((u - r / norm(&raw)).abs() < TOLERANCE);
    }
    let (status, cls) = s
        .post_bytes("/embed_image?pooling=cls", "image/png", bytes.clone())
        .await;
    assert_eq!((status, floats(&cls)), (200, unit.clone()));
    let (status, mean) = s
        .post_bytes("/embed_image?pooling=mean", "image/png", bytes.clone())
        .await;
    assert_eq!(status, 200);
    let mean = floats(&mean);
    assert_eq!(mean.len(), unit.len());
    let apart = mean
        .iter()
        .zip(&unit)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(apart > 1e-3, "the mean of the patches is not the CLS token");
    let (status, e) = s
        .post_bytes("/embed_image?pooling=max", "image/png", bytes)
        .await;
    assert_eq!(status, 400);
    error_of(&e, "Validation");
    s.stop().await;
}

#[tokio::test]
async fn bad_images_are_4xx_json_and_the_server_keeps_serving() {
    let s = start_with_vision(Vision::Fashion, config()).await;
    let good = image_bytes("cli/trouser.png");
    let truncated = good[..good.len() / 2].to_vec();
    let cases: [(&str, Vec<u8>, u16, &str); 4] = [
        (
            "not an image",
            b"GIF89a not a png at all".to_vec(),
            400,
            "not a PNG or JPEG",
        ),
        ("truncated", truncated, 400, "truncated"),
        ("a PNG signature alone", good[..8].to_vec(), 400, ""),
        ("empty", Vec::new(), 422, "empty"),
    ];
    for route in ["/image-classification", "/embed_image"] {
        for (what, bytes, status, reason) in &cases {
            let (got, e) = s.post_bytes(route, "image/png", bytes.clone()).await;
            assert_eq!(got, *status, "{route} {what}: {e}");
            let message = e["error"].as_str().unwrap_or_else(|| panic!("JSON: {e}"));
            assert!(message.contains(reason), "{route} {what}: {message}");
        }
        let (status, e) = s.post_bytes(route, "application/json", good.clone()).await;
        assert_eq!(status, 415);
        assert!(error_of(&e, "Validation").contains("image/png"));
        let (status, answer) = s.post_bytes(route, "image/png", good.clone()).await;
        assert_eq!(status, 200, "{route} still serves: {answer}");
    }
    s.stop().await;
}

#[tokio::test]
async fn an_image_smaller_than_a_patch_is_422() {
    // The backbone's processor keeps each image's size; its patches are 4 x 4.
    let s = start_with_vision(Vision::Backbone, config()).await;
    let (status, e) = s
        .post_bytes(
            "/embed_image",
            "image/png",
            image_bytes("serve/grey-2x2.png"),
        )
        .await;
    assert_eq!(status, 422);
    assert!(
        error_of(&e, "Validation").contains("smaller than one 4x4 patch"),
        "{e}"
    );
    let (status, _) = s
        .post_bytes("/embed_image", "image/png", image_bytes("roformer/rgb.png"))
        .await;
    assert_eq!(status, 200);
    s.stop().await;
}

#[tokio::test]
async fn bodies_and_images_over_the_limits_are_413_before_decoding() {
    let small_body = ServeConfig {
        max_body_bytes: 200,
        ..config()
    };
    let s = start_with_vision(Vision::Fashion, small_body).await;
    for route in ["/image-classification", "/embed_image"] {
        // 394 bytes, over the 200 of --max-body-bytes.
        let (status, e) = s
            .post_bytes(route, "image/png", image_bytes("cli/ankle-boot.png"))
            .await;
        assert_eq!(status, 413, "{route}");
        assert!(error_of(&e, "PayloadTooLarge").contains("200 bytes"));
    }
    s.stop().await;
    let few_pixels = ServeConfig {
        max_image_pixels: 28 * 28 - 1,
        ..config()
    };
    let s = start_with_vision(Vision::Fashion, few_pixels).await;
    for route in ["/image-classification", "/embed_image"] {
        let (status, e) = s
            .post_bytes(route, "image/png", image_bytes("cli/ankle-boot.png"))
            .await;
        assert_eq!(status, 413, "{route}");
        let reason = error_of(&e, "PayloadTooLarge");
        assert!(
            reason.contains("28 x 28 pixels") && reason.contains("783"),
            "{reason}"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn images_of_different_sizes_queued_together_answer_as_alone() {
    let s = start_with_vision(Vision::Backbone, config()).await;
    // 32 x 24 (PNG and JPEG), 20 x 30 grey, 5 x 6 with alpha: three grids, one group each.
    let files = [
        "roformer/rgb.png",
        "roformer/rgb.jpg",
        "roformer/grey.png",
        "roformer/rgba.png",
    ];
    let mut alone = Vec::new();
    for file in files {
        let (status, v) = s
            .post_bytes(
                "/embed_image?normalize=false",
                "image/png",
                image_bytes(file),
            )
            .await;
        assert_eq!(status, 200, "{file}: {v}");
        alone.push(floats(&v));
    }
    let mut tasks = Vec::new();
    for round in 0..6 {
        for (i, file) in files.iter().enumerate() {
            let client = s.client.clone();
            let url = format!("{}/embed_image?normalize=false", s.base);
            let bytes = image_bytes(file);
            tasks.push((
                round,
                i,
                tokio::spawn(async move {
                    let r = client.post(url).body(bytes).send().await.unwrap();
                    (r.status().as_u16(), r.json::<Value>().await.unwrap())
                }),
            ));
        }
    }
    for (round, i, task) in tasks {
        let (status, v) = task.await.unwrap();
        assert_eq!(status, 200, "{v}");
        let got = floats(&v);
        let diff = got
            .iter()
            .zip(&alone[i])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(diff < TOLERANCE, "round {round}, {}: {diff}", files[i]);
    }
    // A backbone has no labels.
    let (status, e) = s
        .post_bytes(
            "/image-classification",
            "image/png",
            image_bytes("roformer/rgb.png"),
        )
        .await;
    assert_eq!(status, 404);
    assert!(error_of(&e, "NotFound").contains("/embed_image"));
    let (_, info) = s.get("/info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    let routes = info["routes"].to_string();
    assert!(routes.contains("POST /embed_image"), "{routes}");
    assert!(!routes.contains("POST /image-classification"), "{routes}");
    assert_eq!(
        info["vision_model"]["model_type"],
        "image-feature-extraction"
    );
    s.stop().await;
}

#[tokio::test]
async fn info_describes_the_vision_model_and_without_one_the_routes_are_404() {
    let s = start_with_vision(Vision::Fashion, config()).await;
    let (_, info) = s.get("/info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    let vision = &info["vision_model"];
    assert_eq!(vision["model_type"], "image-classification", "{info}");
    assert_eq!(vision["id2label"]["9"], "Ankle boot");
    assert_eq!(vision["pooling"], "cls");
    assert_eq!(vision["max_image_pixels"], 4096 * 4096);
    assert_eq!(vision["max_image_bytes"], 2_000_000);
    let routes = info["routes"].to_string();
    for route in ["POST /image-classification", "POST /embed_image"] {
        assert!(routes.contains(route), "{routes}");
    }
    s.stop().await;

    let s = start(Model::MaskedLm, config()).await;
    let (_, info) = s.get("/info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    assert!(info["vision_model"].is_null());
    assert!(!info["routes"].to_string().contains("image"));
    for route in ["/image-classification", "/embed_image"] {
        let (status, e) = s
            .post_bytes(route, "image/png", image_bytes("cli/bag.png"))
            .await;
        assert_eq!(status, 404);
        assert!(error_of(&e, "NotFound").contains("--vision"), "{e}");
    }
    s.stop().await;
}

#[tokio::test]
async fn images_share_the_concurrency_limit_and_are_429_at_once_beyond_it() {
    let s = start_with_vision(
        Vision::Fashion,
        ServeConfig {
            max_concurrent_requests: 1,
            max_wait: Duration::from_millis(1500),
            ..config()
        },
    )
    .await;
    // A text request holds the one slot while the batcher waits 1.5 s for company.
    let (client, url) = (s.client.clone(), format!("{}/embed", s.base));
    let held = tokio::spawn(async move {
        let body = json!({"inputs": "一"});
        client
            .post(url)
            .json(&body)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let boot = image_bytes("cli/ankle-boot.png");
    for route in ["/image-classification", "/embed_image"] {
        let started = std::time::Instant::now();
        let r = s
            .client
            .post(format!("{}{route}", s.base))
            .header("content-type", "image/png")
            .body(boot.clone())
            .send()
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "refused at once"
        );
        assert_eq!(r.status(), 429, "{route}");
        assert_eq!(r.headers()["retry-after"], "1");
        let e: Value = r.json().await.unwrap();
        assert!(error_of(&e, "Overloaded").contains("--max-concurrent-requests"));
    }
    assert_eq!(held.await.unwrap(), 200, "the admitted request is served");
    let (status, _) = s
        .post_bytes("/image-classification", "image/png", boot)
        .await;
    assert_eq!(status, 200, "the slot is free again");
    s.stop().await;
}
