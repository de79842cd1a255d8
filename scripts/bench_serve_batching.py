#!/usr/bin/env python3
"""Issue 37's serving figures: `roformer serve` before and after batching without a wait, against
the FastAPI peer, and where the time of an 8-line /embed request goes.

    python3 scripts/bench_serve_batching.py --roformer target/release/roformer --seconds 10 \\
        --rounds 2 --json experiments/serve/batching.json

Starts, side by side on 127.0.0.1 (the built-in poetry model, f32):
- `after`: `roformer serve` with its defaults (no wait: a request runs as soon as the model is
  free, with whatever is queued);
- `before`: the same binary with `--max-wait-ms 5`, the old default (the batching loop is
  otherwise the old one: it took what was queued, then waited out the 5 ms);
- `cls`: the defaults with `--pooling cls` (no mean pooling);
- `peer`: `scripts/serve_peer_fastapi.py --threads 2` (needs the peers venv with fastapi and
  uvicorn; left out with --no-peer).
Then, for --rounds rounds, each case in turn (so that the machine's load falls on all alike):
one-line /embed at 1 and 8 clients on before, after and peer; 8 lines a request at 8 clients on
after, cls and peer; /similarity with 7 sentences (the same 8 texts a forward pass, 7 numbers
back instead of 8 x 256) on after. Each run is `roformer bench serve --seconds S --warmup 8`.
Around each run on our servers it reads /metrics: the seconds the batcher spent computing
(`te_batch_inference_duration_sum`) over the run's wall time, and the mean batch size; and on
every server the CPU time per answered request from /proc (ours split into the model's threads,
the batcher and its rayon workers, and the HTTP threads, tokio's workers: JSON, tokenizing,
HTTP), a figure that the machine's other load disturbs much less than requests per second.
Finally `roformer bench model --configs poetry` times the bare forward pass at the shapes these
batches take (the tokens of the 8 lines are read from /tokenize).

Before each run it waits (up to --quiet-wait seconds) until the machine has been --quiet idle
(fraction of CPU time, from /proc/stat) for 3 s, and records the load average beside it.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEER_PYTHON = Path.home() / ".cache/roformer-peers/venv/bin/python"


def cpu_idle(window):
    def read():
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return fields[3] + fields[4], sum(fields)
    idle0, total0 = read()
    time.sleep(window)
    idle1, total1 = read()
    return (idle1 - idle0) / max(1, total1 - total0)


def wait_quiet(threshold, max_wait):
    start = time.monotonic()
    while time.monotonic() - start < max_wait:
        if cpu_idle(3.0) >= threshold:
            return True
    return False


def load():
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def cpu_seconds(pid):
    """CPU seconds (user + system) of process `pid` by thread group: `model` (the batcher
    thread and the rayon workers it starts, all named roformer-batche...), `http` (tokio's
    workers: HTTP, JSON, tokenizing) and `all` (the process)."""
    tick = os.sysconf("SC_CLK_TCK")

    def seconds(stat):
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

    # The process's own figure counts the threads that have ended too.
    groups = {"model": 0.0, "http": 0.0, "all": seconds(Path(f"/proc/{pid}/stat").read_text())}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            spent = seconds((task / "stat").read_text())
        except OSError:
            continue  # the thread ended
        if comm.startswith("roformer-batche"):
            groups["model"] += spent
        elif comm.startswith("tokio"):
            groups["http"] += spent
    return groups


def start(command, env=None):
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env=env, cwd=ROOT)
    line = child.stdout.readline().strip()
    if not line.startswith("listening on http://"):
        child.kill()
        raise SystemExit(f"{command[0]} did not print its address (first line: {line!r})")
    return child, line[len("listening on "):]


def wait_ready(url):
    for _ in range(600):
        try:
            get(url + "/health")
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"{url} never became healthy")


def bench(args, url, target, route, clients, lines):
    command = [args.roformer, "bench", "serve", "--url", url, "--routes", route, "--concurrency",
               str(clients), "--seconds", str(args.seconds), "--warmup", "8", "--lines", str(lines),
               "--json"]
    if target == "peer":
        command += ["--target", "peer"]
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout)["records"][0]


def run_case(args, servers, pids, case):
    name, server, route, clients, lines = case
    url = servers[server]
    cpu0 = cpu_seconds(pids[server])
    quiet = wait_quiet(args.quiet, args.quiet_wait)
    entry = {"case": name, "server": server, "route": route, "clients": clients, "lines": lines,
             "quiet": quiet, "load_before": load()}
    ours = server != "peer"
    if ours:
        m0 = get(url + "/metrics")
    record = bench(args, url, server, route, clients, lines)
    if ours:
        m1 = get(url + "/metrics")
        busy = (metric(m1, "te_batch_inference_duration_sum")
                - metric(m0, "te_batch_inference_duration_sum"))
        batches = metric(m1, "te_batch_next_size_count") - metric(m0, "te_batch_next_size_count")
        texts = metric(m1, "te_batch_next_size_sum") - metric(m0, "te_batch_next_size_sum")
        entry["batcher_busy"] = round(busy / record["seconds"], 3)
        entry["mean_batch_texts"] = round(texts / max(1.0, batches), 2)
    cpu1 = cpu_seconds(pids[server])
    answered = max(1, record["ok"])
    entry["cpu_ms_per_request"] = {k: round(1000 * (cpu1[k] - cpu0[k]) / answered, 3)
                                   for k in (cpu0 if ours else ["all"])}
    entry["load_after"] = load()
    entry.update({k: record[k] for k in ("req_s", "p50_ms", "p95_ms", "p99_ms", "ok", "errors")})
    entry["texts_s"] = round(record["req_s"] * (lines + 1 if route == "similarity" else lines), 1)
    print(json.dumps(entry), flush=True)
    return entry


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--roformer", default=str(ROOT / "target/release/roformer"))
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--quiet", type=float, default=0.9, help="idle fraction that counts as quiet")
    p.add_argument("--quiet-wait", type=float, default=60.0, help="longest wait for quiet, s")
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args()

    children, servers = [], {}
    flags = {"after": [], "before": ["--max-wait-ms", "5"], "cls": ["--pooling", "cls"]}
    for name, extra in flags.items():
        child, url = start([args.roformer, "serve", "--port", "0", *extra])
        children.append(child)
        servers[name] = url
    if not args.no_peer:
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        child, url = start([str(PEER_PYTHON), "scripts/serve_peer_fastapi.py", "--port", "0",
                            "--threads", "2"], env)
        children.append(child)
        servers["peer"] = url
    try:
        for url in servers.values():
            wait_ready(url)
        lines = ["床前明月光，疑是地上霜。", "举头望明月，低头思故乡。", "白日依山尽，黄河入海流。",
                 "欲穷千里目，更上一层楼。", "春眠不觉晓，处处闻啼鸟。", "夜来风雨声，花落知多少。",
                 "两个黄鹂鸣翠柳，一行白鹭上青天。", "国破山河在，城春草木深。"]
        tokens = [len(t) for t in post(servers["after"] + "/tokenize", {"inputs": lines})]
        peers = [] if args.no_peer else ["peer"]
        cases = [(f"one line, {c} client(s)", s, "embed", c, 1)
                 for c in (1, 8) for s in ["before", "after", *peers]]
        cases += [("8 lines, 8 clients", s, "embed", 8, 8) for s in ["after", "cls", *peers]]
        cases += [("similarity, 1 + 7 lines, 8 clients", "after", "similarity", 8, 7)]
        pids = {name: child.pid for name, child in zip(servers, children)}
        results = [run_case(args, servers, pids, case)
                   for _ in range(args.rounds) for case in cases]
        rss = {}
        for name, child in zip(servers, children):
            status = Path(f"/proc/{child.pid}/status").read_text()
            rss[name] = next(int(l.split()[1]) for l in status.splitlines() if l.startswith("VmRSS"))
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(timeout=60)
    longest = max(tokens)
    shapes = sorted({f"{b}x{t}" for b in (1, 8, 64) for t in (min(tokens), longest)}
                    | {f"64x{round(sum(tokens) / len(tokens))}"})
    model = subprocess.run([args.roformer, "bench", "model", "--configs", "poetry", "--shapes",
                            ",".join(shapes), "--seconds", "3", "--json"],
                           capture_output=True, text=True, check=True, cwd=ROOT)
    report = {"cpu": next((l.split(":", 1)[1].strip() for l in
                           Path("/proc/cpuinfo").read_text().splitlines()
                           if l.startswith("model name")), "unknown"),
              "cores": os.cpu_count(), "line_tokens": tokens, "rss_kib_after_runs": rss,
              "runs": results,
              "forward": [json.loads(line) for line in model.stdout.splitlines() if line.strip()]}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
