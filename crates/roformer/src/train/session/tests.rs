//! [`fit`] on a tiny model and the poetry sample: it trains, checkpoints, stops on the flag
//! and resumes to the uninterrupted run's result.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::data::{build_vocab, read_corpus, VocabOptions};
use crate::train::params::Trainable;
use crate::train::run::{read_trainer_state, StepMetrics};
use candle_core::{DType, Tensor};
use test_support::Scratch;

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

fn options<'a>(out: &Path, model: &'a ModelStart, resume: bool) -> TrainRun<'a> {
    let data = MlmDataOptions {
        corpus: vec![poetry()],
        seq_len: 32,
        validation_fraction: 0.1,
        batch_size: 8,
        seed: 1,
        max_eval_batches: 2,
        ..MlmDataOptions::default()
    };
    TrainRun {
        options: TrainOptions {
            steps: Some(12),
            lr: 1e-2,
            decay: Decay::Constant,
            seed: 1,
            ..TrainOptions::default()
        },
        resume,
        ..TrainRun::new(out, model, TaskOptions::MaskedLm(data))
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

fn scratch(name: &str) -> Scratch {
    Scratch::new("roformer-fit", name)
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
}

/// The tensor `name` of a dump's `batches.safetensors`, row `step`, flattened.
fn dumped(batches: &std::collections::HashMap<String, Tensor>, name: &str, step: usize) -> Tensor {
    batches[name].get(step).unwrap()
}

/// The loss of the model in the checkpoint `dir` on step `step` of a dump's batches, in
/// training mode without dropout.
fn loss_on(dir: &Path, batches: &std::collections::HashMap<String, Tensor>, step: usize) -> f64 {
    let start = ModelStart::from_checkpoint(dir).unwrap();
    let t: Trainable<RoFormerForMaskedLM> =
        build_trainable(&start.config, start.weights.as_ref(), 99, &Device::Cpu).unwrap();
    assert!(
        t.initialised.is_empty(),
        "every weight from {}",
        dir.display()
    );
    let ids = |name| dumped(batches, name, step).to_dtype(DType::U32).unwrap();
    let (input_ids, types, mask) = (
        ids("input_ids"),
        ids("token_type_ids"),
        ids("attention_mask"),
    );
    let labels = dumped(batches, "labels", step).flatten_all().unwrap();
    let out = crate::train::mlm_loss(
        &t.model,
        crate::train::BatchInputs {
            input_ids: &input_ids,
            token_type_ids: Some(&types),
            attention_mask: Some(&mask),
        },
        &labels.to_vec1::<i64>().unwrap(),
        crate::Mode::Train {
            dropout: &crate::Dropout::disabled(),
            precision: crate::Precision::F32,
        },
    )
    .unwrap();
    f64::from(out.loss.to_scalar::<f32>().unwrap())
}

#[test]
fn a_dump_holds_the_initial_weights_and_the_batches_each_loss_was_computed_on() {
    let mut start = tiny_start();
    start.config.hidden_dropout_prob = 0.0;
    start.config.attention_probs_dropout_prob = 0.0;
    let (out, again) = (scratch("dump"), scratch("dump-again"));
    let dir = out.join("trajectory");
    let mut dumping = options(&out, &start, false);
    dumping.dump = Some(DumpOptions {
        dir: dir.clone(),
        steps: 3,
    });
    let never = AtomicBool::new(false);
    let mut seen = Recorder::new(&never, None);
    fit(&dumping, &mut seen, &never).unwrap();
    assert_eq!(seen.steps.len(), 12, "the dump does not shorten the run");

    // run.json: the run's settings and its first three steps as the observer saw them.
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    let column = |key: &str| -> Vec<f64> {
        let values = record[key].as_array().unwrap();
        values.iter().map(|v| v.as_f64().unwrap()).collect()
    };
    let firsts = |f: fn(&StepMetrics) -> f64| seen.steps[..3].iter().map(f).collect::<Vec<_>>();
    // JSON's decimal round trip may move the last bit of an f64.
    let same = |a: Vec<f64>, b: Vec<f64>| {
        a.len() == b.len()
            && a.iter()
                .zip(&b)
                .all(|(x, y)| (x - y).abs() <= 1e-12 * y.abs())
    };
    assert!(same(column("losses"), firsts(|m| m.loss)));
    assert!(same(column("lrs"), firsts(|m| m.lr)));
    assert!(same(column("grad_norms"), firsts(|m| m.grad_norm)));
    assert_eq!(record["model"], "RoFormerForMaskedLM");
    assert_eq!(record["total_steps"], 12);
    assert_eq!(record["decay"], "constant");
    assert_eq!(record["max_grad_norm"], 1.0);
    assert_eq!(record["weight_decay"], 0.01);

    // batches.safetensors: four [steps, batch, seq] int64 tensors, a different batch a step.
    let batches =
        candle_core::safetensors::load(dir.join("batches.safetensors"), &Device::Cpu).unwrap();
    for name in ["input_ids", "token_type_ids", "attention_mask", "labels"] {
        assert_eq!(batches[name].dims(), [3, 8, 32], "{name}");
        assert_eq!(batches[name].dtype(), DType::I64, "{name}");
    }
    let labels = |step| dumped(&batches, "labels", step).flatten_all().unwrap();
    let labels: Vec<Vec<i64>> = (0..3).map(|s| labels(s).to_vec1().unwrap()).collect();
    assert!(labels[0] != labels[1] && labels[1] != labels[2]);
    assert!(labels
        .iter()
        .all(|l| l.contains(&crate::train::IGNORE) && l.iter().any(|&x| x >= 0)));

    // Step 1's loss is init/'s on batch 0; step 2's is the step-1 checkpoint's on batch 1
    // (a second run stopped after step 1). Same code path: agreement to f32 rounding.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs();
    let first = loss_on(&dir.join("init"), &batches, 0);
    assert!(
        close(first, seen.steps[0].loss),
        "{first} {}",
        seen.steps[0].loss
    );
    let stop = AtomicBool::new(false);
    let mut stopped = Recorder::new(&stop, Some(1));
    fit(&options(&again, &start, false), &mut stopped, &stop).unwrap();
    let second = loss_on(&checkpoint_dir(&again), &batches, 1);
    assert!(
        close(second, seen.steps[1].loss),
        "{second} {}",
        seen.steps[1].loss
    );
    assert!(!close(
        loss_on(&checkpoint_dir(&again), &batches, 2),
        seen.steps[1].loss
    ));
}

#[test]
fn a_dump_refuses_a_resumed_run_and_accumulated_micro_batches() {
    let start = tiny_start();
    let out = scratch("dump-refused");
    let never = AtomicBool::new(false);
    let dump = Some(DumpOptions {
        dir: out.join("trajectory"),
        steps: 2,
    });
    let mut accumulating = options(&out, &start, false);
    accumulating.options.grad_accum = 2;
    accumulating.dump = dump.clone();
    let err = fit(&accumulating, &mut Recorder::new(&never, None), &never).unwrap_err();
    assert!(
        err.to_string().contains("accumulates 2 micro-batches"),
        "{err}"
    );
    let mut zero = options(&out, &start, false);
    zero.dump = Some(DumpOptions {
        dir: out.join("trajectory"),
        steps: 0,
    });
    let err = fit(&zero, &mut Recorder::new(&never, None), &never).unwrap_err();
    assert!(err.to_string().contains("0 steps"), "{err}");
    let mut resumed = options(&out, &start, true);
    resumed.dump = dump;
    let err = fit(&resumed, &mut Recorder::new(&never, None), &never).unwrap_err();
    assert!(err.to_string().contains("resumed run"), "{err}");
    assert!(!out.join("trajectory").exists() && !checkpoint_dir(&out).exists());
}

/// Where [`StopAt`] sets the stop flag.
#[derive(Clone, Copy)]
enum StopPoint {
    /// While micro-batch `index` (global) runs: the next check is before the one after it.
    Micro(u64),
    /// When the evaluation after `step` steps begins: it is abandoned at its first batch.
    Eval(u64),
}

/// A task that sets the stop flag at a [`StopPoint`], as a signal arriving there would.
struct StopAt<'a, T: Task> {
    inner: T,
    stop: &'a AtomicBool,
    at: StopPoint,
}

