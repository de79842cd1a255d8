//! The kill test of issues 19 and 34: `train mlm` killed with SIGKILL, SIGTERM and SIGINT, run
//! under coreutils `timeout`, and stopped by a process-group SIGTERM, at random moments and at
//! every point of a checkpoint save. After each kill, `--resume` continues from a complete
//! checkpoint, and every run, resumed until it finishes, ends with the weights of an
//! uninterrupted run, bit for bit.
//!
//! What is compared, and why it must be equal: `checkpoint/model.safetensors` and
//! `checkpoint/optimizer.safetensors` (the weights and AdamW's moments) of the finished run,
//! byte for byte. Step `s` of a run uses `lr_at(s)`, the micro-batches of step `s` and dropout
//! seeded by `(seed, s)`: a pure function of the run's options and the step
//! (`roformer::train::run`). A checkpoint holds the weights, the optimiser state and the step,
//! and saves are atomic, so a kill leaves the last checkpoint whole; a resume from step `k`
//! then does exactly what the uninterrupted run did from step `k`, whichever steps the kill
//! threw away (they are done again, identically). A kill "on a save boundary" and one between
//! saves (here every 3 steps) both must end equal; SIGINT and SIGTERM even save at a step that
//! is no boundary, which must not change the result either.
//!
//! Random moments: a delay drawn uniformly over the time an uninterrupted run takes (scaled
//! to the steps still to do), the five kinds of kill in turn; the seed is printed
//! (`ROFORMER_KILL_SEED` replays it). Two of the kinds deliver one request twice, microseconds
//! apart, as schedulers do: `TIMEOUT` runs the command under `timeout DELAY` (which sends
//! SIGTERM to its child and then to its process group), `GROUP` sends SIGTERM to the process
//! group (`kill -TERM -PGID`) and to the process. Both must stop the run as one SIGTERM does,
//! never quit at once: after them the checkpoint of a completed step is in place
//! (`checkpoint/`, not set aside), or the run says that nothing was saved. Save points: the fault-injection hook
//! `ROFORMER_TEST_PAUSE_IN_SAVE=6:POINT` holds the save after step 6 right after POINT and
//! says so on stderr; the test sends the signal then, so the kill lands exactly there, not
//! where a timer happens to fall. SIGKILL ends the process at that point; SIGINT and SIGTERM
//! let the save finish and stop the run after it.
//!
//! `every_kill_leaves_a_run_that_resume_finishes_with_the_uninterrupted_weights` does a CI-sized
//! share (30 random kills, six of each kind, and the 12 save points); the `#[ignore]`d
//! `kill_test_full` does `ROFORMER_KILL_COUNT` random kills (default 200), for
//! RELIABILITY.md.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use test_support::SplitMix64;

use crate::common::roformer_ok;
use crate::train::{tiny_run, TinyRun};

/// Steps of every run; a checkpoint every [`SAVE_EVERY`] of them.
const STEPS: u64 = 12;
const SAVE_EVERY: &str = "3";

/// The kinds of kill: three signals, as `kill -s` names them; `timeout DELAY`; SIGTERM to the
/// process group and to the process.
const SIGNALS: [&str; 5] = ["KILL", "TERM", "INT", "TIMEOUT", "GROUP"];

/// How one killed process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Killed by the signal (SIGKILL; SIGTERM or SIGINT before their handlers were set).
    Died,
    /// Handled the signal: finished its step, saved and stopped (SIGINT exits 0, SIGTERM 1).
    Stopped,
    /// Finished the run before the signal came.
    Finished,
}

/// Counts per kind of kill, in the order of [`SIGNALS`].
#[derive(Debug, Default)]
struct Tally {
    sent: [usize; 5],
    died: [usize; 5],
    stopped: [usize; 5],
    /// Processes that finished before their signal came (not counted as kills).
    finished_first: usize,
    /// `--resume` runs started after a kill (each then finished or was killed in turn; none
    /// failed).
    resumed: usize,
    /// Kills before the first checkpoint: `--resume` refused cleanly and the run started over.
    started_over: usize,
    /// Runs resumed to the end, all with the uninterrupted run's weights.
    runs_matched: usize,
}

impl Tally {
    fn kills(&self) -> usize {
        self.sent.iter().sum()
    }

    fn record(&mut self, signal: usize, ending: Ending) {
        self.sent[signal] += 1;
        match ending {
            Ending::Died => self.died[signal] += 1,
            Ending::Stopped => self.stopped[signal] += 1,
            Ending::Finished => {}
        }
    }

