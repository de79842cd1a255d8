//! The requests of `bench serve`: one body shape per route, the same for our server and the
//! FastAPI peer (`scripts/serve_peer_fastapi.py`). Request `i` takes poem line `i % 8` (and
//! with `--lines N`, an `/embed` request the `N` lines from there on, cycling; a
//! `/similarity` request compares line `i % 8` with the `N` after it); a fill-mask request
//! masks one character of it, which one cycling with `i / 8`. A completion
//! takes prompt `i % 4`, greedy, and asks for exactly `max_tokens` tokens in the words of its
//! server: `ignore_eos` for ours, `min_tokens` for llama-cpp-python's.

use serde::Serialize;
use serde_json::json;

use super::load::{Tokens, Workload};
use super::Target;

/// A route that `bench serve` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Route {
    /// `POST /embed` with `--lines` texts (default one), `normalize: true`.
    Embed,
    /// `POST /similarity` with one source sentence and `--lines` sentences (ours only): the
    /// forward pass of `/embed` with `--lines` + 1 texts, and an answer of `--lines` numbers.
    Similarity,
    /// `POST /fill-mask` with one text holding one `[MASK]`, `top_k: 5`.
    FillMask,
    /// `POST /v1/completions` (a server started with `--gguf`, or llama-cpp-python's): greedy,
    /// `--max-tokens` tokens.
    Completions,
}

impl Route {
    /// The route's path.
    pub fn path(self) -> &'static str {
        match self {
            Route::Embed => "/embed",
            Route::Similarity => "/similarity",
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
    target: Target,
    max_tokens: u32,
    lines: usize,
}

impl RouteLoad {
    /// Requests of `route` to `target`'s server at `base` (`http://HOST:PORT`); `max_tokens` is
    /// the completion length, `lines` the texts of an `/embed` request (the sentences of a
    /// `/similarity` one).
    pub fn new(
        base: &str,
        route: Route,
        target: Target,
        max_tokens: u32,
        lines: usize,
    ) -> RouteLoad {
        RouteLoad {
            url: format!("{}{}", base.trim_end_matches('/'), route.path()),
            route,
            target,
            max_tokens,
            lines: lines.max(1),
        }
    }

    /// The `n` lines from line `i % 8` on, cycling.
    fn lines_from(i: u64, n: usize) -> Vec<&'static str> {
        (0..n)
            .map(|k| LINES[(i as usize + k) % LINES.len()])
            .collect()
    }

    /// A greedy completion of `prompt` of exactly `max_tokens` tokens, as `target` is asked
    /// for one.
    fn completion(&self, prompt: &str) -> serde_json::Value {
        let mut body = json!({
            "prompt": prompt,
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "seed": 0,
        });
        match self.target {
            Target::Ours | Target::Peer => body["ignore_eos"] = json!(true),
            Target::LlamaCpp => {
                body["min_tokens"] = json!(self.max_tokens);
                body["repeat_penalty"] = json!(1.0);
            }
        }
        body
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
            Route::Embed if self.lines == 1 => json!({ "inputs": line, "normalize": true }),
            Route::Embed => json!({
                "inputs": Self::lines_from(i, self.lines),
                "normalize": true,
            }),
            Route::Similarity => json!({
                "inputs": {
                    "source_sentence": line,
                    "sentences": Self::lines_from(i + 1, self.lines),
                },
            }),
            Route::FillMask => json!({
                "inputs": masked(line, (i / LINES.len() as u64) as usize),
                "parameters": { "top_k": 5 },
            }),
            Route::Completions => self.completion(PROMPTS[(i % PROMPTS.len() as u64) as usize]),
        };
        value.to_string()
    }

    fn wanted_tokens(&self) -> Option<u64> {
        (self.route == Route::Completions).then_some(u64::from(self.max_tokens))
    }

    /// `usage.prompt_tokens` and `usage.completion_tokens` of an OpenAI completion (0 when
    /// absent).
    fn tokens(&self, answer: &[u8]) -> Tokens {
        let usage = serde_json::from_slice::<serde_json::Value>(answer)
            .map(|v| v["usage"].clone())
            .unwrap_or_default();
        let count = |key: &str| usage[key].as_u64().unwrap_or(0);
        Tokens {
            prompt: count("prompt_tokens"),
            completion: count("completion_tokens"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_mask_bodies_hold_one_mask_and_cycle_through_the_characters() {
        let load = RouteLoad::new("http://h:1/", Route::FillMask, Target::Ours, 0, 1);
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
        let embed = RouteLoad::new("http://h:1", Route::Embed, Target::Ours, 0, 1);
        assert_eq!(
            embed.body(1),
            r#"{"inputs":"举头望明月，低头思故乡。","normalize":true}"#
        );
        assert_eq!(embed.wanted_tokens(), None);
        let gen = RouteLoad::new("http://h:1", Route::Completions, Target::Ours, 16, 1);
        let body: serde_json::Value = serde_json::from_str(&gen.body(0)).unwrap();
        assert_eq!(body["max_tokens"], 16);
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["ignore_eos"], true);
        assert_eq!(gen.wanted_tokens(), Some(16));
        let usage = br#"{"usage":{"prompt_tokens":5,"completion_tokens":16}}"#;
        let tokens = gen.tokens(usage);
        assert_eq!((tokens.prompt, tokens.completion), (5, 16));
        let none = gen.tokens(b"not json");
        assert_eq!((none.prompt, none.completion), (0, 0));
    }

    #[test]
    fn several_lines_a_request() {
        let embed = RouteLoad::new("http://h:1", Route::Embed, Target::Ours, 0, 3);
        let body: serde_json::Value = serde_json::from_str(&embed.body(7)).unwrap();
        assert_eq!(
            body["inputs"],
            serde_json::json!([LINES[7], LINES[0], LINES[1]]),
            "cycling"
        );
        let sim = RouteLoad::new("http://h:1", Route::Similarity, Target::Ours, 0, 2);
        assert_eq!(sim.url(), "http://h:1/similarity");
        let body: serde_json::Value = serde_json::from_str(&sim.body(0)).unwrap();
        assert_eq!(body["inputs"]["source_sentence"], LINES[0]);
        assert_eq!(
            body["inputs"]["sentences"],
            serde_json::json!([LINES[1], LINES[2]])
        );
    }

    #[test]
    fn llama_cpp_is_asked_for_the_same_greedy_fixed_length_completion() {
        let ours = RouteLoad::new("http://h:1", Route::Completions, Target::Ours, 16, 1);
        let peer = RouteLoad::new("http://h:2", Route::Completions, Target::LlamaCpp, 16, 1);
        let ours: serde_json::Value = serde_json::from_str(&ours.body(3)).unwrap();
        let peer: serde_json::Value = serde_json::from_str(&peer.body(3)).unwrap();
        for key in ["prompt", "max_tokens", "temperature", "seed"] {
            assert_eq!(ours[key], peer[key], "{key}");
        }
        assert_eq!(peer["min_tokens"], 16, "the end token held back to the end");
        assert_eq!(peer["repeat_penalty"], 1.0, "no penalty: plain greedy");
        assert!(peer.get("ignore_eos").is_none());
    }
}
