#!/usr/bin/env python3
"""Soak test of `roformer serve`: a long run mixing valid requests with malformed ones, oversized
bodies, clients that disconnect, and (with --gguf) completions.

    python3 scripts/soak_serve.py --roformer target/release/roformer --minutes 10 \\
        --concurrency 8 --json soak.json
    python3 scripts/soak_serve.py --roformer target/release/roformer --minutes 10 \\
        --gguf crates/llama/tests/fixtures/tiny-llama/tiny.gguf --json soak.json
    python3 scripts/soak_serve.py --url http://127.0.0.1:3000 --pid PID --minutes 10

Without --url the script starts `ROFORMER serve --port 0` (the built-in model; with --gguf FILE
also the completion routes; extra server flags after `--`) and stops it at the end; with --url it
measures a running server whose process id --pid gives (for its memory). Python's standard
library only.

--concurrency client threads (default 8), each on its own keep-alive connection, send requests
until the time is up. Request number i (counted across threads) is of kind KINDS[i % 40]: per 40
requests,
- 28 valid: /embed (one line, or 8 lines), /fill-mask, /similarity, /embed_all, /embed_sparse,
  /tokenize, /decode; with --gguf, 4 of them completions instead (two whole, two streamed and read
  to the end). Each should get 200 (a completion may get 429 when --max-waiting-generations are
  waiting).
- 5 malformed: broken JSON, `inputs` of the wrong type, an empty text, a fill-mask text without
  [MASK], top_k 0. Each should get 400 or 422.
- 2 oversized: a body of 3 MB (over the default --max-body-bytes of 2 MB; should get 413) and
  10,000 lines in one request (should get 422: over --max-client-batch-size).
- 5 disconnecting: a client that sends the headers and half the body, then closes (no status
  expected: the request was never sent in full); one that sends a whole valid request and closes
  without reading the answer; and, with --gguf, one that reads the first event of a stream and
  closes (else a half-sent body again).

Every request sent in full is counted by kind and status; 0 means no status came back (the
connection was closed or reset, or --timeout passed). A failure while sending is counted apart
(`send_failed`), since a client that could not send its request cannot expect an answer.

Every --sample-every seconds (default 10), and at start and end, the script reads the server's
VmRSS from /proc/PID/status, its start time from /proc/PID/stat (a restart, same pid or not,
changes it) and GET /health.

It passes (exit 0) when:
- every request sent in full got a status (no status 0), and none failed while sending;
- valid requests got 200, malformed ones 400 or 422, oversized ones 413 or 422;
- the server process was never restarted and answered every /health with 200;
- RSS is level: after minute 2 every sample is within 10 % of the sample at minute 2 (runs of two
  minutes or less compare the last sample with the first under load, 10 % + 16 MiB).
The figures go to stdout, and as JSON to --json FILE.
"""

import argparse
import http.client
import itertools
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import Counter
from pathlib import Path

LINES = ["床前明月光，疑是地上霜。", "举头望明月，低头思故乡。", "白日依山尽，黄河入海流。",
         "春眠不觉晓，处处闻啼鸟。", "夜来风雨声，花落知多少。", "两个黄鹂鸣翠柳，一行白鹭上青天。",
         "国破山河在，城春草木深。", "欲穷千里目，更上一层楼。"]


def body(value):
    """JSON as UTF-8, the characters unescaped (3 bytes each, not 6)."""
    return json.dumps(value, ensure_ascii=False).encode()


OVERSIZED = body({"inputs": "月" * 1_000_000})  # 3 MB
MANY_LINES = body({"inputs": [LINES[0]] * 10_000})  # 380 kB