    fn report(&self) -> String {
        let per_signal = (0..SIGNALS.len())
            .map(|i| {
                format!(
                    "{}: {} sent, {} died, {} stopped after saving",
                    SIGNALS[i], self.sent[i], self.died[i], self.stopped[i]
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        format!(
            "{} kills ({per_signal}); {} resumes after a kill, none failed; {} kills came before \
             the first checkpoint (started over); {} processes finished before their signal; {} \
             runs finished, all with the uninterrupted weights",
            self.kills(),
            self.resumed,
            self.started_over,
            self.finished_first,
            self.runs_matched
        )
    }
}

/// A tiny MLM run's setting: config, vocabulary and corpus, and the uninterrupted run.
struct Setup {
    run: TinyRun,
    dir: PathBuf,
    /// The uninterrupted run's weights and optimiser state.
    expected: (Vec<u8>, Vec<u8>),
    /// How long the uninterrupted run took.
    span: Duration,
}

impl Setup {
    fn new(name: &str) -> Self {
        let run = tiny_run(name);
        let mut setup = Setup {
            dir: run.dir.to_path_buf(),
            run,
            expected: (Vec::new(), Vec::new()),
            span: Duration::ZERO,
        };
        let straight = setup.dir.join("straight");
        let started = Instant::now();
        roformer_ok(&as_strs(&setup.fresh_args(&straight)));
        setup.span = started.elapsed();
        setup.expected = final_state(&straight);
        setup
    }

    /// `train mlm` into `out` from scratch.
    fn fresh_args(&self, out: &Path) -> Vec<String> {
        // Short steps and a short final evaluation: the test is about kills, not training.
        self.run
            .mlm(out, "12")
            .set("--warmup", "2")
            .set("--save-every", SAVE_EVERY)
            .set("--seq-len", "32")
            .set("--batch", "4")
            .set("--eval-batches", "2")
            .0
    }
}

fn resume_args(out: &Path) -> Vec<String> {
    [
        "train",
        "mlm",
        "--resume",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]
    .map(String::from)
    .to_vec()
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The finished run's weights and optimiser state.
fn final_state(out: &Path) -> (Vec<u8>, Vec<u8>) {
    let read = |name: &str| std::fs::read(out.join("checkpoint").join(name)).unwrap();
    (read("model.safetensors"), read("optimizer.safetensors"))
}

/// The step of the checkpoint in `out`, or of one a killed save set aside (which `--resume`
/// puts back), if any.
fn saved_step(out: &Path) -> Option<u64> {
    let step = |dir: &Path| -> Option<u64> {
        let text = std::fs::read_to_string(dir.join("trainer_state.json")).ok()?;
        serde_json::from_str::<serde_json::Value>(&text).ok()?["step"].as_u64()
    };
    step(&out.join("checkpoint")).or_else(|| {
        std::fs::read_dir(out)
            .ok()?
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".checkpoint.old-")
            })
            .find_map(|e| step(&e.path()))
    })
}

fn spawn(args: &[String], env: Option<(&str, String)>) -> Child {
    spawn_as(args, env, "TERM", Duration::ZERO)
}

/// Spawns `roformer args` for the kind of kill `kind`: under `timeout DELAY` for `TIMEOUT`, in a
/// process group of its own for `GROUP`, plainly for the others.
fn spawn_as(args: &[String], env: Option<(&str, String)>, kind: &str, delay: Duration) -> Child {
    use std::os::unix::process::CommandExt;
    let binary = env!("CARGO_BIN_EXE_roformer");
    let mut command = match kind {
        "TIMEOUT" => {
            let mut c = Command::new("timeout");
            c.arg(format!("{:.3}s", delay.as_secs_f64())).arg(binary);
            c
        }
        _ => Command::new(binary),
    };
    command
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if kind == "GROUP" {
        command.process_group(0);
    }
    if let Some((var, value)) = env {
        command.env(var, value);
    }
    command.spawn().unwrap()
}

fn send(child: &mut Child, signal: &str) {
    match signal {
        // A child that already exited but is not yet reaped takes the signal harmlessly.
        "KILL" => {
            let _ = child.kill();
        }
        // `timeout` sends its own.
        "TIMEOUT" => {}
        // The process group (the child leads its own), then the process: one request delivered
        // twice, microseconds apart, as a scheduler's group kill and `timeout` deliver it.
        "GROUP" => {
            let pid = child.id() as i32;
            // SAFETY: `kill` only sends a signal; the ids are of our own child and its group.
            let sent = unsafe {
                (
                    libc::kill(-pid, libc::SIGTERM),
                    libc::kill(pid, libc::SIGTERM),
                )
            };
            assert_eq!(sent, (0, 0), "kill -TERM -{pid}");
        }
        _ => {
            let sent = Command::new("kill")
                .args(["-s", signal, &child.id().to_string()])
                .status()
                .unwrap();
            assert!(sent.success(), "kill -s {signal}");
        }
    }
}

/// How a process sent `signal` ended; panics on any other ending (an error exit, a crash, a
/// forced exit after a request that came once but was delivered twice).
fn ending(status: ExitStatus, stderr: &str, signal: &str, out: &Path) -> Ending {
    use std::os::unix::process::ExitStatusExt;
    assert!(
        !stderr.contains("quitting at once") && !stderr.contains("quitting once"),
        "{signal}: one request read as two: {stderr}"
    );
    let number = match signal {
        "KILL" => 9,
        "INT" => 2,
        _ => 15,
    };
    let finished = || saved_step(out) == Some(STEPS);
    let stopped = stderr.contains("stopped by SIGTERM");
    match (signal, status.signal(), status.code()) {
        (_, Some(s), _) if s == number => Ending::Died,
        (_, None, Some(0)) if finished() => Ending::Finished,
        ("INT", None, Some(0)) => Ending::Stopped,
        ("TERM" | "GROUP", None, Some(1)) if stopped => Ending::Stopped,
        // `timeout` exits 124 when its time ran out: the run stopped, or died of SIGTERM
        // before its handler was set (then it wrote nothing of a stop).
        ("TIMEOUT", None, Some(124)) if stopped => Ending::Stopped,
        // The signal came after the last step's evaluation: the run finished (exit 0), but
        // `timeout`'s time ran out all the same.
        ("TIMEOUT", None, Some(124)) if finished() => Ending::Finished,
        ("TIMEOUT", None, Some(124)) if !stderr.contains("stopping") => Ending::Died,
        _ => panic!("{signal}: ended with {status:?}: {stderr}"),
    }
}

/// After a run stopped by a request: the checkpoint of a completed step is in place (a resume
/// loads it next), or the run said that nothing was saved and there is none.
fn check_kept(out: &Path, stderr: &str, signal: &str) {
    if stderr.contains("nothing was saved") {
        assert_eq!(saved_step(out), None, "{signal}: {stderr}");
        return;
    }
    let step = saved_step(out).unwrap_or(0);
    assert!(
        step >= 1 && out.join("checkpoint/trainer_state.json").is_file(),
        "{signal}: no checkpoint in place after a stop: {stderr}"
    );
    assert!(
        stderr.contains(&format!("(step {step}")),
        "{signal}: the message names another step than {step}: {stderr}"
    );
}

/// Waits for `child`, collecting its stderr.
fn finish(child: Child) -> (ExitStatus, String) {
    let output = child.wait_with_output().unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// One run into `out`, killed at random moments until a process of it finishes; returns when
/// it has, having checked its final weights.
fn killed_run(setup: &Setup, out: &Path, rng: &mut SplitMix64, tally: &mut Tally, budget: usize) {
    let mut kills = 0;
    loop {
        let before = saved_step(out);
        let args = match before {
            Some(_) => resume_args(out),
            None => {
                let _ = std::fs::remove_dir_all(out);
                setup.fresh_args(out)
            }
        };
        if before.is_some() && kills > 0 {
            tally.resumed += 1;
        }
        let remaining = STEPS - before.unwrap_or(0);
        let span = setup.span.as_micros() as u64 * (remaining + 1) / (STEPS + 1);
        let delay = Duration::from_micros(rng.below(span));
        let signal = tally.kills() % SIGNALS.len();
        if kills == budget {
            // Enough kills for this run: let it finish.
            let (status, stderr) = finish(spawn(&args, None));
            assert!(status.success(), "the last resume: {stderr}");
            break;
        }
        let mut child = spawn_as(&args, None, SIGNALS[signal], delay);
        let started = Instant::now();
        let mut exited = None;
        while started.elapsed() < delay && exited.is_none() && SIGNALS[signal] != "TIMEOUT" {
            std::thread::sleep(Duration::from_millis(1));
            exited = child.try_wait().unwrap();
        }
        let end = match exited {
            // The run ended before its signal (`try_wait` reaped it: nothing to send to).
            Some(status) => {
                let (_, stderr) = finish(child);
                assert!(status.success(), "ended before its signal: {stderr}");
                Ending::Finished
            }
            None => {
                send(&mut child, SIGNALS[signal]);
                let (status, stderr) = finish(child);
                let end = ending(status, &stderr, SIGNALS[signal], out);
                if end == Ending::Stopped {
                    check_kept(out, &stderr, SIGNALS[signal]);
                }
                end
            }
        };
        if end == Ending::Finished {
            tally.finished_first += 1;
            break;
        }
        tally.record(signal, end);
        kills += 1;
        let after = saved_step(out);
        // A kill never loses a checkpoint that was there, nor goes back to an older one.
        assert!(
            after >= before,
            "SIG{}: {before:?} -> {after:?}",
            SIGNALS[signal]
        );
        if after.is_none() {
            refused_without_a_checkpoint(out);
            tally.started_over += 1;
        }
    }
    assert!(
        final_state(out) == setup.expected,
        "{}: final weights differ",
        out.display()
    );
    tally.runs_matched += 1;
}

/// A run killed before its first checkpoint: `--resume` says there is nothing to resume
/// (a clean error, not a crash); the caller starts over.
fn refused_without_a_checkpoint(out: &Path) {
    if !out.exists() {
        return;
    }
    let (status, stderr) = finish(spawn(&resume_args(out), None));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no checkpoint to resume") || stderr.contains("run.json"),
        "{stderr}"
    );
}

/// Random kills, spread over as many runs as it takes, until `count` have landed.
fn random_kills(setup: &Setup, count: usize, seed: u64, tally: &mut Tally) {
    let mut rng = SplitMix64::new(seed);
    let mut run = 0;
    while tally.kills() < count {
        let out = setup.dir.join(format!("random-{run}"));
        let budget = (count - tally.kills()).min(8);
        killed_run(setup, &out, &mut rng, tally, budget);
        std::fs::remove_dir_all(&out).unwrap();
        run += 1;
    }
}

/// Each signal at each point of the save after step 6 (the second save: the first has no
/// previous checkpoint to set aside), then a resume to the end.
fn save_point_kills(setup: &Setup, tally: &mut Tally) {
    for point in ["first-file", "written", "moved-aside", "renamed"] {
        for (signal, name) in SIGNALS.iter().enumerate().take(3) {
            let out = setup.dir.join(format!("save-{point}-{name}"));
            let hook = ("ROFORMER_TEST_PAUSE_IN_SAVE", format!("6:{point}"));
            let mut child = spawn(&setup.fresh_args(&out), Some(hook));
            let stderr = child.stderr.take().unwrap();
            let mut lines = BufReader::new(stderr).lines();
            let paused = lines
                .by_ref()
                .map_while(Result::ok)
                .any(|l| l.contains("test hook: paused after"));
            assert!(paused, "{point} SIG{name}: the save never paused");
            send(&mut child, name);
            let rest: Vec<String> = lines.map_while(Result::ok).collect();
            let status = child.wait().unwrap();
            let end = ending(status, &rest.join("\n"), name, &out);
            let at = format!("{point} SIG{name}");
            match end {
                // Killed inside the save: the last checkpoint (step 3) or, once renamed, the
                // new one (step 6); between the renames the old one lies aside.
                Ending::Died => {
                    let expected = if point == "renamed" { 6 } else { 3 };
                    assert_eq!(saved_step(&out), Some(expected), "{at}");
                    assert_eq!(
                        out.join("checkpoint").exists(),
                        point != "moved-aside",
                        "{at}"
                    );
                }
                // The save went on; the run stopped after it.
                Ending::Stopped => assert_eq!(saved_step(&out), Some(6), "{at}"),
                Ending::Finished => panic!("{at}: finished while its save was paused"),
            }
            tally.record(signal, end);
            roformer_ok(&as_strs(&resume_args(&out)));
            tally.resumed += 1;
            assert!(
                final_state(&out) == setup.expected,
                "{at}: final weights differ"
            );
            let leftovers: Vec<_> = std::fs::read_dir(&out)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".checkpoint."))
                .collect();
            assert!(leftovers.is_empty(), "{at}: {leftovers:?}");
            tally.runs_matched += 1;
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
}

fn seed() -> u64 {
    std::env::var("ROFORMER_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(19)
}

#[test]
fn every_kill_leaves_a_run_that_resume_finishes_with_the_uninterrupted_weights() {
    let setup = Setup::new("kills");
    let mut tally = Tally::default();
    save_point_kills(&setup, &mut tally);
    assert_eq!(tally.kills(), 12);
    // Six of each of the five kinds, `timeout` and the group kill among them.
    random_kills(&setup, 12 + 30, seed(), &mut tally);
    eprintln!("seed {}: {}", seed(), tally.report());
}

/// The full kill test: `ROFORMER_KILL_COUNT` random kills (default 200) and the 12 save points.
#[test]
#[ignore = "minutes long; run by hand for RELIABILITY.md"]
fn kill_test_full() {
    let count = std::env::var("ROFORMER_KILL_COUNT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let setup = Setup::new("kills-full");
    let mut tally = Tally::default();
    save_point_kills(&setup, &mut tally);
    let at_save_points = tally.kills();
    random_kills(&setup, at_save_points + count, seed(), &mut tally);
    eprintln!(
        "seed {}, uninterrupted run {:.2} s: {} at the save points, then {count} at random \
         moments: {}",
        seed(),
        setup.span.as_secs_f64(),
        at_save_points,
        tally.report()
    );
}
