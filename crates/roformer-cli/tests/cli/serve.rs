//! `roformer serve` end to end: the built-in model over HTTP (one test per route family), flag
//! errors, and SIGTERM with requests in flight (none lost). A plain HTTP/1.1 client over a
//! socket, one connection per request.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::roformer;
use crate::serve_child::{exchange, ServeChild};

/// `POST path` with a JSON body: the status and the body as JSON (null when it is not JSON).
fn post_json(addr: &str, path: &str, body: Value) -> (u16, Value) {
    let (status, text) = call(addr, "POST", path, Some(body));
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// `METHOD path` with a JSON body: the status and the body.
fn call(addr: &str, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    exchange(addr, method, path, "application/json", body.as_bytes())
}

#[test]
fn serve_answers_every_route_family_with_the_built_in_model() {
    let s = ServeChild::start(&[]);
    assert_eq!(call(s.addr(), "GET", "/health", None), (200, String::new()));
    let (status, info) = call(s.addr(), "GET", "/info", None);
    assert_eq!(status, 200);
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["model_id"], "<built-in poetry model>");
    assert_eq!(info["fill_mask"], true);
    assert_eq!(info["max_input_length"], 512);

    let text = "床前明[MASK]光";
    let (status, fill) = post_json(s.addr(), "/fill-mask", json!({"inputs": text}));
    assert_eq!(status, 200);
    assert_eq!(fill[0]["token_str"], "月", "{fill}");
    assert_eq!(fill[0]["sequence"], "床前明月光");
    assert_eq!(fill.as_array().unwrap().len(), 5);

    let (status, v) = post_json(
        s.addr(),
        "/embed",
        json!({"inputs": ["床前明月光", "疑是地上霜"]}),
    );
    assert_eq!(status, 200);
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[0].as_array().unwrap().len(), 256);
    let (status, o) = post_json(s.addr(), "/v1/embeddings", json!({"input": "床前明月光"}));
    assert_eq!(status, 200);
    assert_eq!(o["usage"]["prompt_tokens"], 7);
    let (status, t) = post_json(s.addr(), "/tokenize", json!({"inputs": "月光"}));
    assert_eq!(status, 200);
    assert_eq!(t[0][1]["text"], "月");
    assert_eq!(
        (t[0][2]["start"].clone(), t[0][2]["stop"].clone()),
        (json!(3), json!(6))
    );
    let (status, p) = post_json(s.addr(), "/predict", json!({"inputs": "月"}));
    assert_eq!(status, 404);
    assert_eq!(p["error_type"], "NotFound");
    let (status, metrics) = call(s.addr(), "GET", "/metrics", None);
    assert_eq!(status, 200);
    assert!(metrics.contains("te_request_count{route=\"/fill-mask\",status=\"200\"} 1"));

    let log = s.log();
    assert!(
        log.contains("POST /fill-mask 200") && log.contains("inputs=1 tokens=7"),
        "{log}"
    );
    assert!(!log.contains("床前"), "texts only with --log-inputs: {log}");
}

/// TEI's other routes on the built-in model: `/similarity`, `/embed_all`, `/embed_sparse`,
/// `/decode`, and `/rerank` refused (no classifier), as `/info`'s `routes` says.
#[test]
fn serve_answers_teis_other_routes_with_the_built_in_model() {
    let s = ServeChild::start(&[]);
    let (_, info) = call(s.addr(), "GET", "/info", None);
    let info: Value = serde_json::from_str(&info).unwrap();
    let routes = info["routes"].as_array().unwrap();
    for route in [
        "POST /similarity",
        "POST /embed_all",
        "POST /embed_sparse",
        "POST /decode",
    ] {
        assert!(routes.contains(&json!(route)), "{route}: {info}");
    }
    assert!(!routes.contains(&json!("POST /rerank")), "{info}");

    let body = json!({"inputs": {"source_sentence": "床前明月光",
                                 "sentences": ["床前明月光", "疑是地上霜"]}});
    let (status, scores) = post_json(s.addr(), "/similarity", body);
    assert_eq!(status, 200, "{scores}");
    let scores: Vec<f64> = scores
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(
        (scores[0] - 1.0).abs() < 1e-6 && scores[1] < scores[0],
        "{scores:?}"
    );

    let (status, all) = post_json(s.addr(), "/embed_all", json!({"inputs": "月光"}));
    assert_eq!(status, 200);
    assert_eq!(all[0].as_array().unwrap().len(), 4, "[CLS] 月 光 [SEP]");
    assert_eq!(all[0][1].as_array().unwrap().len(), 256);

    let (_, t) = post_json(s.addr(), "/tokenize", json!({"inputs": "床前明月光"}));
    let ids: Vec<u64> = t[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_u64().unwrap())
        .collect();
    let (status, sparse) = post_json(s.addr(), "/embed_sparse", json!({"inputs": "床前明月光"}));
    assert_eq!(status, 200);
    let entries = sparse[0].as_array().unwrap();
    assert!(
        !entries.is_empty() && entries.len() < 10_000,
        "sparse: {}",
        entries.len()
    );
    let weight = |id: u64| {
        entries
            .iter()
            .find(|e| e["index"] == id)
            .map_or(0.0, |e| e["value"].as_f64().unwrap())
    };
    // A masked LM predicts a text's own characters: 月's weight is among the largest.
    let mut values: Vec<f64> = entries
        .iter()
        .map(|e| e["value"].as_f64().unwrap())
        .collect();
    values.sort_by(|a, b| b.total_cmp(a));
    let (_, moon) = post_json(s.addr(), "/tokenize", json!({"inputs": "月"}));
    let moon = weight(moon[0][1]["id"].as_u64().unwrap());
    assert!(
        moon >= values[values.len().min(20) - 1],
        "{moon} vs {values:?}"
    );

    let (status, text) = post_json(s.addr(), "/decode", json!({ "ids": ids }));
    assert_eq!(status, 200);
    assert_eq!(text, json!(["床 前 明 月 光"]));
    let (status, e) = post_json(
        s.addr(),
        "/rerank",
        json!({"query": "月", "texts": ["床前明月光"]}),
    );
    assert_eq!(status, 404, "{e}");
    assert_eq!(e["error_type"], "NotFound");
}

