//! TEI's other routes: `/similarity`, `/embed_all`, `/embed_sparse`, `/rerank`, `/decode`, and
//! the routes `/info` lists for each kind of model.

use roformer::pipeline;
use serde_json::{json, Value};

use crate::common::{backend, config, error_of, floats, start, Model, TOLERANCE};
use test_support::max_abs_diff;

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// The routes of `/info`.
async fn routes(s: &crate::common::TestServer) -> Vec<String> {
    let (_, info) = s.get("/info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    info["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn similarity_is_the_cosine_of_the_embeddings() {
    let s = start(Model::MaskedLm, config()).await;
    let body = json!({"inputs": {"source_sentence": "一丁七", "sentences": ["一丁七", "丄丅", "万丈三上"]}});
    let (status, scores) = s.post("/similarity", body).await;
    assert_eq!(status, 200, "{scores}");
    let scores = floats(&scores);
    assert_eq!(scores.len(), 3, "one score per sentence");
    assert!(
        (scores[0] - 1.0).abs() < 1e-6,
        "the same text: {}",
        scores[0]
    );
    let (_, vectors) = s
        .post("/embed", json!({"inputs": ["一丁七", "丄丅", "万丈三上"]}))
        .await;
    let v: Vec<Vec<f64>> = vectors.as_array().unwrap().iter().map(floats).collect();
    for (i, score) in scores.iter().enumerate() {
        assert!((score - cosine(&v[0], &v[i])).abs() < TOLERANCE, "{i}");
    }
    // TEI's parameters, null or with truncate.
    let long: String = "一丁七".repeat(40);
    let (status, _) = s
        .post(
            "/similarity",
            json!({"inputs": {"source_sentence": long, "sentences": ["一"]}}),
        )
        .await;
    assert_eq!(status, 413, "over --max-input-length without truncate");
    let (status, cut) = s
        .post(
            "/similarity",
            json!({"inputs": {"source_sentence": long, "sentences": ["一"]},
                   "parameters": {"truncate": true}}),
        )
        .await;
    assert_eq!((status, floats(&cut).len()), (200, 1));
    let (status, _) = s
        .post(
            "/similarity",
            json!({"inputs": {"source_sentence": "一", "sentences": ["丁"]}, "parameters": null}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, e) = s
        .post(
            "/similarity",
            json!({"inputs": {"source_sentence": "一", "sentences": []}}),
        )
        .await;
    assert_eq!(status, 422);
    assert!(error_of(&e, "Empty").contains("sentences"));
    let (status, e) = s
        .post(
            "/similarity",
            json!({"inputs": {"source_sentence": "一", "sentences": vec!["丁"; 32]}}),
        )
        .await;
    assert_eq!(status, 422, "the source counts: 33 texts");
    assert!(error_of(&e, "Validation").contains("33 inputs"));
    let (status, e) = s.post("/similarity", json!({"inputs": "一"})).await;
    assert_eq!(status, 400);
    error_of(&e, "Validation");
    s.stop().await;
}

#[tokio::test]
async fn embed_all_gives_every_tokens_state() {
    let s = start(Model::MaskedLm, config()).await;
    let (status, all) = s.post("/embed_all", json!({"inputs": "一丁七"})).await;
    assert_eq!(status, 200, "{all}");
    let texts = all.as_array().unwrap();
    assert_eq!(texts.len(), 1, "one string: still a list per text");
    let tokens = texts[0].as_array().unwrap();
    assert_eq!(tokens.len(), 5, "[CLS] 一 丁 七 [SEP]");
    assert!(tokens.iter().all(|t| floats(t).len() == 32));
    // Mean pooling is the mean of these states.
    let (_, mean) = s
        .post("/embed", json!({"inputs": "一丁七", "normalize": false}))
        .await;
    let mean = floats(&mean[0]);
    for (d, m) in mean.iter().enumerate() {
        let avg = tokens.iter().map(|t| t[d].as_f64().unwrap()).sum::<f64>() / 5.0;
        assert!((avg - m).abs() < TOLERANCE, "dimension {d}: {avg} vs {m}");
    }
    // In a padded list, each text keeps its own length and states.
    let (_, list) = s
        .post("/embed_all", json!({"inputs": ["丁", "一丁七"]}))
        .await;
    let list = list.as_array().unwrap();
    assert_eq!(list[0].as_array().unwrap().len(), 3);
    assert!(max_abs_diff(&list[1], &all[0]) < TOLERANCE);
    let (status, e) = s.post("/embed_all", json!({"inputs": [""]})).await;
    assert_eq!(status, 422);
    error_of(&e, "Empty");
    s.stop().await;
}

#[tokio::test]
async fn embed_sparse_lists_the_non_zero_splade_weights() {
    let s = start(Model::MaskedLm, config()).await;
    let (status, sparse) = s.post("/embed_sparse", json!({"inputs": "一丁七"})).await;
    assert_eq!(status, 200, "{sparse}");
    let entries = sparse[0].as_array().unwrap();
    assert!(!entries.is_empty());
    let indices: Vec<u64> = entries
        .iter()
        .map(|e| e["index"].as_u64().unwrap())
        .collect();
    assert!(
        indices.windows(2).all(|w| w[0] < w[1]),
        "by increasing index"
    );
    assert!(indices.iter().all(|&i| i < 97), "vocabulary ids");
    assert!(entries.iter().all(|e| e["value"].as_f64().unwrap() > 0.0));
    // The weights from the model directly: max over tokens of log(1 + relu(logits)).
    let model = backend(Model::MaskedLm);
    let encoding = model.tokenizer.encode("一丁七");
    let expected = pipeline::splade(model.masked_lm().unwrap(), &[&encoding], model.pad_id())
        .unwrap()
        .remove(0);
    assert_eq!(expected.len(), entries.len());
    for ((index, value), e) in expected.iter().zip(entries) {
        assert_eq!(u64::from(*index), e["index"].as_u64().unwrap());
        assert!((f64::from(*value) - e["value"].as_f64().unwrap()).abs() < TOLERANCE);
    }
    let (_, list) = s
        .post("/embed_sparse", json!({"inputs": ["丁", "一丁七"]}))
        .await;
    assert!(
        max_abs_diff(&list[1], &sparse[0]) < TOLERANCE,
        "alone and in a batch"
    );
    s.stop().await;

    let cls = start(Model::Classifier, config()).await;
    let (status, e) = cls.post("/embed_sparse", json!({"inputs": "一"})).await;
    assert_eq!(status, 404);
    assert!(error_of(&e, "NotFound").contains("no masked-LM head"));
    cls.stop().await;
}

#[tokio::test]
async fn rerank_scores_pairs_with_a_one_label_classifier() {
    let s = start(Model::Reranker, config()).await;
    let (_, info) = s.get("/info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(
        info["model_type"],
        json!({"reranker": {"id2label": {"0": "LABEL_0"}}})
    );
    let texts = ["一丁", "七丄丅丆", "万", "丈三上下"];
    let (status, ranks) = s
        .post("/rerank", json!({"query": "一丁七", "texts": texts}))
        .await;
    assert_eq!(status, 200, "{ranks}");
    let ranks = ranks.as_array().unwrap();
    assert_eq!(ranks.len(), 4);
    let scores: Vec<f64> = ranks.iter().map(|r| r["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert!(scores.iter().all(|&p| 0.0 < p && p < 1.0), "sigmoids");
    assert!(ranks.iter().all(|r| r.get("text").is_none()));
    let mut indices: Vec<u64> = ranks.iter().map(|r| r["index"].as_u64().unwrap()).collect();
    indices.sort_unstable();
    assert_eq!(indices, [0, 1, 2, 3]);

    // The raw score of each text is the classifier's logit on the pair, run alone.
    let (_, raw) = s
        .post(
            "/rerank",
            json!({"query": "一丁七", "texts": texts, "raw_scores": true, "return_text": true}),
        )
        .await;
    let model = backend(Model::Reranker);
    for r in raw.as_array().unwrap() {
        let i = r["index"].as_u64().unwrap() as usize;
        assert_eq!(r["text"], texts[i]);
        let pair = model.tokenizer.encode_pair("一丁七", texts[i]);
        let logit = pipeline::classify(model.classifier().unwrap(), &[&pair], model.pad_id())
            .unwrap()[0][0];
        let got = r["score"].as_f64().unwrap();
        assert!(
            (got - f64::from(logit)).abs() < TOLERANCE,
            "{i}: {got} vs {logit}"
        );
        let p = ranks.iter().find(|x| x["index"] == i).unwrap()["score"]
            .as_f64()
            .unwrap();
        assert!((p - 1.0 / (1.0 + (-got).exp())).abs() < 1e-6);
    }

    let long: String = "一丁七".repeat(30);
    let (status, e) = s
        .post("/rerank", json!({"query": long, "texts": ["一"]}))
        .await;
    assert_eq!(status, 413);
    assert!(error_of(&e, "Validation").contains("truncate"));
    let (status, cut) = s
        .post(
            "/rerank",
            json!({"query": long, "texts": ["一"], "truncate": true}),
        )
        .await;
    assert_eq!((status, cut.as_array().unwrap().len()), (200, 1));
    for (body, status, kind) in [
        (json!({"query": "一", "texts": []}), 422, "Empty"),
        (json!({"query": " ", "texts": ["一"]}), 422, "Empty"),
        (json!({"query": "一", "texts": ["一", ""]}), 422, "Empty"),
        (
            json!({"query": "一", "texts": vec!["丁"; 33]}),
            422,
            "Validation",
        ),
        (json!({"query": "一"}), 400, "Validation"),
        (json!({"query": "一", "texts": "丁"}), 400, "Validation"),
    ] {
        let (got, e) = s.post("/rerank", body.clone()).await;
        assert_eq!(got, status, "{body}");
        error_of(&e, kind);
    }
    assert!(routes(&s).await.contains(&"POST /rerank".to_owned()));
    s.stop().await;

    let cls = start(Model::Classifier, config()).await;
    let (status, e) = cls
        .post("/rerank", json!({"query": "一", "texts": ["丁"]}))
        .await;
    assert_eq!(status, 422, "three labels: not a reranker");
    assert!(error_of(&e, "Validation").contains("3 labels"));
    assert!(!routes(&cls).await.contains(&"POST /rerank".to_owned()));
    cls.stop().await;
    let mlm = start(Model::MaskedLm, config()).await;
    let (status, e) = mlm
        .post("/rerank", json!({"query": "一", "texts": ["丁"]}))
        .await;
    assert_eq!(status, 404);
    assert!(error_of(&e, "NotFound").contains("not a sequence classifier"));
    mlm.stop().await;
}

#[tokio::test]
async fn decode_gives_the_text_of_ids() {
    let s = start(Model::MaskedLm, config()).await;
    let (status, one) = s.post("/decode", json!({"ids": [2, 5, 6, 3]})).await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(
        one,
        json!(["一 丁"]),
        "special tokens skipped; joined as transformers"
    );
    let (_, kept) = s
        .post(
            "/decode",
            json!({"ids": [[2, 5, 3], [6]], "skip_special_tokens": false}),
        )
        .await;
    assert_eq!(kept, json!(["[CLS] 一 [SEP]", "丁"]));
    // What /tokenize gives, /decode reads back.
    let (_, t) = s.post("/tokenize", json!({"inputs": "一丁七"})).await;
    let ids: Vec<u64> = t[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_u64().unwrap())
        .collect();
    let (_, back) = s.post("/decode", json!({ "ids": ids })).await;
    assert_eq!(back, json!(["一 丁 七"]));
    for (body, status, kind) in [
        (json!({"ids": [5, 97]}), 422, "Validation"),
        (json!({"ids": [[5], []]}), 200, ""),
        (json!({"ids": []}), 200, ""),
        (json!({"ids": vec![vec![5]; 33]}), 422, "Validation"),
        (json!({"ids": [-1]}), 400, "Validation"),
        (json!({"ids": "一"}), 400, "Validation"),
    ] {
        let (got, e) = s.post("/decode", body.clone()).await;
        assert_eq!(got, status, "{body}: {e}");
        if !kind.is_empty() {
            error_of(&e, kind);
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn info_lists_the_routes_each_model_serves() {
    let mlm = start(Model::MaskedLm, config()).await;
    let served = routes(&mlm).await;
    for route in [
        "POST /embed",
        "POST /similarity",
        "POST /embed_all",
        "POST /embed_sparse",
        "POST /fill-mask",
        "POST /decode",
        "POST /tokenize",
        "GET /info",
    ] {
        assert!(served.contains(&route.to_owned()), "{route}: {served:?}");
    }
    for route in ["POST /predict", "POST /rerank", "POST /v1/completions"] {
        assert!(!served.contains(&route.to_owned()), "{route}: {served:?}");
    }
    mlm.stop().await;
    let cls = start(Model::Classifier, config()).await;
    let served = routes(&cls).await;
    assert!(served.contains(&"POST /predict".to_owned()));
    assert!(!served.contains(&"POST /embed_sparse".to_owned()));
    assert!(!served.contains(&"POST /fill-mask".to_owned()));
    cls.stop().await;
}