VALID = [
    ("/embed", body({"inputs": LINES[0], "normalize": True})),
    ("/embed", body({"inputs": LINES})),
    ("/fill-mask", body({"inputs": "床前明[MASK]光", "parameters": {"top_k": 5}})),
    ("/similarity", body({"inputs": {"source_sentence": LINES[0], "sentences": LINES[1:4]}})),
    ("/embed_all", body({"inputs": LINES[1]})),
    ("/embed_sparse", body({"inputs": LINES[2]})),
    ("/tokenize", body({"inputs": LINES[3]})),
    ("/decode", body({"ids": [2, 100, 200, 300, 3]})),
]
COMPLETION = ("/v1/completions", body({"prompt": "hello there", "max_tokens": 16, "temperature": 0,
                                       "ignore_eos": True}))
STREAM = ("/v1/completions", body({"prompt": "hello there", "max_tokens": 16, "temperature": 0,
                                   "ignore_eos": True, "stream": True}))
MALFORMED = [
    ("/embed", b'{"inputs": "\xe5\xba\x8a'),                                   # broken JSON
    ("/embed", body({"inputs": 5})),                                           # wrong type
    ("/embed", body({"inputs": ""})),                                          # empty text
    ("/fill-mask", body({"inputs": LINES[0]})),                                # no [MASK]
    ("/fill-mask", body({"inputs": "床前[MASK]月光", "parameters": {"top_k": 0}})),
]


def kinds(gguf):
    """The 40 kinds of requests, in the order they cycle: (kind, path, body, expected)."""
    out = []
    for n in range(28):
        if gguf and n % 7 == 6:
            # 429 is a completion's due when --max-waiting-generations are already waiting.
            out.append(("valid", *(COMPLETION if n % 14 == 6 else STREAM), {200, 429}))
        else:
            out.append(("valid", *VALID[n % len(VALID)], {200}))
    out += [("malformed", *m, {400, 422}) for m in MALFORMED]
    out.append(("oversized", "/embed", OVERSIZED, {413}))
    out.append(("oversized", "/embed", MANY_LINES, {413, 422}))
    out += [("half_sent", "/embed", body({"inputs": LINES[0]}), None)] * 2
    out += [("unread", "/embed", body({"inputs": LINES}), None)] * 2
    out.append(("stream_dropped", *STREAM, None) if gguf
               else ("half_sent", "/embed", body({"inputs": LINES[1]}), None))
    # Spread the kinds over the cycle so that each thread meets every kind.
    order = sorted(range(len(out)), key=lambda i: (i * 17) % len(out))
    return [out[i] for i in order]


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


def raw_request(path, payload, host, port):
    return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload


