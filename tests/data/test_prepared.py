"""The prepared-data folder (lib/data/prepared.py): what the data stage writes is what the trainer, the
loader and the memory open; a folder with a missing or broken file is refused with an error that
names the folder, the file and what to do."""

from __future__ import annotations

import json
import shutil

import pytest

from data_fixtures import train_tokenizer, two_sources, write_sources
from lib.config import SamplingConfig
from lib.data.loader import TrainLoader, validate
from lib.data.prepared import DataError, PreparedData
from lib.data.sampling import prepare_training_data

SEQ = 64


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("prepared")
    tok = train_tokenizer(root / "tok", 512)
    corpus, new = write_sources(root, corpus_docs=16, new_docs=16, max_chars=2000)
    data = prepare_training_data(two_sources(corpus, new), tok, root / "data", token_budget=8_000,
                                 sampling=SamplingConfig(heldout_fraction=0.2, fim_rate_code=0.0), seq_len=SEQ, workers=1)
    return {"root": root, "tok": tok, "data": data, "folder": root / "data"}


def test_what_prepare_writes_is_what_open_reads(prepared):
    data = PreparedData.open(prepared["folder"])
    assert data.info == json.loads(json.dumps(prepared["data"], default=str))  # data.json as returned
    assert data.manifest_file() == data.manifest and data.manifest.is_file()
    assert all((data.path / entry).exists() for entry in PreparedData.OUTPUTS)  # what a cached stage adopts
    assert data.heldout_files() == [data.heldout_file("new")]
    exposures = data.read_exposures()
    assert {r["source"] for r in exposures} == {"new"} and len(exposures) == data.info["sources"]["new"]["docs"]
    assert PreparedData.open(data) is data  # already open: the same object
    # the loader takes the opened folder as well as its path
    assert validate(data)["manifest_rows"] == data.info["manifest_rows"] == validate(prepared["folder"])["manifest_rows"]
    assert TrainLoader(data, 2, SEQ).next_batch()[0].shape == (2, SEQ)


def test_write_then_open_round_trip(tmp_path):
    out = PreparedData(tmp_path / "data")
    out.path.mkdir()
    out.write_heldout("tickets", ["a", "b"], ["first", "second"])
    out.write_exposures({"source": ["new"], "doc_id": ["d1"], "night": [""], "exposures": [4]})
    out.manifest.write_bytes(b"")  # the loader, not open, reads the manifest's rows
    out.write_info({"format": "training-data", "seq_len": SEQ, "sources": {}})
    again = PreparedData.open(tmp_path / "data")
    assert again.info == {"format": "training-data", "seq_len": SEQ, "sources": {}}
    assert again.heldout_files() == [tmp_path / "data" / "heldout" / "tickets.parquet"]
    assert again.read_exposures() == [{"source": "new", "doc_id": "d1", "night": "", "exposures": 4}]


def test_a_missing_manifest_names_the_folder_and_what_to_do(prepared, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(prepared["folder"], bad)
    (bad / "manifest.parquet").unlink()
    with pytest.raises(DataError, match=r"manifest\.parquet does not exist, though .*data\.json names it.*"
                                        r"prepare the data again") as err:
        PreparedData.open(bad)
    assert str(bad) in str(err.value)
    with pytest.raises(DataError, match=r"manifest\.parquet does not exist"):
        TrainLoader(bad, 2, SEQ)


def test_a_truncated_data_json_is_refused(prepared, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(prepared["folder"], bad)
    text = (bad / "data.json").read_text()
    (bad / "data.json").write_text(text[: len(text) // 2])
    with pytest.raises(DataError, match=r"data\.json is not valid JSON .*cut short.*prepare the data again"):
        PreparedData.open(bad)
    (bad / "data.json").write_text("[1, 2]")
    with pytest.raises(DataError, match=r"data\.json holds a list"):
        PreparedData.open(bad)


def test_the_trainer_refuses_a_folder_that_was_not_prepared(tmp_path):
    from lib.config import load_config
    from lib.training.train import train

    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty/data\.json does not exist: .*not a prepared data folder; prepare the data again"):
        train(load_config(preset="tiny"), tmp_path / "empty", tmp_path / "v1", init=True, install_signal_handlers=False)
    with pytest.raises(DataError, match=r"nowhere does not exist: no prepared data there"):
        PreparedData.open(tmp_path / "nowhere")
