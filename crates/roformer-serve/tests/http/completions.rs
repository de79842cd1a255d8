//! `/v1/completions` and `/v1/chat/completions` with the tiny GGUF LLaMA (context 128): the
//! OpenAI shapes, stream framing, stop strings, seeds, limits, the queue, and a client that
//! goes away.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{config, error_of, start, start_with_gguf, tiny_gguf, Model, TestServer};
use llama::generate::{generate, Sampling};
use roformer_serve::{LlamaModel, ServeConfig};

/// The prompt of the llama crate's fixture: 6 tokens.
const PROMPT: &str = "hello there, the end.";

/// POSTs `body` with `"stream": true` to `path`: the content type and the events' data, in
/// order (asserting the `data: ...\n\n` framing).
async fn stream(s: &TestServer, path: &str, body: Value) -> (String, Vec<String>) {
    stream_to(&s.client, &format!("{}{path}", s.base), body).await
}

/// [`stream`] with a client of its own, to `url`.
async fn stream_to(client: &reqwest::Client, url: &str, mut body: Value) -> (String, Vec<String>) {
    body["stream"] = json!(true);
    let r = client.post(url).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let kind = r.headers()["content-type"].to_str().unwrap().to_owned();
    let text = r.text().await.unwrap();
    assert!(text.ends_with("\n\n"), "{text:?}");
    let data = text
        .trim_end_matches("\n\n")
        .split("\n\n")
        .map(|event| {
            event
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {event:?}"))
                .to_owned()
        })
        .collect();
    (kind, data)
}