class Soak:
    def __init__(self, host, port, args):
        self.host, self.port, self.args = host, port, args
        self.kinds = kinds(args.gguf is not None)
        self.counter = itertools.count()
        self.lock = threading.Lock()
        self.counts = Counter()  # (kind, status) -> n; status "send_failed" when sending failed
        self.unexpected = Counter()  # (kind, path, status) -> n
        self.deadline = 0.0

    def disconnect(self, kind, path, payload):
        """A client that leaves early on a connection of its own: half a body, an unread
        answer, or a stream read to its first event."""
        with socket.create_connection((self.host, self.port), timeout=self.args.timeout) as s:
            request = raw_request(path, payload, self.host, self.port)
            if kind == "half_sent":
                s.sendall(request[:len(request) - len(payload) // 2])
            elif kind == "unread":
                s.sendall(request)
            else:  # stream_dropped: wait for the first bytes of the stream
                s.sendall(request)
                s.recv(1)

    def worker(self):
        conn = None
        local, unexpected = Counter(), Counter()
        while time.monotonic() < self.deadline:
            kind, path, payload, expected = self.kinds[next(self.counter) % len(self.kinds)]
            if expected is None:
                try:
                    self.disconnect(kind, path, payload)
                    local[(kind, "left")] += 1
                except OSError:
                    local[(kind, "send_failed")] += 1
                continue
            if conn is None:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.args.timeout)
            try:
                conn.request("POST", path, payload, {"Content-Type": "application/json"})
            except (OSError, http.client.HTTPException):
                local[(kind, "send_failed")] += 1
                conn.close()
                conn = None
                continue
            try:
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
            local[(kind, status)] += 1
            if status not in expected:
                unexpected[(kind, path, status)] += 1
        if conn is not None:
            conn.close()
        with self.lock:
            self.counts.update(local)
            self.unexpected.update(unexpected)

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


def rss_level(samples):
    """Whether RSS stays level, and the reference it was compared with."""
    loaded = [s for s in samples[1:] if "rss_kib" in s]
    if not loaded:
        return False, None
    after_two = [s for s in loaded if s["t_s"] >= 120.0]
    if len(after_two) >= 2:
        ref = after_two[0]["rss_kib"]
        ok = all(abs(s["rss_kib"] - ref) <= 0.10 * ref for s in after_two)
        return ok, {"t_s": after_two[0]["t_s"], "rss_kib": ref}
    ref = loaded[0]["rss_kib"]
    return loaded[-1]["rss_kib"] <= ref * 1.10 + 16 * 1024, {"t_s": loaded[0]["t_s"], "rss_kib": ref}


def verdict(soak, samples, child):
    counts = soak.counts
    no_status = sum(n for (_, s), n in counts.items() if s == 0)
    send_failed = sum(n for (_, s), n in counts.items() if s == "send_failed")
    starts = {s.get("start_time") for s in samples}
    restarts = len(starts) - 1 if None not in starts else None
    rss_ok, reference = rss_level(samples)
    checks = {
        "every_request_sent_in_full_got_a_status": no_status == 0,
        "every_request_could_be_sent": send_failed == 0,
        "every_status_as_expected": not soak.unexpected,
        "no_restart": restarts == 0 and (child is None or child.poll() is None),
        "health_always_200": all(s["health"] == 200 for s in samples),
        "rss_level": rss_ok,
    }
    return {"no_status": no_status, "send_failed": send_failed, "restarts": restarts,
            "rss_reference": reference, "checks": checks, "ok": all(checks.values())}


def start_server(binary, gguf, extra):
    command = [binary, "serve", "--port", "0", *(["--gguf", gguf] if gguf else []), *extra]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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
    p.add_argument("--gguf", help="a GGUF file: the started server serves completions too")
    p.add_argument("--url", help="a running server instead (needs --pid)")
    p.add_argument("--pid", type=int, help="process id of the server at --url")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--seconds", type=float, help="duration in seconds (overrides --minutes)")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--sample-every", type=float, default=10.0, help="seconds between RSS samples")
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
        child, url = start_server(args.roformer, args.gguf, args.server_args)
        pid = child.pid
    parsed = urllib.parse.urlparse(url)
    soak = Soak(parsed.hostname, parsed.port or 80, args)
    try:
        wait_healthy(soak)
        samples, elapsed = run(Proc(pid), soak, seconds, args.sample_every)
        result = verdict(soak, samples, child)
    finally:
        if child is not None:
            child.terminate()
            child.wait(timeout=60)
    total = sum(soak.counts.values())
    rss = [s["rss_kib"] for s in samples if "rss_kib" in s]
    report = {
        "url": url, "pid": pid, "gguf": args.gguf, "seconds": round(elapsed, 1),
        "concurrency": args.concurrency, "requests": total, "req_s": round(total / elapsed, 1),
        "by_kind_and_status": {f"{k} {s}": n for (k, s), n in
                               sorted(soak.counts.items(), key=lambda x: (x[0][0], str(x[0][1])))},
        "unexpected": {f"{k} {p} {s}": n for (k, p, s), n in sorted(soak.unexpected.items(),
                                                                     key=str)},
        "rss_kib": {"before_load": samples[0].get("rss_kib"),
                    "first_under_load": samples[1].get("rss_kib") if len(samples) > 1 else None,
                    "end": samples[-1].get("rss_kib"), "max": max(rss, default=None)},
        "samples": samples, **result,
    }
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    sys.exit(0 if report["ok"] else 1)


if __name__ == "__main__":
    main()
