#!/usr/bin/env python3
"""Reruns issue 11's list of hostile inputs against a `roformer` binary and prints a table.

Rows `19.N` are issue 19's training-run findings (data loss and clobbering): a resumed copy, what
`--overwrite` may delete, a kill at each step of a checkpoint save, two writers, SIGTERM; outputs
that are inputs (19.6), duplicate arms (19.8), what --resume checks (19.9), unchecked options
(19.10) and messages (19.msg); and its GGUF findings: NaN and huge weights (19.7), metadata
checks (19.11), `bench llama --repeats` (19.12), a FIFO (19.13) and a file truncated during the
load (19.14: a GGUF, and a RoFormer safetensors checkpoint).

Rows `34.N` are issue 34's: a run under `timeout` or a process-group SIGTERM keeps the checkpoint
of a completed step (34.1, with a second request that quits at once), a stop inside a long step
(34.2) and the evaluation of 10 002 labels (34.3).

Usage: scripts/rerun_robustness_findings.py [BIN]   (default: target/release/roformer)

Each case runs under `timeout 20` and a 4 GB address-space cap (`ulimit -v`), as the original
survey did. A case passes when the command ends the way the issue asks: a clear error (exit 1,
no panic, no backtrace, one message) or, for inputs that are valid, success with the promised
side effect (a truncation note, a kept FIFO, umask modes). Exit status 1 if any case fails.

Needs only the Python standard library; checkpoints are made from the committed fixtures in
`crates/roformer/tests/fixtures/model/` and the built-in model's files.
"""

import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "crates/roformer/tests/fixtures/model")
POETRY = os.path.join(ROOT, "crates/roformer-builtin/assets/poetry-model")
CORPUS = os.path.join(ROOT, "crates/roformer/tests/fixtures/poetry")
LIMIT_KB = 4_000_000
TIMEOUT_S = 20


def run(binary, args, cwd, env=None, umask=None):
    """Runs the binary with args; returns (rc, seconds, stdout, stderr)."""
    prefix = f"ulimit -v {LIMIT_KB}; "
    if umask is not None:
        prefix += f"umask {umask:03o}; "
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in [binary] + args)
    cmd = ["bash", "-c", f"{prefix}exec timeout {TIMEOUT_S} {quoted}"]
    full_env = dict(os.environ)
    full_env.pop("RUST_BACKTRACE", None)
    full_env.update(env or {})
    start = time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, env=full_env, capture_output=True)
    return (p.returncode, time.monotonic() - start,
            p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"))


def verdict_error(rc, err):
    """A clear error: exit 1, an `error:` line, no panic and no backtrace frames."""
    if rc != 1:
        return False, {101: "panic", 124: "timeout", 134: "abort", 137: "killed"}.get(
            rc, f"exit {rc}")
    if "panicked" in err or "stack backtrace" in err or "\n   0: " in err:
        return False, "backtrace"
    if not err.startswith("error:"):
        return False, "no error line"
    return True, "clear error"


# ---------------------------------------------------------------- checkpoint surgery

def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), 8 + n, bytearray(data)


def poke(path, name, index, value):
    """Writes `value` into element `index` of tensor `name` of a safetensors file, in place."""
    header, base, data = read_safetensors(path)
    info = header[name]
    start = base + info["data_offsets"][0]
    if info["dtype"] == "F32":
        data[start + 4 * index:start + 4 * index + 4] = struct.pack("<f", value)
    elif info["dtype"] == "F16":
        data[start + 2 * index:start + 2 * index + 2] = struct.pack("<e", value)
    else:
        raise ValueError(info["dtype"])
    with open(path, "wb") as f:
        f.write(data)


def h1(tmp, name="h1"):
    """The small safetensors MLM fixture, a 97-token vocabulary and an input.json."""
    d = os.path.join(tmp, name)
    shutil.copytree(os.path.join(FIXTURES, "mlm_gelu"), d)
    os.remove(os.path.join(d, "reference.safetensors"))
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [
        chr(c) for c in range(0x4E00, 0x4E00 + 97 - 5 - 26)]
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("\n".join(specials + chars) + "\n")
    with open(os.path.join(d, "input.json"), "w") as f:
        json.dump({"input_ids": [[2, 10, 11, 12, 3]]}, f)
    return d


def h4(tmp):
    d = os.path.join(tmp, "h4")
    shutil.copytree(os.path.join(FIXTURES, "mlm_pickle_relu"), d)
    with open(os.path.join(d, "input.json"), "w") as f:
        json.dump({"input_ids": [[2, 10, 11, 12, 3]]}, f)
    return d


def with_config(tmp, name, **changes):
    d = h1(tmp, name)
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg.update(changes)
    with open(path, "w") as f:
        f.write(json.dumps(cfg).replace('"__BIG__"', str(2**64 - 2)))
    return d


def with_poke(tmp, name, tensor, index, value, base=None):
    d = base(tmp, name) if base else h1(tmp, name)
    poke(os.path.join(d, "model.safetensors"), tensor, index, value)
    return d


def nested_pickle(tmp, name, body):
    d = os.path.join(tmp, "h4")
    dst = os.path.join(tmp, name)
    shutil.copytree(d, dst)
    with zipfile.ZipFile(os.path.join(dst, "pytorch_model.bin"), "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02" + body + b".")
    return dst


# ---------------------------------------------------------------- cases

