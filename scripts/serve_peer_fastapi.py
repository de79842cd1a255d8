#!/usr/bin/env python3
"""The peer of `roformer serve`: the same RoFormer checkpoint served by transformers' pipeline on
PyTorch behind FastAPI and uvicorn, with the request and response shapes of our /embed and
/fill-mask (the HTTP contract of `roformer serve`), so that `roformer bench serve --target peer`
sends it the same requests.

    ~/.cache/roformer-peers/venv/bin/python scripts/serve_peer_fastapi.py \\
        [--model DIR] [--host 127.0.0.1] [--port 8000] [--threads N]

    roformer bench serve --target peer --url http://127.0.0.1:8000

--model DIR: a checkpoint directory in Hugging Face format (config.json with architectures
RoFormerForMaskedLM, model.safetensors, vocab.txt, tokenizer_config.json), as our Rust code
writes them; default: the built-in poetry model, crates/roformer-builtin/assets/poetry-model (f16
weights, widened to f32 in memory by `from_pretrained(dtype=float32)`, as our server runs it).
--port 0 picks a free port. The first line on stdout is `listening on http://HOST:PORT`.

Routes:
- GET /health: 200 once the model is loaded.
- POST /embed {"inputs": str | [str], "normalize": true, "truncate": false, "pooling": "mean"|"cls"}
  -> [[f32, ...], ...]: the encoder's last hidden states of `[CLS] text [SEP]`, mean-pooled over
  all tokens ([CLS] and [SEP] included, padding excluded) or the [CLS] state, as `roformer embed`.
- POST /fill-mask {"inputs": str | [str], "parameters": {"top_k": 5}} -> transformers'
  FillMaskPipeline output: [{"score", "token", "token_str", "sequence"}] for one mask, one such
  list per mask for several, one result per text for a list.
Errors are {"error", "error_type"}: 400 for malformed JSON or wrong types, 413 for a text longer
than the model's 512 positions without "truncate", 422 for an empty text, no [MASK], top_k outside
1..=100 or more than 32 texts.

The handlers are plain `def` functions, so uvicorn runs each request on its worker thread pool
(one request per forward pass, no batching across requests): the usual FastAPI deployment.
PyTorch uses --threads intra-op threads (default: its own choice, one per physical core). The
model is shared; each request in flight borrows a tokenizer and pipeline of its own from a pool
that grows to the concurrency seen: RoFormerTokenizer's pre-tokenizer calls back into Python
(jieba), and one tokenizer used from two threads at once deadlocks (seen here with transformers
5.23: one thread in jieba_split, the other in set_truncation_and_padding).

Needs the peers virtualenv (torch, transformers, rjieba) plus fastapi and uvicorn:
    ~/.cache/roformer-peers/venv/bin/pip install -r scripts/requirements-serve-peer.txt
"""

import argparse
import contextlib
import queue
import socket
import sys
from pathlib import Path
from typing import List, Literal, Optional, Union

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from transformers import AutoTokenizer, RoFormerForMaskedLM, pipeline

ROOT = Path(__file__).resolve().parent.parent
BUILT_IN = ROOT / "crates" / "roformer-builtin" / "assets" / "poetry-model"
MAX_TEXTS = 32


class ApiError(Exception):
    """A request the contract refuses: HTTP status, error_type and message."""

    def __init__(self, status, error_type, message):
        super().__init__(message)
        self.status, self.error_type, self.message = status, error_type, message


class EmbedRequest(BaseModel):
    inputs: Union[str, List[str]]
    normalize: bool = True
    truncate: bool = False
    pooling: Optional[Literal["mean", "cls"]] = None


class FillMaskParameters(BaseModel):
    top_k: int = 5


class FillMaskRequest(BaseModel):
    inputs: Union[str, List[str]]
    parameters: FillMaskParameters = FillMaskParameters()


def load_model(model_dir):
    """The masked LM in f32 eval mode, checked as check_hf_roundtrip.py does: nothing missing but
    the tied decoder and the rebuilt sinusoidal table, nothing unexpected."""
    model, info = RoFormerForMaskedLM.from_pretrained(
        model_dir, dtype=torch.float32, output_loading_info=True)
    allowed = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias",
               "roformer.encoder.embed_positions.weight"}
    bad = [k for k in info["missing_keys"] if k not in allowed] + list(info["unexpected_keys"])
    if bad or info["mismatched_keys"]:
        raise SystemExit(f"{model_dir}: keys that do not fit RoFormerForMaskedLM: "
                         f"{bad + list(info['mismatched_keys'])}")
    model.eval()
    return model


