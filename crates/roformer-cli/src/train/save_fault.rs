//! The save's fault-injection test hooks: stop a run at an exact point of a checkpoint save,
//! so that tests can kill it there instead of hoping a timer lands in a window of
//! microseconds.
//!
//! - `ROFORMER_TEST_ABORT_IN_SAVE=STEP:POINT` aborts the process, as a kill would end it, right
//!   after POINT of the save after step STEP.
//! - `ROFORMER_TEST_PAUSE_IN_SAVE=STEP:POINT` prints `test hook: paused after POINT of the save
//!   at step STEP` to stderr and waits there until the run is asked to stop (Ctrl-C, SIGTERM or
//!   SIGHUP; then the save goes on, and the run stops after it) or 60 s pass; a test sends the
//!   signal it wants, SIGKILL included, while the save is held at that point.
//! - `ROFORMER_TEST_HOLD_IN_SAVE=STEP:POINT` prints `test hook: held after POINT of the save at
//!   step STEP` and holds the save there for [`HOLD`] (3 s) whatever comes, as a slow disk
//!   would: a test sends a stop request and, a second or more later, a second one, which quits
//!   at once ([`roformer_runner::train::signals`]).
//!
//! POINT is one of `first-file`, `written`, `moved-aside` or `renamed` ([`SaveStep`]). Both
//! work in any build; without them the save runs straight through.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use roformer::train::checkpoint::SaveStep;

/// The environment variable of the abort hook.
pub const ABORT_IN_SAVE_VAR: &str = "ROFORMER_TEST_ABORT_IN_SAVE";

/// The environment variable of the pause hook.
pub const PAUSE_IN_SAVE_VAR: &str = "ROFORMER_TEST_PAUSE_IN_SAVE";

/// The environment variable of the hold hook.
pub const HOLD_IN_SAVE_VAR: &str = "ROFORMER_TEST_HOLD_IN_SAVE";

/// How long the hold hook holds a save.
const HOLD: Duration = Duration::from_secs(3);

/// The longest a paused save waits for a signal.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// What the hook does at its point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// Abort the process.
    Abort,
    /// Wait for a stop request (or [`MAX_PAUSE`]), then go on.
    Pause,
    /// Wait [`HOLD`], whatever comes, then go on.
    Hold,
}

/// A fault at one point of one save, from [`ABORT_IN_SAVE_VAR`] or [`PAUSE_IN_SAVE_VAR`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultInSave {
    /// The steps done when the save runs.
    pub step: u64,
    /// The point of the save.
    pub point: SaveStep,
    /// What happens there.
    pub action: FaultAction,
}

/// `STEP:POINT`.
fn parse(s: &str) -> Result<(u64, SaveStep), String> {
    let names = || {
        SaveStep::ALL
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (step, point) = s
        .split_once(':')
        .ok_or_else(|| format!("expected STEP:POINT, got {s:?}"))?;
    let step = step
        .parse()
        .map_err(|_| format!("STEP must be a number of steps, got {step:?}"))?;
    let point = SaveStep::ALL
        .into_iter()
        .find(|p| p.name() == point)
        .ok_or_else(|| format!("POINT must be one of {}, got {point:?}", names()))?;
    Ok((step, point))
}

impl FaultInSave {
    /// The hook the environment asks for, if any.
    ///
    /// # Errors
    /// A value that is not `STEP:POINT`, or both variables set.
    pub fn from_env() -> anyhow::Result<Option<Self>> {
        let mut found = None;
        for (var, action) in [
            (ABORT_IN_SAVE_VAR, FaultAction::Abort),
            (PAUSE_IN_SAVE_VAR, FaultAction::Pause),
            (HOLD_IN_SAVE_VAR, FaultAction::Hold),
        ] {
            let Ok(value) = std::env::var(var) else {
                continue;
            };
            if found.is_some() {
                anyhow::bail!(
                    "set one of {ABORT_IN_SAVE_VAR}, {PAUSE_IN_SAVE_VAR} and {HOLD_IN_SAVE_VAR}, \
                     not two"
                );
            }
            let (step, point) = parse(&value).map_err(|e| anyhow::anyhow!("{var}={value}: {e}"))?;
            found = Some(Self {
                step,
                point,
                action,
            });
        }
        Ok(found)
    }

    /// The trainer's save hook: acts at this point of this step's save; `stop` is the run's
    /// stop flag, which ends a pause.
    pub fn hook(self, stop: &AtomicBool) -> impl Fn(u64, SaveStep) + '_ {
        move |step, point| {
            if step != self.step || point != self.point {
                return;
            }
            match self.action {
                FaultAction::Abort => {
                    eprintln!(
                        "test hook: aborting after {} of the save at step {step}",
                        point.name()
                    );
                    std::process::abort();
                }
                FaultAction::Pause => {
                    eprintln!(
                        "test hook: paused after {} of the save at step {step}",
                        point.name()
                    );
                    let started = Instant::now();
                    while !stop.load(Ordering::SeqCst) && started.elapsed() < MAX_PAUSE {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                FaultAction::Hold => {
                    eprintln!(
                        "test hook: held after {} of the save at step {step}",
                        point.name()
                    );
                    std::thread::sleep(HOLD);
                }
            }
        }
    }
}
