#!/usr/bin/env python3
"""Soak test of `roformer serve`: a long run at fixed concurrency with malformed requests mixed in.

    python3 scripts/soak_serve.py --roformer target/release/roformer --minutes 10 \\
        --concurrency 64 --json soak.json
    python3 scripts/soak_serve.py --url http://127.0.0.1:3000 --pid PID --minutes 10

Without --url the script starts `ROFORMER serve --port 0` (the built-in model; extra server flags
after `--`) and stops it at the end; with --url it measures a running server whose process id
--pid gives (for its memory). Python's standard library only.

--concurrency client threads (default 64), each on its own keep-alive connection, send requests
until the time is up. Request number i (counted across threads) is malformed when i % 20 == 19
(exactly 1 in 20, the 5 % of the issue), cycling through five kinds: broken JSON, `inputs` of the
wrong type, an empty text, a fill-mask text without [MASK], and top_k 0; the others alternate a
valid /embed and a valid /fill-mask. Every answer is counted by kind and status (0: no answer, a
connection error or the --timeout).

Every --sample-every seconds (default 30), and at start and end, the script reads the server's
VmRSS from /proc/PID/status, its start time from /proc/PID/stat (a restart, same pid or not,
changes it) and GET /health.

It passes (exit 0) when:
- the count of failed answers (non-2xx or none) equals the count of malformed requests, and each
  malformed request got a 4xx (400, 413 or 422);
- the server process was never restarted and answered every /health with 200;
- RSS is flat: the last sample is at most 10 % + 16 MiB above the first sample taken under load
  (after the first interval; the sample before any load is reported too).
The figures go to stdout, and as JSON to --json FILE.
"""

import argparse
import http.client
import itertools
import json
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import Counter
from pathlib import Path

LINES = ["床前明月光，疑是地上霜。", "举头望明月，低头思故乡。", "白日依山尽，黄河入海流。",
         "春眠不觉晓，处处闻啼鸟。"]
MALFORMED = [
    ("/embed", b'{"inputs": "\xe5\xba\x8a'),                                  # broken JSON
    ("/embed", json.dumps({"inputs": 5}).encode()),                           # wrong type
    ("/embed", json.dumps({"inputs": ""}).encode()),                          # empty text
    ("/fill-mask", json.dumps({"inputs": LINES[0]}).encode()),                # no [MASK]
    ("/fill-mask", json.dumps({"inputs": "床前[MASK]月光", "parameters": {"top_k": 0}}).encode()),
]
RSS_TOLERANCE = (1.10, 16 * 1024)  # factor, KiB


