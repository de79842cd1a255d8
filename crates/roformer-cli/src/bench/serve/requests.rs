//! The requests of `bench serve`: one body shape per route, the same for our server and the
//! FastAPI peer (`scripts/serve_peer_fastapi.py`). Request `i` takes poem line `i % 8`; a
//! fill-mask request masks one character of it, which one cycling with `i / 8`.

use serde::Serialize;
use serde_json::json;

use super::load::Workload;

/// A route that `bench serve` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Route {
    /// `POST /embed` with one text, `normalize: true`.
    Embed,
    /// `POST /fill-mask` with one text holding one `[MASK]`, `top_k: 5`.
    FillMask,
    /// `POST /v1/completions` (a server started with `--gguf`): greedy, `--max-tokens` tokens.
    Completions,
}

impl Route {
    /// The route's path.
    pub fn path(self) -> &'static str {
        match self {
            Route::Embed => "/embed",
            Route::FillMask => "/fill-mask",
            Route::Completions => "/v1/completions",
        }
    }
}

/// The texts: lines of Tang poems, in the built-in model's vocabulary.
const LINES: [&str; 8] = [
    "床前明月光，疑是地上霜。",
    "举头望明月，低头思故乡。",
    "白日依山尽，黄河入海流。",
    "欲穷千里目，更上一层楼。",
    "春眠不觉晓，处处闻啼鸟。",
    "夜来风雨声，花落知多少。",
    "两个黄鹂鸣翠柳，一行白鹭上青天。",
    "国破山河在，城春草木深。",
];

/// Prompts of the completions route (English: the GGUF default is SmolLM2).
const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "The three primary colours are",
    "A good way to learn a language is",
];

/// The requests of one route against one server.
pub struct RouteLoad {
    url: String,
    route: Route,
    max_tokens: u32,
}

impl RouteLoad {
    /// Requests of `route` to the server at `base` (`http://HOST:PORT`); `max_tokens` is the
    /// completion length.
    pub fn new(base: &str, route: Route, max_tokens: u32) -> RouteLoad {
        RouteLoad {
            url: format!("{}{}", base.trim_end_matches('/'), route.path()),
            route,
            max_tokens,
        }
    }
}

/// `line` with its character number `n` (modulo its length) replaced by `[MASK]`.
fn masked(line: &str, n: usize) -> String {
    let count = line.chars().count().max(1);
    line.chars()
        .enumerate()
        .map(|(j, c)| {
            if j == n % count {
                "[MASK]".to_owned()
            } else {
                c.to_string()
            }
        })
        .collect()
}

impl Workload for RouteLoad {
    fn url(&self) -> &str {
        &self.url
    }

    fn body(&self, i: u64) -> String {
        let line = LINES[(i % LINES.len() as u64) as usize];
        let value = match self.route {
            Route::Embed => json!({ "inputs": line, "normalize": true }),
            Route::FillMask => json!({
                "inputs": masked(line, (i / LINES.len() as u64) as usize),
                "parameters": { "top_k": 5 },
            }),
            Route::Completions => json!({
                "prompt": PROMPTS[(i % PROMPTS.len() as u64) as usize],
                "max_tokens": self.max_tokens,
                "temperature": 0.0,
                "seed": 0,
            }),
        };
        value.to_string()
    }

    fn generates(&self) -> bool {
        self.route == Route::Completions
    }

    /// `usage.completion_tokens` of an OpenAI completion (0 when absent).
    fn tokens(&self, answer: &[u8]) -> u64 {
        serde_json::from_slice::<serde_json::Value>(answer)
            .ok()
            .and_then(|v| v["usage"]["completion_tokens"].as_u64())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_mask_bodies_hold_one_mask_and_cycle_through_the_characters() {
        let load = RouteLoad::new("http://h:1/", Route::FillMask, 0);
        assert_eq!(load.url(), "http://h:1/fill-mask");
        let first: serde_json::Value = serde_json::from_str(&load.body(0)).unwrap();
        assert_eq!(first["inputs"], "[MASK]前明月光，疑是地上霜。");
        assert_eq!(first["parameters"]["top_k"], 5);
        let ninth: serde_json::Value = serde_json::from_str(&load.body(8)).unwrap();
        assert_eq!(ninth["inputs"], "床[MASK]明月光，疑是地上霜。");
        for i in 0..200 {
            assert_eq!(load.body(i).matches("[MASK]").count(), 1);
        }
    }

    #[test]
    fn embed_and_completion_bodies() {
        let embed = RouteLoad::new("http://h:1", Route::Embed, 0);
        assert_eq!(
            embed.body(1),
            r#"{"inputs":"举头望明月，低头思故乡。","normalize":true}"#
        );
        assert!(!embed.generates());
        let gen = RouteLoad::new("http://h:1", Route::Completions, 16);
        let body: serde_json::Value = serde_json::from_str(&gen.body(0)).unwrap();
        assert_eq!(body["max_tokens"], 16);
        assert_eq!(gen.tokens(br#"{"usage":{"completion_tokens":16}}"#), 16);
        assert_eq!(gen.tokens(b"not json"), 0);
    }
}
