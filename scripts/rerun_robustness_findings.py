#!/usr/bin/env python3
"""Reruns issue 11's list of hostile inputs against a `roformer` binary and prints a table.

Rows `19.N` are issue 19's training-run findings (data loss and clobbering): a resumed copy, what
`--overwrite` may delete, a kill at each step of a checkpoint save, two writers, SIGTERM.

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
POETRY = os.path.join(ROOT, "crates/roformer-cli/assets/poetry-model")
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
    return training(binary, kind, tmp)


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
