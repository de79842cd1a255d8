#!/usr/bin/env python3
"""Golden fixtures for the rotary crate's scalings (crates/rotary/src/scaling/).

Run with the peers virtualenv (transformers 5.23, torch, rotary-embedding-torch):

    ~/.cache/roformer-peers/venv/bin/python scripts/make_scaling_fixtures.py

Writes, under crates/rotary/tests/fixtures/scaling/:
  cases.json  a list of {name, config, checks: [{seq_len, inv_freq, attention_factor}]}:
              `config` is what a checkpoint's config.json would hold (legacy `rope_scaling` or
              the newer `rope_parameters` form); each check is what transformers'
              modeling_rope_utils returns for it at `seq_len` (null: the value computed at
              model init, i.e. seq_len=None).
  xpos.json   rotary-embedding-torch's `rotate_queries_and_keys` with `use_xpos=True` on small
              random q and k: inputs, outputs and the settings used.

How the reference values are obtained. Each config dict is loaded with the config class of its
`model_type` (`CONFIG_MAPPING[model_type].from_dict`), exactly as from_pretrained would, so
that transformers' own standardisation (legacy `type`, top-level rope_theta,
partial_rotary_factor, original_max_position_embeddings) runs. Scaled types call
`ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=...)`; the default type calls the
model's `RotaryEmbedding.compute_default_rope_parameters`. Every config states
partial_rotary_factor and original_max_position_embeddings explicitly where the model class
would otherwise supply a class default (GPT-NeoX 0.25, Phi 0.5, Phi-3 4096), because the Rust
reader only sees the JSON. (GPT-NeoX's config class reads its own `rotary_pct` rather than a
top-level partial_rotary_factor, so its case states the factor inside rope_parameters.) transformers computes in float32; values are stored as float64
decimals of those float32 results.
"""

import json
from pathlib import Path

import torch
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from rotary_embedding_torch import RotaryEmbedding

OUT = Path(__file__).resolve().parent.parent / "crates/rotary/tests/fixtures/scaling"

# A deterministic, non-trivial list of LongRoPE factors (not copied from any checkpoint).
def ramp(n, lo, hi):
    return [round(lo + (hi - lo) * (i / (n - 1)) ** 2, 6) for i in range(n)]


