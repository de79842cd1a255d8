//! Starting a server in-process and reading what it logged.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use roformer::images::processor::ImageProcessor;
use roformer::vision::VisionModelDir;
use roformer::{ModelDir, Precision, RoFormerTokenizer};
use roformer_serve::{Backend, LlamaModel, Models, ServeConfig, Server, VisionBackend};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The test checkpoints: a masked LM and a 3-label classifier (rotary, hidden 32, 2 layers,
/// `max_position_embeddings` 64). Their vocabularies are the special tokens, then the CJK
/// characters from U+4E00 on (一丁丂七丄丅丆万丈三上下...).
/// `Reranker` is the classifier cut to its first label (a cross-encoder), written once per
/// process to a temporary directory.
#[derive(Debug, Clone, Copy)]
pub enum Model {
    MaskedLm,
    Classifier,
    Reranker,
}

fn fixture(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../roformer/tests/fixtures/roundtrip")
        .join(case)
}

fn model_dir(model: Model) -> PathBuf {
    match model {
        Model::MaskedLm => fixture("mlm_rotary"),
        Model::Classifier => fixture("seq_cls"),
        Model::Reranker => reranker_dir().clone(),
    }
}

/// The 3-label classifier fixture with only its first label: `classifier.out_proj` cut to its
/// first row, `num_labels` 1.
fn reranker_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let from = fixture("seq_cls");
        let dir =
            std::env::temp_dir().join(format!("roformer-serve-reranker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for file in ["vocab.txt", "tokenizer_config.json"] {
            std::fs::copy(from.join(file), dir.join(file)).unwrap();
        }
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(from.join("config.json")).unwrap())
                .unwrap();
        config["num_labels"] = 1.into();
        config["id2label"] = serde_json::json!({"0": "LABEL_0"});
        config["label2id"] = serde_json::json!({"LABEL_0": 0});
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let mut tensors = candle_core::safetensors::load(
            from.join("model.safetensors"),
            &candle_core::Device::Cpu,
        )
        .unwrap();
        for name in ["classifier.out_proj.weight", "classifier.out_proj.bias"] {
            let cut = tensors[name].narrow(0, 0, 1).unwrap().contiguous().unwrap();
            tensors.insert(name.to_owned(), cut);
        }
        candle_core::safetensors::save(&tensors, dir.join("model.safetensors")).unwrap();
        dir
    })
}

/// A running server.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Every access log line so far.
    pub logs: Arc<Mutex<Vec<String>>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), roformer_serve::ServeError>>>,
    pub client: reqwest::Client,
}

/// A config for tests: port 0, otherwise `config`.
pub fn config() -> ServeConfig {
    ServeConfig {
        port: 0,
        ..ServeConfig::default()
    }
}

/// The tiny GGUF LLaMA of the llama crate's tests (64-token byte-level BPE vocabulary,
/// ChatML template, context 128; written by scripts/make_tiny_llama.py).
pub fn tiny_gguf() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../llama/tests/fixtures/tiny-llama/tiny.gguf")
}

/// The model of `model`, loaded as the server loads it.
pub fn backend(model: Model) -> Backend {
    let dir = model_dir(model);
    let md = ModelDir::open(&dir).unwrap();
    let tokenizer = RoFormerTokenizer::from_dir(&dir).unwrap();
    Backend::load(dir.display().to_string(), &md, tokenizer, Precision::F32).unwrap()
}

/// Starts `model` with `config` (its port replaced by 0).
pub async fn start(model: Model, config: ServeConfig) -> TestServer {
    start_models(backend(model).into(), config).await
}

/// Starts the masked LM with the tiny GGUF LLaMA for the completion routes.
pub async fn start_with_gguf(config: ServeConfig) -> TestServer {
    let models = Models {
        encoder: backend(Model::MaskedLm),
        generator: Some(LlamaModel::load(&tiny_gguf()).unwrap()),
        vision: None,
    };
    start_models(models, config).await
}

/// The vision models of the image tests.
#[derive(Debug, Clone, Copy)]
pub enum Vision {
    /// The CLI's built-in Fashion-MNIST classifier (28 x 28 grey, patches of 4, 10 labels),
    /// read from its directory with its processor (which resizes every image to 28 x 28).
    Fashion,
    /// The roformer crate's tiny random DINOv3 backbone (RGB, patches of 4, hidden 32), with a
    /// processor that keeps each image's size (rescale and normalise only).
    Backbone,
}

