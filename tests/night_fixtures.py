"""Real nights on a tiny workspace, shared by the test modules that run `consolidate run` as a
process (faults, workspace moves). Loaded with `pytest_plugins = ["prefect_fixtures", "night_fixtures"]`:
registered as a plugin, the session fixture `v0_workspace` (a corpus and a pre-trained v0, ~40 s)
is built once however many modules use it; tests work on copies of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]

SETS = [
    "workspace.corpus=small", "tokenizer.vocab_size=512", "model.num_layers=2", "model.hidden_size=64",
    "model.intermediate_size=128", "model.max_position_embeddings=128", "model.pretrain_iterations=6",
    "training.num_iterations=8", "training.snapshot_every=2", "training.total_batch_size=1024",
    "training.seq_len=128", "training.device=cpu", "training.optimizer_state=inherit",
    "checkpoints.keep_optimizer_states=0", "eval.max_docs=6", "curation.workers=1", "curation.languages=[]",
    # the gate is not under test here: a night must pass it to reach promotion and storage
    "gate.max_forgetting=10", "gate.min_acquisition=-10",
    # nor is the night's length: exactly num_iterations steps, never lengthened for its facts' forms
    "knowledge.min_exposures=0",
]


def night_cfg(ws_root: Path, *extra: str):
    from lib.config import load_config

    return load_config(preset="tiny", overrides=[f"workspace.root={ws_root}", *SETS, *extra])


def write_texts(folder: Path, texts: list[str], name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    pq.write_table(pa.table({"text": list(texts), "source": ["notes"] * len(texts)}), path)
    return path


@pytest.fixture(scope="session")
def v0_workspace(tmp_path_factory, prefect_harness) -> Path:
    """A workspace with a 0.3 MB stdlib corpus and a pre-trained tiny v0 (bootstrap flow)."""
    from flows.bootstrap import bootstrap
    from lib.data.corpus import build_stdlib_corpus
    from lib.workspace import Workspace

    root = tmp_path_factory.mktemp("nights") / "ws"
    ws = Workspace(root).ensure()
    build_stdlib_corpus(ws, "small", max_mb=0.3)
    write_texts(ws.buffers, ["placeholder, so the bootstrap builds no demo buffer"], "placeholder.parquet")
    assert bootstrap(night_cfg(root))["version"] == "v0"
    (ws.buffers / "placeholder.parquet").unlink()
    return root


def api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value()


def consolidate(ws, *args: str, fault: str | None = None, ephemeral: bool = False) -> subprocess.Popen:
    """`consolidate run ...` as its own process, on the session's Prefect server (or, with
    `ephemeral`, starting its own), with the workspace's own PREFECT_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "CONSOLIDATION_FAULT"}
    env.update(PYTHONPATH=str(ROOT), PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_LOGGING_LEVEL="INFO",
               PYTHONFAULTHANDLER="1")  # a hung night's stacks on SIGABRT (`finish`)
    if not ephemeral:
        env["PREFECT_API_URL"] = api_url()
    if fault:
        env["CONSOLIDATION_FAULT"] = fault
    sets = [x for s in SETS for x in ("--set", s)]
    return subprocess.Popen([sys.executable, "-m", "cli.main", "run", "--preset", "tiny", "-w", str(ws.root), *sets, *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    """(exit code, output) of a `consolidate` process. One that hangs past `timeout` fails the test
    with the stack of every thread it had (PYTHONFAULTHANDLER, set by `consolidate`, dumps them on
    SIGABRT): a hang after Ctrl-C was seen once in a fresh-clone run, with no clue in its output."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            out = ""
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # and whatever it started
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
        raise AssertionError(f"{' '.join(proc.args[2:5])} did not exit within {timeout:.0f} s; its threads when stopped:\n{out[-12000:]}") from None
    return proc.returncode, out


def run_night(ws, *args: str, fault: str | None = None, expect: int = 0) -> str:
    rc, out = finish(consolidate(ws, *args, fault=fault))
    assert rc == expect, f"consolidate run (fault {fault}) exited {rc}, expected {expect}:\n{out[-4000:]}"
    return out