def cases(tmp):
    """(finding, description, args, expectation, setup-free extra check)."""
    big = str(2**64 - 2)
    out = os.path.join(tmp, "out.safetensors")
    yield ("1", "hidden_size 2^64-2, 1 head (forward)",
           ["forward", "--model", with_config(tmp, "f1a", hidden_size="__BIG__",
                                              num_attention_heads=1),
            "--input", os.path.join(tmp, "f1a/input.json"), "--output", out], "error")
    freqs = os.path.join(tmp, "freqs.json")
    with open(freqs, "w") as f:
        f.write('{"head_dim": 18446744073709551615}')
    yield ("1", "rope freqs head_dim 2^64-1", ["rope", "freqs", "--config", freqs], "error")
    yield ("1", "analyze decay --dim 2^64-2", ["analyze", "decay", "--dim", big], "error")
    yield ("1", "analyze decay --max-distance 2^64-1",
           ["analyze", "decay", "--max-distance", str(2**64 - 1)], "error")
    for n, (label, changes) in enumerate([
        ("hidden_size 4e9, 1 head", dict(hidden_size=4_000_000_000, num_attention_heads=1)),
        ("hidden_size 1e18", dict(hidden_size=10**18)),
        ("num_hidden_layers 1e7", dict(num_hidden_layers=10_000_000)),
        ("num_hidden_layers 1e5", dict(num_hidden_layers=100_000)),
        ("hidden_size 1e9, 4 heads", dict(hidden_size=10**9, num_attention_heads=4)),
    ]):
        name = f"f2-{n}"
        d = with_config(tmp, name, **changes)
        yield ("2", label, ["forward", "--model", d, "--input", os.path.join(d, "input.json"),
                            "--output", out], "error")
    freqs40 = os.path.join(tmp, "freqs40.json")
    with open(freqs40, "w") as f:
        f.write('{"head_dim": %d}' % 2**40)
    yield ("2", "rope freqs head_dim 2^40", ["rope", "freqs", "--config", freqs40], "error")
    yield ("2", "analyze decay --dim 2^40", ["analyze", "decay", "--dim", str(2**40)], "error")
    yield ("2", "analyze decay --max-distance 2^40",
           ["analyze", "decay", "--max-distance", str(2**40)], "error")
    yield ("2", "analyze attention-2d --dim 2^40",
           ["analyze", "attention-2d", "--dim", str(2**40)], "error")
    yield ("2", "analyze decay --measured --dim 2^30 --samples 1",
           ["analyze", "decay", "--measured", "--dim", str(2**30), "--samples", "1"], "error")
    yield ("3", "pickle: 200000 nested lists",
           ["forward", "--model", nested_pickle(tmp, "f3a", b"]" * 200000 + b"a" * 199999),
            "--input", os.path.join(tmp, "h4/input.json"), "--output", out], "error")
    yield ("3", "pickle: 1M nested TUPLE1",
           ["forward", "--model", nested_pickle(tmp, "f3b", b"N" + b"\x85" * 1_000_000),
            "--input", os.path.join(tmp, "h4/input.json"), "--output", out], "error")
    line = os.path.join(tmp, "long.txt")
    with open(line, "w") as f:
        f.write("春" * 350_000 + "\n")
    yield ("4", "embed one 1 MB line (built-in model)",
           ["embed", "--input", line, "--output", os.path.join(tmp, "long.npy")], "truncated")
    yield ("4", "analyze decay --measured --samples 2^40",
           ["analyze", "decay", "--measured", "--samples", str(2**40)], "error")
    q = "roformer.encoder.layer.0.attention.self.query.weight"
    for n, (label, tensor, index, value) in enumerate([
        ("NaN in a query weight", q, 5, float("nan")),
        ("Inf in an intermediate weight", "roformer.encoder.layer.1.intermediate.dense.weight",
         3, float("inf")),
        ("Inf in the MLM bias", "cls.predictions.bias", 7, float("inf")),
        ("NaN in an unused word-embedding row", "roformer.embeddings.word_embeddings.weight",
         96 * 32, float("nan")),
    ]):
        d = with_poke(tmp, f"f5-{n}", tensor, index, value)
        yield ("5", label + " (forward)", ["forward", "--model", d, "--input",
                                           os.path.join(d, "input.json"), "--output", out],
               "error")
        yield ("5", label + " (fill-mask --json)",
               ["fill-mask", "--model", d, "--json", "ab[MASK]c"], "error")
    d = h1(tmp, "f5-huge")
    header, _, _ = read_safetensors(os.path.join(d, "model.safetensors"))
    for name in header:
        if name.endswith("dense.weight") and "intermediate" in name:
            n = header[name]["shape"][0] * header[name]["shape"][1]
            for i in range(n):
                poke(os.path.join(d, "model.safetensors"), name, i, 3e38)
            break
    yield ("5", "finite weights of 3e38 (fill-mask --json)",
           ["fill-mask", "--model", d, "--json", "ab[MASK]c"], "error")
    yield ("5", "finite weights of 3e38 (embed)",
           ["embed", "--model", d, "--input", os.path.join(tmp, "short.txt"),
            "--output", os.path.join(tmp, "e.jsonl")], "error")
    yield ("5", "finite weights of 3e38 (forward warns, keeps raw values)",
           ["forward", "--model", d, "--input", os.path.join(d, "input.json"),
            "--output", out], "warning")
    yield ("6", "forward --output FIFO", "fifo", "fifo")
    yield ("6", "forward --output symlink", "symlink", "symlink")
    yield ("6", "forward and embed modes follow umask 022", "umask", "umask")
    d = h1(tmp, "f7-array")
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write('[117,32,32,2,4,64,"gelu"]')
    yield ("7", "config.json is a JSON array",
           ["forward", "--model", d, "--input", os.path.join(d, "input.json"), "--output", out],
           "error")
    yarn = os.path.join(tmp, "yarn.json")
    with open(yarn, "w") as f:
        json.dump({"rope_theta": 10000, "head_dim": 64, "max_position_embeddings": 4096,
                   "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "beta_fast": -32,
                                    "beta_slow": -1,
                                    "original_max_position_embeddings": 2048}}, f)
    yield ("7", "YaRN with negative beta_fast/beta_slow (rope freqs)",
           ["rope", "freqs", "--config", yarn], "error")
    d = with_config(tmp, "f7-pad", pad_token_id=500)
    yield ("7", "pad_token_id above vocab_size",
           ["forward", "--model", d, "--input", os.path.join(d, "input.json"), "--output", out],
           "error")
    d = h1(tmp, "f7-tokdir")
    os.mkdir(os.path.join(d, "tokenizer_config.json"))
    yield ("7", "a directory named tokenizer_config.json",
           ["tokenize", "--model", d, "abc"], "error")
    d = h1(tmp, "f7-stdir")
    os.remove(os.path.join(d, "model.safetensors"))
    os.mkdir(os.path.join(d, "model.safetensors"))
    yield ("7", "a directory named model.safetensors",
           ["forward", "--model", d, "--input", os.path.join(d, "input.json"), "--output", out],
           "directory")
    d = h1(tmp, "f7-serde")
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write("{")
    yield ("7", "serde message printed once",
           ["forward", "--model", d, "--input", os.path.join(d, "input.json"), "--output", out],
           "once")
    d = with_config(tmp, "f7-bt", hidden_size=33)
    yield ("7", "RUST_BACKTRACE=1 user error has no backtrace",
           ["forward", "--model", d, "--input", os.path.join(d, "input.json"), "--output", out],
           "backtrace-env")
    yield ("19.1", "train mlm --resume of a copied run writes the copy only", "copied-run",
           "copied-run")
    yield ("19.2", "--overwrite of a directory holding thesis.tex and data/", "overwrite-foreign",
           "overwrite-foreign")
    yield ("19.2", "--overwrite with --config inside --out", "overwrite-input",
           "overwrite-input")
    for point in ["first-file", "written", "moved-aside", "renamed"]:
        yield ("19.3", f"killed after {point} of a checkpoint save, then --resume",
               f"save-kill:{point}", "save-kill")
    yield ("19.4", "a second run and a --resume while a run trains", "two-writers",
           "two-writers")
    yield ("19.5", "SIGTERM during training, then --resume", "sigterm", "sigterm")
    yield ("34.1", "timeout T train mlm (SIGTERM to the child, then its group), 14 runs, T 1.0-2.3 s",
           "stop-timeout", "stop")
    yield ("34.1", "kill -TERM -PGID and the process at random moments, 10 runs", "stop-group",
           "stop")
    yield ("34.1", "a second SIGTERM 1.5 s after the first, during a save", "stop-forced", "stop")
    yield ("34.2", "--grad-accum 2^40: SIGTERM during the first step", "stop-endless", "stop")
    yield ("34.2", "--grad-accum 64: SIGTERM inside step 2, then --resume", "stop-mid-step",
           "stop")
    yield ("34.3", "train classify --labels of 10 002 names, 300 dev examples", "labels-10002",
           "stop")
    yield from memory_cases(tmp)
    yield from check_cases(tmp)
    yield from gguf_cases(tmp)


# ---------------------------------------------------------------- training runs (issue 19)

def train_args(tmp, out, steps, *extra):
    """`train mlm` of a tiny RoFormer on the poetry fixtures, saving after every step."""
    config = os.path.join(tmp, "tiny-config.json")
    if not os.path.exists(config):
        with open(config, "w") as f:
            json.dump({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "intermediate_size": 128, "max_position_embeddings": 64,
                       "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}, f)
    return ["train", "mlm", "--config", config, "--vocab", os.path.join(POETRY, "vocab.txt"),
            "--corpus", CORPUS, "--seq-len", "64", "--batch", "8", "--steps", str(steps),
            "--save-every", "1", "--out", out, "--json", *extra]


def tree(d):
    """Every file under `d`: relative path -> bytes."""
    files = {}
    for root, _, names in os.walk(d):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, d)] = f.read()
    return files


