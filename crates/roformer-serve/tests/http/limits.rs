//! Limits and malformed bodies: each refused with its status and a JSON reason.

use std::time::Duration;

use serde_json::json;

use crate::common::{config, error_of, start, Model};
use roformer_serve::ServeConfig;

#[tokio::test]
async fn malformed_and_mistyped_bodies_are_400() {
    let s = start(Model::MaskedLm, config()).await;
    for body in [
        "{",
        "",
        "[1, 2]",
        "{\"inputs\": 3}",
        "{\"input\": \"x\"}",
        "\u{0}\u{1}",
    ] {
        let r = s
            .client
            .post(format!("{}/embed", s.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body:?}");
        let answer: serde_json::Value = r.json().await.unwrap();
        error_of(&answer, "Validation");
    }
    let (status, e) = s
        .post("/embed", json!({"inputs": "一", "normalize": "yes"}))
        .await;
    assert_eq!(status, 400);
    assert!(
        error_of(&e, "Validation").contains("normalize")
            || e["error"].as_str().unwrap().contains("boolean")
    );
    let (status, e) = s.post("/embed", json!({"inputs": []})).await;
    assert_eq!(status, 422);
    error_of(&e, "Empty");
    let (status, e) = s.post("/embed", json!({"inputs": ["一", ""]})).await;
    assert_eq!(status, 422);
    assert!(error_of(&e, "Empty").contains("input 1"));
    s.stop().await;
}

#[tokio::test]
async fn size_limits_are_413_or_422_with_the_reason() {
    let s = start(
        Model::MaskedLm,
        ServeConfig {
            max_body_bytes: 1000,
            max_client_batch_size: 2,
            ..config()
        },
    )
    .await;
    let (status, e) = s.post("/embed", json!({"inputs": "一".repeat(400)})).await;
    assert_eq!(status, 413);
    assert!(error_of(&e, "PayloadTooLarge").contains("1000 bytes"));

    let (status, e) = s
        .post("/embed", json!({"inputs": ["一", "丁", "七"]}))
        .await;
    assert_eq!(status, 422);
    assert!(error_of(&e, "Validation").contains("--max-client-batch-size"));

    // 63 characters + [CLS] + [SEP] = 65 tokens, one over the model's 64.
    let long = "一".repeat(63);
    let (status, e) = s.post("/embed", json!({"inputs": ["丁", long]})).await;
    assert_eq!(status, 413);
    let reason = error_of(&e, "Validation");
    assert!(
        reason.contains("input 1 has 65 tokens") && reason.contains("truncate"),
        "{reason}"
    );
    let (status, v) = s
        .post("/embed", json!({"inputs": long, "truncate": true}))
        .await;
    assert_eq!(status, 200);
    let (_, cut) = s.post("/embed", json!({"inputs": "一".repeat(62)})).await;
    assert_eq!(v, cut, "truncated to 64 tokens = the 62-character text");
    let (status, _) = s.post("/embed", json!({"inputs": "一".repeat(62)})).await;
    assert_eq!(status, 200, "exactly the limit is fine");
    s.stop().await;
}

#[tokio::test]
async fn beyond_the_concurrency_limit_is_429_at_once() {
    let s = start(
        Model::MaskedLm,
        ServeConfig {
            max_concurrent_requests: 1,
            max_wait: Duration::from_millis(1500),
            ..config()
        },
    )
    .await;
    let (client, url) = (s.client.clone(), format!("{}/embed", s.base));
    let first = tokio::spawn(async move {
        let r = client
            .post(url)
            .json(&json!({"inputs": "一"}))
            .send()
            .await
            .unwrap();
        r.status().as_u16()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = s
        .post_overloaded("/fill-mask", &json!({"inputs": "一[MASK]"}))
        .await;
    assert!(refused.contains("--max-concurrent-requests"), "{refused}");
    assert_eq!(first.await.unwrap(), 200, "the admitted request is served");
    let (status, _) = s.post("/embed", json!({"inputs": "一"})).await;
    assert_eq!(status, 200, "the slot is free again");
    s.stop().await;
}

#[tokio::test]
async fn a_request_over_its_time_is_504() {
    let s = start(
        Model::MaskedLm,
        ServeConfig {
            max_wait: Duration::from_millis(2000),
            request_timeout: Duration::from_millis(300),
            ..config()
        },
    )
    .await;
    let (status, e) = s.post("/embed", json!({"inputs": "一"})).await;
    assert_eq!(status, 504);
    assert!(error_of(&e, "Timeout").contains("--request-timeout-s"));
    s.stop().await;
}

/// A body over `--max-body-bytes`, sent in full, gets its 413 every time: the server reads
/// it to its end before answering, so the client's last bytes are not met by a reset (before
/// the fix, a client sending 3 MB one request at a time failed to send 220 of 300).
#[tokio::test]
async fn an_oversized_body_sent_in_full_always_gets_its_413() {
    let s = start(Model::MaskedLm, config()).await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let statuses = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let body = format!("{{\"inputs\": \"{}\"}}", "月".repeat(1_000_000));
        (0..20)
            .map(|_| {
                let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
                let head = format!(
                    "POST /embed HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\n\r\n",
                    body.len()
                );
                let sent = tcp
                    .write_all(head.as_bytes())
                    .and_then(|()| tcp.write_all(body.as_bytes()));
                if let Err(e) = sent {
                    return format!("send failed: {e}");
                }
                let mut answer = [0u8; 12];
                match tcp.read_exact(&mut answer) {
                    Ok(()) => String::from_utf8_lossy(&answer).into_owned(),
                    Err(e) => format!("no status: {e}"),
                }
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for status in &statuses {
        assert_eq!(status, "HTTP/1.1 413", "{statuses:?}");
    }
    s.stop().await;
}
