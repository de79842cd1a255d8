#!/usr/bin/env python3
"""Issues 37 (item 3) and 38 (item 3): SmolLM2-135M decode and batched completions, two
`roformer` builds (before and after a change) in alternating rounds, and llama.cpp beside them.

    python3 scripts/measure_llama_head.py --before OLD/roformer --after target/release/roformer \\
        --rounds 3 --json /tmp/llama-head.json

Per round, each build in turn (before, after), on RAYON_NUM_THREADS=2 (or as set):
- `roformer bench llama --json` (128 prompt tokens, 64 greedy decode steps, median of 3 runs);
- `roformer serve --gguf GGUF --max-waiting-generations 16`, then `roformer bench serve` of
  32 completions of 64 tokens after 4 warm-up requests, at 1 and at 8 clients.
Then, when the peers' virtualenv imports `llama_cpp` (and unless --no-peer): llama-cpp-python's
server (`--n_threads 2 --n_threads_batch 2`, or RAYON_NUM_THREADS) under the same `bench serve`
load at 1 and 8 clients, and llama.cpp's own decode (`scripts/bench_llama_peers.py`, the
measurement `scripts/bench_llama.sh` makes) followed by ours again.

Beside every wall-clock figure it records CPU-seconds (utime + stime: of `bench llama` itself,
and of the server process over each `bench serve` run, warm-up included) and the load average,
so that a run on a shared machine can still be read, and resident memory (the peak of each
`bench llama` run; the server's after each `bench serve` run). Prints Markdown tables and the ratios the
issues set targets for: 8 clients / 1 client (2.5x), ours / llama-cpp-python at 8 clients (3x),
decode ours / llama.cpp (1.5x). Run it on a quiet machine (pause other work with kill -STOP).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GGUF = ROOT / "data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PEERS_PYTHON = Path(os.environ.get("PEERS_PYTHON",
                                   Path.home() / ".cache/roformer-peers/venv/bin/python"))
WARMUP, MAX_TOKENS = 4, 64


def load_average():
    return float(Path("/proc/loadavg").read_text().split()[0])


def cpu_name():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def process_cpu(pid):
    """utime + stime of a running process, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def env():
    e = dict(os.environ)
    e["RAYON_NUM_THREADS"] = e.get("RAYON_NUM_THREADS", "2")
    e["HF_HUB_OFFLINE"] = "1"
    return e


def bench_llama(binary):
    """One `bench llama --json` run: its figures, CPU-seconds and peak resident memory."""
    wall0, load = time.time(), load_average()
    proc = subprocess.Popen([binary, "bench", "llama", "--gguf", str(GGUF), "--json"],
                            stdout=subprocess.PIPE, text=True, env=env())
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, proc.args)
    j = json.loads(out[out.index("{"):])
    return {"prefill_tok_s": j["prefill_tok_s"], "decode_tok_s": j["decode_tok_s"],
            "wall_s": time.time() - wall0, "cpu_s": usage.ru_utime + usage.ru_stime,
            "max_rss_mb": usage.ru_maxrss / 1024, "load": load}


