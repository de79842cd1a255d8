"""Make a tiny random LLaMA model as a GGUF file, and what Hugging Face transformers computes from it.

What it makes (in --out-dir, default crates/llama/tests/fixtures/tiny-llama):

* ``tiny.gguf``: a 2-layer LLaMA (hidden 64, FFN 128, 4 query heads and 2 key/value heads of dim 16,
  RoPE base 10000, RMS-norm eps 1e-5, context 128, tied embeddings: no ``output.weight``) with a
  64-token byte-level BPE ("gpt2") vocabulary, a ChatML chat template, F32 norm weights and Q8_0 2-D
  weights. It is written with gguf-py's ``GGUFWriter`` (a third-party writer, so the Rust reader is
  checked against something it did not write), using llama.cpp's tensor names and, like llama.cpp's
  HF-to-GGUF converter, with the q and k rows permuted for interleaved RoPE.
* ``expected.json``: what transformers gives after loading that file with
  ``from_pretrained(out_dir, gguf_file="tiny.gguf")``: the config it reports, the token ids and
  decoded text of a few strings, the full logits of two sequences, 8 greedy tokens (argmax loop with
  the KV cache, not stopping at EOS) with the logits each was picked from, and a check that transformers un-permutes q on load
  (``q_proj_check_max_abs_diff``: its q_proj against the original HF-layout q sent through Q8_0).
  Floats are the shortest decimal that reads back as the same float32.

From what: nothing but fixed seeds. The weights are drawn with ``np.random.default_rng(0)`` in a
Hugging Face LLaMA layout; the vocabulary and merges are spelled out below. Rerunning reproduces the
same bytes (with the same numpy / gguf / torch / transformers versions).

Rerun with:

    ~/.cache/roformer-peers/venv/bin/python scripts/make_tiny_llama.py
"""

import argparse
import io
import json
import logging
import os
import warnings
from contextlib import redirect_stderr

import numpy as np

import gguf

# ---------------------------------------------------------------------------------------------
# Model sizes
# ---------------------------------------------------------------------------------------------

N_LAYER = 2
N_EMBD = 64
N_FF = 128
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = N_EMBD // N_HEAD  # 16
ROPE_BASE = 10000.0
RMS_EPS = 1e-5
N_CTX = 128
SEED = 0
EMBED_STD = 0.25  # with N(0, 1) embeddings (tied to the head) greedy decoding only repeats the last token

GGUF_NAME = "tiny.gguf"
JSON_NAME = "expected.json"

# ---------------------------------------------------------------------------------------------
# Tokenizer: byte-level BPE, written in GPT-2's byte-to-unicode spelling (space = "Ġ", "\n" = "Ċ")
# ---------------------------------------------------------------------------------------------

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
SINGLE_CHARS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["Ġ", "Ċ", ".", ",", "!", "?"]
# Highest priority first. Every result is a vocabulary entry, in this order, after the single characters.
MERGES = [
    ("Ġ", "t"),
    ("h", "e"),
    ("Ġt", "he"),
    ("t", "he"),
    ("i", "n"),
    ("e", "r"),
    ("Ġ", "e"),
    ("n", "d"),
    ("Ġe", "nd"),
    ("l", "l"),
    ("he", "ll"),
    ("hell", "o"),
    ("r", "e"),
    ("Ġthe", "re"),
    ("u", "s"),
    ("us", "er"),
    ("h", "i"),
    ("Ġ", "a"),
    ("a", "n"),
    ("Ġa", "nd"),
    ("o", "n"),
    ("Ġ", "i"),
    ("Ġi", "s"),
    ("Ġ", "in"),
    ("Ġ", "w"),
    ("o", "r"),
    ("Ġw", "or"),
    ("l", "d"),
    ("Ġwor", "ld"),
]
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TEXTS = [
    "hello there, the end.",
    "<|im_start|>user\nhi<|im_end|>\n",
    "the the the!",
]
N_GREEDY = 8


