//! API key, CORS and what the access log may contain.

use serde_json::json;

use crate::common::{config, error_of, start, Model};
use roformer_serve::ServeConfig;

#[tokio::test]
async fn the_api_key_guards_every_route_but_health_and_the_page() {
    let s = start(
        Model::MaskedLm,
        ServeConfig {
            api_key: Some("s3cret".into()),
            ..config()
        },
    )
    .await;
    let url = format!("{}/embed", s.base);
    let body = json!({"inputs": "一"});
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("s3cret"),
        Some("Bearer s3cre"),
    ] {
        let mut r = s.client.post(&url).json(&body);
        if let Some(auth) = auth {
            r = r.header("authorization", auth);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), 401, "{auth:?}");
        let e: serde_json::Value = r.json().await.unwrap();
        error_of(&e, "Unauthorized");
    }
    let r = s
        .client
        .post(&url)
        .bearer_auth("s3cret")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for path in ["/info", "/metrics", "/nowhere"] {
        assert_eq!(s.get(path).await.0, 401, "{path}");
    }
    assert_eq!(s.get("/health").await.0, 200);
    // The page loads without the key (a browser sends none on page load; it holds no data),
    // and its calls still need it.
    let (status, page) = s.get("/").await;
    assert_eq!(status, 200);
    assert!(page.contains("api-key"), "the page asks for the key");
    let r = s.client.post(format!("{}/", s.base)).send().await.unwrap();
    assert_eq!(r.status(), 401, "only GET / is open");
    s.stop().await;
}

#[tokio::test]
async fn cors_headers_only_with_an_origin() {
    let origin = "https://app.example";
    for allowed in [None, Some(origin)] {
        let s = start(
            Model::MaskedLm,
            ServeConfig {
                cors_origin: allowed.map(str::to_owned),
                ..config()
            },
        )
        .await;
        let r = s
            .client
            .post(format!("{}/embed", s.base))
            .header("origin", origin)
            .json(&json!({"inputs": "一"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let header = r.headers().get("access-control-allow-origin");
        assert_eq!(header.map(|h| h.to_str().unwrap()), allowed);
        let preflight = s
            .client
            .request(reqwest::Method::OPTIONS, format!("{}/embed", s.base))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .send()
            .await
            .unwrap();
        let header = preflight.headers().get("access-control-allow-origin");
        assert_eq!(header.map(|h| h.to_str().unwrap()), allowed);
        s.stop().await;
    }
}

#[tokio::test]
async fn logs_hold_texts_only_with_log_inputs() {
    let text = "丄丅丆万";
    for log_inputs in [false, true] {
        let s = start(
            Model::MaskedLm,
            ServeConfig {
                log_inputs,
                ..config()
            },
        )
        .await;
        for (route, body) in [
            ("/embed", json!({"inputs": text})),
            ("/v1/embeddings", json!({"input": text})),
            ("/fill-mask", json!({"inputs": format!("{text}[MASK]")})),
            ("/tokenize", json!({"inputs": text})),
        ] {
            assert_eq!(s.post(route, body).await.0, 200, "{route}");
        }
        let (status, _) = s.post("/embed", json!({"inputs": [text, ""]})).await;
        assert_eq!(status, 422);
        let logs = s.log_text();
        assert!(logs.contains("POST /embed 200"), "{logs}");
        assert!(
            logs.contains("POST /fill-mask 200") && logs.contains("inputs=1 tokens=7"),
            "{logs}"
        );
        assert!(logs.contains("POST /embed 422"), "{logs}");
        assert_eq!(logs.lines().count(), 5, "one line per request: {logs}");
        assert_eq!(logs.contains(text), log_inputs, "{logs}");
        s.stop().await;
    }
}