def request_for(i):
    """(path, body, malformed) of request number i."""
    if i % 20 == 19:
        path, body = MALFORMED[(i // 20) % len(MALFORMED)]
        return path, body, True
    line = LINES[i % len(LINES)]
    if i % 2 == 0:
        return "/embed", json.dumps({"inputs": line, "normalize": True}).encode(), False
    masked = line[:2] + "[MASK]" + line[3:]
    return "/fill-mask", json.dumps({"inputs": masked, "parameters": {"top_k": 5}}).encode(), False


class Proc:
    """The server's process, read from /proc."""

    def __init__(self, pid):
        self.pid = pid

    def rss_kib(self):
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError(f"/proc/{self.pid}/status has no VmRSS")

    def start_time(self):
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the command name


class Soak:
    def __init__(self, host, port, args):
        self.host, self.port, self.args = host, port, args
        self.counter = itertools.count()
        self.lock = threading.Lock()
        self.counts = Counter()  # (kind, status) -> n
        self.malformed_statuses = Counter()
        self.deadline = 0.0

    def worker(self):
        conn = None
        local = Counter()
        while time.monotonic() < self.deadline:
            i = next(self.counter)
            path, body, bad = request_for(i)
            if conn is None:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.args.timeout)
            try:
                conn.request("POST", path, body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                status = response.status
                if response.getheader("connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                status = 0
                conn.close()
                conn = None
            local[("malformed" if bad else "valid", status)] += 1
        if conn is not None:
            conn.close()
        with self.lock:
            self.counts.update(local)

    def health(self):
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
            conn.request("GET", "/health")
            status = conn.getresponse().status
            conn.close()
            return status
        except (OSError, http.client.HTTPException):
            return 0


def sample(proc, soak, t0, samples):
    entry = {"t_s": round(time.monotonic() - t0, 1), "health": soak.health()}
    try:
        entry["rss_kib"] = proc.rss_kib()
        entry["start_time"] = proc.start_time()
    except (OSError, RuntimeError) as err:
        entry["gone"] = str(err)
    samples.append(entry)
    print(f"t={entry['t_s']:>7.1f}s rss={entry.get('rss_kib', '-')} KiB "
          f"health={entry['health']}", flush=True)


def run(proc, soak, seconds, every):
    samples = []
    t0 = time.monotonic()
    sample(proc, soak, t0, samples)
    soak.deadline = time.monotonic() + seconds
    threads = [threading.Thread(target=soak.worker, daemon=True)
               for _ in range(soak.args.concurrency)]
    for t in threads:
        t.start()
    while time.monotonic() < soak.deadline:
        time.sleep(min(every, max(0.0, soak.deadline - time.monotonic())))
        if time.monotonic() < soak.deadline - 0.5:
            sample(proc, soak, t0, samples)
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    sample(proc, soak, t0, samples)
    return samples, elapsed


def verdict(counts, samples, child):
    malformed = sum(n for (kind, _), n in counts.items() if kind == "malformed")
    failed = sum(n for (_, status), n in counts.items() if not 200 <= status < 300)
    bad_as_4xx = sum(n for (kind, s), n in counts.items() if kind == "malformed" and s in (400, 413, 422))
    starts = {s.get("start_time") for s in samples}
    restarts = len(starts) - 1 if None not in starts else None
    loaded = [s["rss_kib"] for s in samples[1:] if "rss_kib" in s]
    rss_ok = len(loaded) >= 1 and loaded[-1] <= loaded[0] * RSS_TOLERANCE[0] + RSS_TOLERANCE[1]
    checks = {
        "failed_equals_malformed": failed == malformed,
        "malformed_all_4xx": bad_as_4xx == malformed,
        "no_restart": restarts == 0 and (child is None or child.poll() is None),
        "health_always_200": all(s["health"] == 200 for s in samples),
        "rss_flat": rss_ok,
    }
    return {"malformed": malformed, "failed": failed, "restarts": restarts, "checks": checks,
            "ok": all(checks.values())}


def start_server(binary, extra):
    child = subprocess.Popen([binary, "serve", "--port", "0", *extra], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    line = child.stdout.readline().strip()
    if not line.startswith("listening on http://"):
        child.kill()
        raise SystemExit(f"{binary} serve did not print its address (first line: {line!r})")
    threading.Thread(target=child.stdout.read, daemon=True).start()  # never block its stdout
    return child, line[len("listening on "):]


def wait_healthy(soak, seconds=120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if soak.health() == 200:
            return
        time.sleep(0.2)
    raise SystemExit(f"/health did not answer 200 within {seconds} s")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--roformer", default="target/release/roformer", help="binary to start")
    p.add_argument("--url", help="a running server instead (needs --pid)")
    p.add_argument("--pid", type=int, help="process id of the server at --url")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--seconds", type=float, help="duration in seconds (overrides --minutes)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--sample-every", type=float, default=30.0, help="seconds between RSS samples")
    p.add_argument("--timeout", type=float, default=60.0, help="client timeout per request, s")
    p.add_argument("--json", type=Path, help="write the figures here as JSON")
    p.add_argument("server_args", nargs="*", help="after --: extra flags of the started server")
    args = p.parse_args()
    seconds = args.seconds if args.seconds is not None else args.minutes * 60
    if not 0 < seconds <= 86400:
        p.error(f"duration {seconds} s: expected above 0 and at most 86400 (a day)")
    if not 1 <= args.concurrency <= 1024:
        p.error(f"--concurrency {args.concurrency}: expected 1 to 1024")
    if not 0 < args.sample_every <= seconds:
        p.error(f"--sample-every {args.sample_every}: expected above 0 and at most the duration")
    if args.url and args.pid is None:
        p.error("--url needs --pid (the server's process id, to read its memory)")
    return args, seconds


def main():
    args, seconds = parse_args()
    child = None
    if args.url:
        url, pid = args.url, args.pid
    else:
        child, url = start_server(args.roformer, args.server_args)
        pid = child.pid
    parsed = urllib.parse.urlparse(url)
    soak = Soak(parsed.hostname, parsed.port or 80, args)
    try:
        wait_healthy(soak)
        samples, elapsed = run(Proc(pid), soak, seconds, args.sample_every)
        result = verdict(soak.counts, samples, child)
    finally:
        if child is not None:
            child.terminate()
            child.wait(timeout=60)
    total = sum(soak.counts.values())
    report = {
        "url": url, "pid": pid, "seconds": round(elapsed, 1), "concurrency": args.concurrency,
        "requests": total, "req_s": round(total / elapsed, 1),
        "by_kind_and_status": {f"{k} {s}": n for (k, s), n in sorted(soak.counts.items())},
        "rss_kib": {"before_load": samples[0].get("rss_kib"),
                    "first_under_load": samples[1].get("rss_kib") if len(samples) > 1 else None,
                    "end": samples[-1].get("rss_kib"),
                    "max": max((s.get("rss_kib", 0) for s in samples), default=None)},
        "samples": samples, **result,
    }
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    sys.exit(0 if report["ok"] else 1)


if __name__ == "__main__":
    main()