def build_vocab():
    tokens = list(SPECIAL_TOKENS) + list(SINGLE_CHARS)
    for left, right in MERGES:
        assert left in tokens and right in tokens, (left, right)
        merged = left + right
        assert merged not in tokens, merged
        tokens.append(merged)
    assert len(tokens) == 64, len(tokens)
    assert len(set(tokens)) == len(tokens)
    types = [TOKEN_TYPE_CONTROL] * len(SPECIAL_TOKENS) + [TOKEN_TYPE_NORMAL] * (len(tokens) - len(SPECIAL_TOKENS))
    merges = [f"{left} {right}" for left, right in MERGES]
    return tokens, types, merges


# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------


def draw_hf_state_dict(n_vocab):
    """A Hugging Face-layout LLaMA state dict (nn.Linear weights are [out, in]), float32."""
    rng = np.random.default_rng(SEED)

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm_weight():
        return (1.0 + 0.1 * rng.standard_normal(N_EMBD)).astype(np.float32)

    kv_dim = N_HEAD_KV * HEAD_DIM
    sd = {"model.embed_tokens.weight": normal((n_vocab, N_EMBD), EMBED_STD)}
    for i in range(N_LAYER):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = norm_weight()
        sd[p + "self_attn.q_proj.weight"] = normal((N_HEAD * HEAD_DIM, N_EMBD), 2.0 / np.sqrt(N_EMBD))
        sd[p + "self_attn.k_proj.weight"] = normal((kv_dim, N_EMBD), 2.0 / np.sqrt(N_EMBD))
        sd[p + "self_attn.v_proj.weight"] = normal((kv_dim, N_EMBD), 1.0 / np.sqrt(N_EMBD))
        sd[p + "self_attn.o_proj.weight"] = normal((N_EMBD, N_HEAD * HEAD_DIM), 1.0 / np.sqrt(N_EMBD))
        sd[p + "post_attention_layernorm.weight"] = norm_weight()
        sd[p + "mlp.gate_proj.weight"] = normal((N_FF, N_EMBD), 1.0 / np.sqrt(N_EMBD))
        sd[p + "mlp.up_proj.weight"] = normal((N_FF, N_EMBD), 1.0 / np.sqrt(N_EMBD))
        sd[p + "mlp.down_proj.weight"] = normal((N_EMBD, N_FF), 1.0 / np.sqrt(N_FF))
    sd["model.norm.weight"] = norm_weight()
    return sd


def permute_for_interleaved_rope(w, n_head):
    """HF rows (head h, half j, index i) -> stored row h*head_dim + 2*i + j, as llama.cpp's converter does."""
    rows, cols = w.shape
    half = rows // n_head // 2
    return w.reshape(n_head, 2, half, cols).swapaxes(1, 2).reshape(rows, cols)


HF_TO_GGUF = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def gguf_tensors(sd):
    """[(gguf name, float32 array in numpy [rows, cols] order, as stored)] in file order."""
    out = [("token_embd.weight", sd["model.embed_tokens.weight"])]
    for i in range(N_LAYER):
        for hf, gg in HF_TO_GGUF.items():
            w = sd[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q":
                w = permute_for_interleaved_rope(w, N_HEAD)
            elif gg == "attn_k":
                w = permute_for_interleaved_rope(w, N_HEAD_KV)
            out.append((f"blk.{i}.{gg}.weight", w))
    out.append(("output_norm.weight", sd["model.norm.weight"]))
    return out


def q8_0_roundtrip(w):
    q = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0)
    return gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).reshape(w.shape)


