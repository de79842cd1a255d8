//! [`fit`] on a tiny model and the poetry sample: it trains, checkpoints, stops on the flag
//! and resumes to the uninterrupted run's result.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::data::{build_vocab, read_corpus, VocabOptions};
use crate::train::run::{read_trainer_state, StepMetrics};

fn poetry() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/poetry")
}

/// A 2-layer, width-32 RoFormer over the sample's vocabulary, fresh.
fn tiny_start() -> ModelStart {
    let documents = read_corpus(&poetry(), None).unwrap();
    let options = VocabOptions::new(3000);
    let built = build_vocab(&documents, &options).unwrap();
    let tokenizer = RoFormerTokenizer::new(built.vocab(), options.config.clone()).unwrap();
    let config = RoFormerConfig::from_json_str(&format!(
        r#"{{"vocab_size": {}, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 64,
            "max_position_embeddings": 64}}"#,
        tokenizer.vocab_size()
    ))
    .unwrap();
    ModelStart {
        config,
        tokenizer,
        weights: None,
    }
}

fn options<'a>(out: &Path, model: &'a ModelStart, resume: bool) -> TrainOptions<'a> {
    TrainOptions {
        out: out.to_path_buf(),
        model,
        task: TaskOptions::MaskedLm(MlmDataOptions {
            corpus: vec![poetry()],
            format: None,
            seq_len: 32,
            packed: true,
            validation_fraction: 0.1,
            batch_size: 8,
            seed: 1,
            whole_word: false,
            max_eval_batches: 2,
            also_simplified: false,
            line_share: 0.0,
            alone_share: 0.0,
        }),
        steps: Some(12),
        grad_accum: 1,
        lr: 1e-2,
        warmup: 0,
        decay: Decay::Constant,
        weight_decay: 0.01,
        max_grad_norm: Some(1.0),
        seed: 1,
        eval_every: 0,
        save_every: 0,
        precision: Precision::F32,
        resume,
        save_hook: None,
    }
}

/// Records the steps and saves; sets the stop flag after step `stop_after`.
struct Recorder<'a> {
    steps: Vec<StepMetrics>,
    saved: Vec<PathBuf>,
    started: Option<(u64, u64)>,
    stop: &'a AtomicBool,
    stop_after: Option<u64>,
}

impl<'a> Recorder<'a> {
    fn new(stop: &'a AtomicBool, stop_after: Option<u64>) -> Self {
        Self {
            steps: Vec::new(),
            saved: Vec::new(),
            started: None,
            stop,
            stop_after,
        }
    }
}

impl Observer for Recorder<'_> {
    fn starting(&mut self, done: u64, total: u64) -> Result<(), TrainError> {
        self.started = Some((done, total));
        Ok(())
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Step(m) => {
                if Some(m.step) == self.stop_after {
                    self.stop.store(true, Ordering::SeqCst);
                }
                self.steps.push(m);
            }
            Event::Saved(path) => self.saved.push(path),
            Event::Eval(_) => {}
        }
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roformer-fit-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn weights(out: &Path) -> Vec<u8> {
    std::fs::read(checkpoint_dir(out).join("model.safetensors")).unwrap()
}

#[test]
fn a_run_trains_checkpoints_stops_and_resumes_to_the_same_result() {
    let start = tiny_start();
    let (whole, split) = (scratch("whole"), scratch("split"));

    // Uninterrupted: 12 steps, the loss falls, one checkpoint at the end.
    let never = AtomicBool::new(false);
    let mut seen = Recorder::new(&never, None);
    let done = fit(&options(&whole, &start, false), &mut seen, &never).unwrap();
    assert_eq!(done.outcome, Outcome::Finished);
    assert_eq!(done.steps, 12);
    assert_eq!(seen.started, Some((0, 12)));
    let losses: Vec<f64> = seen.steps.iter().map(|m| m.loss).collect();
    let mean = |l: &[f64]| l.iter().sum::<f64>() / l.len() as f64;
    assert!(
        mean(&losses[9..]) < mean(&losses[..3]) - 0.5,
        "the loss falls by more than 0.5 nat in 12 steps: {losses:?}"
    );
    assert_eq!(seen.saved, [checkpoint_dir(&whole)]);
    assert_eq!(
        read_trainer_state(&checkpoint_dir(&whole)).unwrap().step,
        12
    );
    assert!(done.last_eval.is_some(), "validation at the end");

    // Stopped by the flag after step 5: a checkpoint at step 5, nothing more.
    let stop = AtomicBool::new(false);
    let mut seen = Recorder::new(&stop, Some(5));
    let stopped = fit(&options(&split, &start, false), &mut seen, &stop).unwrap();
    assert_eq!(stopped.outcome, Outcome::Stopped(5));
    assert_eq!(seen.steps.len(), 5);
    assert_eq!(read_trainer_state(&checkpoint_dir(&split)).unwrap().step, 5);
    assert_eq!(
        &losses[..5],
        seen.steps.iter().map(|m| m.loss).collect::<Vec<_>>()
    );

    // Resumed from that checkpoint: steps 6 to 12 repeat the uninterrupted run bit for bit.
    let resumed_start = ModelStart::from_checkpoint(&checkpoint_dir(&split)).unwrap();
    let go = AtomicBool::new(false);
    let mut seen = Recorder::new(&go, None);
    let resumed = fit(&options(&split, &resumed_start, true), &mut seen, &go).unwrap();
    assert_eq!(resumed.outcome, Outcome::Finished);
    assert_eq!(seen.started, Some((5, 12)));
    let rest: Vec<f64> = seen.steps.iter().map(|m| m.loss).collect();
    assert_eq!(rest, losses[5..], "the same losses after the resume");
    assert!(weights(&split) == weights(&whole), "the same final weights");
    assert_eq!(resumed.last_eval, done.last_eval);

    let _ = std::fs::remove_dir_all(&whole);
    let _ = std::fs::remove_dir_all(&split);
}

#[test]
fn an_observer_refusal_stops_the_run_before_anything_is_written() {
    struct Refuse;
    impl Observer for Refuse {
        fn prepared(&mut self, run: &Prepared<'_>) -> Result<(), TrainError> {
            assert!(!run.from_checkpoint);
            assert_eq!(run.initialised.len(), run.params.vars().len());
            Err(TrainError::Observer("not this run".into()))
        }
        fn event(&mut self, _: Event) {
            panic!("no event after a refusal");
        }
    }
    let start = tiny_start();
    let out = scratch("refused");
    let never = AtomicBool::new(false);
    let err = fit(&options(&out, &start, false), &mut Refuse, &never).unwrap_err();
    assert_eq!(err.to_string(), "not this run");
    assert!(!checkpoint_dir(&out).exists());
    let _ = std::fs::remove_dir_all(&out);
}