impl<T: Task> Task for StopAt<'_, T> {
    fn micro_batch_loss(
        &self,
        index: u64,
        dropout: &crate::mode::Dropout,
        grads: &crate::ParamGrads,
    ) -> Result<(Tensor, usize), TrainError> {
        if let StopPoint::Micro(at) = self.at {
            if index == at {
                self.stop.store(true, Ordering::SeqCst);
            }
        }
        self.inner.micro_batch_loss(index, dropout, grads)
    }

    fn evaluate(
        &self,
        step: u64,
        stop: &AtomicBool,
    ) -> Result<crate::train::run::Evaluation, TrainError> {
        if let StopPoint::Eval(at) = self.at {
            if step == at {
                self.stop.store(true, Ordering::SeqCst);
            }
        }
        self.inner.evaluate(step, stop)
    }

    fn model_files(&self) -> Result<Vec<(String, Vec<u8>)>, TrainError> {
        self.inner.model_files()
    }
}

/// A fresh masked-LM run of `options` whose task stops at `at` (what [`fit_mlm`] does, with
/// the task wrapped).
fn drive_stopping(run: &TrainRun<'_>, at: StopPoint, seen: &mut Recorder<'_>) -> Finished {
    let start = run.model;
    let TaskOptions::MaskedLm(data_options) = &run.task else {
        unreachable!("a masked-LM run");
    };
    let trainable: Trainable<RoFormerForMaskedLM> =
        build_trainable(&start.config, None, run.options.seed, &Device::Cpu).unwrap();
    let data = prepare_mlm_data(&start.tokenizer, data_options).unwrap();
    let task = MlmTask {
        model: &trainable.model,
        params: &trainable.params,
        data: &data,
        max_eval_batches: data_options.max_eval_batches,
        tokenizer_files: tokenizer_files(&start.tokenizer, &start.config).unwrap(),
        precision: run.options.precision,
    };
    let stop = seen.stop;
    let task = StopAt {
        inner: task,
        stop,
        at,
    };
    let record = task_record(data_options).unwrap();
    let steps = run.options.steps.unwrap();
    drive(
        &run.settings(),
        task,
        &trainable.params,
        steps,
        record,
        seen,
        stop,
    )
    .unwrap()
    .0
}

