//! Batched results against unbatched ones, and draining on shutdown.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{config, start, Model, TestServer, TOLERANCE};
use test_support::max_abs_diff;

/// Texts of different lengths (so batches are padded), each with a mask.
fn texts() -> Vec<String> {
    let chars: Vec<char> = (0x4e05u32..0x4e40).filter_map(char::from_u32).collect();
    (0..12)
        .map(|i| {
            let body: String = chars.iter().skip(i * 3).take(2 + (i * 7) % 40).collect();
            format!("{}[MASK]{}", &body[..3], &body[3..])
        })
        .collect()
}

/// The answers of `route` for each text, sent all at once (concurrently).
async fn all_at_once(s: &TestServer, route: &str, body: impl Fn(&str) -> Value) -> Vec<Value> {
    let requests = texts().into_iter().map(|t| {
        let (client, url, body) = (s.client.clone(), format!("{}{route}", s.base), body(&t));
        tokio::spawn(async move {
            let r = client.post(url).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        })
    });
    let handles: Vec<_> = requests.collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

/// The answers of `route` for each text, one request at a time.
async fn one_by_one(s: &TestServer, route: &str, body: impl Fn(&str) -> Value) -> Vec<Value> {
    let mut out = Vec::new();
    for t in texts() {
        let (status, v) = s.post(route, body(&t)).await;
        assert_eq!(status, 200);
        out.push(v);
    }
    out
}

/// Batches formed so far, from `/metrics`.
async fn batches(s: &TestServer) -> u64 {
    let (_, m) = s.get("/metrics").await;
    m.lines()
        .find_map(|l| l.strip_prefix("te_batch_next_size_count "))
        .unwrap()
        .parse()
        .unwrap()
}

/// Every text's answer is the same whether it ran alone or in a padded batch with others, within
/// [`TOLERANCE`] (the same candidates in the same order; numbers within 1e-5).
///
/// Not bit-identical: padding a text changes the shapes the fused encoder works on (the
/// attention's key loop runs over the padded length, and the products block rows differently),
/// so f32 sums are added in another order and differ in their last bits; measured at most
/// 1.0e-7 on unit vectors and 1.9e-6 on fill-mask probabilities (the logits' last-bit
/// differences scaled by the softmax). Texts as long as their batch's longest
/// (no padding) come out bit for bit the same.
#[tokio::test]
async fn batched_answers_equal_unbatched_ones() {
    let alone = start(Model::MaskedLm, config()).await;
    let batched = start(
        Model::MaskedLm,
        roformer_serve::ServeConfig {
            max_wait: Duration::from_millis(300),
            ..config()
        },
    )
    .await;
    let embed = |t: &str| json!({"inputs": t.replace("[MASK]", "")});
    let fill = |t: &str| json!({"inputs": t, "parameters": {"top_k": 10}});
    for (route, body) in [
        ("/embed", &embed as &dyn Fn(&str) -> Value),
        ("/fill-mask", &fill),
    ] {
        let before = batches(&batched).await;
        let together = all_at_once(&batched, route, body).await;
        let formed = batches(&batched).await - before;
        assert!(formed < 12, "{route}: {formed} batches for 12 requests");
        let one = one_by_one(&alone, route, body).await;
        let diff = max_abs_diff(&Value::from(together.clone()), &Value::from(one.clone()));
        eprintln!("{route}: {formed} batches for 12 requests, max difference {diff:e}");
        assert!(
            diff < TOLERANCE,
            "{route}: batched and unbatched differ by {diff:e}"
        );
    }
    alone.stop().await;
    batched.stop().await;

    let cls_alone = start(Model::Classifier, config()).await;
    let cls_batched = start(
        Model::Classifier,
        roformer_serve::ServeConfig {
            max_wait: Duration::from_millis(300),
            ..config()
        },
    )
    .await;
    let predict = |t: &str| json!({"inputs": t.replace("[MASK]", ""), "raw_scores": true});
    let together = all_at_once(&cls_batched, "/predict", predict).await;
    let one = one_by_one(&cls_alone, "/predict", predict).await;
    let diff = max_abs_diff(&Value::from(together), &Value::from(one));
    assert!(
        diff < TOLERANCE,
        "/predict: batched and unbatched differ by {diff:e}"
    );
    cls_alone.stop().await;
    cls_batched.stop().await;
}

/// Requests in flight when the shutdown starts are all answered; the server then stops.
#[tokio::test]
async fn shutdown_finishes_admitted_requests() {
    let s = start(
        Model::MaskedLm,
        roformer_serve::ServeConfig {
            max_wait: Duration::from_millis(500),
            ..config()
        },
    )
    .await;
    let requests: Vec<_> = (0..8)
        .map(|_| {
            let (client, url) = (s.client.clone(), format!("{}/embed", s.base));
            tokio::spawn(async move {
                let r = client
                    .post(url)
                    .json(&json!({"inputs": "一丁七"}))
                    .send()
                    .await;
                r.map(|r| r.status().as_u16())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let base = s.base.clone();
    s.stop().await;
    for r in requests {
        assert_eq!(r.await.unwrap().unwrap(), 200);
    }
    assert!(
        reqwest::get(format!("{base}/health")).await.is_err(),
        "no longer accepting"
    );
}
