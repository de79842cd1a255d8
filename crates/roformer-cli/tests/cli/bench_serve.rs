//! `roformer bench serve`: its refusals of unbounded or contradictory runs, and a short run
//! against the `roformer serve` it starts itself (no timing asserts).

use crate::common::{assert_each_fails, roformer_ok};

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
        ],
    );
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