/// The vision model of `vision`, loaded as the server loads it.
pub fn vision_backend(vision: Vision) -> VisionBackend {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let (dir, processor) = match vision {
        Vision::Fashion => {
            let dir = root.join("../roformer-builtin/assets/fashion-model");
            let processor = ImageProcessor::from_path(&dir.join("preprocessor_config.json"));
            (dir, processor.unwrap())
        }
        Vision::Backbone => {
            let keep_size = r#"{"do_resize": false, "do_rescale": true,
                "rescale_factor": 0.00392156862745098, "do_normalize": true,
                "image_mean": [0.5, 0.5, 0.5], "image_std": [0.25, 0.25, 0.25]}"#;
            let dir = root.join("../roformer/tests/fixtures/vision/base");
            (dir, ImageProcessor::from_json(keep_size).unwrap())
        }
    };
    let md = VisionModelDir::open(&dir).unwrap();
    VisionBackend::load(dir.display().to_string(), &md, processor).unwrap()
}

/// Starts the masked LM with `vision` for the image routes.
pub async fn start_with_vision(vision: Vision, config: ServeConfig) -> TestServer {
    let models = Models {
        encoder: backend(Model::MaskedLm),
        generator: None,
        vision: Some(vision_backend(vision)),
    };
    start_models(models, config).await
}

/// The bytes of a committed image: `cli/NAME` from the CLI's fixtures (28 x 28 grey PNGs),
/// `roformer/NAME` from the roformer crate's, `serve/NAME` from this crate's.
pub fn image_bytes(name: &str) -> Vec<u8> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let path = match name.split_once('/') {
        Some(("cli", file)) => root
            .join("../roformer-cli/tests/fixtures/images")
            .join(file),
        Some(("roformer", file)) => root.join("../roformer/tests/fixtures/images").join(file),
        Some(("serve", file)) => root.join("tests/fixtures").join(file),
        _ => panic!("no image fixture {name}"),
    };
    std::fs::read(path).unwrap()
}

async fn start_models(models: Models, config: ServeConfig) -> TestServer {
    let logs = Arc::new(Mutex::new(Vec::new()));
    let sink = logs.clone();
    let log = Arc::new(move |line: &str| sink.lock().unwrap().push(line.to_owned()));
    let server = Server::bind(ServeConfig { port: 0, ..config }, models, log)
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    TestServer {
        base,
        logs,
        stop: Some(stop),
        task: Some(task),
        client: reqwest::Client::new(),
    }
}

impl TestServer {
    /// POSTs `body` (JSON) to `path`: the status and the parsed JSON answer (Null if none).
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// POSTs raw `bytes` to `path` with `content_type` (none if empty): the status and the
    /// parsed JSON answer (Null if none).
    pub async fn post_bytes(&self, path: &str, content_type: &str, bytes: Vec<u8>) -> (u16, Value) {
        let mut request = self.client.post(format!("{}{path}", self.base)).body(bytes);
        if !content_type.is_empty() {
            request = request.header("content-type", content_type);
        }
        let r = request.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// POSTs `body` to `path` on a full server and asserts the refusal: at once (within
    /// 500 ms), 429 with `Retry-After: 1` and an `Overloaded` error, whose message it returns.
    pub async fn post_overloaded(&self, path: &str, body: &Value) -> String {
        let started = std::time::Instant::now();
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "answered at once"
        );
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["retry-after"], "1");
        let e: Value = r.json().await.unwrap();
        error_of(&e, "Overloaded")
    }

    /// GETs `path`: the status and the body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    /// Starts the shutdown and waits until the server has drained (at most 10 s).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("the server drains within 10 s")
                .unwrap()
                .unwrap();
        }
    }

    /// The access log so far, one line per request.
    pub fn log_text(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }
}

/// Asserts `answer` is an error body of `error_type`, and returns its message.
pub fn error_of(answer: &Value, error_type: &str) -> String {
    assert_eq!(answer["error_type"], error_type, "{answer}");
    answer["error"].as_str().unwrap().to_owned()
}

/// The numbers of a JSON array.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// How far a text's numbers may move with what it is batched with, absolute (see
/// `batching::batched_answers_equal_unbatched_ones`; measured: 1.0e-7 on unit vectors, 1.9e-6
/// on fill-mask probabilities, where the softmax scales the logits' last-bit differences).
pub const TOLERANCE: f64 = 1e-5;
