#!/usr/bin/env python3
"""Prefill and decode throughput of two peer runtimes on SmolLM2-135M-Instruct (CPU).

Peers, both fed the same fixed token ids (an English sentence repeated and cut to
--prompt-tokens, tokenized by transformers' GGUF tokenizer):

* transformers: `LlamaForCausalLM` dequantised from the GGUF to float32, on PyTorch with
  torch.set_num_threads(--threads), eval mode, no grad.
* llama.cpp: llama-cpp-python on the Q4_1 GGUF itself, n_threads = n_threads_batch = --threads.
  Skipped (and said so in the JSON) when llama_cpp cannot be imported.

Prefill: one forward over the whole prompt with an empty KV cache (llama.cpp: one batch,
n_batch >= prompt length); tokens/s = prompt tokens / seconds.
Decode: after that prefill, --new-tokens greedy steps, one token each through the KV cache
(argmax of the last logits, fed back); tokens/s = new tokens / seconds, prefill excluded.
Each peer runs once untimed (warm-up), then --repeats times; the median is reported.
Times are wall clock from time.perf_counter.

Run from the repository root:

    HF_HUB_OFFLINE=1 ~/.cache/roformer-peers/venv/bin/python scripts/bench_llama_peers.py \\
        --threads 2 --prompt-tokens 128 --new-tokens 64 --repeats 3 --json /tmp/peer_bench.json

Writes {"cpu", "threads", "peers": {name: {prefill_tok_s, decode_tok_s, prefill_tokens,
decode_tokens, ...}}} to --json and prints a table.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GGUF = ROOT / "data" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"

SENTENCE = ("The quick brown fox jumps over the lazy dog while the old farmer watches "
            "from the porch and the river runs quietly past the mill. ")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def prompt_ids(tok, n):
    ids = []
    while len(ids) < n:
        ids += tok(SENTENCE, add_special_tokens=False)["input_ids"]
    return [int(t) for t in ids[:n]]


def measure(run_once, repeats):
    """run_once() -> (prefill_s, decode_s, generated_ids); warm-up, then the median of repeats."""
    _, _, warm_ids = run_once()
    prefill, decode = [], []
    for _ in range(repeats):
        p, d, ids = run_once()
        if ids != warm_ids:
            print("warning: greedy tokens differ between runs", file=sys.stderr)
        prefill.append(p)
        decode.append(d)
    return statistics.median(prefill), statistics.median(decode), prefill, decode, warm_ids


def bench_transformers(gguf, ids, new_tokens, repeats):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    model.eval()
    x = torch.tensor([ids])

    @torch.no_grad()
    def run_once():
        t0 = time.perf_counter()
        out = model(input_ids=x, use_cache=True)
        nxt = int(out.logits[0, -1].argmax())
        t1 = time.perf_counter()
        past = out.past_key_values
        generated = [nxt]
        for _ in range(new_tokens):
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = int(out.logits[0, -1].argmax())
            generated.append(nxt)
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1, generated

    return measure(run_once, repeats), {"dtype": "float32", "torch_threads": torch.get_num_threads()}


def bench_llama_cpp(gguf, ids, new_tokens, repeats, threads):
    import llama_cpp

    n_ctx = len(ids) + new_tokens + 16
    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=n_ctx, n_batch=max(512, len(ids)),
                          n_ubatch=max(512, len(ids)), n_threads=threads, n_threads_batch=threads,
                          logits_all=False, verbose=False)

    n_vocab = llm.n_vocab()

    def last_argmax():
        # With logits_all=False, Llama.eval() does not copy logits into llm.scores; read the last
        # token's logits straight from the context.
        ptr = llm._ctx.get_logits_ith(-1)
        return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(n_vocab,))))

    def run_once():
        llm.reset()  # n_tokens = 0; eval() drops the KV cache past n_tokens
        t0 = time.perf_counter()
        llm.eval(ids)
        nxt = last_argmax()
        t1 = time.perf_counter()
        generated = [nxt]
        for _ in range(new_tokens):
            llm.eval([nxt])
            nxt = last_argmax()
            generated.append(nxt)
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1, generated

    return measure(run_once, repeats), {"weights": "Q4_1 GGUF", "llama_cpp_python": llama_cpp.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer
    import transformers

    tok = AutoTokenizer.from_pretrained(str(args.gguf.parent), gguf_file=args.gguf.name)
    ids = prompt_ids(tok, args.prompt_tokens)

    load_before = os.getloadavg()
    peers = {}
    greedy = {}
    runners = [("transformers-f32", lambda: bench_transformers(args.gguf, ids, args.new_tokens, args.repeats))]
    try:
        import llama_cpp  # noqa: F401
        runners.append(("llama.cpp-q4_1",
                        lambda: bench_llama_cpp(args.gguf, ids, args.new_tokens, args.repeats, args.threads)))
    except ImportError as e:
        peers["llama.cpp-q4_1"] = {"skipped": f"llama_cpp not importable: {e}"}

    for name, run in runners:
        print(f"running {name} ...", file=sys.stderr)
        (p_med, d_med, p_all, d_all, generated), extra = run()
        greedy[name] = generated
        peers[name] = {
            "prefill_tok_s": len(ids) / p_med,
            "decode_tok_s": args.new_tokens / d_med,
            "prefill_tokens": len(ids),
            "decode_tokens": args.new_tokens,
            # Best of the repeats too: on a busy machine the median can be far off.
            "prefill_tok_s_best": len(ids) / min(p_all),
            "decode_tok_s_best": args.new_tokens / min(d_all),
            "prefill_s_runs": p_all,
            "decode_s_runs": d_all,
            **extra,
        }

    names = [n for n in greedy]
    if len(names) == 2:
        a, b = greedy[names[0]], greedy[names[1]]
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
        print(f"greedy tokens agree for the first {same} of {len(a)}", file=sys.stderr)

    result = {
        "cpu": cpu_model(),
        "threads": args.threads,
        "peers": peers,
        "prompt_tokens": len(ids),
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        # 1-minute load average before and after: other work on the machine skews the timings.
        "loadavg_1min": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    try:
        import llama_cpp
        result["versions"]["llama_cpp_python"] = llama_cpp.__version__
    except ImportError:
        pass

    print(f"\nCPU: {result['cpu']}, threads: {args.threads}, median of {args.repeats} (after 1 warm-up), "
          f"load average {result['loadavg_1min'][0]} -> {result['loadavg_1min'][1]}")
    print(f"{'peer':<20} {'prefill tok/s':>14} {'decode tok/s':>13}  tokens (prefill/decode)  "
          f"best prefill/decode tok/s")
    for name, r in peers.items():
        if "skipped" in r:
            print(f"{name:<20} skipped: {r['skipped']}")
        else:
            print(f"{name:<20} {r['prefill_tok_s']:>14.1f} {r['decode_tok_s']:>13.1f}  "
                  f"{r['prefill_tokens']}/{r['decode_tokens']:<17} "
                  f"{r['prefill_tok_s_best']:.1f}/{r['decode_tok_s_best']:.1f}")

    if args.json:
        args.json.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
