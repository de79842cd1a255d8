//! Every route's request and answer shapes.

use base64::Engine;
use serde_json::{json, Value};

use crate::common::{config, error_of, floats, start, Model, TOLERANCE};
use test_support::max_abs_diff;

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

#[tokio::test]
async fn health_info_metrics_and_the_page() {
    let s = start(Model::MaskedLm, config()).await;
    assert_eq!(s.get("/health").await, (200, String::new()));
    let (status, info) = s.get("/info").await;
    assert_eq!(status, 200);
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(
        info["model_type"],
        json!({"embedding": {"pooling": "mean"}})
    );
    assert_eq!(info["fill_mask"], true);
    assert_eq!(info["model_dtype"], "float32");
    assert_eq!(
        info["max_input_length"], 64,
        "the model's max_position_embeddings"
    );
    assert_eq!(info["max_batch_tokens"], 16384);
    assert_eq!(info["max_client_batch_size"], 32);
    assert_eq!(info["max_concurrent_requests"], 512);
    assert!(info["model_id"].as_str().unwrap().ends_with("mlm_rotary"));
    assert_eq!(info["generation_model"], Value::Null, "no --gguf");
    let (status, models) = s.get("/v1/models").await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["object"], "list");
    let data = models["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{models}");
    assert_eq!(data[0]["id"], info["model_id"]);
    assert_eq!(data[0]["object"], "model");
    let r = s.client.get(format!("{}/", s.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(r.text().await.unwrap().to_lowercase().contains("<html"));
    let (status, _) = s.post("/embed", json!({"inputs": "一丁"})).await;
    assert_eq!(status, 200);
    let (status, metrics) = s.get("/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("te_request_count{route=\"/embed\",status=\"200\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("te_request_duration_bucket{route=\"/embed\""),
        "{metrics}"
    );
    assert!(metrics.contains("te_batch_next_size_count 1"), "{metrics}");
    assert!(metrics.contains("te_request_tokens_total 4"), "{metrics}");
    assert!(metrics.contains("te_queue_size 0"), "{metrics}");
    let (status, body) = s.get("/nowhere").await;
    assert_eq!(status, 404);
    error_of(&serde_json::from_str(&body).unwrap(), "NotFound");
    s.stop().await;
}

#[tokio::test]
async fn embed_gives_a_list_of_vectors_normalised_by_default() {
    let s = start(Model::MaskedLm, config()).await;
    let (status, one) = s.post("/embed", json!({"inputs": "一丁七"})).await;
    assert_eq!(status, 200);
    let one = one.as_array().unwrap();
    assert_eq!(one.len(), 1, "one string: still a list of lists");
    let v = floats(&one[0]);
    assert_eq!(v.len(), 32);
    assert!((norm(&v) - 1.0).abs() < 1e-6, "{}", norm(&v));

    let (_, raw) = s
        .post("/embed", json!({"inputs": ["一丁七"], "normalize": false}))
        .await;
    let raw = floats(&raw[0]);
    let n = norm(&raw);
    assert!((n - 1.0).abs() > 1e-3, "an unnormalised mean has norm {n}");
    for (a, b) in v.iter().zip(&raw) {
        assert!((a - b / n).abs() < 1e-6, "{a} vs {}", b / n);
    }

    let (_, three) = s
        .post("/embed", json!({"inputs": ["一", "丁七", "一丁七"]}))
        .await;
    let three = three.as_array().unwrap();
    assert_eq!(three.len(), 3);
    // The same text alone and in a (padded) list.
    assert!(max_abs_diff(&three[2], &one[0]) < TOLERANCE);

    let (_, cls) = s
        .post("/embed", json!({"inputs": "一丁七", "pooling": "cls"}))
        .await;
    assert_ne!(floats(&cls[0]), v, "cls pooling differs from mean");
    let (status, bad) = s
        .post("/embed", json!({"inputs": "一", "pooling": "max"}))
        .await;
    assert_eq!(status, 400);
    assert!(error_of(&bad, "Validation").contains("max"));
    s.stop().await;
}

#[tokio::test]
async fn openai_embeddings_with_usage_and_base64() {
    let s = start(Model::MaskedLm, config()).await;
    let (status, r) = s
        .post(
            "/v1/embeddings",
            json!({"input": ["一丁", "七丄丅"], "model": "any-name"}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(r["object"], "list");
    assert_eq!(r["model"], "any-name");
    assert_eq!(r["usage"], json!({"prompt_tokens": 9, "total_tokens": 9}));
    let data = r["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["object"], "embedding");
        assert_eq!(d["index"], i);
        assert_eq!(d["embedding"].as_array().unwrap().len(), 32);
    }
    let (_, tei) = s.post("/embed", json!({"inputs": "一丁"})).await;
    assert!(max_abs_diff(&data[0]["embedding"], &tei[0]) < TOLERANCE);

    let (_, b) = s
        .post(
            "/v1/embeddings",
            json!({"input": "一丁", "encoding_format": "base64"}),
        )
        .await;
    assert!(b["model"].as_str().unwrap().ends_with("mlm_rotary"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let decoded: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    // JSON writes the shortest decimal that reads back as the same f32.
    let float: Vec<f32> = floats(&tei[0]).into_iter().map(|x| x as f32).collect();
    assert_eq!(decoded, float, "the same text alone: bit for bit");
    s.stop().await;
}

/// The candidates of one mask: sorted, at most `k`, each with its filled sequence.
fn check_candidates(list: &Value, k: usize, text: &str, nth_mask: usize) {
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), k);
    let mut previous = f64::INFINITY;
    for c in list {
        let score = c["score"].as_f64().unwrap();
        assert!(score <= previous && score > 0.0);
        previous = score;
        assert!(c["token"].as_u64().unwrap() < 97);
        let token = c["token_str"].as_str().unwrap();
        let (at, _) = text.match_indices("[MASK]").nth(nth_mask).unwrap();
        let expected = format!("{}{token}{}", &text[..at], &text[at + 6..]);
        assert_eq!(c["sequence"], expected);
    }
}

#[tokio::test]
async fn fill_mask_answers_in_the_hugging_face_shapes() {
    let s = start(Model::MaskedLm, config()).await;
    let text = "一丁[MASK]七";
    let (status, one) = s.post("/fill-mask", json!({"inputs": text})).await;
    assert_eq!(status, 200);
    check_candidates(&one, 5, text, 0);

    let two = "[MASK]丁七[MASK]";
    let (_, several) = s
        .post(
            "/fill-mask",
            json!({"inputs": two, "parameters": {"top_k": 3}}),
        )
        .await;
    let several = several.as_array().unwrap();
    assert_eq!(several.len(), 2, "one list per mask");
    check_candidates(&several[0], 3, two, 0);
    check_candidates(&several[1], 3, two, 1);

    let (_, list) = s.post("/fill-mask", json!({"inputs": [text, two]})).await;
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert!(
        max_abs_diff(&list[0], &one) < TOLERANCE,
        "the same text alone and in a list"
    );
    assert_eq!(list[1].as_array().unwrap().len(), 2);

    let (_, all) = s
        .post(
            "/fill-mask",
            json!({"inputs": text, "parameters": {"top_k": 100}}),
        )
        .await;
    let total: f64 = all
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["score"].as_f64().unwrap())
        .sum();
    assert_eq!(
        all.as_array().unwrap().len(),
        97,
        "no more than the vocabulary"
    );
    assert!((total - 1.0).abs() < 1e-9, "{total}");

    let (status, e) = s.post("/fill-mask", json!({"inputs": "一丁"})).await;
    assert_eq!(status, 422);
    assert!(error_of(&e, "Validation").contains("no mask token"));
    for k in [0, 101] {
        let (status, e) = s
            .post(
                "/fill-mask",
                json!({"inputs": text, "parameters": {"top_k": k}}),
            )
            .await;
        assert_eq!(status, 422);
        assert!(error_of(&e, "Validation").contains("top_k"));
    }
    let (status, e) = s.post("/predict", json!({"inputs": text})).await;
    assert_eq!(status, 404);
    assert!(error_of(&e, "NotFound").contains("not a sequence classifier"));
    s.stop().await;
}

#[tokio::test]
async fn predict_scores_every_label_sorted() {
    let s = start(Model::Classifier, config()).await;
    let (_, info) = s.get("/info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(
        info["model_type"],
        json!({"classifier": {"id2label": {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}}})
    );
    assert_eq!(info["fill_mask"], false);
    let (status, one) = s.post("/predict", json!({"inputs": "一丁七"})).await;
    assert_eq!(status, 200);
    let one = one.as_array().unwrap();
    assert_eq!(one.len(), 3);
    let scores: Vec<f64> = one.iter().map(|x| x["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert!((scores.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    let mut labels: Vec<&str> = one.iter().map(|x| x["label"].as_str().unwrap()).collect();
    labels.sort_unstable();
    assert_eq!(labels, ["LABEL_0", "LABEL_1", "LABEL_2"]);

    let (_, raw) = s
        .post(
            "/predict",
            json!({"inputs": ["一丁七", "丁"], "raw_scores": true}),
        )
        .await;
    let raw = raw.as_array().unwrap();
    assert_eq!(raw.len(), 2, "a list per text");
    let logits: Vec<f64> = raw[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["score"].as_f64().unwrap())
        .collect();
    // softmax of the raw scores gives the probabilities, in the same label order.
    let max = logits[0];
    let denominator: f64 = logits.iter().map(|z| (z - max).exp()).sum();
    for (z, p) in logits.iter().zip(&scores) {
        assert!(((z - max).exp() / denominator - p).abs() < 1e-6);
    }
    let (status, e) = s.post("/fill-mask", json!({"inputs": "一[MASK]"})).await;
    assert_eq!(status, 404);
    assert!(error_of(&e, "NotFound").contains("no masked-LM head"));
    s.stop().await;
}

#[tokio::test]
async fn tokenize_gives_ids_and_byte_offsets() {
    let s = start(Model::MaskedLm, config()).await;
    let (status, t) = s.post("/tokenize", json!({"inputs": "一丁"})).await;
    assert_eq!(status, 200);
    assert_eq!(
        t,
        json!([[
            {"id": 2, "text": "[CLS]", "special": true, "start": 0, "stop": 0},
            {"id": 5, "text": "一", "special": false, "start": 0, "stop": 3},
            {"id": 6, "text": "丁", "special": false, "start": 3, "stop": 6},
            {"id": 3, "text": "[SEP]", "special": true, "start": 0, "stop": 0},
        ]])
    );
    let (_, bare) = s
        .post(
            "/tokenize",
            json!({"inputs": ["一丁", "丁[MASK]"], "add_special_tokens": false}),
        )
        .await;
    assert_eq!(bare[0].as_array().unwrap().len(), 2);
    assert_eq!(
        bare[1][1],
        json!({"id": 4, "text": "[MASK]", "special": true, "start": 3, "stop": 9})
    );
    s.stop().await;
}
