"""train_mlm: a short run from the built-in model on a small corpus, its progress events, the
checkpoint it leaves (loaded back by Model), a run from scratch on a config and a vocabulary, an
exception in the callback, and bad arguments."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

import roformer_rs
from roformer_rs import Model, train_mlm

POEMS = [
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
    "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
    "千山鸟飞绝，万径人踪灭。孤舟蓑笠翁，独钓寒江雪。",
]


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "poems.txt"
    path.write_text("\n".join(POEMS * 8) + "\n", encoding="utf-8")
    return path


def test_a_short_run_reports_progress_and_leaves_a_checkpoint(tmp_path: Path, corpus: Path) -> None:
    events: list[dict] = []
    result = train_mlm(
        tmp_path / "run", [corpus], steps=2, batch_size=2, seq_len=24, validation=0.25,
        eval_batches=1, progress=events.append,
    )
    assert result["outcome"] == "finished" and result["steps"] == 2
    steps = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in steps] == [1, 2]
    assert all(e["loss"] > 0 and e["tokens"] > 0 for e in steps)
    assert any(e["event"] == "saved" for e in events)
    assert result["last_eval"] is None or result["last_eval"]["loss"] > 0
    trained = Model.from_pretrained(tmp_path / "run" / "checkpoint")
    assert trained.fill_mask("床前明月[MASK]", top_k=1)[0]["token_str"]


BUILTIN = Path(__file__).resolve().parents[2] / "crates" / "roformer-builtin" / "assets" / "poetry-model"


@pytest.fixture()
def small_config(tmp_path: Path) -> Path:
    """The built-in model's config.json, shrunk to one layer of width 16."""
    config = json.loads((BUILTIN / "config.json").read_text(encoding="utf-8"))
    config.update(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def test_a_run_from_scratch_takes_config_and_vocab(tmp_path: Path, corpus: Path, small_config: Path) -> None:
    result = train_mlm(
        tmp_path / "run", [corpus], steps=2, batch_size=2, seq_len=24, validation=0.25, eval_batches=1,
        config=small_config, vocab=BUILTIN / "vocab.txt",
    )
    assert result["outcome"] == "finished" and result["steps"] == 2
    saved = json.loads((tmp_path / "run" / "checkpoint" / "config.json").read_text(encoding="utf-8"))
    assert saved["hidden_size"] == 16 and saved["num_hidden_layers"] == 1
    vocab_lines = (BUILTIN / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert saved["vocab_size"] == len([line for line in vocab_lines if line])
    assert Model.from_pretrained(tmp_path / "run" / "checkpoint").fill_mask("床前明月[MASK]", top_k=1)


def test_a_fresh_model_needs_both_files_and_no_init(tmp_path: Path, corpus: Path, small_config: Path) -> None:
    vocab = BUILTIN / "vocab.txt"
    with pytest.raises(ValueError, match="both config"):
        train_mlm(tmp_path / "run", [corpus], steps=1, config=small_config)
    with pytest.raises(ValueError, match="not both"):
        train_mlm(tmp_path / "run", [corpus], steps=1, init=BUILTIN, config=small_config, vocab=vocab)
    with pytest.raises(FileNotFoundError):
        train_mlm(tmp_path / "run", [corpus], steps=1, config=tmp_path / "nowhere.json", vocab=vocab)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(roformer_rs.ModelError):
        train_mlm(tmp_path / "run", [corpus], steps=1, config=broken, vocab=vocab)


def test_an_exception_in_the_callback_stops_the_run_and_propagates(tmp_path: Path, corpus: Path) -> None:
    def stop_at_first_step(event: dict) -> None:
        if event["event"] == "step":
            raise RuntimeError("enough")

    with pytest.raises(RuntimeError, match="enough"):
        train_mlm(tmp_path / "run", [corpus], steps=5, batch_size=2, seq_len=24, progress=stop_at_first_step)
    # The stop saved the completed step.
    assert (tmp_path / "run" / "checkpoint").is_dir()


def test_ctrl_c_stops_the_run_with_its_checkpoint(tmp_path: Path, corpus: Path) -> None:
    def interrupt_at_first_step(event: dict) -> None:
        if event["event"] == "step":
            os.kill(os.getpid(), signal.SIGINT)

    # Python's own Ctrl-C handler, whatever the test runner was started with (a job started in
    # the background by a shell without job control inherits SIGINT ignored, and Python then
    # leaves it ignored).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            train_mlm(tmp_path / "run", [corpus], steps=50, batch_size=2, seq_len=24, progress=interrupt_at_first_step)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (tmp_path / "run" / "checkpoint").is_dir()


def test_missing_corpus_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        train_mlm(tmp_path / "run", [tmp_path / "nowhere.txt"], steps=1)


def test_missing_init_is_file_not_found(tmp_path: Path, corpus: Path) -> None:
    with pytest.raises(FileNotFoundError):
        train_mlm(tmp_path / "run", [corpus], steps=1, init=tmp_path / "nowhere")


@pytest.mark.parametrize(
    "kwargs",
    [dict(steps=0), dict(steps=1, batch_size=0), dict(steps=1, lr=-1.0), dict(steps=1, decay="step"), dict(steps=1, precision="f8")],
)
def test_bad_arguments_raise_value_error(tmp_path: Path, corpus: Path, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        train_mlm(tmp_path / "run", [corpus], **kwargs)


def test_train_mlm_is_exported() -> None:
    assert "train_mlm" in roformer_rs.__all__
