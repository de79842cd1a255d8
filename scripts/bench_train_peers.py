#!/usr/bin/env python3
"""PyTorch's side of `scripts/bench_train.sh`: training steps of transformers'
RoFormerForMaskedLM with torch.optim.AdamW, on one config and batch shape, in f32 or under
torch.autocast("cpu", dtype=torch.bfloat16) (master weights, optimiser and loss f32).

    PEERS_PYTHON scripts/bench_train_peers.py --config small|poetry --shape 8x128 \
        --precision f32|bf16 [--seconds 10] [--threads 2]

Prints one JSON line {impl, config, batch, seq, precision, steps, step_s, tokens_per_s,
peak_rss_bytes, first_loss, last_loss}. The batch is as `roformer bench train` draws it: ids
uniform in 5..vocab, about 15 % of the positions labelled with their own id (the rest -100),
the same batch every step; dropout 0. Run each case in its own process (peak RSS is the
process's). Needs torch and transformers (the peers' virtualenv, ../shared/peers/setup.sh).
"""
import argparse
import json
import resource
import statistics
import time

import torch
from transformers import RoFormerConfig, RoFormerForMaskedLM

# (vocab, hidden, layers, heads, intermediate), as `roformer bench train --config`.
CONFIGS = {
    "small": (50000, 384, 6, 6, 1536),
    "poetry": (10000, 256, 4, 4, 1024),
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", choices=CONFIGS, default="small")
    p.add_argument("--shape", default="8x128")
    p.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    batch, seq = (int(v) for v in a.shape.split("x"))
    vocab, hidden, layers, heads, inter = CONFIGS[a.config]
    cfg = RoFormerConfig(vocab_size=vocab, hidden_size=hidden, embedding_size=hidden,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         intermediate_size=inter, max_position_embeddings=max(1536, seq),
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = RoFormerForMaskedLM(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    ids = torch.randint(5, vocab, (batch, seq))
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(batch, seq) < 0.15
    chosen[0, 0] = True
    labels[chosen] = ids[chosen]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        return loss.item()

    first = step()
    times, last = [], first
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < a.seconds:
        t = time.perf_counter()
        last = step()
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    print(json.dumps({
        "impl": "pytorch", "config": a.config, "batch": batch, "seq": seq,
        "precision": a.precision, "steps": len(times), "step_s": med,
        "tokens_per_s": batch * seq / med,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "first_loss": first, "last_loss": last, "torch": torch.__version__,
    }), flush=True)


if __name__ == "__main__":
    main()