/// `--gguf`: the completion routes with the tiny LLaMA of the llama crate's tests, whole and
/// streamed, beside the built-in RoFormer model's routes.
#[test]
fn serve_with_gguf_answers_completions_beside_the_built_in_model() {
    let gguf = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../llama/tests/fixtures/tiny-llama/tiny.gguf"
    );
    let s = ServeChild::start(&["--gguf", gguf, "--max-tokens", "16"]);
    let body = json!({"prompt": "hello there, the end.", "max_tokens": 4, "temperature": 0});
    let (status, answer) = post_json(s.addr(), "/v1/completions", body.clone());
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "text_completion");
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    assert_eq!(
        answer["usage"],
        json!({"prompt_tokens": 6, "completion_tokens": 4, "total_tokens": 10})
    );
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let (status, events) = call(s.addr(), "POST", "/v1/completions", Some(streamed));
    assert_eq!(status, 200);
    // The body is chunked (this client does not undo the chunk sizes): look for the events.
    assert!(
        events.matches("\"object\":\"text_completion\"").count() >= 2,
        "{events}"
    );
    let last = events.rfind("data: ").unwrap();
    assert!(events[last..].starts_with("data: [DONE]\n\n"), "{events}");
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let (status, answer) = post_json(s.addr(), "/v1/chat/completions", chat);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "chat.completion");
    let (status, e) = post_json(
        s.addr(),
        "/v1/completions",
        json!({"prompt": "hello", "max_tokens": 17}),
    );
    assert_eq!(status, 422);
    assert!(e["error"].as_str().unwrap().contains("--max-tokens"), "{e}");
    let (status, info) = call(s.addr(), "GET", "/info", None);
    assert_eq!(status, 200);
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["generation_model"]["file_name"], "tiny.gguf", "{info}");
    assert_eq!(info["generation_model"]["context_length"], 128, "{info}");
    assert_eq!(info["generation_model"]["max_tokens"], 16, "{info}");
    let (status, models) = call(s.addr(), "GET", "/v1/models", None);
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][1]["id"], gguf, "{models}");
    let (status, fill) = post_json(s.addr(), "/fill-mask", json!({"inputs": "床前明[MASK]光"}));
    assert_eq!(status, 200);
    assert_eq!(
        fill[0]["token_str"], "月",
        "the built-in model still serves"
    );
}

#[test]
fn serve_refuses_bad_flags_naming_them() {
    let out = roformer(&["serve", "--port", "0", "--max-batch-tokens", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-batch-tokens"));
    let out = roformer(&["serve", "--port", "0", "--api-key", ""]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--api-key") && stderr.contains("non-empty"),
        "{stderr}"
    );
    let out = roformer(&["serve", "--port", "0", "--request-timeout-s", "700000"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--request-timeout-s") && stderr.contains("604800"),
        "{stderr}"
    );
    let out = roformer(&["serve", "--model", "/nonexistent/dir"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/dir"));
    let out = roformer(&["serve", "--port", "0", "--gguf", "/nonexistent/model.gguf"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--gguf /nonexistent/model.gguf"),
        "{stderr}"
    );
}

/// SIGTERM while requests wait in the batcher: every request sent before it gets its 200, and
/// the process exits 0 soon after.
#[test]
fn serve_finishes_requests_in_flight_on_sigterm() {
    let mut s = ServeChild::start(&["--max-wait-ms", "1500"]);
    let requests: Vec<_> = (0..8)
        .map(|i| {
            let addr = s.addr().to_owned();
            std::thread::spawn(move || {
                let path = if i % 2 == 0 { "/embed" } else { "/fill-mask" };
                call(
                    &addr,
                    "POST",
                    path,
                    Some(json!({"inputs": "床前明[MASK]光"})),
                )
                .0
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let pid = s.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let statuses: Vec<u16> = requests.into_iter().map(|r| r.join().unwrap()).collect();
    assert_eq!(statuses, vec![200; 8], "{}", s.log());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}: {}", s.log());
}