def resident_mb(pid):
    """The resident memory of a running process, MB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_ready(url, seconds=300):
    end = time.time() + seconds
    while time.time() < end:
        for path in ("/health", "/v1/models"):
            try:
                with urllib.request.urlopen(url + path, timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not come up")


def serve_runs(server_cmd, port, target, load_binary, requests):
    """Starts a server, runs the completions load at 1 and 8 clients, stops it."""
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(server_cmd, env=env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        wait_ready(url)
        runs = {}
        for clients in (1, 8):
            load = load_average()
            cpu0 = process_cpu(server.pid)
            out = subprocess.run(
                [load_binary, "bench", "serve", "--target", target, "--url", url,
                 "--routes", "completions", "--max-tokens", str(MAX_TOKENS),
                 "--concurrency", str(clients), "--requests", str(requests),
                 "--warmup", str(WARMUP), "--json"],
                check=True, capture_output=True, text=True, env=env()).stdout
            cpu = process_cpu(server.pid) - cpu0
            rec = json.loads(out[out.index("{"):])["records"][0]
            tokens = (requests + WARMUP) * MAX_TOKENS
            runs[clients] = {"tokens_s": rec["tokens_s"], "p50_ms": rec["p50_ms"],
                             "p99_ms": rec["p99_ms"], "short_answers": rec["short_answers"],
                             "server_cpu_s": cpu, "server_cpu_ms_per_token": 1e3 * cpu / tokens,
                             "load": load, "server_rss_mb": resident_mb(server.pid)}
        return runs
    finally:
        server.terminate()
        server.wait(timeout=30)


def ours_serve(binary, port, requests):
    cmd = [binary, "serve", "--gguf", str(GGUF), "--port", str(port),
           "--request-timeout-s", "600", "--max-waiting-generations", "16"]
    return serve_runs(cmd, port, "ours", binary, requests)


def peer_serve(load_binary, port, requests):
    cmd = [str(PEERS_PYTHON), "-m", "llama_cpp.server", "--model", str(GGUF),
           "--n_threads", env()["RAYON_NUM_THREADS"], "--n_threads_batch",
           env()["RAYON_NUM_THREADS"], "--n_ctx", "2048",
           "--host", "127.0.0.1", "--port", str(port), "--verbose", "false"]
    return serve_runs(cmd, port, "llama-cpp", load_binary, requests)


def has_peer():
    if not PEERS_PYTHON.exists():
        return False
    return subprocess.run([str(PEERS_PYTHON), "-c", "import llama_cpp"],
                          capture_output=True).returncode == 0


def med(values):
    return statistics.median(values) if values else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the build before the change")
    ap.add_argument("--after", default=str(ROOT / "target/release/roformer"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=32,
                    help="completions per serve run (after 4 warm-up ones)")
    ap.add_argument("--no-peer", action="store_true", help="skip llama.cpp")
    ap.add_argument("--no-serve", action="store_true", help="skip the serve runs")
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args()
    builds = {"before": args.before, "after": args.after}
    figures = {"cpu": cpu_name(), "cores": os.cpu_count(), "rounds": [], "peer": None,
               "threads": env()["RAYON_NUM_THREADS"], "requests": args.requests}
    print(f"{figures['cpu']}, {figures['cores']} cores, {figures['threads']} threads, "
          f"load average {load_average()}",
          file=sys.stderr)
    for r in range(args.rounds):
        round_ = {}
        for name, binary in builds.items():
            print(f"round {r + 1}: {name} (load {load_average()})", file=sys.stderr)
            round_[name] = {"llama": bench_llama(binary)}
            if not args.no_serve:
                round_[name]["serve"] = ours_serve(binary, 8014, args.requests)
        figures["rounds"].append(round_)
    if not args.no_peer and has_peer():
        print("llama-cpp-python: its server, then its own decode", file=sys.stderr)
        if not args.no_serve:
            figures["peer"] = {"serve": peer_serve(args.after, 8013, args.requests)}
        # llama.cpp's own decode (scripts/bench_llama_peers.py, which also runs transformers),
        # then ours again right after it.
        out = Path("/tmp/measure-llama-head-peers.json")
        subprocess.run([str(PEERS_PYTHON), str(ROOT / "scripts/bench_llama_peers.py"),
                        "--threads", env()["RAYON_NUM_THREADS"], "--json", str(out)],
                       check=True, capture_output=True, env=env())
        peer = json.loads(out.read_text())["peers"]["llama.cpp-q4_1"]
        figures["peer"] = dict(figures["peer"] or {}, llama_cpp=peer,
                               ours_after=bench_llama(args.after))
    elif not args.no_peer:
        print(f"no llama_cpp in {PEERS_PYTHON}: the peer is left out", file=sys.stderr)

    def llama(name, key):
        return med([rd[name]["llama"][key] for rd in figures["rounds"]])

    print("| build | prefill tok/s | decode tok/s | bench llama wall s | CPU s | peak RSS MB "
          "| load |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in builds:
        print(f"| {name} | {llama(name, 'prefill_tok_s'):.1f} | {llama(name, 'decode_tok_s'):.1f}"
              f" | {llama(name, 'wall_s'):.1f} | {llama(name, 'cpu_s'):.2f}"
              f" | {llama(name, 'max_rss_mb'):.0f} | {llama(name, 'load'):.1f} |")
    print(f"\ndecode after / before: {llama('after', 'decode_tok_s') / llama('before', 'decode_tok_s'):.2f}x")
    if not args.no_serve:
        print("\n| server | clients | tokens/s | p50 ms | p99 ms | server CPU ms / token "
              "| server RSS MB | load |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        rows = {name: {c: {k: med([rd[name]["serve"][c][k] for rd in figures["rounds"]])
                           for k in ("tokens_s", "p50_ms", "p99_ms",
                                     "server_cpu_ms_per_token", "server_rss_mb", "load")}
                       for c in (1, 8)} for name in builds}
        if figures["peer"] and "serve" in figures["peer"]:
            rows["llama-cpp-python"] = figures["peer"]["serve"]
        for name, by in rows.items():
            for c, f in by.items():
                print(f"| {name} | {c} | {f['tokens_s']:.1f} | {f['p50_ms']:.0f} | "
                      f"{f['p99_ms']:.0f} | {f['server_cpu_ms_per_token']:.2f} | "
                      f"{f['server_rss_mb']:.0f} | {f['load']:.1f} |")
        print()
        for name, by in rows.items():
            print(f"{name}: 8 clients / 1 client = {by[8]['tokens_s'] / by[1]['tokens_s']:.2f}x "
                  f"(CPU per token: {by[1]['server_cpu_ms_per_token'] / by[8]['server_cpu_ms_per_token']:.2f}x)")
        if "llama-cpp-python" in rows:
            peer = rows["llama-cpp-python"]
            for c in (1, 8):
                print(f"after / llama-cpp-python at {c} clients: "
                      f"{rows['after'][c]['tokens_s'] / peer[c]['tokens_s']:.2f}x")
    if figures["peer"] and "llama_cpp" in figures["peer"]:
        cpp, ours = figures["peer"]["llama_cpp"], figures["peer"]["ours_after"]
        print("\n| runtime | prefill tok/s | decode tok/s |\n|---|---:|---:|")
        print(f"| ours (after) | {ours['prefill_tok_s']:.1f} | {ours['decode_tok_s']:.1f} |")
        print(f"| llama.cpp | {cpp['prefill_tok_s']:.1f} | {cpp['decode_tok_s']:.1f} |")
        print(f"\ndecode ours / llama.cpp: {ours['decode_tok_s'] / cpp['decode_tok_s']:.2f}x "
              f"(prefill {ours['prefill_tok_s'] / cpp['prefill_tok_s']:.2f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
