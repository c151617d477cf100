"""Files are read strictly: params take numbers only where numbers are asked, no document repeats a key, only
regular UTF-8 files are read, and the corpus holds no timing the measurement file would refuse. Each case is a
one-line typed error, exit 2 through the CLI."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from flows_support import tiny_inventory

from dreamshard.cli.app import invoke
from dreamshard.config.settings import resolve
from dreamshard.documents import load_inventory, read_structured
from dreamshard.errors import ConfigError, InputFileError
from dreamshard.profiling.corpus import CorpusEntry, DeviceCorpus, timing_problem
from dreamshard.values import BackendInfo
from dreamshard.values.costs import MAX_RECORD_MS


def _params(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "params.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text, where",
    [
        ("evaluate:\n  rounds: true\n", "evaluate.rounds"),
        ("plan:\n  verify: true\n", "plan.verify"),
        ("plan:\n  refine_confirm_rounds: '3'\n", "plan.refine_confirm_rounds"),
        ("plan:\n  verify_confidence: '0.95'\n", "plan.verify_confidence"),
        ("plan:\n  num_devices: true\n", "plan.num_devices"),
        ("publish:\n  min_rounds: '5'\n", "publish.min_rounds"),
        ("profile:\n  repeats: false\n", "profile.repeats"),
    ],
)
def test_params_refuse_bools_and_strings_for_numbers(tmp_path: Path, text: str, where: str) -> None:
    with pytest.raises(ConfigError, match=rf"{where}: must be a number, got (bool|str)"):
        resolve(_params(tmp_path, text))


def test_params_numbers_still_load(tmp_path: Path) -> None:
    s = resolve(_params(tmp_path, "evaluate:\n  rounds: 5\nplan:\n  verify: 2\n  verify_confidence: 0.9\n"))
    assert s.evaluate.rounds == 5 and s.plan.verify == 2 and s.plan.verify_confidence == 0.9


def test_duplicate_params_key_is_refused_through_the_cli(tmp_path: Path) -> None:
    p = _params(tmp_path, "plan:\n  verify: 2\n  verify: 0\n")
    inv = tmp_path / "inv.yaml"
    tiny_inventory(inv)
    code, out, err = invoke(
        ["plan", "-i", str(inv), "-s", "dim_greedy", "-o", str(tmp_path / "p.json"), "--params", str(p)]
    )
    assert code == 2 and "duplicate key 'verify' (line 3)" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_duplicate_keys_are_refused_in_inventories(tmp_path: Path, suffix: str) -> None:
    doc = tiny_inventory(tmp_path / "good.yaml").model_dump(mode="json")
    text = json.dumps(doc)
    # the first table names its embedding_dim twice (the second value would silently win)
    text = text.replace('"embedding_dim": ', '"embedding_dim": 8, "embedding_dim": ', 1)
    f = tmp_path / f"inv{suffix}"
    f.write_text(text)
    with pytest.raises(InputFileError, match="duplicate key 'embedding_dim'"):
        load_inventory(f)


def test_a_fifo_or_directory_is_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "params.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputFileError, match="not a regular file"):
        read_structured(fifo)  # would block forever on open()


def _entry(fwd: float) -> CorpusEntry:
    info = BackendInfo(
        name="simulator", operator="analytic", device="cpu", num_threads=1, batch_size=64, warmup=0, repeats=1
    )
    return CorpusEntry(
        key="k" * 64, hardware="h", backend="simulator", batch_size=64, tables=("t",), fwd_ms=(fwd,), bwd_ms=(1.0,),
        info=info, seed=0,
    )  # fmt: skip


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: (d / "refine.jsonl").mkdir(), "refine.jsonl: not a regular file"),
        (lambda d: os.mkfifo(d / "refine.jsonl"), "refine.jsonl: not a regular file"),
        (lambda d: (d / "refine.jsonl").write_bytes(b"\xff\xfe\x00{not utf8\n{}\n"), "not a UTF-8 text file"),
    ],
    ids=["directory", "fifo", "undecodable"],
)
def test_bad_corpus_files_are_one_line_errors(tmp_path: Path, make: Callable[[Path], object], message: str) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    make(corpus)
    with pytest.raises(InputFileError, match=message):
        DeviceCorpus(corpus, "profile")


def test_the_corpus_refuses_what_the_measurement_file_refuses(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    huge = _entry(1.0).model_dump_json().replace('"fwd_ms":[1.0]', '"fwd_ms":[1e300]')
    (corpus / "profile.jsonl").write_text(huge + "\n" + _entry(2.0).model_dump_json() + "\n")
    with pytest.raises(InputFileError, match=r"profile.jsonl:1: not a corpus entry \(timing 1e\+300 ms.*MAX_RECORD_MS"):
        DeviceCorpus(corpus, "profile")
    assert timing_problem(_entry(MAX_RECORD_MS * 2)) is not None  # a worker's timing: left out and counted
    assert timing_problem(_entry(MAX_RECORD_MS)) is None