/// `options` of `accum` micro-batches a step, evaluating every 2 steps.
fn accumulating<'a>(out: &Path, model: &'a ModelStart, accum: usize, resume: bool) -> TrainRun<'a> {
    let run = options(out, model, resume);
    TrainRun {
        options: TrainOptions {
            steps: Some(4),
            grad_accum: accum,
            eval_every: 2,
            ..run.options.clone()
        },
        ..run
    }
}

/// A stop between the micro-batches of step 3 saves step 2 with the micro-batches of step 3
/// done; the resume continues step 3 at its next micro-batch and ends bit for bit as the
/// uninterrupted run, its step-3 loss and all.
#[test]
fn a_stop_between_micro_batches_saves_them_and_the_resume_ends_bit_for_bit() {
    let start = tiny_start();
    let (whole, split) = (scratch("accum-whole"), scratch("accum-split"));
    let never = AtomicBool::new(false);
    let mut seen = Recorder::new(&never, None);
    fit(&accumulating(&whole, &start, 4, false), &mut seen, &never).unwrap();
    let losses: Vec<f64> = seen.steps.iter().map(|m| m.loss).collect();

    let stop = AtomicBool::new(false);
    let mut seen = Recorder::new(&stop, None);
    // Global micro-batch 9 is the second of step 3 (0-based: step 2, micro 1).
    let stopped = drive_stopping(
        &accumulating(&split, &start, 4, false),
        StopPoint::Micro(9),
        &mut seen,
    );
    assert_eq!(stopped.outcome, Outcome::Stopped(2));
    assert_eq!(stopped.accumulated, 2);
    let state = read_trainer_state(&checkpoint_dir(&split)).unwrap();
    assert_eq!(state.step, 2);
    assert_eq!(state.partial.as_ref().map(|p| p.micro_batches), Some(2));
    assert!(checkpoint_dir(&split)
        .join("accumulated.safetensors")
        .is_file());

    let resumed_start = ModelStart::from_checkpoint(&checkpoint_dir(&split)).unwrap();
    let go = AtomicBool::new(false);
    let mut seen = Recorder::new(&go, None);
    let resumed = fit(
        &accumulating(&split, &resumed_start, 4, true),
        &mut seen,
        &go,
    )
    .unwrap();
    assert_eq!(resumed.outcome, Outcome::Finished);
    assert!(weights(&split) == weights(&whole), "the same final weights");
    let optimizer = |out: &Path| std::fs::read(checkpoint_dir(out).join("optimizer.safetensors"));
    assert!(optimizer(&split).unwrap() == optimizer(&whole).unwrap());
    let rest: Vec<f64> = seen.steps.iter().map(|m| m.loss).collect();
    assert_eq!(rest.len(), 2);
    assert!(
        (rest[0] - losses[2]).abs() <= 1e-12 * losses[2].abs(),
        "{rest:?} {losses:?}"
    );
    assert_eq!(rest[1], losses[3]);
    assert!(!checkpoint_dir(&split)
        .join("accumulated.safetensors")
        .exists());
}

