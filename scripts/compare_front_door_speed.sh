#!/usr/bin/env bash
# Speed before and after issue 36 (the front doors, the experiments crate, one home each), which
# asked that no speed be lost: the rope, model, train and llama benchmarks of two revisions,
# run alternating (before, after, before, after, ...) so that slow phases of a shared machine
# hit both alike, as issue 22's comparison did (BENCHMARKS.md, "Before and after the
# architecture change").
#
#   scripts/compare_front_door_speed.sh BEFORE AFTER [bench_before_after.py options]
#   scripts/compare_front_door_speed.sh 3b3091a HEAD \
#       --gguf data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --rounds 2
#
# 3b3091a is the last commit before issue 36's work (4a2b9c6, "Experiments out of the binary",
# is its first). Each revision is exported with `git archive` into
# $SPEED_DIR/src-<commit> and built there (`cargo build --release -p roformer-cli`) into its
# own target directory, $SPEED_DIR/target-<commit> (default SPEED_DIR: target/front-door-speed;
# a build already there is reused). scripts/bench_before_after.py then runs the two binaries
# alternating and prints, per case, the median of each and after / before as a Markdown table;
# the options after AFTER go to it (--rounds N, --gguf FILE for the llama case, --only NAME,
# --json FILE, --quick for a smoke run whose figures are not a measurement). Without --gguf the
# llama case is left out.
#
# Run it on a quiet machine (pause anything else that computes, `kill -STOP`), and name the CPU
# beside the figures (the script prints `lscpu`'s model name first).
set -euo pipefail

if [ $# -lt 2 ]; then
    sed -n '2,22p' "$0" >&2
    exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
before="$1"
after="$2"
shift 2
work="${SPEED_DIR:-$root/target/front-door-speed}"
mkdir -p "$work"

# The release binary of revision $1, built in its own source and target directories; its path
# on stdout, cargo's output on stderr.
build() {
    local commit src target
    commit="$(git -C "$root" rev-parse --short=12 "$1^{commit}")"
    src="$work/src-$commit"
    target="$work/target-$commit"
    if [ ! -f "$src/Cargo.toml" ]; then
        rm -rf "$src"
        mkdir -p "$src"
        git -C "$root" archive "$commit" | tar -x -C "$src"
    fi
    echo "building $1 ($commit) in $target" >&2
    CARGO_INCREMENTAL=0 cargo build --release -p roformer-cli \
        --manifest-path "$src/Cargo.toml" --target-dir "$target" >&2
    echo "$target/release/roformer"
}

before_bin="$(build "$before")"
after_bin="$(build "$after")"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "before: $before ($("$before_bin" --version 2>/dev/null || echo "$before_bin"))"
echo "after:  $after ($("$after_bin" --version 2>/dev/null || echo "$after_bin"))"
python3 "$root/scripts/bench_before_after.py" --before "$before_bin" --after "$after_bin" "$@"
