//! Ten steps of masked-LM training with `roformer::train::fit`: a tiny checkpoint of the tests
//! on the poetry sample (or `--corpus PATH`), the loss of each step printed, the checkpoint in
//! a temporary directory.
//!
//! `cargo run -p roformer --example train [-- PATH]`

use std::sync::atomic::AtomicBool;

use roformer::train::mlm::MlmDataOptions;
use roformer::train::run::Event;
use roformer::train::{fit, ModelStart, Observer, TaskOptions, TrainOptions, TrainRun};

/// Prints each step's loss and learning rate.
struct Print;

impl Observer for Print {
    fn event(&mut self, event: Event) {
        if let Event::Step(m) = event {
            println!("step {:>2}  loss {:.4}  lr {:.1e}", m.step, m.loss, m.lr);
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let corpus = std::env::args()
        .nth(1)
        .unwrap_or(format!("{fixtures}/poetry"));
    let model = ModelStart::from_checkpoint(format!("{fixtures}/roundtrip/mlm_rotary").as_ref())?;
    let data = MlmDataOptions {
        corpus: vec![corpus.into()],
        seq_len: 32,
        batch_size: 8,
        ..MlmDataOptions::default()
    };
    let out = std::env::temp_dir().join(format!("roformer-example-train-{}", std::process::id()));
    let options = TrainOptions {
        steps: Some(10),
        lr: 2e-3,
        warmup: 2,
        ..TrainOptions::default()
    };
    let run = TrainRun {
        options,
        ..TrainRun::new(&out, &model, TaskOptions::MaskedLm(data))
    };
    // Ctrl-C handling would set this flag; the run stops at its next micro-batch, saved.
    let stop = AtomicBool::new(false);
    let finished = fit(&run, &mut Print, &stop)?;
    println!(
        "{:?} after {} steps; checkpoint in {}",
        finished.outcome,
        finished.steps,
        out.join("checkpoint").display()
    );
    std::fs::remove_dir_all(&out)?;
    Ok(())
}