/// A stop before the first step completes saves nothing; one that comes as an evaluation
/// begins abandons it and saves the step; the resume runs that evaluation first.
#[test]
fn a_stop_in_the_first_step_saves_nothing_and_one_in_an_evaluation_abandons_it() {
    let start = tiny_start();
    let out = scratch("stop-first");
    let stop = AtomicBool::new(false);
    let mut seen = Recorder::new(&stop, None);
    let stopped = drive_stopping(
        &accumulating(&out, &start, 4, false),
        StopPoint::Micro(1),
        &mut seen,
    );
    assert_eq!(stopped.outcome, Outcome::Stopped(0));
    assert!(seen.saved.is_empty() && !checkpoint_dir(&out).exists());

    let (whole, split) = (scratch("eval-whole"), scratch("eval-split"));
    let never = AtomicBool::new(false);
    let mut seen = Recorder::new(&never, None);
    let done = fit(&accumulating(&whole, &start, 1, false), &mut seen, &never).unwrap();
    let stop = AtomicBool::new(false);
    let mut seen = Recorder::new(&stop, None);
    let stopped = drive_stopping(
        &accumulating(&split, &start, 1, false),
        StopPoint::Eval(2),
        &mut seen,
    );
    assert_eq!(stopped.outcome, Outcome::Stopped(2));
    let state = read_trainer_state(&checkpoint_dir(&split)).unwrap();
    assert_eq!(state.step, 2);
    assert!(
        state.last_eval.is_none(),
        "the evaluation at step 2 was abandoned"
    );

    let resumed_start = ModelStart::from_checkpoint(&checkpoint_dir(&split)).unwrap();
    let go = AtomicBool::new(false);
    let mut seen = Recorder::new(&go, None);
    let resumed = fit(
        &accumulating(&split, &resumed_start, 1, true),
        &mut seen,
        &go,
    )
    .unwrap();
    assert_eq!(resumed.outcome, Outcome::Finished);
    // Saved after the evaluation the resume ran first, and at the end.
    assert_eq!(seen.saved.len(), 2);
    assert!(weights(&split) == weights(&whole));
    assert_eq!(resumed.last_eval, done.last_eval);
}