def reference_logits(sd, ids):
    """A plain float64 numpy LLaMA forward (HF layout, half-split RoPE), to cross-check transformers."""
    w = {k: (q8_0_roundtrip(v) if v.ndim == 2 else v).astype(np.float64) for k, v in sd.items()}

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + float(np.float32(RMS_EPS))) * g

    t = len(ids)
    half = HEAD_DIM // 2
    inv = ROPE_BASE ** (-np.arange(half) * 2.0 / HEAD_DIM)
    ang = np.arange(t)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(x):  # x [t, heads, head_dim]
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)

    mask = np.triu(np.full((t, t), -np.inf), 1)
    x = w["model.embed_tokens.weight"][ids]
    for i in range(N_LAYER):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(t, N_HEAD, HEAD_DIM))
        k = rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(t, N_HEAD_KV, HEAD_DIM))
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(t, N_HEAD_KV, HEAD_DIM)
        group = N_HEAD // N_HEAD_KV
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(HEAD_DIM) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = np.einsum("hqk,khd->qhd", s, v).reshape(t, N_HEAD * HEAD_DIM)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (g / (1.0 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T
    return rms(x, w["model.norm.weight"]) @ w["model.embed_tokens.weight"].T


# ---------------------------------------------------------------------------------------------
# GGUF writing and checking
# ---------------------------------------------------------------------------------------------


def write_gguf(path, tokens, types, merges, tensors):
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-llama")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_vocab_size(len(tokens))

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_pad_token_id(PAD_ID)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    for name, arr in tensors:
        if arr.ndim == 1:
            w.add_tensor(name, arr.astype(np.float32))
        else:
            # quantize() gives uint8 [rows, cols / 32 * 34]; with raw_dtype the writer turns that byte
            # shape back into [rows, cols] and writes it reversed, as ne = [cols, rows].
            q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def field_value(reader, key):
    f = reader.fields[key]
    vals = [f.parts[i] for i in f.data]
    vt = f.types[-1]
    if vt == gguf.GGUFValueType.STRING:
        vals = [bytes(v).decode("utf-8") for v in vals]
    else:
        vals = [v.tolist()[0] for v in vals]
    return vals if f.types[0] == gguf.GGUFValueType.ARRAY else vals[0]


def check_gguf(path, tokens, types, merges, tensors):
    r = gguf.GGUFReader(path)
    expect_kv = {
        "general.architecture": "llama",
        "llama.block_count": N_LAYER,
        "llama.embedding_length": N_EMBD,
        "llama.feed_forward_length": N_FF,
        "llama.attention.head_count": N_HEAD,
        "llama.attention.head_count_kv": N_HEAD_KV,
        "llama.rope.dimension_count": HEAD_DIM,
        "llama.context_length": N_CTX,
        "llama.vocab_size": len(tokens),
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": BOS_ID,
        "tokenizer.ggml.eos_token_id": EOS_ID,
        "tokenizer.ggml.padding_token_id": PAD_ID,
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": CHAT_TEMPLATE,
    }
    for key, want in expect_kv.items():
        got = field_value(r, key)
        assert got == want, (key, got, want)
    assert r.fields["tokenizer.ggml.token_type"].types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32]
    assert np.float32(field_value(r, "llama.rope.freq_base")) == np.float32(ROPE_BASE)
    assert np.float32(field_value(r, "llama.attention.layer_norm_rms_epsilon")) == np.float32(RMS_EPS)

    want = dict(tensors)
    assert [t.name for t in r.tensors] == [n for n, _ in tensors]
    assert "output.weight" not in want
    for t in r.tensors:
        w = want[t.name]
        # The reader reports llama.cpp's ne order: ne[0] is the row length (the fastest axis).
        assert list(t.shape) == list(reversed(w.shape)), (t.name, list(t.shape), w.shape)
        if w.ndim == 1:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32
            got = np.asarray(t.data).reshape(w.shape)
            assert np.array_equal(got, w), t.name
        else:
            assert t.tensor_type == gguf.GGMLQuantizationType.Q8_0, t.name
            got = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(w.shape)
            # Q8_0: blocks of 32 along a row share one f16 scale d ~= amax / 127.
            amax = np.abs(w.reshape(-1, 32)).max(axis=1, keepdims=True)
            bound = (amax / 127.0 * 0.5 + amax * 2.0**-10 + 1e-7).repeat(32, axis=1).reshape(w.shape)
            err = np.abs(got - w)
            assert (err <= bound).all(), (t.name, float(err.max()))
            assert np.array_equal(got, q8_0_roundtrip(w)), t.name
    shapes = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    assert shapes["token_embd.weight"] == [64, 64]
    assert shapes["blk.0.attn_q.weight"] == [64, 64]
    assert shapes["blk.0.attn_k.weight"] == [64, 32]
    assert shapes["blk.0.attn_v.weight"] == [64, 32]
    assert shapes["blk.0.ffn_gate.weight"] == [64, 128]
    assert shapes["blk.0.ffn_down.weight"] == [128, 64]
    assert shapes["blk.0.attn_norm.weight"] == [64]
    return shapes


# ---------------------------------------------------------------------------------------------
# transformers
# ---------------------------------------------------------------------------------------------


def f32(x):
    """The shortest decimal that reads back as this float32, as a Python float."""
    return float(str(np.float32(x)))


def run_transformers(out_dir, sd):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_warning()

    captured = io.StringIO()
    handler = logging.StreamHandler(captured)
    tf_logger = logging.getLogger("transformers")
    tf_logger.addHandler(handler)
    with warnings.catch_warnings(record=True) as caught, redirect_stderr(captured):
        warnings.simplefilter("always")
        tok = AutoTokenizer.from_pretrained(out_dir, gguf_file=GGUF_NAME)
        model = AutoModelForCausalLM.from_pretrained(out_dir, gguf_file=GGUF_NAME, dtype=torch.float32)
    tf_logger.removeHandler(handler)
    lines = captured.getvalue().replace("\r", "\n").splitlines()
    # Drop tqdm progress bars ("Loading weights: 100%|...| 20/20 [...]").
    lines = [s for s in lines if s.strip() and "it/s]" not in s]
    load_messages = [str(w.message) for w in caught] + lines
    model.eval()

    # transformers must undo llama.cpp's q/k row permutation.
    q_hf = model.model.layers[0].self_attn.q_proj.weight.detach().numpy()
    q_want = q8_0_roundtrip(sd["model.layers.0.self_attn.q_proj.weight"])
    q_diff = float(np.abs(q_hf - q_want).max())
    k_hf = model.model.layers[0].self_attn.k_proj.weight.detach().numpy()
    k_diff = float(np.abs(k_hf - q8_0_roundtrip(sd["model.layers.0.self_attn.k_proj.weight"])).max())
    assert q_diff < 1e-6 and k_diff < 1e-6, (q_diff, k_diff)

    tokenize = []
    for text in TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        tokenize.append({
            "text": text,
            "ids": [int(i) for i in ids],
            "tokens": tok.convert_ids_to_tokens(ids),
            "decoded": tok.decode(ids),
        })

    logits = []
    ref_diff = 0.0
    with torch.no_grad():
        for entry in tokenize[:2]:
            ids = entry["ids"]
            out = model(torch.tensor([ids]), use_cache=False).logits[0]
            logits.append({"ids": ids, "logits": [[f32(v) for v in row] for row in out.numpy()]})
            ref_diff = max(ref_diff, float(np.abs(reference_logits(sd, ids) - out.numpy()).max()))
        assert ref_diff < 1e-3, ref_diff

        prompt = tokenize[0]["ids"]
        out = model(torch.tensor([prompt]), use_cache=True)
        past = out.past_key_values
        new_ids, step_logits = [], []
        for step in range(N_GREEDY):
            last = out.logits[0, -1]
            step_logits.append([f32(v) for v in last.numpy()])
            nxt = int(last.argmax())
            new_ids.append(nxt)
            if step + 1 == N_GREEDY:
                break
            out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
        # Same tokens without the cache, recomputing the whole sequence each step.
        seq = list(prompt)
        for _ in range(N_GREEDY):
            seq.append(int(model(torch.tensor([seq]), use_cache=False).logits[0, -1].argmax()))
        assert seq[len(prompt):] == new_ids, (seq, new_ids)

    c = model.config
    rope_theta = getattr(c, "rope_theta", None)
    if rope_theta is None:
        rope_theta = (getattr(c, "rope_parameters", None) or {}).get("rope_theta")
    config = {
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "head_dim": getattr(c, "head_dim", None),
        "max_position_embeddings": c.max_position_embeddings,
        "rope_theta": float(rope_theta),
        "rms_norm_eps": float(c.rms_norm_eps),
        "vocab_size": c.vocab_size,
        "tie_word_embeddings": bool(c.tie_word_embeddings),
        "model_type": c.model_type,
    }
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    expected = {
        "generated_by": {
            "script": "scripts/make_tiny_llama.py",
            "gguf_file": GGUF_NAME,
            "transformers": transformers.__version__,
            "torch": torch.__version__.split("+")[0],
            "gguf": _gguf_version(),
            "numpy": np.__version__,
        },
        "config": config,
        "q_proj_check_max_abs_diff": q_diff,
        "k_proj_check_max_abs_diff": k_diff,
        "tokenize": tokenize,
        "logits": logits,
        # step_logits[k]: the logits new_ids[k] was chosen from (k = 0: the prompt's last position).
        "greedy": {"prompt_ids": prompt, "new_ids": new_ids, "step_logits": step_logits},
    }
    return expected, load_messages, tied, ref_diff


def _gguf_version():
    try:
        from importlib.metadata import version

        return version("gguf")
    except Exception:
        return "unknown"


def dump_json(obj, indent=0):
    """JSON with sorted keys; a list of plain numbers/strings goes on one line."""
    pad = " " * indent
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f'{pad} {json.dumps(k)}: {dump_json(obj[k], indent + 1)}' for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        if all(not isinstance(v, (dict, list)) for v in obj):
            return "[" + ", ".join(dump_json(v) for v in obj) + "]"
        items = [pad + " " + dump_json(v, indent + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    if isinstance(obj, float):
        assert np.isfinite(obj)
        return repr(obj)
    return json.dumps(obj, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default="crates/llama/tests/fixtures/tiny-llama")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    gguf_path = os.path.join(args.out_dir, GGUF_NAME)

    tokens, types, merges = build_vocab()
    sd = draw_hf_state_dict(len(tokens))
    tensors = gguf_tensors(sd)
    write_gguf(gguf_path, tokens, types, merges, tensors)
    shapes = check_gguf(gguf_path, tokens, types, merges, tensors)

    expected, load_messages, tied, ref_diff = run_transformers(args.out_dir, sd)
    json_path = os.path.join(args.out_dir, JSON_NAME)
    with open(json_path, "w", encoding="utf-8") as f:
        f.write(dump_json(expected) + "\n")

    print(f"wrote {gguf_path} ({os.path.getsize(gguf_path)} bytes)")
    print(f"wrote {json_path} ({os.path.getsize(json_path)} bytes)")
    print("tensor ne:", shapes["token_embd.weight"], shapes["blk.0.attn_k.weight"])
    print("lm_head tied to embed_tokens:", tied)
    print("q_proj check max abs diff:", expected["q_proj_check_max_abs_diff"])
    for t in expected["tokenize"]:
        print(repr(t["text"]), "->", t["ids"], t["tokens"], "decoded", repr(t["decoded"]))
    print("logits vs a float64 numpy LLaMA forward, max abs diff:", ref_diff)
    print("greedy new ids:", expected["greedy"]["new_ids"])
    print("config:", expected["config"])
    print("messages while loading:" if load_messages else "no messages while loading")
    for m in load_messages:
        print("  ", m)


if __name__ == "__main__":
    main()