CASES = [
    ("llama_default_legacy", {
        "model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
        "max_position_embeddings": 2048, "rope_theta": 500000.0,
    }, [None]),
    ("neox_default_partial_new_form", {
        "model_type": "gpt_neox", "hidden_size": 256, "num_attention_heads": 2,
        "max_position_embeddings": 2048,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                            "partial_rotary_factor": 0.25},
    }, [None]),
    ("llama_linear_legacy_type", {
        "model_type": "llama", "hidden_size": 512, "num_attention_heads": 8,
        "max_position_embeddings": 4096, "rope_theta": 10000.0,
        "rope_scaling": {"type": "linear", "factor": 4.0},
    }, [None]),
    ("llama_dynamic_legacy", {
        "model_type": "llama", "hidden_size": 512, "num_attention_heads": 8,
        "max_position_embeddings": 2048, "rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
    }, [None, 1000, 2048, 2049, 4096, 10000]),
    ("phi_dynamic_partial", {
        "model_type": "phi", "hidden_size": 256, "num_attention_heads": 4,
        "max_position_embeddings": 1024, "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
        "rope_scaling": {"type": "dynamic", "factor": 3.0},
    }, [None, 5000]),
    ("qwen2_yarn_legacy", {
        "model_type": "qwen2", "hidden_size": 1024, "num_attention_heads": 8,
        "num_key_value_heads": 2, "max_position_embeddings": 131072, "rope_theta": 1000000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 32768},
    }, [None]),
    ("llama_yarn_mscale_no_truncate_new_form", {
        "model_type": "llama", "hidden_size": 512, "num_attention_heads": 4,
        "max_position_embeddings": 163840,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                            "original_max_position_embeddings": 4096, "beta_fast": 32,
                            "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8,
                            "truncate": False},
    }, [None]),
    ("llama_yarn_explicit_attention_head_dim", {
        "model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "head_dim": 96,
        "max_position_embeddings": 16384, "rope_theta": 50000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 2.5, "attention_factor": 1.25,
                         "beta_fast": 16.0, "beta_slow": 2.0,
                         "original_max_position_embeddings": 8192},
    }, [None]),
    ("llama_yarn_factor_from_ratio", {
        "model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
        "max_position_embeddings": 16384, "rope_theta": 10000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": None,
                         "original_max_position_embeddings": 4096},
    }, [None]),
    ("llama3_legacy", {
        "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
        "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    }, [None]),
    ("llama3_new_form_small", {
        "model_type": "llama", "hidden_size": 512, "num_attention_heads": 8,
        "max_position_embeddings": 8192,
        "rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0,
                            "low_freq_factor": 2.0, "high_freq_factor": 8.0,
                            "original_max_position_embeddings": 1024},
    }, [None]),
    ("phi3_longrope_legacy", {
        "model_type": "phi3", "hidden_size": 768, "num_attention_heads": 8,
        "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0, "partial_rotary_factor": 1.0,
        "rope_scaling": {"type": "longrope", "short_factor": ramp(48, 1.0, 1.9),
                         "long_factor": ramp(48, 1.0, 40.0)},
    }, [None, 10, 4096, 4097, 100000]),
    ("phi3_longrope_partial_factor_new_form", {
        "model_type": "phi3", "hidden_size": 512, "num_attention_heads": 4,
        "max_position_embeddings": 65536, "original_max_position_embeddings": 2048,
        "rope_parameters": {"rope_type": "longrope", "rope_theta": 250000.0,
                            "partial_rotary_factor": 0.75, "factor": 16.0,
                            "short_factor": ramp(48, 1.0, 1.5),
                            "long_factor": ramp(48, 1.2, 20.0)},
    }, [None, 2048, 3000]),
    ("phi3_longrope_su_attention_factor", {
        "model_type": "phi3", "hidden_size": 256, "num_attention_heads": 4,
        "max_position_embeddings": 32768, "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0, "partial_rotary_factor": 1.0,
        "rope_scaling": {"type": "su", "attention_factor": 1.1,
                         "original_max_position_embeddings": 4096,
                         "short_factor": ramp(32, 1.0, 1.2),
                         "long_factor": ramp(32, 1.0, 8.0)},
    }, [None, 5000]),
]


def load(config_dict):
    cls = CONFIG_MAPPING[config_dict["model_type"]]
    return cls.from_dict(json.loads(json.dumps(config_dict)))


def reference(config, seq_len):
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":
        # GPT-NeoX's default honours partial_rotary_factor; Llama's uses the whole head.
        if config.model_type == "gpt_neox":
            inv, att = GPTNeoXRotaryEmbedding.compute_default_rope_parameters(config)
        else:
            inv, att = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        inv, att = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    assert inv.dtype == torch.float32
    return [float(x) for x in inv.tolist()], float(att)


def scaling_cases():
    out = []
    for name, config_dict, seq_lens in CASES:
        checks = []
        for seq_len in seq_lens:
            inv, att = reference(load(config_dict), seq_len)
            checks.append({"seq_len": seq_len, "inv_freq": inv, "attention_factor": att})
        out.append({"name": name, "config": config_dict, "checks": checks})
    return out


def xpos_case():
    torch.manual_seed(5)
    dim, seq, heads, scale_base = 16, 12, 2, 8
    rope = RotaryEmbedding(dim=dim, use_xpos=True, xpos_scale_base=scale_base,
                           cache_if_possible=False)
    q = torch.randn(1, heads, seq, dim, dtype=torch.float64).float()
    k = torch.randn(1, heads, seq, dim, dtype=torch.float64).float()
    rq, rk = rope.rotate_queries_and_keys(q, k)
    flat = lambda t: [float(x) for x in t.flatten().tolist()]
    return {
        "head_dim": dim, "rotary_dim": dim, "base": 10000.0, "scale_base": scale_base,
        "heads": heads, "seq": seq, "layout": "interleaved", "center": seq // 2,
        "q": flat(q), "k": flat(k), "q_out": flat(rq), "k_out": flat(rk),
    }


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "cases.json").write_text(json.dumps(scaling_cases(), indent=1) + "\n")
    (OUT / "xpos.json").write_text(json.dumps(xpos_case()) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