def checkpoint_step(out):
    try:
        with open(os.path.join(out, "checkpoint/trainer_state.json")) as f:
            return json.load(f)["step"]
    except (OSError, ValueError, KeyError):
        return None


def wait_for(predicate, seconds=60):
    end = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def training(binary, kind, tmp):
    """The training-run cases of issue 19; returns (ok, note)."""
    if kind == "copied-run":
        run_dir, copy = os.path.join(tmp, "t-run"), os.path.join(tmp, "t-copy")
        rc1, _, _, _ = run(binary, train_args(tmp, run_dir, 2), tmp)
        shutil.copytree(run_dir, copy)
        before = tree(run_dir)
        rc2, _, _, err = run(binary, ["train", "mlm", "--resume", "--steps", "4", "--out", copy,
                                      "--json"], tmp)
        same = tree(run_dir) == before
        ok = rc1 == 0 and rc2 == 0 and same and checkpoint_step(copy) == 4
        return ok, (f"exit {rc2}, original unchanged: {same}, copy at step "
                    f"{checkpoint_step(copy)}")
    if kind == "overwrite-foreign":
        d = os.path.join(tmp, "t-thesis")
        os.makedirs(os.path.join(d, "data"))
        with open(os.path.join(d, "thesis.tex"), "w") as f:
            f.write("\\documentclass{article}\n")
        rc, _, _, err = run(binary, train_args(tmp, d, 1, "--overwrite"), tmp)
        ok, note = verdict_error(rc, err)
        kept = os.path.isdir(os.path.join(d, "data")) and os.path.isfile(
            os.path.join(d, "thesis.tex"))
        return ok and kept, (err.strip().splitlines() or ["-"])[0] + f" (kept: {kept})"
    if kind == "overwrite-input":
        d = os.path.join(tmp, "t-input")
        rc1, _, _, _ = run(binary, train_args(tmp, d, 1), tmp)
        config = os.path.join(d, "checkpoint/config.json")
        args = train_args(tmp, d, 1, "--overwrite")
        args[args.index("--config") + 1] = config
        rc, _, _, err = run(binary, args, tmp)
        ok, note = verdict_error(rc, err)
        kept = os.path.isfile(config)
        return rc1 == 0 and ok and kept, (err.strip().splitlines() or ["-"])[0] + f" (kept: {kept})"
    if kind.startswith("save-kill:"):
        point = kind.split(":", 1)[1]
        d = os.path.join(tmp, f"t-kill-{point}")
        rc1, _, _, _ = run(binary, train_args(tmp, d, 4), tmp,
                           env={"ROFORMER_TEST_ABORT_IN_SAVE": f"2:{point}"})
        had = os.path.isdir(os.path.join(d, "checkpoint"))
        rc2, _, _, err = run(binary, ["train", "mlm", "--resume", "--out", d, "--json"], tmp)
        leftovers = [n for n in os.listdir(d) if n.startswith(".checkpoint.")]
        # SIGABRT: 134 from a shell, -6 when `timeout` passes the signal on.
        ok = rc1 in (134, -6) and rc2 == 0 and checkpoint_step(d) == 4 and not leftovers
        return ok, (f"killed: exit {rc1}, checkpoint/ left: {had}; resume: exit {rc2}, step "
                    f"{checkpoint_step(d)}, leftovers {leftovers}")
    if kind == "two-writers":
        d = os.path.join(tmp, "t-lock")
        first = subprocess.Popen([binary] + train_args(tmp, d, 100000), cwd=tmp,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            started = wait_for(lambda: checkpoint_step(d) is not None)
            results = [run(binary, args, tmp) for args in (
                train_args(tmp, d, 2), train_args(tmp, d, 2, "--overwrite"),
                ["train", "mlm", "--resume", "--out", d])]
        finally:
            first.kill()
            first.wait()
        want = f"is in use by process {first.pid}"
        refused = [rc == 1 and want in err for rc, _, _, err in results]
        try:
            with open(os.path.join(d, "metrics.jsonl")) as f:
                logged = max(json.loads(line).get("step", 0) for line in f
                             if line.endswith("}\n"))
        except (OSError, ValueError):
            logged = 0  # the second writer deleted the run (what the issue saw)
        rc, _, _, err = run(binary, ["train", "mlm", "--resume", "--steps", str(logged + 2),
                                     "--out", d, "--json"], tmp)
        ok = started and all(refused) and rc == 0 and checkpoint_step(d) == logged + 2
        note = (results[0][3].strip().splitlines() or ["-"])[0]
        return ok, f"{note}; refused {sum(refused)}/3, resume after the kill: exit {rc}"
    if kind == "sigterm":
        d = os.path.join(tmp, "t-term")
        child = subprocess.Popen([binary] + train_args(tmp, d, 100000), cwd=tmp,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        metrics = os.path.join(d, "metrics.jsonl")
        started = wait_for(lambda: os.path.exists(metrics) and os.path.getsize(metrics) > 0)
        child.terminate()
        _, err = child.communicate(timeout=TIMEOUT_S)
        err = err.decode(errors="replace")
        done = checkpoint_step(d) or 0
        rc, _, _, _ = run(binary, ["train", "mlm", "--resume", "--steps", str(done + 2),
                                   "--out", d, "--json"], tmp)
        ok = (started and child.returncode == 1 and "stopped by SIGTERM" in err and done > 0
              and rc == 0 and checkpoint_step(d) == done + 2)
        last = (err.strip().splitlines() or ["-"])[-1]
        return ok, f"exit {child.returncode}: {last}; resume: exit {rc}"
    return bounded_memory(binary, kind, tmp)


# ---------------------------------------------------------------- memory bounds (issue 19)

def with_flag(args, flag, value):
    """`args` with `flag`'s value replaced."""
    args = list(args)
    args[args.index(flag) + 1] = value
    return args


# What the refusals of issue 19 items 12 and 15 say.
FITS = "error:needs about"
NOT_FILE = "error:not a regular file"


def memory_cases(tmp):
    """Issue 19 items 12 and 15: sizes past the machine's memory, endless and huge inputs."""
    out = os.path.join(tmp, "t-mem")
    for batch in ["1000000", "4294967296"]:
        yield ("19.12", f"train mlm --batch {batch}",
               with_flag(train_args(tmp, out, 1), "--batch", batch), FITS)
    for field, value in [("num_hidden_layers", 10**6), ("hidden_size", 65536),
                         ("intermediate_size", 2**30)]:
        config = os.path.join(tmp, f"huge-{field}.json")
        with open(config, "w") as f:
            json.dump({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "intermediate_size": 128, field: value}, f)
        yield ("19.12", f"train mlm, config {field} {value}",
               with_flag(train_args(tmp, out, 1), "--config", config), FITS)
    examples = os.path.join(tmp, "examples.jsonl")
    with open(examples, "w") as f:
        for i in range(8):
            f.write(json.dumps({"text": "床前明月光" if i % 2 else "黄河入海流",
                                "label": "ab"[i % 2]}, ensure_ascii=False) + "\n")
    classify = ["train", "classify", "--init", POETRY, "--train", examples, "--steps", "1",
                "--out", os.path.join(tmp, "t-mem-cls")]
    yield ("19.12", "train classify --batch 4294967296", classify + ["--batch", "4294967296"],
           FITS)
    yield ("19.12", "experiment convergence --layers 1000000 (after its progress line)",
           "experiment-layers", FITS)
    yield ("19.15", "train mlm --corpus /dev/zero",
           with_flag(train_args(tmp, out, 1), "--corpus", "/dev/zero"), NOT_FILE)
    yield ("19.15", "train classify --train /dev/zero", with_flag(classify, "--train", "/dev/zero"),
           NOT_FILE)
    yield ("19.15", "vocab build --corpus /dev/zero",
           ["vocab", "build", "--corpus", "/dev/zero", "--size", "100", "--out",
            os.path.join(tmp, "zero-vocab.txt")], NOT_FILE)
    yield ("19.15", "embed --input /dev/zero",
           ["embed", "--input", "/dev/zero", "--output", os.path.join(tmp, "zero.jsonl")],
           NOT_FILE)
    yield ("19.15", "train mlm on a 48 MB one-line corpus: peak RSS under 1 GB", "one-line",
           "rss")
    yield ("19.15", "train classify, a 16 M-character example: peak RSS under 0.5 GB",
           "long-example", "rss")


def poem_text(chars):
    """The poetry fixtures' poems run together (punctuation, no line break), `chars` long."""
    texts = []
    for root, _, names in os.walk(CORPUS):
        for name in sorted(names):
            if name.endswith(".json"):
                with open(os.path.join(root, name)) as f:
                    texts += ["".join(p["paragraphs"]) for p in json.load(f)]
    text = "".join(texts)
    return (text * (chars // len(text) + 1))[:chars]


def peak_rss(binary, args, cwd, timeout=180):
    """Runs the binary; returns (rc, peak resident set in MB, stderr)."""
    child = subprocess.Popen([binary] + args, cwd=cwd, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    timer = threading.Timer(timeout, child.kill)
    timer.start()
    err = child.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(child.pid, 0)
    timer.cancel()
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_maxrss / 1024, err


def bounded_memory(binary, kind, tmp):
    """The experiment and peak-memory cases of issue 19 items 12 and 15; returns (ok, note)."""
    if kind == "experiment-layers":
        rc, _, _, err = run(binary, [
            "experiment", "convergence", "--corpus", CORPUS, "--out", os.path.join(tmp, "t-exp"),
            "--seeds", "1", "--steps", "2", "--hidden", "16", "--layers", "1000000", "--heads",
            "2", "--vocab-size", "400", "--batch", "2", "--seq-len", "16"], tmp)
        last = (err.strip().splitlines() or ["-"])[-1]
        ok, note = verdict_error(rc, last)
        return ok and "needs about" in last, last
    if kind == "one-line":
        corpus = os.path.join(tmp, "one-line.txt")
        with open(corpus, "w") as f:
            f.write(poem_text(16_000_000) + "\n")  # 48 MB of UTF-8
        args = with_flag(train_args(tmp, os.path.join(tmp, "t-one"), 1), "--corpus", corpus)
        rc, mb, err = peak_rss(binary, args, tmp)
        return rc == 0 and mb < 1000, f"exit {rc}, peak RSS {mb:.0f} MB (was 1274 MB)"
    if kind == "long-example":
        examples = os.path.join(tmp, "long-example.jsonl")
        with open(examples, "w") as f:
            f.write(json.dumps({"text": poem_text(16_000_000), "label": "a"},
                               ensure_ascii=False) + "\n")
            f.write(json.dumps({"text": "黄河入海流", "label": "b"}, ensure_ascii=False) + "\n")
        rc, mb, err = peak_rss(binary, ["train", "classify", "--init", POETRY, "--train",
                                        examples, "--steps", "1", "--batch", "2", "--out",
                                        os.path.join(tmp, "t-long"), "--quiet"], tmp)
        return rc == 0 and mb < 500, f"exit {rc}, peak RSS {mb:.0f} MB (was 2397 MB)"
    return run_checks(binary, kind, tmp)


# ---------------------------------------------------------------- run checks (issue 19)

def check_cases(tmp):
    """Issue 19 items 6, 8, 9, 10 and its messages: outputs that are inputs, duplicate arms,
    what --resume checks, unchecked options. `error:TEXT` is exit 1 with TEXT in the message;
    `usage:TEXT` is clap's refusal of a flag's value (exit 2) with TEXT."""
    h1 = os.path.join(tmp, "h1")
    ids = os.path.join(h1, "input.json")
    forward = ["forward", "--model", h1, "--input", ids, "--output"]
    yield ("19.6", "forward --output the --input file", forward + [ids],
           "error:is the same file as --input")
    yield ("19.6", "forward --output the checkpoint's model.safetensors",
           forward + [os.path.join(h1, "model.safetensors")], "error:is the same file as --model")
    texts = os.path.join(tmp, "texts.jsonl")
    with open(texts, "w") as f:
        f.write('{"text": "ab"}\n')
    yield ("19.6", "embed --output the --input file",
           ["embed", "--model", h1, "--input", texts, "--output", texts],
           "error:is the same file as --input")
    yield ("19.6", "llama logits --output the --input file",
           ["llama", "logits", "--gguf", os.path.join(tmp, "none.gguf"), "--input", ids,
            "--output", ids], "error:is the same file as --input")
    yield ("19.6", "vocab build --out DIR/vocab.txt beside a tokenizer_config.json",
           "vocab-beside", "vocab-beside")
    yield ("19.6", "train mlm --plot ../../x.png",
           train_args(tmp, os.path.join(tmp, "t-plot/a/b"), 1, "--plot", "../../x.png"),
           "error:without a directory")
    yield ("19.8", "experiment convergence --arms absolute,absolute",
           ["experiment", "convergence", "--arms", "absolute,absolute", "--corpus", CORPUS,
            "--out", os.path.join(tmp, "t-arms")], "error:names absolute twice")
    for kind, label in [
        ("resume-max-step", "trainer_state.json step 2^64-1, then --resume"),
        ("resume-zero-step", "trainer_state.json step 0, then --resume"),
        ("resume-lr", "--resume --lr 0.01 (the run's is 5e-4)"),
        ("resume-vocab", "--resume after an edit of checkpoint/vocab.txt (same size)"),
        ("resume-corpus", "--resume after a file was added to the corpus directory"),
        ("resume-shape", "--resume with another run's checkpoint (hidden 32, not 64)"),
        ("resume-old-record", "--resume of a run.json without fingerprint (older version)"),
    ]:
        yield ("19.9", label, kind, kind)
    mlm = train_args(tmp, os.path.join(tmp, "t-flags"), 1)
    yield ("19.10", "train mlm --max-grad-norm -1", mlm + ["--max-grad-norm", "-1"],
           "usage:--max-grad-norm")
    yield ("19.10", "train mlm --max-grad-norm NaN (was: cannot write NaN as JSON)",
           mlm + ["--max-grad-norm", "NaN"], "usage:--max-grad-norm")
    labelled = os.path.join(tmp, "labelled.jsonl")
    with open(labelled, "w") as f:
        for label in ['"pos"', '"neg"', "1"]:
            f.write('{"text": "床前明月光", "label": %s}\n' % label)
    classify = ["train", "classify", "--init", POETRY, "--train", labelled, "--steps", "1",
                "--out", os.path.join(tmp, "t-labels")]
    yield ("19.10", "train classify --labels pos,pos,neg", classify + ["--labels", "pos,pos,neg"],
           "error:is given twice")
    yield ("19.10", "an integer label 1 among names (no --labels)", classify,
           "error:is a number")
    yield ("19.10", "an integer label 1 with --labels pos,neg", classify + ["--labels", "pos,neg"],
           "error:the labels are names")
    long_vocab = os.path.join(tmp, "long-vocab")
    shutil.copytree(POETRY, long_vocab)
    with open(os.path.join(long_vocab, "vocab.txt"), "a") as f:
        f.write("多余\n")
    yield ("19.10", "vocab.txt one token longer than vocab_size (train classify --init)",
           with_flag(classify, "--init", long_vocab), "error:more than vocab_size")
    one = os.path.join(tmp, "one-line-corpus.txt")
    with open(one, "w") as f:
        f.write("床前明月光\n")
    yield ("19.msg", "a corpus too short for one block (was: there is no block)",
           with_flag(train_args(tmp, os.path.join(tmp, "t-block"), 1), "--corpus", one),
           "error:no training block of 64 tokens")
    yield ("19.msg", "a resumed run that diverges before its first save", "diverge-resume",
           "diverge-resume")


def started_run(binary, tmp, name, corpus):
    """A run of 4 steps on `corpus` stopped (and saved) after step 2; returns its directory."""
    d = os.path.join(tmp, name)
    if not os.path.isdir(d):
        run(binary, with_flag(train_args(tmp, d, 4, "--stop-after", "2"), "--corpus", corpus),
            tmp)
    return d


def damaged_copy(binary, tmp, kind):
    """A copy of a started run, damaged as `kind` says; returns it."""
    corpus = os.path.join(tmp, "t-corpus")
    if not os.path.isdir(corpus):
        shutil.copytree(CORPUS, corpus)
    base = started_run(binary, tmp, "t-started", corpus)
    copy = os.path.join(tmp, f"t-{kind}")
    shutil.copytree(base, copy)
    state = os.path.join(copy, "checkpoint/trainer_state.json")
    if kind in ("resume-max-step", "resume-zero-step"):
        with open(state) as f:
            text = f.read()
        step = str(2**64 - 1) if kind == "resume-max-step" else "0"
        with open(state, "w") as f:
            f.write(text.replace('"step": 2', f'"step": {step}', 1))
    elif kind == "resume-vocab":
        path = os.path.join(copy, "checkpoint/vocab.txt")
        with open(path) as f:
            lines = f.read().split("\n")
        lines[100] = "X"
        with open(path, "w") as f:
            f.write("\n".join(lines))
    elif kind == "resume-corpus":
        with open(os.path.join(corpus, "extra.txt"), "w") as f:
            f.write("床前明月光，疑是地上霜。\n")
    elif kind == "resume-shape":
        config = os.path.join(tmp, "tiny-config-32.json")
        with open(config, "w") as f:
            json.dump({"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                       "intermediate_size": 64, "max_position_embeddings": 64}, f)
        other = os.path.join(tmp, "t-other")
        run(binary, with_flag(train_args(tmp, other, 1), "--config", config), tmp)
        shutil.rmtree(os.path.join(copy, "checkpoint"))
        shutil.copytree(os.path.join(other, "checkpoint"), os.path.join(copy, "checkpoint"))
    elif kind == "resume-old-record":
        path = os.path.join(copy, "run.json")
        with open(path) as f:
            record = json.load(f)
        record.pop("fingerprint", None)
        with open(path, "w") as f:
            json.dump(record, f)
    return copy


# What each resume case must say (exit 1), or "" for a resume that must succeed.
RESUME_EXPECT = {
    "resume-max-step": "records step 2",
    "resume-zero-step": "step 0, but a checkpoint is only written after a step",
    "resume-lr": "--lr 0.01 cannot change on --resume",
    "resume-vocab": "vocabulary",
    "resume-corpus": "--corpus",
    "resume-shape": "parameter shapes",
    "resume-old-record": "",
}


def run_checks(binary, kind, tmp):
    """The special cases of `check_cases`; returns (ok, note)."""
    if kind == "vocab-beside":
        d = os.path.join(tmp, "t-vocab")
        os.makedirs(d)
        config = os.path.join(d, "tokenizer_config.json")
        with open(config, "w") as f:
            f.write('{"do_lower_case": true}')
        rc, _, _, err = run(binary, ["vocab", "build", "--corpus", CORPUS, "--size", "100",
                                     "--out", os.path.join(d, "vocab.txt")], tmp)
        with open(config) as f:
            kept = f.read() == '{"do_lower_case": true}'
        return rc == 0 and kept, f"exit {rc}, tokenizer_config.json untouched: {kept}"
    if kind == "diverge-resume":
        d = os.path.join(tmp, "t-diverge")
        run(binary, train_args(tmp, d, 50, "--lr", "1e30", "--stop-after", "1"), tmp)
        # Steps after the first diverge; --save-every 0 (a resume may change it): no save.
        rc, _, _, err = run(binary, ["train", "mlm", "--resume", "--out", d, "--json",
                                     "--save-every", "0"], tmp)
        ok, note = verdict_error(rc, err)
        last = (err.strip().splitlines() or ["-"])[-1]
        return ok and "from before this command" in last, last
    if kind in RESUME_EXPECT:
        copy = damaged_copy(binary, tmp, kind)
        extra = ["--lr", "0.01"] if kind == "resume-lr" else []
        rc, _, _, err = run(binary, ["train", "mlm", "--resume", "--out", copy, "--json",
                                     *extra], tmp)
        want = RESUME_EXPECT[kind]
        if not want:
            return (rc == 0 and "records no fingerprint" in err,
                    f"exit {rc}, " + (err.strip().splitlines() or ["-"])[0])
        ok, note = verdict_error(rc, err)
        lines = err.strip().splitlines() or ["-"]
        return ok and want in err, " ".join(lines[:2])
    raise ValueError(kind)


def special(binary, kind, tmp):
    """The output-path cases; returns (ok, note)."""
    d = os.path.join(tmp, "h1")
    args = ["forward", "--model", d, "--input", os.path.join(d, "input.json"), "--output"]
    if kind == "fifo":
        fifo = os.path.join(tmp, "out.fifo")
        os.mkfifo(fifo)
        got = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
        reader.start()
        rc, _, _, err = run(binary, args + [fifo], tmp)
        reader.join(timeout=TIMEOUT_S)
        ok = rc == 0 and stat.S_ISFIFO(os.lstat(fifo).st_mode) and got and len(got[0]) > 8
        return ok, f"exit {rc}, still a FIFO: {stat.S_ISFIFO(os.lstat(fifo).st_mode)}"
    if kind == "symlink":
        target = os.path.join(tmp, "target.safetensors")
        link = os.path.join(tmp, "link.safetensors")
        os.symlink(target, link)
        rc, _, _, _ = run(binary, args + [link], tmp)
        ok = rc == 0 and os.path.islink(link) and os.path.getsize(target) > 8
        return ok, f"exit {rc}, link kept: {os.path.islink(link)}"
    if kind == "umask":
        a = os.path.join(tmp, "m.safetensors")
        b = os.path.join(tmp, "m.npy")
        rc1, _, _, _ = run(binary, args + [a], tmp, umask=0o022)
        rc2, _, _, _ = run(binary, ["embed", "--input", os.path.join(tmp, "short.txt"),
                                    "--output", b], tmp, umask=0o022)
        modes = [oct(os.stat(p).st_mode & 0o777) for p in (a, b) if os.path.exists(p)]
        return rc1 == 0 and rc2 == 0 and modes == ["0o644", "0o644"], f"modes {modes}"
    if kind.startswith("gguf-"):
        return gguf_special(binary, kind, tmp)
    if kind == "safetensors-truncate":
        return safetensors_truncate(binary, tmp)
    if kind.startswith("stop-") or kind == "labels-10002":
        return stop_cases(binary, kind, tmp)
    return training(binary, kind, tmp)


# ---------------------------------------------------------------- stops and labels (issue 34)

def capped(binary, args, seconds=None):
    """The command line of `binary args` under the 4 GB cap, and under `timeout SECONDS`."""
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in [binary] + args)
    wrap = f"timeout {seconds} " if seconds is not None else ""
    return ["bash", "-c", f"ulimit -v {LIMIT_KB}; exec {wrap}{quoted}"]


def loads(binary, out, tmp):
    """Whether `out/checkpoint` is a checkpoint `roformer forward` loads."""
    rc, _, _, _ = run(binary, ["forward", "--model", os.path.join(out, "checkpoint"), "--input",
                               os.path.join(tmp, "h1/input.json"), "--output",
                               os.path.join(tmp, "kept-forward.safetensors")], tmp)
    return rc == 0


def kept_after_stop(binary, out, err, tmp):
    """A stopped run kept what it says: a loadable checkpoint of a completed step, or nothing
    when it says nothing was saved. Returns (ok, what)."""
    if "quitting" in err:
        return False, "quit at once"
    if "nothing was saved" in err:
        return checkpoint_step(out) is None, "nothing saved (first step not done)"
    step = checkpoint_step(out)
    return (step is not None and step >= 1 and f"(step {step}" in err and loads(binary, out, tmp),
            f"step {step}")


def stop_cases(binary, kind, tmp):
    """Issue 34's cases; returns (ok, note)."""
    endless = lambda d: with_flag(train_args(tmp, d, 10000000), "--save-every", "0")
    if kind == "stop-timeout":
        results = []
        for i in range(14):
            d = os.path.join(tmp, f"t-timeout-{i}")
            p = subprocess.run(capped(binary, endless(d), f"{1.0 + 0.1 * i:.1f}"), cwd=tmp,
                               capture_output=True)
            err = p.stderr.decode(errors="replace")
            ok, what = kept_after_stop(binary, d, err, tmp)
            results.append((ok and p.returncode == 124 and "stopped by SIGTERM" in err, what))
        kept = sum(ok for ok, _ in results)
        nothing = sum("nothing" in w for _, w in results)
        return kept == len(results), (f"{kept}/{len(results)} kept what they said ({nothing} "
                                      f"before their first step: nothing saved); exit 124 each")
    if kind == "stop-group":
        import random
        rng = random.Random(34)
        results = []
        for i in range(10):
            d = os.path.join(tmp, f"t-group-{i}")
            child = subprocess.Popen(capped(binary, endless(d)), cwd=tmp, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
            time.sleep(rng.uniform(0.2, 2.5))
            os.killpg(child.pid, 15)
            os.kill(child.pid, 15)
            _, err = child.communicate(timeout=TIMEOUT_S)
            err = err.decode(errors="replace")
            ok, what = kept_after_stop(binary, d, err, tmp)
            results.append(ok and child.returncode == 1 and "stopped by SIGTERM" in err)
        return all(results), f"{sum(results)}/{len(results)} stopped once, keeping a checkpoint"
    if kind == "stop-forced":
        d = os.path.join(tmp, "t-forced")
        child = subprocess.Popen(capped(binary, train_args(tmp, d, 10)), cwd=tmp,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 env={**os.environ, "ROFORMER_TEST_HOLD_IN_SAVE": "2:first-file"})
        for line in child.stderr:
            if b"test hook: held after" in line:
                break
        child.send_signal(15)
        time.sleep(1.5)
        child.send_signal(15)
        _, err = child.communicate(timeout=TIMEOUT_S)
        err = err.decode(errors="replace")
        step = checkpoint_step(d)
        rc, _, _, _ = run(binary, ["train", "mlm", "--resume", "--out", d, "--json"], tmp)
        ok = (child.returncode == 143 and "checkpoint of step 1 is kept" in err and step == 1
              and loads(binary, d, tmp) and rc == 0 and checkpoint_step(d) == 10)
        last = (err.strip().splitlines() or ["-"])[-1]
        return ok, f"exit {child.returncode}: {last}; resume: exit {rc}"
    if kind == "stop-endless":
        d = os.path.join(tmp, "t-endless")
        args = with_flag(train_args(tmp, d, 1), "--save-every", "0") + [
            "--grad-accum", "1099511627776"]
        child = subprocess.Popen(capped(binary, args), cwd=tmp, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)
        wait_for(lambda: os.path.exists(os.path.join(d, "run.json")))
        time.sleep(1)
        child.send_signal(15)
        sent = time.monotonic()
        _, err = child.communicate(timeout=TIMEOUT_S)
        took = time.monotonic() - sent
        err = err.decode(errors="replace")
        ok = (child.returncode == 1 and "nothing was saved" in err and took < 10
              and checkpoint_step(d) is None)
        last = (err.strip().splitlines() or ["-"])[-1]
        return ok, f"exit {child.returncode} {took:.2f} s after SIGTERM: {last}"
    if kind == "stop-mid-step":
        d = os.path.join(tmp, "t-mid-step")
        args = with_flag(train_args(tmp, d, 3), "--save-every", "0") + ["--grad-accum", "64"]
        child = subprocess.Popen(capped(binary, args), cwd=tmp, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)
        metrics = os.path.join(d, "metrics.jsonl")
        wait_for(lambda: os.path.exists(metrics) and '"step"' in open(metrics).read(), 120)
        time.sleep(0.2)
        child.send_signal(15)
        _, err = child.communicate(timeout=TIMEOUT_S)
        err = err.decode(errors="replace")
        try:
            with open(os.path.join(d, "checkpoint/trainer_state.json")) as f:
                micro = json.load(f).get("partial", {}).get("micro_batches", 0)
        except (OSError, ValueError):
            micro = 0
        rc, _, _, _ = run(binary, ["train", "mlm", "--resume", "--out", d, "--json"], tmp)
        ok = (child.returncode == 1 and checkpoint_step(d) == 3 and 0 < micro < 64 and rc == 0)
        return ok, (f"exit {child.returncode}, saved step 1 with {micro} of 64 micro-batches of "
                    f"step 2; resume: exit {rc}, step {checkpoint_step(d)}")
    if kind == "labels-10002":
        names = ["a", "b"] + [f"l{i}" for i in range(10000)]
        dev = os.path.join(tmp, "dev-10002.jsonl")
        with open(dev, "w") as f:
            for i in range(300):
                f.write(json.dumps({"text": "床前明月光" if i % 2 else "黄河入海流",
                                    "label": names[(i * 37) % len(names)]},
                                   ensure_ascii=False) + "\n")
        out = os.path.join(tmp, "t-labels-10002")
        args = ["train", "classify", "--init", POETRY, "--train",
                os.path.join(tmp, "examples.jsonl"), "--eval", dev, "--labels", ",".join(names),
                "--steps", "1", "--batch", "4", "--max-length", "16", "--out", out, "--quiet"]
        rc, secs, _, err = run(binary, args, tmp)
        line = ""
        if os.path.exists(os.path.join(out, "metrics.jsonl")):
            with open(os.path.join(out, "metrics.jsonl")) as f:
                line = next((l for l in f if '"event":"eval"' in l), "")
        best = os.path.join(out, "best/eval.json")
        size = os.path.getsize(best) if os.path.exists(best) else None
        _, mb, _ = peak_rss(binary, with_flag(args, "--out", out + "-rss"), tmp)
        ok = (rc == 0 and 0 < len(line) < 40 * len(names) + 4096 and size is not None
              and size < 100 * len(names) + 8192)
        return ok, (f"exit {rc}, {secs:.1f} s: eval line {len(line)} bytes, best/eval.json "
                    f"{size} bytes, peak RSS {mb:.0f} MB (was: exit 134, a 109 MB line, 900 MB)")
    raise ValueError(kind)


# ---------------------------------------------------------------- GGUF files (issue 19)

TINY_GGUF = os.path.join(ROOT, "crates/llama/tests/fixtures/tiny-llama/tiny.gguf")


def gguf_layout(data):
    """Where things lie in a GGUF file: ({key: offset of its value, after its type}, {tensor:
    [offset of its directory entry's data offset field, start of its data]})."""
    fixed = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    pos = 24
    (n_tensors, n_kv) = struct.unpack_from("<QQ", data, 8)

    def string(pos):
        (n,) = struct.unpack_from("<Q", data, pos)
        return data[pos + 8:pos + 8 + n].decode(), pos + 8 + n

    def skip(kind, pos):
        if kind in fixed:
            return pos + fixed[kind]
        if kind == 8:
            return string(pos)[1]
        (inner, count) = struct.unpack_from("<IQ", data, pos)
        pos += 12
        for _ in range(count):
            pos = skip(inner, pos)
        return pos

    values, entries = {}, {}
    for _ in range(n_kv):
        key, pos = string(pos)
        (kind,) = struct.unpack_from("<I", data, pos)
        values[key] = pos + 4
        pos = skip(kind, pos + 4)
    for _ in range(n_tensors):
        name, pos = string(pos)
        (dims,) = struct.unpack_from("<I", data, pos)
        field = pos + 4 + 8 * dims + 4
        entries[name] = [field, struct.unpack_from("<Q", data, field)[0]]
        pos = field + 8
    start = (pos + 31) // 32 * 32
    for entry in entries.values():
        entry[1] += start
    return values, entries


def gguf_edit(tmp, name, edit):
    """The tiny GGUF model, changed in place by `edit(bytearray, values, entries)`."""
    with open(TINY_GGUF, "rb") as f:
        data = bytearray(f.read())
    values, entries = gguf_layout(data)
    edit(data, values, entries)
    path = os.path.join(tmp, name + ".gguf")
    with open(path, "wb") as f:
        f.write(data)
    return path


def gguf_cases(tmp):
    """Issue 19 items 7, 11, 12 (bench llama), 13 and 14 on the tiny GGUF model."""
    def put(data, at, fmt, value):
        struct.pack_into(fmt, data, at, value)

    nan_norm = gguf_edit(tmp, "nan-norm", lambda d, v, e: put(
        d, e["blk.0.attn_norm.weight"][1] + 8, "<f", float("nan")))
    nan_out = gguf_edit(tmp, "nan-output-norm", lambda d, v, e: put(
        d, e["output_norm.weight"][1], "<f", float("nan")))
    # The f16 scale of block 1 of a Q8_0 weight (34-byte blocks) becomes a NaN.
    nan_q8 = gguf_edit(tmp, "nan-q8", lambda d, v, e: put(
        d, e["blk.0.attn_q.weight"][1] + 34, "<H", 0x7e00))
    huge = gguf_edit(tmp, "huge-ffn-norm", lambda d, v, e: [put(
        d, e["blk.0.ffn_norm.weight"][1] + 4 * i, "<f", 1e30) for i in range(64)])
    gen = ["llama", "generate", "--max-new-tokens", "4", "--gguf"]
    for path, label, says in [
            (nan_norm, "NaN in attn_norm", "holds NaN at index 2"),
            (nan_out, "NaN in output_norm", "`output_norm.weight` holds NaN"),
            (nan_q8, "NaN scale in a Q8_0 attn_q", "scale `d` of block 1"),
            (huge, "ffn_norm 1e30", "the input of `blk.0.ffn_gate.weight`")]:
        yield ("19.7", f"llama generate, {label}", gen + [path, "the cat"], "error:" + says)
        yield ("19.7", f"llama generate --temperature 1, {label}",
               gen + [path, "--temperature", "1", "the cat"], "error:" + says)
    ids = os.path.join(tmp, "gguf-ids.json")
    with open(ids, "w") as f:
        f.write('{"input_ids": [[1, 2, 3]]}')
    yield ("19.7", "llama logits, NaN in attn_norm",
           ["llama", "logits", "--gguf", nan_norm, "--input", ids, "--output",
            os.path.join(tmp, "gguf-logits.safetensors")], "error:holds NaN at index 2")
    yield ("19.7", "llama generate --dequantize, ffn_norm 1e30",
           gen + [huge, "--dequantize", "the cat"], "error:non-finite logit")
    pad = gguf_edit(tmp, "pad", lambda d, v, e: put(
        d, v["tokenizer.ggml.padding_token_id"], "<I", 9999))
    yield ("19.11", "padding token id 9999 of 64", gen + [pad, "hi"],
           "error:tokenizer.ggml.padding_token_id")

    def overlap(d, v, e):
        put(d, e["blk.0.ffn_up.weight"][0], "<Q", struct.unpack_from(
            "<Q", d, e["blk.0.ffn_gate.weight"][0])[0])
    yield ("19.11", "two tensors over the same bytes",
           gen + [gguf_edit(tmp, "overlap", overlap), "hi"], "error:overlaps")
    blocks = gguf_edit(tmp, "blocks", lambda d, v, e: put(
        d, v["llama.block_count"], "<I", 1))
    yield ("19.11", "block_count 1 on a file with 2 layers", gen + [blocks, "hi"],
           "error:tensors of 2 blocks")
    yield ("19.12", "bench llama --repeats 1000000000",
           ["bench", "llama", "--gguf", TINY_GGUF, "--repeats", "1000000000"],
           "error:would need")
    fifo = os.path.join(tmp, "model-fifo.gguf")
    os.mkfifo(fifo)
    for command in (["llama", "generate", "--gguf", fifo, "hi"],
                    ["llama", "logits", "--gguf", fifo, "--input", ids, "--output",
                     os.path.join(tmp, "fifo-logits.safetensors")],
                    ["bench", "llama", "--gguf", fifo]):
        yield ("19.13", f"{' '.join(command[:2])} --gguf FIFO", command,
               "error:not a regular file")
    yield ("19.14", "llama logits on a 26 MB GGUF truncated 0-80 ms into the load",
           "gguf-truncate", "gguf-truncate")
    yield ("19.14", "forward on a 64 MB safetensors truncated 0-80 ms into the load",
           "safetensors-truncate", "safetensors-truncate")


def big_gguf(path):
    """A one-block model (width 64) with a 100 000-token f32 embedding: 26 MB."""
    vocab, h, f = 100_000, 64, 96
    meta = [("general.architecture", 8, "llama"), ("llama.block_count", 4, 1),
            ("llama.context_length", 4, 256), ("llama.embedding_length", 4, h),
            ("llama.feed_forward_length", 4, f), ("llama.attention.head_count", 4, 4),
            ("llama.attention.head_count_kv", 4, 2),
            ("llama.attention.layer_norm_rms_epsilon", 6, 1e-5), ("llama.vocab_size", 4, vocab)]
    kv = h // 2
    tensors = [("token_embd.weight", [vocab, h]), ("blk.0.attn_norm.weight", [h]),
               ("blk.0.attn_q.weight", [h, h]), ("blk.0.attn_k.weight", [kv, h]),
               ("blk.0.attn_v.weight", [kv, h]), ("blk.0.attn_output.weight", [h, h]),
               ("blk.0.ffn_norm.weight", [h]), ("blk.0.ffn_gate.weight", [f, h]),
               ("blk.0.ffn_up.weight", [f, h]), ("blk.0.ffn_down.weight", [h, f]),
               ("output_norm.weight", [h])]

    def string(s):
        return struct.pack("<Q", len(s.encode())) + s.encode()
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)))
    for key, kind, value in meta:
        out += string(key) + struct.pack("<I", kind)
        out += string(value) if kind == 8 else struct.pack("<f" if kind == 6 else "<I", value)
    offset, sizes = 0, []
    for name, shape in tensors:
        out += string(name) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", d) for d in reversed(shape))
        out += struct.pack("<IQ", 0, offset)
        n = 4 * (shape[0] * (shape[1] if len(shape) > 1 else 1))
        sizes.append(n)
        offset += (n + 31) // 32 * 32
    out += bytes(-len(out) % 32)
    for (name, shape), n in zip(tensors, sizes):
        value = 1.0 if len(shape) == 1 else 0.01
        out += struct.pack("<f", value) * (n // 4) + bytes(-n % 32)
    with open(path, "wb") as f:
        f.write(out)


def big_safetensors_model(d):
    """The `mlm_gelu` fixture with a 500 000-token vocabulary (a 64 MB f32 embedding) in `d`:
    config.json, model.safetensors and a 4-token input.json."""
    src = os.path.join(ROOT, "crates/roformer/tests/fixtures/model/mlm_gelu")
    vocab = 500_000
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["vocab_size"] = vocab
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    big = {"roformer.embeddings.word_embeddings.weight": ([vocab, 32], struct.pack("<f", 0.01)),
           "cls.predictions.bias": ([vocab], bytes(4))}
    out_header, chunks, offset = {}, [], 0
    for name, info in sorted(header.items()):
        if name in big:
            shape, value = big[name]
            blob = value * (shape[0] * (shape[1] if len(shape) > 1 else 1))
        else:
            shape = info["shape"]
            start, end = info["data_offsets"]
            blob = data[8 + n + start:8 + n + end]
        out_header[name] = {"dtype": info["dtype"], "shape": shape,
                            "data_offsets": [offset, offset + len(blob)]}
        chunks.append(blob)
        offset += len(blob)
    text = json.dumps(out_header).encode()
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    with open(os.path.join(d, "input.json"), "w") as f:
        f.write('{"input_ids": [[2, 50, 96, 3]]}')


def truncate_during_load(binary, args, path, remake, short_message, tmp):
    """Runs `binary args` six times, remaking `path` (`remake()`) and halving it 0-80 ms into
    each run. Each run must end in success or a clear error: "changed while it was being read",
    or `short_message` when the cut came before the load read that far; never a signal (the
    mapped loaders died of SIGBUS, exit 135)."""
    outcomes = []
    for delay in [0, 0.005, 0.01, 0.02, 0.04, 0.08]:
        remake()
        size = os.path.getsize(path)
        p = subprocess.Popen([binary] + args, cwd=tmp, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        time.sleep(delay)
        os.truncate(path, size // 2)
        _, err = p.communicate(timeout=TIMEOUT_S)
        err = err.decode(errors="replace")
        if p.returncode == 0:
            outcomes.append("ok")
        elif p.returncode == 1 and "changed while it was being read" in err:
            outcomes.append("changed")
        elif p.returncode == 1 and short_message in err:
            outcomes.append("short")
        else:
            return False, f"exit {p.returncode}: {err.strip()[:100]}"
    return True, "outcomes " + ", ".join(outcomes)


def safetensors_truncate(binary, tmp):
    """Issue 19 item 14, RoFormer half: a safetensors checkpoint truncated while `forward`
    loads it."""
    d = os.path.join(tmp, "big-st")
    args = ["forward", "--model", d, "--input", os.path.join(d, "input.json"), "--output",
            os.path.join(tmp, "big-st-out.safetensors")]
    return truncate_during_load(binary, args, os.path.join(d, "model.safetensors"),
                                lambda: big_safetensors_model(d), "unreadable checkpoint", tmp)


def gguf_special(binary, kind, tmp):
    """Issue 19 item 14: a GGUF truncated while `llama logits` reads it."""
    assert kind == "gguf-truncate"
    path = os.path.join(tmp, "big.gguf")
    ids = os.path.join(tmp, "gguf-ids.json")
    args = ["llama", "logits", "--gguf", path, "--input", ids, "--output",
            os.path.join(tmp, "big-logits.safetensors")]
    return truncate_during_load(binary, args, path, lambda: big_gguf(path), "ends past the end",
                                tmp)


def main():
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1
                             else os.path.join(ROOT, "target/release/roformer"))
    tmp = tempfile.mkdtemp(prefix="roformer-findings-")
    h1(tmp)
    h4(tmp)
    with open(os.path.join(tmp, "short.txt"), "w") as f:
        f.write("ab\n")
    rows, failures = [], 0
    for finding, label, args, expect in list(cases(tmp)):
        if isinstance(args, str):
            ok, note = special(binary, args, tmp)
            secs = float("nan")
        else:
            env = {"RUST_BACKTRACE": "1"} if expect == "backtrace-env" else None
            rc, secs, out, err = run(binary, args, tmp, env=env)
            if expect in ("error", "backtrace-env"):
                ok, note = verdict_error(rc, err)
                if ok and len(err.strip().splitlines()) > 3:
                    ok, note = False, f"{len(err.splitlines())} lines of stderr"
            elif expect == "directory":
                ok, note = verdict_error(rc, err)
                ok = ok and "directory" in err
            elif expect.startswith("usage:"):
                # clap's refusal of a flag's value: exit 2, one error line naming the flag.
                ok = rc == 2 and err.startswith("error:") and expect[len("usage:"):] in err
                note = f"exit {rc}, " + (err.strip().splitlines() or ["-"])[0]
            elif expect.startswith("error:"):
                # A clear error that says this (not one that merely ran out of memory).
                ok, note = verdict_error(rc, err)
                ok = ok and expect[len("error:"):] in err
            elif expect == "once":
                ok, note = verdict_error(rc, err)
                first = err.split(":")[-1].strip()
                ok = ok and err.count(first) == 1
            elif expect == "truncated":
                ok = rc == 0 and ("cut" in err or "truncat" in err)
                note = f"exit {rc}, " + (err.strip().splitlines() or ["-"])[0]
            elif expect == "warning":
                warned = "warning:" in err and "not finite" in err
                ok = rc == 0 and warned
                note = f"exit {rc}, warned: {warned}"
            else:
                raise ValueError(expect)
            if ok and expect != "truncated":
                lines = err.strip().splitlines() or ["-"]
                # A list of problems follows its heading line: show the first item too.
                note = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
        note = note.replace(tmp + "/", "")
        if len(note) > 150:
            note = note[:147] + "..."
        failures += not ok
        rows.append((finding, label, "ok" if ok else "FAIL", secs, note))
    print("| finding | input | result | seconds | first line of stderr / note |")
    print("|---|---|---|---|---|")
    for finding, label, result, secs, note in rows:
        s = "-" if secs != secs else f"{secs:.2f}"
        print(f"| {finding} | {label} | {result} | {s} | {note.replace('|', '/')} |")
    print(f"\n{len(rows) - failures} of {len(rows)} cases as the issue asks", file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
