//! `roformer bench serve`: its refusals of unbounded or contradictory runs, a short run
//! against the `roformer serve` it starts itself, and completions of a fixed length against a
//! server started with `--gguf`, as ours and as the llama-cpp-python target (no timing asserts).

use serde_json::Value;

use crate::common::{assert_each_fails, roformer_ok};
use crate::serve_child::ServeChild;

/// The tiny GGUF LLaMA of the llama crate's tests.
const TINY_GGUF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../llama/tests/fixtures/tiny-llama/tiny.gguf"
);

#[test]
fn unbounded_or_contradictory_runs_are_refused() {
    assert_each_fails(
        &["bench", "serve"],
        &[
            &["--requests", "0"],
            &["--requests", "1000001"],
            &["--seconds", "0"],
            &["--seconds", "-1"],
            &["--seconds", "inf"],
            &["--seconds", "NaN"],
            &["--seconds", "3601"],
            &["--requests", "5", "--seconds", "1"],
            &["--lines", "0"],
            &["--lines", "33"],
            &[
                "--url",
                "http://127.0.0.1:9",
                "--target",
                "peer",
                "--routes",
                "similarity",
            ],
            &["--concurrency", "0"],
            &["--concurrency", "1025"],
            &["--timeout", "0"],
            &["--target", "peer"],
            &["--routes", "completions"],
            &["--url", "http://127.0.0.1:9", "--model", "x"],
            &[
                "--url",
                "http://127.0.0.1:9",
                "--target",
                "peer",
                "--routes",
                "completions",
            ],
            &["--target", "llama-cpp"],
            &[
                "--url",
                "http://127.0.0.1:9",
                "--target",
                "llama-cpp",
                "--routes",
                "embed",
            ],
        ],
    );
}

/// The completion records of a `bench serve --json` report: each at its level, every request
/// answered with exactly `max_tokens` generated tokens, counted as the server reported them.
fn assert_exact_completions(report: &Value, levels: &[u64], requests: u64, max_tokens: u64) {
    let records = report["records"].as_array().unwrap();
    assert_eq!(records.len(), levels.len(), "{report}");
    for (r, &level) in records.iter().zip(levels) {
        assert_eq!(r["route"], "completions", "{r}");
        assert_eq!(r["concurrency"], level, "{r}");
        assert_eq!(r["ok"], requests, "{r}");
        assert_eq!(r["completion_tokens"], requests * max_tokens, "{r}");
        assert_eq!(r["short_answers"], 0, "{r}");
        assert!(r["prompt_tokens"].as_u64().unwrap() >= requests, "{r}");
        let tokens_s = r["tokens_s"].as_f64().unwrap();
        let seconds = r["seconds"].as_f64().unwrap();
        let want = (requests * max_tokens) as f64 / seconds;
        assert!((tokens_s - want).abs() <= 1e-9 * want, "{r}");
    }
}

#[test]
fn completions_run_to_max_tokens_on_ours_and_as_the_llama_cpp_target() {
    let args = [
        "--routes",
        "completions",
        "--max-tokens",
        "12",
        "--requests",
        "3",
        "--concurrency",
        "1,2",
        "--warmup",
        "1",
        "--json",
    ];
    let mut ours = vec!["bench", "serve", "--gguf", TINY_GGUF];
    ours.extend(args);
    let report: Value = serde_json::from_slice(&roformer_ok(&ours).stdout).unwrap();
    assert_eq!(report["target"], "roformer serve");
    assert_exact_completions(&report, &[1, 2], 3, 12);

    // The llama-cpp target's requests (min_tokens, repeat_penalty) against any OpenAI
    // completions server: ours ignores those fields, and this prompt does not reach an end
    // token in 12 greedy tokens.
    let server = ServeChild::start(&["--gguf", TINY_GGUF]);
    let mut peer = vec![
        "bench",
        "serve",
        "--target",
        "llama-cpp",
        "--url",
        &server.url,
    ];
    peer.extend(args);
    let report: Value = serde_json::from_slice(&roformer_ok(&peer).stdout).unwrap();
    assert_eq!(report["target"], "llama-cpp-python server");
    assert_exact_completions(&report, &[1, 2], 3, 12);
}

#[test]
fn a_short_run_reports_every_route_and_level() {
    let out = roformer_ok(&[
        "bench",
        "serve",
        "--requests",
        "6",
        "--concurrency",
        "1,3",
        "--warmup",
        "1",
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["target"], "roformer serve");
    assert_eq!(report["bound"]["requests"], 6);
    let records = report["records"].as_array().unwrap();
    let keys: Vec<(String, u64)> = records
        .iter()
        .map(|r| {
            (
                r["route"].as_str().unwrap().to_owned(),
                r["concurrency"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = [
        ("embed", 1),
        ("embed", 3),
        ("fill-mask", 1),
        ("fill-mask", 3),
    ];
    assert_eq!(keys, want.map(|(r, c)| (r.to_owned(), c)));
    for r in records {
        assert_eq!(
            (r["requests"].as_u64(), r["ok"].as_u64()),
            (Some(6), Some(6)),
            "{r}"
        );
        assert!(r["errors"].as_object().unwrap().is_empty(), "{r}");
        let p = |k: &str| r[k].as_f64().unwrap();
        assert!(p("req_s") > 0.0 && p("p50_ms") > 0.0, "{r}");
        assert!(
            p("p50_ms") <= p("p95_ms") && p("p95_ms") <= p("p99_ms"),
            "{r}"
        );
        assert!(r.get("tokens_s").is_none(), "{r}");
    }
}

#[test]
fn several_lines_a_request_and_the_similarity_route() {
    let out = roformer_ok(&[
        "bench",
        "serve",
        "--routes",
        "embed,similarity",
        "--lines",
        "8",
        "--requests",
        "4",
        "--concurrency",
        "2",
        "--warmup",
        "0",
        "--json",
    ]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let records = report["records"].as_array().unwrap();
    let routes: Vec<&str> = records
        .iter()
        .map(|r| r["route"].as_str().unwrap())
        .collect();
    assert_eq!(routes, ["embed", "similarity"]);
    for r in records {
        assert_eq!(r["ok"], 4, "{r}");
    }
}
