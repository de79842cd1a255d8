//! Issue 34: stop requests inside a long step, and a second request that quits at once.
//!
//! - A stop between the micro-batches of a step (a large `--grad-accum`) is honoured at the
//!   next micro-batch: the checkpoint of the last completed step is saved with the micro-batches
//!   of the step in progress, and `--resume` continues that step, ending with the weights of an
//!   uninterrupted run, bit for bit.
//! - With 2^40 micro-batches a step, a stop before the first step completes ends the run at
//!   once, saying that nothing was saved.
//! - A second SIGTERM a second or more after the first quits at once (status 143), keeping the
//!   last checkpoint; between the two renames of a save it waits for the second, so
//!   `checkpoint/` is never missing.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::roformer_ok;
use crate::train::{tiny_run, Args, TinyRun};

/// `roformer args` with stderr piped (stdout discarded), and `env` set.
fn spawn(args: &Args, env: &[(&str, &str)]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_roformer"));
    command
        .args(args.strs())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (var, value) in env {
        command.env(var, value);
    }
    command.spawn().unwrap()
}

fn term(child: &Child) {
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// `out/checkpoint/trainer_state.json`.
fn trainer_state(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("checkpoint/trainer_state.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The finished run's weights and optimiser state.
fn final_state(out: &Path) -> (Vec<u8>, Vec<u8>) {
    let read = |name: &str| std::fs::read(out.join("checkpoint").join(name)).unwrap();
    (read("model.safetensors"), read("optimizer.safetensors"))
}

/// The steps logged in `out/metrics.jsonl`.
fn logged_steps(out: &Path) -> usize {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(r#""event":"step""#))
        .count()
}

/// A short masked-LM run of `steps` steps of `accum` micro-batches (batch 2 of 32 tokens).
fn accumulating(t: &TinyRun, out: &Path, steps: &str, accum: &str) -> Args {
    t.mlm(out, steps)
        .set("--seq-len", "32")
        .set("--batch", "2")
        .set("--warmup", "0")
        .set("--eval-batches", "1")
        .set("--grad-accum", accum)
}

#[test]
fn a_stop_inside_a_long_step_saves_the_last_step_with_its_micro_batches_and_resume_ends_equal() {
    let t = tiny_run("stop-mid-step");
    let (straight, stopped) = (t.dir.join("straight"), t.dir.join("stopped"));
    let accum = 48;
    roformer_ok(&accumulating(&t, &straight, "3", &accum.to_string()).strs());
    let args = accumulating(&t, &stopped, "3", &accum.to_string());
    let child = spawn(&args, &[]);
    let started = Instant::now();
    while logged_steps(&stopped) < 1 {
        assert!(started.elapsed() < Duration::from_secs(120), "no step");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Step 2 is under way (48 micro-batches): stop it part-way. A fast machine may be in
    // step 3 by then; the checks below read the step the stop landed in.
    std::thread::sleep(Duration::from_millis(20));
    term(&child);
    let signalled = Instant::now();
    let output = child.wait_with_output().unwrap();
    let waited = signalled.elapsed();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    let state = trainer_state(&stopped);
    let done = state["step"].as_u64().unwrap_or(0);
    assert!((1..3).contains(&done), "stopped inside step 2 or 3: {err}");
    let micro = state["partial"]["micro_batches"].as_u64().unwrap_or(0);
    assert!(
        (1..accum).contains(&micro),
        "a step in progress is saved: {state}"
    );
    assert!(stopped.join("checkpoint/accumulated.safetensors").is_file());
    assert!(
        err.contains(&format!("stopped by SIGTERM after step {done}"))
            && err.contains(&format!(
                "with the {micro} micro-batches of step {}",
                done + 1
            )),
        "{err}"
    );
    // Honoured at the next micro-batch, not at the end of the step.
    assert!(waited < Duration::from_secs(20), "took {waited:?}: {err}");
    let o = stopped.to_str().unwrap();
    roformer_ok(&["train", "mlm", "--resume", "--out", o, "--json"]);
    assert!(
        final_state(&stopped) == final_state(&straight),
        "the resumed run ends with the uninterrupted weights"
    );
    assert!(!stopped.join("checkpoint/accumulated.safetensors").exists());
}

#[test]
fn a_stop_inside_an_endless_first_step_ends_at_once_and_says_nothing_was_saved() {
    let t = tiny_run("stop-endless-step");
    let out = t.dir.join("run");
    let args = accumulating(&t, &out, "1", "1099511627776");
    let child = spawn(&args, &[]);
    let started = Instant::now();
    while !out.join("run.json").is_file() {
        assert!(started.elapsed() < Duration::from_secs(120), "no start");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(300));
    term(&child);
    let signalled = Instant::now();
    let output = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(signalled.elapsed() < Duration::from_secs(20), "{err}");
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        err.contains("stopped by SIGTERM before the first step completed")
            && err.contains("nothing was saved"),
        "{err}"
    );
    assert!(!out.join("checkpoint").exists());
}

/// A run of 12 steps saving every 3, whose save after step 6 the test hook holds for 3 s at
/// `point`: SIGTERM, then SIGTERM again 1.2 s later.
fn second_request_during_a_save(t: &TinyRun, point: &str) -> (std::process::Output, String) {
    let out = t.dir.join(format!("forced-{point}"));
    let args = t
        .mlm(&out, "12")
        .set("--seq-len", "32")
        .set("--batch", "4")
        .set("--save-every", "3")
        .set("--eval-batches", "1");
    let hold = format!("6:{point}");
    let mut child = spawn(&args, &[("ROFORMER_TEST_HOLD_IN_SAVE", &hold)]);
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let held = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("test hook: held after"));
    assert!(held, "{point}: the save was never held");
    term(&child);
    std::thread::sleep(Duration::from_millis(1200));
    term(&child);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let output = child.wait_with_output().unwrap();
    (output, rest.join("\n"))
}

#[test]
fn a_second_request_a_second_later_quits_at_once_and_keeps_the_last_checkpoint() {
    let t = tiny_run("forced-exit");
    // Before the renames: the checkpoint of step 3 stays; the new one is left half made.
    let (output, err) = second_request_during_a_save(&t, "first-file");
    let out = t.dir.join("forced-first-file");
    assert_eq!(output.status.code(), Some(143), "{err}");
    assert!(
        err.contains("SIGTERM again, 1 s or more after the first: quitting at once")
            && err.contains("the checkpoint of step 3 is kept"),
        "{err}"
    );
    assert_eq!(trainer_state(&out)["step"], 3);
    // Between the renames: the exit waits for the second, and the new checkpoint is in place.
    let (output, err) = second_request_during_a_save(&t, "moved-aside");
    let out = t.dir.join("forced-moved-aside");
    assert_eq!(output.status.code(), Some(143), "{err}");
    assert!(
        err.contains("quitting once the checkpoint being saved is renamed into place")
            && err.contains("the checkpoint of step 6 is kept"),
        "{err}"
    );
    assert_eq!(trainer_state(&out)["step"], 6);
    // Both resume to the end; the resume clears what the forced exits left.
    for point in ["first-file", "moved-aside"] {
        let out = t.dir.join(format!("forced-{point}"));
        let o = out.to_str().unwrap();
        roformer_ok(&["train", "mlm", "--resume", "--out", o, "--json"]);
        assert_eq!(trainer_state(&out)["step"], 12, "{point}");
        let leftovers = std::fs::read_dir(&out)
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy().starts_with(".checkpoint.")
            })
            .count();
        assert_eq!(leftovers, 0, "{point}");
    }
}