/// The JSON chunks of a stream that ended with `[DONE]`.
fn chunks(data: &[String]) -> Vec<Value> {
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The greedy completion of [`PROMPT`] with `max_tokens`.
async fn greedy(s: &TestServer, max_tokens: usize) -> Value {
    let body = json!({"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0});
    let (status, answer) = s.post("/v1/completions", body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

#[tokio::test]
async fn completions_answer_in_openai_shapes_whole_and_streamed() {
    let s = start_with_gguf(config()).await;
    let answer = greedy(&s, 8).await;
    assert_eq!(answer["object"], "text_completion");
    assert!(answer["id"].as_str().unwrap().starts_with("cmpl-"));
    assert!(answer["created"].as_u64().unwrap() > 1_600_000_000);
    assert!(answer["model"].as_str().unwrap().ends_with("tiny.gguf"));
    let choice = &answer["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["finish_reason"], "length");
    let text = choice["text"].as_str().unwrap();
    assert!(!text.is_empty());
    assert_eq!(
        answer["usage"],
        json!({"prompt_tokens": 6, "completion_tokens": 8, "total_tokens": 14})
    );

    let body = json!({"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "model": "m"});
    let (kind, data) = stream(&s, "/v1/completions", body).await;
    assert!(kind.starts_with("text/event-stream"), "{kind}");
    let chunks = chunks(&data);
    let (last, pieces) = chunks.split_last().unwrap();
    assert!(!pieces.is_empty());
    for c in pieces {
        assert_eq!(c["object"], "text_completion");
        assert_eq!(c["model"], "m");
        assert_eq!(c["choices"][0]["finish_reason"], Value::Null);
    }
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    let streamed: String = chunks
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, text, "the stream carries the same text");
    let ids: Vec<&Value> = chunks.iter().map(|c| &c["id"]).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "one id per completion");
    s.stop().await;
}

#[tokio::test]
async fn chat_completions_wrap_the_messages_in_chatml() {
    let s = start_with_gguf(config()).await;
    let messages =
        json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]);
    let body = json!({"messages": messages, "max_tokens": 5, "temperature": 0});
    let (status, answer) = s.post("/v1/chat/completions", body.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "chat.completion");
    assert!(answer["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let choice = &answer["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    let reason = choice["finish_reason"].as_str().unwrap();
    assert!(["stop", "length"].contains(&reason), "{reason}");
    let usage = &answer["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        )
    );
    // The same turn as a plain completion of the ChatML text (system, user, then assistant).
    let chatml = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n\
                  <|im_start|>assistant\n";
    let (_, plain) = s
        .post(
            "/v1/completions",
            json!({"prompt": chatml, "max_tokens": 5, "temperature": 0}),
        )
        .await;
    assert_eq!(usage["prompt_tokens"], plain["usage"]["prompt_tokens"]);
    let content = choice["message"]["content"].as_str().unwrap();
    assert!(
        plain["choices"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with(content),
        "{answer} {plain}"
    );

    let (_, data) = stream(&s, "/v1/chat/completions", body).await;
    let chunks = chunks(&data);
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
    }
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["delta"], json!({}));
    assert_eq!(last["choices"][0]["finish_reason"], reason);
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, content);
    s.stop().await;
}

#[tokio::test]
async fn stop_strings_cut_the_completion_whole_and_streamed() {
    let s = start_with_gguf(config()).await;
    let full = greedy(&s, 8).await["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    // A stop string from the middle of the greedy text: the completion is what precedes its
    // first occurrence.
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() >= 4, "{full:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let expected = &full[..full.find(&stop).unwrap()];
    for stop_field in [json!(stop), json!(["never-there", stop])] {
        let body = json!({"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "stop": stop_field});
        let (status, answer) = s.post("/v1/completions", body.clone()).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["choices"][0]["text"], expected, "stop {stop:?}");
        assert_eq!(answer["choices"][0]["finish_reason"], "stop");
        assert!(answer["usage"]["completion_tokens"].as_u64().unwrap() < 8);
        let (_, data) = stream(&s, "/v1/completions", body).await;
        let chunks = chunks(&data);
        let streamed: String = chunks
            .iter()
            .map(|c| c["choices"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(streamed, expected, "no part of the stop string is streamed");
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "stop"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn a_seed_reproduces_a_sampled_completion() {
    let s = start_with_gguf(config()).await;
    let sample = |seed: u64| {
        let body = json!({"prompt": PROMPT, "max_tokens": 20, "temperature": 1.0, "seed": seed});
        let s = &s;
        async move {
            let (status, answer) = s.post("/v1/completions", body).await;
            assert_eq!(status, 200, "{answer}");
            answer["choices"][0]["text"].as_str().unwrap().to_owned()
        }
    };
    let first = sample(7).await;
    assert_eq!(sample(7).await, first, "the same seed, the same text");
    let mut others = Vec::new();
    for seed in 1..=4 {
        others.push(sample(seed).await);
    }
    assert!(
        others.iter().any(|o| *o != first),
        "other seeds sample other texts: {first:?} {others:?}"
    );
    s.stop().await;
}

#[tokio::test]
async fn max_tokens_ends_with_length_and_limits_are_checked() {
    let s = start_with_gguf(ServeConfig {
        max_tokens: 50,
        ..config()
    })
    .await;
    let answer = greedy(&s, 3).await;
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    assert_eq!(answer["usage"]["completion_tokens"], 3);

    let cases = [
        (
            json!({"prompt": PROMPT, "max_tokens": 0}),
            422,
            "max_tokens 0",
        ),
        (
            json!({"prompt": PROMPT, "max_tokens": 51}),
            422,
            "--max-tokens",
        ),
        (
            json!({"prompt": "the ".repeat(100), "max_tokens": 50}),
            422,
            "room for",
        ),
        (
            json!({"prompt": "the ".repeat(200)}),
            413,
            "context holds 128",
        ),
        (
            json!({"prompt": PROMPT, "temperature": 2.5}),
            422,
            "temperature",
        ),
        (json!({"prompt": PROMPT, "n": 2}), 422, "n must be 1"),
        (
            json!({"prompt": PROMPT, "stop": ["a", "b", "c", "d", "e"]}),
            422,
            "at most 4",
        ),
        (json!({"prompt": PROMPT, "stop": ""}), 422, "empty"),
        (json!({"prompt": ["a", "b"]}), 422, "one prompt per request"),
        (json!({"prompt": ""}), 422, "no tokens"),
        (json!({"prompt": 3}), 400, "string"),
        (
            json!({"prompt": PROMPT, "max_tokens": -1}),
            400,
            "expected u64",
        ),
    ];
    for (body, status, reason) in cases {
        let (got, e) = s.post("/v1/completions", body.clone()).await;
        assert_eq!(got, status, "{body} -> {e}");
        assert!(
            e["error"].as_str().unwrap().contains(reason),
            "{body} -> {e}"
        );
    }
    for (body, status) in [
        (json!({"messages": []}), 422),
        (
            json!({"messages": [{"role": "robot", "content": "hi"}]}),
            400,
        ),
        (json!({"messages": "hi"}), 400),
    ] {
        let (got, e) = s.post("/v1/chat/completions", body.clone()).await;
        assert_eq!(got, status, "{body} -> {e}");
    }
    s.stop().await;
}

/// The server's count of decoded tokens, from `/metrics`.
async fn decoded_tokens(s: &TestServer) -> u64 {
    let (_, metrics) = s.get("/metrics").await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("te_generation_tokens_total "))
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_client_that_goes_away_stops_its_generation() {
    // 20 ms a token: 100 tokens would take 2 s.
    let s = start_with_gguf(ServeConfig {
        generation_pause: Duration::from_millis(20),
        ..config()
    })
    .await;
    let body = json!({"prompt": PROMPT, "max_tokens": 100, "temperature": 0, "stream": true});
    let mut r = s
        .client
        .post(format!("{}/v1/completions", s.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.chunk().await.unwrap().is_some(), "a first event");
    drop(r);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_stream = decoded_tokens(&s).await;
    assert!(
        after_stream < 50,
        "{after_stream} tokens decoded: not stopped"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(decoded_tokens(&s).await, after_stream, "no more decoding");

    // A whole-answer request given up by its client (a timeout) stops too.
    let body = json!({"prompt": PROMPT, "max_tokens": 100, "temperature": 0});
    let gone = s
        .client
        .post(format!("{}/v1/completions", s.base))
        .timeout(Duration::from_millis(300))
        .json(&body)
        .send()
        .await;
    assert!(gone.is_err());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_whole = decoded_tokens(&s).await;
    assert!(
        after_whole - after_stream < 50,
        "{} tokens decoded: not stopped",
        after_whole - after_stream
    );
    wait_for(&s, "cancelled 2", |m| {
        m.contains("te_generation_count{finish=\"cancelled\"} 2")
    })
    .await;
    s.stop().await;
}

#[tokio::test]
async fn beyond_the_running_and_waiting_generations_is_429_at_once() {
    // Two may run or wait: both run together, a third is refused.
    let s = start_with_gguf(ServeConfig {
        generation_pause: Duration::from_millis(25),
        max_waiting_generations: 2,
        ..config()
    })
    .await;
    let body = json!({"prompt": PROMPT, "max_tokens": 30, "temperature": 0});
    let send = |body: Value| {
        let (client, url) = (s.client.clone(), format!("{}/v1/completions", s.base));
        tokio::spawn(async move {
            let r = client.post(url).json(&body).send().await.unwrap();
            r.status().as_u16()
        })
    };
    let running = send(body.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = send(body.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = s.post_overloaded("/v1/completions", &body).await;
    assert!(refused.contains("--max-waiting-generations"), "{refused}");
    let (_, metrics) = s.get("/metrics").await;
    assert!(metrics.contains("te_generation_queue_size 2"), "{metrics}");
    assert_eq!(running.await.unwrap(), 200);
    assert_eq!(second.await.unwrap(), 200, "the second request is served");
    let (_, metrics) = s.get("/metrics").await;
    assert!(batched_steps(&metrics) > 0, "the two ran in the same steps");
    s.stop().await;
}

#[tokio::test]
async fn a_completion_whose_cache_cannot_fit_is_422_and_others_wait_for_room() {
    // 40 cache positions: a 6-token prompt with 40 new tokens never fits; two of 6 + 14 fit
    // together, a third waits until one ends, and all are answered.
    let s = start_with_gguf(ServeConfig {
        max_cached_tokens: 40,
        generation_pause: Duration::from_millis(10),
        ..config()
    })
    .await;
    let (status, e) = s
        .post(
            "/v1/completions",
            json!({"prompt": PROMPT, "max_tokens": 40, "temperature": 0}),
        )
        .await;
    assert_eq!(status, 422, "{e}");
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("--max-cached-tokens 40"),
        "{e}"
    );
    let body = json!({"prompt": PROMPT, "max_tokens": 14, "temperature": 0, "ignore_eos": true});
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (client, url) = (s.client.clone(), format!("{}/v1/completions", s.base));
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let r = client.post(url).json(&body).send().await.unwrap();
            let status = r.status().as_u16();
            let answer: Value = r.json().await.unwrap();
            (status, answer["choices"][0]["text"].clone())
        }));
    }
    let mut texts = Vec::new();
    for task in tasks {
        let (status, text) = task.await.unwrap();
        assert_eq!(status, 200);
        texts.push(text);
    }
    assert!(texts.iter().all(|t| *t == texts[0]), "{texts:?}");
    let (_, metrics) = s.get("/metrics").await;
    // Never more than two in a step: the third waited for room.
    assert!(
        metrics.contains("te_generation_step_size_bucket{le=\"2\"} ")
            && batched_steps(&metrics) > 0,
        "{metrics}"
    );
    let at_most_two = metrics
        .lines()
        .find_map(|l| l.strip_prefix("te_generation_step_size_bucket{le=\"2\"} "))
        .unwrap();
    let all = metrics
        .lines()
        .find_map(|l| l.strip_prefix("te_generation_step_size_count "))
        .unwrap();
    assert_eq!(at_most_two, all, "no step ran three: {metrics}");
    s.stop().await;
}

#[tokio::test]
async fn without_a_gguf_model_the_completion_routes_are_404() {
    let s = start(Model::MaskedLm, config()).await;
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let body = json!({"prompt": PROMPT, "messages": [{"role": "user", "content": "hi"}]});
        let (status, e) = s.post(path, body).await;
        assert_eq!(status, 404, "{path}");
        assert!(error_of(&e, "NotFound").contains("--gguf"));
    }
    s.stop().await;
}

#[tokio::test]
async fn info_and_models_describe_the_gguf_model() {
    let s = start_with_gguf(ServeConfig {
        max_tokens: 50,
        max_waiting_generations: 3,
        ..config()
    })
    .await;
    let (status, info) = s.get("/info").await;
    assert_eq!(status, 200);
    let info: Value = serde_json::from_str(&info).unwrap();
    let g = &info["generation_model"];
    // The fixture's header (scripts/make_tiny_llama.py): general.file_type 7, 15 Q8_0 matrices
    // and 5 f32 norms.
    assert_eq!(g["file_name"], "tiny.gguf", "{g}");
    assert!(g["model_id"].as_str().unwrap().ends_with("tiny.gguf"));
    assert_eq!(g["name"], "tiny-llama");
    assert_eq!(g["architecture"], "llama");
    assert_eq!(g["quantization"], "Q8_0");
    assert_eq!(g["tensor_types"], json!({"F32": 5, "Q8_0": 15}));
    assert_eq!(g["context_length"], 128);
    assert_eq!(g["vocab_size"], 64);
    assert_eq!(g["layers"], 2);
    assert_eq!(g["hidden_size"], 64);
    assert_eq!(g["intermediate_size"], 128);
    assert_eq!(g["heads"], 4);
    assert_eq!(g["kv_heads"], 2);
    assert_eq!(g["rope_base"], 10000.0);
    assert_eq!(g["chat"], true);
    assert_eq!(g["max_tokens"], 50);
    assert_eq!(g["max_waiting_generations"], 3);
    // The cache: 2 layers x (keys, values) x 2 key/value heads x 16 dims x 4 bytes a position,
    // bounded by the default 8192 positions.
    assert_eq!(g["max_prefill_tokens"], 256);
    assert_eq!(g["max_cached_tokens"], 8192);
    assert_eq!(g["kv_cache_bytes_per_token"], 2 * 2 * 2 * 16 * 4);
    assert_eq!(g["kv_cache_max_bytes"], 8192 * 512);
    // Embeddings 64 x 64 (tied to the output); per layer q and o 64 x 64, k and v 32 x 64, the
    // three feed-forward matrices 128 x 64 and two norms of 64; the last norm of 64.
    let per_layer = 64 * 64 * 2 + 32 * 64 * 2 + 3 * 128 * 64 + 2 * 64;
    assert_eq!(g["parameters"], 64 * 64 + 2 * per_layer + 64, "{g}");
    assert!(g["weight_bytes"].as_u64().unwrap() > 0);

    let (status, models) = s.get("/v1/models").await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["object"], "list");
    let data = models["data"].as_array().unwrap();
    let ids: Vec<&Value> = data.iter().map(|m| &m["id"]).collect();
    assert_eq!(ids, [&info["model_id"], &g["model_id"]], "{models}");
    for m in data {
        assert_eq!(m["object"], "model");
        assert_eq!(m["owned_by"], "roformer-serve");
        assert!(m["created"].as_u64().unwrap() > 1_600_000_000);
    }
    // The id is the name completions answer with.
    assert_eq!(greedy(&s, 1).await["model"], g["model_id"]);
    s.stop().await;
}

#[tokio::test]
async fn a_completion_past_the_request_timeout_ends_and_frees_the_model() {
    // 25 ms a step: 100 tokens take 2.5 s at the least; the limit is 800 ms (some 30 steps,
    // a few even on a loaded machine).
    let limit = Duration::from_millis(800);
    let s = start_with_gguf(ServeConfig {
        generation_pause: Duration::from_millis(25),
        request_timeout: limit,
        ..config()
    })
    .await;
    let chat = json!([{"role": "user", "content": "hi"}]);
    for (path, body) in [
        (
            "/v1/completions",
            json!({"prompt": PROMPT, "max_tokens": 100, "temperature": 0}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": chat, "max_tokens": 100, "temperature": 0}),
        ),
    ] {
        let started = std::time::Instant::now();
        let (_, data) = stream(&s, path, body).await;
        let took = started.elapsed();
        // The stream ends at the limit, before the 2.5 s of the whole completion (1.6 s of
        // slack for a loaded machine).
        assert!(took >= limit && took < limit * 3, "{path}: {took:?}");
        let (last, pieces) = data.split_last().unwrap();
        let last: Value = serde_json::from_str(last).unwrap();
        let message = error_of(&last, "Timeout");
        assert!(
            message.contains("800 ms (--request-timeout-s)"),
            "{message}"
        );
        assert!(!data.iter().any(|d| d == "[DONE]"), "{data:?}");
        assert!(
            pieces.len() >= 3,
            "text was streamed before the end: {data:?}"
        );
        for piece in pieces {
            let chunk: Value = serde_json::from_str(piece).unwrap();
            assert_eq!(chunk["choices"][0]["finish_reason"], Value::Null, "{chunk}");
        }
    }
    // Both left the batch (the scheduler sees a closed channel at its next step): their places
    // are free, and no more tokens are decoded.
    wait_for(&s, "cancelled 2, nothing running", |m| {
        m.contains("te_generation_count{finish=\"cancelled\"} 2")
            && m.contains("te_generation_queue_size 0")
    })
    .await;
    let stopped = decoded_tokens(&s).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(decoded_tokens(&s).await, stopped, "no more decoding");

    // A whole answer past the limit is a 504, and stops too.
    let body = json!({"prompt": PROMPT, "max_tokens": 100, "temperature": 0});
    let (status, e) = s.post("/v1/completions", body).await;
    assert_eq!(status, 504, "{e}");
    error_of(&e, "Timeout");
    wait_for(&s, "cancelled 3, nothing running", |m| {
        m.contains("te_generation_count{finish=\"cancelled\"} 3")
            && m.contains("te_generation_queue_size 0")
    })
    .await;
    // 800 ms of 25 ms steps: about 32 tokens; 50 would take 1.25 s.
    assert!(
        decoded_tokens(&s).await - stopped < 50,
        "stopped at the limit"
    );

    // The model is free: a one-token completion (25 ms) is answered within the limit.
    let answer = greedy(&s, 1).await;
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    s.stop().await;
}

/// Waits (up to 10 s) until `/metrics` satisfies `done`; panics naming `what` otherwise.
async fn wait_for(s: &TestServer, what: &str, done: impl Fn(&str) -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, metrics) = s.get("/metrics").await;
        if done(&metrics) {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "not {what} after 10 s: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Steps that decoded more than one completion, from `/metrics`.
fn batched_steps(metrics: &str) -> u64 {
    let value = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {metrics}"))
    };
    value("te_generation_step_size_count ") - value("te_generation_step_size_bucket{le=\"1\"} ")
}

#[tokio::test]
async fn completions_decoded_together_equal_lone_runs() {
    // Prompts of different lengths, prefilled in chunks of 4 tokens, each joining while the
    // others decode (5 ms a step; 40 ms apart), answered whole or streamed.
    let s = start_with_gguf(ServeConfig {
        max_prefill_tokens: 4,
        generation_pause: Duration::from_millis(5),
        ..config()
    })
    .await;
    let prompts = [
        "the end of the story is near, they said, and there it was.",
        "a",
        PROMPT,
        "hello hello hello there, the",
    ];
    // The lone reference: the llama crate's one-at-a-time greedy decoding of each prompt.
    let model = LlamaModel::load(&tiny_gguf()).unwrap();
    let n = 24;
    let alone: Vec<String> = prompts
        .iter()
        .map(|p| {
            let ids = model.encode(p).unwrap();
            let out = generate(model.model(), &ids, n, Sampling::GREEDY, None, |_| Ok(())).unwrap();
            model.tokenizer().decode(&out.tokens).unwrap()
        })
        .collect();
    // A sampled completion, alone first, then among the others.
    let sampled = json!({"prompt": PROMPT, "max_tokens": n, "temperature": 1.0, "seed": 11});
    let (_, lone_sample) = s.post("/v1/completions", sampled.clone()).await;
    let mut bodies: Vec<Value> = prompts
        .iter()
        .map(|p| json!({"prompt": p, "max_tokens": n, "temperature": 0, "ignore_eos": true}))
        .collect();
    bodies.push(sampled);
    let mut tasks = Vec::new();
    for (i, body) in bodies.into_iter().enumerate() {
        let (client, base) = (s.client.clone(), s.base.clone());
        tasks.push(tokio::spawn(async move {
            if i % 2 == 1 {
                let (_, data) = stream_to(&client, &format!("{base}/v1/completions"), body).await;
                chunks(&data)
                    .iter()
                    .map(|c| c["choices"][0]["text"].as_str().unwrap().to_owned())
                    .collect::<String>()
            } else {
                let r = client
                    .post(format!("{base}/v1/completions"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                let answer: Value = r.json().await.unwrap();
                answer["choices"][0]["text"].as_str().unwrap().to_owned()
            }
        }));
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let mut texts = Vec::new();
    for task in tasks {
        texts.push(task.await.unwrap());
    }
    assert_eq!(
        texts[..prompts.len()],
        alone[..],
        "greedy: as decoded alone"
    );
    assert_eq!(
        texts[prompts.len()],
        lone_sample["choices"][0]["text"].as_str().unwrap(),
        "sampled with a seed: as alone"
    );
    let (_, metrics) = s.get("/metrics").await;
    assert!(batched_steps(&metrics) > 10, "decoded together: {metrics}");
    s.stop().await;
}

#[tokio::test]
async fn ignore_eos_runs_the_completion_to_max_tokens() {
    let s = start_with_gguf(config()).await;
    // Greedy, the fixture ends this completion with its end token (<|im_end|>) after 78 tokens.
    let mut body = json!({"prompt": PROMPT, "max_tokens": 100, "temperature": 0});
    let (status, natural) = s.post("/v1/completions", body.clone()).await;
    assert_eq!(status, 200, "{natural}");
    assert_eq!(natural["choices"][0]["finish_reason"], "stop", "{natural}");
    let produced = natural["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(produced < 100, "{natural}");
    body["ignore_eos"] = json!(true);
    let (status, forced) = s.post("/v1/completions", body).await;
    assert_eq!(status, 200, "{forced}");
    assert_eq!(forced["choices"][0]["finish_reason"], "length", "{forced}");
    assert_eq!(forced["usage"]["completion_tokens"], 100);
    let text = forced["choices"][0]["text"].as_str().unwrap();
    let before = natural["choices"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("{before}<|im_end|>")),
        "the end token is kept as text and decoding goes on: {text:?}"
    );
    s.stop().await;
}
