#!/usr/bin/env bash
# Fuzz one target for a while: scripts/fuzz.sh TARGET MINUTES [SEED]
#
# TARGET: config, vocab, safetensors, pickle, input, gguf, request, trainer-state, optimizer or
# run-json. The last three (the files `train --resume` reads) run on the in-tree fuzzer only;
# run-json runs the `roformer` binary, built here with the same profile.
#
# Where `cargo +nightly fuzz` works (cargo-fuzz installed), runs the libFuzzer target of the
# same name in fuzz/ (coverage-guided, with the in-tree structure-aware mutators; stops at
# the first crash, saved in fuzz/artifacts/TARGET/). Otherwise, or with FUZZ_ENGINE=builtin,
# runs the in-tree seeded mutation fuzzer (crates/roformer-fuzz), which needs only stable
# Rust: built with the `fuzz` profile (release optimisation with overflow checks), each input
# run in a worker process whose address space is capped at FUZZ_MEM_MB (default 4096) and
# whose time per input is capped at FUZZ_TIMEOUT_S seconds (default 5). Its findings
# (inputs that panicked, crashed or hung) go to crates/roformer-fuzz/findings/TARGET/; the
# exit code is 1 when there are any.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 TARGET MINUTES [SEED]" >&2
    exit 2
fi
target=$1
minutes=$2
seed=${3:-$(date +%s)}
mem_mb=${FUZZ_MEM_MB:-4096}
timeout_s=${FUZZ_TIMEOUT_S:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "fuzzing $target for $minutes min, seed $seed" >&2

case $target in
    trainer-state | optimizer | run-json) engine=builtin ;;
    *) engine=${FUZZ_ENGINE:-} ;;
esac

if [ "$engine" != builtin ] && cargo +nightly fuzz --version >/dev/null 2>&1; then
    seconds=$(awk "BEGIN { print int($minutes * 60) }")
    corpus=fuzz/corpus/$target
    if [ ! -d "$corpus" ]; then
        cargo run --profile fuzz -p roformer-fuzz -- "$target" --write-seeds "$corpus"
    fi
    cd fuzz
    exec cargo +nightly fuzz run "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb="$mem_mb" -timeout="$timeout_s" \
        -seed="$seed" -max_len=4194304
fi

cargo build --profile fuzz -p roformer-fuzz
if [ "$target" = run-json ]; then
    cargo build --profile fuzz -p roformer-cli
fi
# A cap for the fuzzer process too (its worker sets its own, lower one with RLIMIT_AS).
ulimit -v $(( (mem_mb + 1024) * 1024 ))
exec target/fuzz/roformer-fuzz "$target" --minutes "$minutes" --seed "$seed" \
    --mem-mb "$mem_mb" --timeout-s "$timeout_s"