def load_tokenizer(model_dir):
    """The checkpoint's tokenizer (RoFormerTokenizer over its vocab.txt), checked on a probe."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    probe = tokenizer("床前明月光", add_special_tokens=False)["input_ids"]
    if len(probe) != 5 or tokenizer.unk_token_id in probe:
        raise SystemExit(f"{model_dir}: the tokenizer did not load vocab.txt (床前明月光 -> {probe})")
    return tokenizer


class Tools:
    """A tokenizer and a fill-mask pipeline over the one shared model."""

    def __init__(self, model, model_dir):
        self.tokenizer = load_tokenizer(model_dir)
        self.fill = pipeline("fill-mask", model=model, tokenizer=self.tokenizer, device="cpu")


class ToolPool:
    """Tools lent to one request at a time; a new one is made when all are lent."""

    def __init__(self, model, model_dir):
        self.model, self.model_dir = model, model_dir
        self.idle = queue.SimpleQueue()
        self.idle.put(Tools(model, model_dir))

    @contextlib.contextmanager
    def borrow(self):
        try:
            tools = self.idle.get_nowait()
        except queue.Empty:
            tools = Tools(self.model, self.model_dir)
        try:
            yield tools
        finally:
            self.idle.put(tools)


def texts_of(inputs):
    """The request's texts as a list, refusing what the contract refuses."""
    texts = [inputs] if isinstance(inputs, str) else list(inputs)
    if not texts:
        raise ApiError(422, "Validation", "inputs: expected at least one text")
    if len(texts) > MAX_TEXTS:
        raise ApiError(422, "Validation", f"inputs: {len(texts)} texts, at most {MAX_TEXTS}")
    for i, t in enumerate(texts):
        if not t.strip():
            raise ApiError(422, "Empty", f"inputs[{i}] is empty")
    return texts


def make_app(model, model_dir, default_pooling):
    app = FastAPI()
    pool = ToolPool(model, model_dir)
    max_len = model.config.max_position_embeddings

    @app.exception_handler(ApiError)
    def api_error(_request: Request, err: ApiError):
        return JSONResponse({"error": err.message, "error_type": err.error_type},
                            status_code=err.status)

    @app.exception_handler(RequestValidationError)
    def malformed(_request: Request, err: RequestValidationError):
        where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        return JSONResponse({"error": where, "error_type": "Validation"}, status_code=400)

    @app.get("/health")
    def health():
        return Response(status_code=200)

    @app.post("/embed")
    def embed(req: EmbedRequest):
        with pool.borrow() as tools:
            return embed_with(tools, req)

    def embed_with(tools, req):
        texts = texts_of(req.inputs)
        cut = {"truncation": True, "max_length": max_len} if req.truncate else {}
        enc = tools.tokenizer(texts, padding=True, return_tensors="pt", **cut)
        if enc["input_ids"].shape[1] > max_len:
            raise ApiError(413, "Validation",
                           f"a text has {enc['input_ids'].shape[1]} tokens, more than {max_len}; "
                           "send \"truncate\": true to cut it")
        with torch.inference_mode():
            hidden = model.roformer(**enc).last_hidden_state  # (B, T, H)
        if (req.pooling or default_pooling) == "cls":
            vectors = hidden[:, 0]
        else:
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            vectors = (hidden * mask).sum(1) / mask.sum(1)
        if req.normalize:
            vectors = torch.nn.functional.normalize(vectors, dim=-1)
        return vectors.tolist()

    @app.post("/fill-mask")
    def fill_mask(req: FillMaskRequest):
        with pool.borrow() as tools:
            return fill_mask_with(tools, req)

    def fill_mask_with(tools, req):
        texts = texts_of(req.inputs)
        tokenizer = tools.tokenizer
        top_k = req.parameters.top_k
        if not 1 <= top_k <= 100:
            raise ApiError(422, "Validation", f"parameters.top_k {top_k}: expected 1..=100")
        for i, t in enumerate(texts):
            if tokenizer.mask_token not in t:
                raise ApiError(422, "Validation", f"inputs[{i}] has no {tokenizer.mask_token}")
            if len(tokenizer(t)["input_ids"]) > max_len:
                raise ApiError(413, "Validation", f"inputs[{i}] is longer than {max_len} tokens")
        with torch.inference_mode():
            out = tools.fill(texts, top_k=top_k)
        # The pipeline unwraps a one-text list; keep the contract's shapes.
        return out if isinstance(req.inputs, str) or len(texts) > 1 else [out]

    return app


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=BUILT_IN)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=0,
                        help="PyTorch intra-op threads (0: PyTorch's default)")
    parser.add_argument("--pooling", choices=["mean", "cls"], default="mean")
    args = parser.parse_args()
    if args.threads < 0:
        parser.error(f"--threads {args.threads}: expected 0 (PyTorch's default) or more")
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_model(args.model)
    app = make_app(model, args.model, args.pooling)
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    host, port = sock.getsockname()[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    print(f"serving {args.model} with torch {torch.__version__} "
          f"({torch.get_num_threads()} threads)", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
