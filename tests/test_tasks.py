"""Tasks outside a flow (`task.fn`), the supervised torchrun process, and content cache keys."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest_plugins = ["prefect_fixtures"]

from lib.training.supervised_process import run_supervised  # noqa: E402


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


# -- supervised process ----------------------------------------------------------------------
def test_supervised_streams_lines_and_returns_exit_code():
    seen = []
    r = run_supervised([sys.executable, "-c", "import sys; print('a'); print('b'); sys.exit(7)"], on_line=seen.append)
    assert r.returncode == 7 and not r.timed_out
    assert seen == ["a", "b"]


def test_time_limit_kills_the_whole_process_group():
    code = "import subprocess, time; p = subprocess.Popen(['sleep', '300']); print(p.pid, flush=True); time.sleep(300)"
    r = run_supervised([sys.executable, "-c", code], time_limit_s=1.5, grace_s=2)
    assert r.timed_out and r.returncode < 0
    grandchild = int(r.last_lines[0])
    assert _wait_gone(grandchild), "the grandchild (a torchrun rank) survived the time limit"


def test_exception_in_callback_kills_the_child():
    pids = []

    def on_line(line):
        pids.append(int(line))
        raise KeyboardInterrupt  # what Ctrl-C or a cancellation looks like to the caller

    with pytest.raises(KeyboardInterrupt):
        run_supervised([sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(300)"],
                       on_line=on_line, grace_s=2)
    assert _wait_gone(pids[0])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_child_dies_when_its_supervisor_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from lib.training.supervised_process import run_supervised
        run_supervised([sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(300)"],
                       on_line=lambda l: print(l, flush=True))
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)  # no finally, no handler: only the kernel can help
    parent.wait()
    assert _wait_gone(child), "the training process outlived its killed supervisor"


# -- content cache keys ----------------------------------------------------------------------
def _parquet(path: Path, texts: list[str]) -> Path:
    pq.write_table(pa.table({"id": [str(i) for i in range(len(texts))], "text": texts}), path)
    return path


def test_stage_key_depends_on_content_and_config_not_names(tmp_path):
    from tasks.cache_keys import stage_key

    a = _parquet(tmp_path / "a.parquet", ["one", "two"])
    b = tmp_path / "renamed.parquet"
    b.write_bytes(a.read_bytes())
    k1 = stage_key("curate", [a], {"threshold": 0.8}, ["lib.buffer.store"])
    assert stage_key("curate", [b], {"threshold": 0.8}, ["lib.buffer.store"]) == k1  # same bytes, other name
    assert stage_key("curate", [a], {"threshold": 0.7}, ["lib.buffer.store"]) != k1  # config changed
    c = _parquet(tmp_path / "c.parquet", ["one", "three"])
    assert stage_key("curate", [c], {"threshold": 0.8}, ["lib.buffer.store"]) != k1  # content changed
    assert stage_key("curate", [a], {"threshold": 0.8}, ["lib.data.sampling"]) != k1  # other code


# -- tasks as plain functions (CI use) -------------------------------------------------------
def test_ingest_tasks_run_outside_a_flow(workspace):
    from lib.buffer.store import Buffer
    from lib.buffer.records import content_hash
    from lib.registry.lineage import Lineage
    from tasks.data import find_buffer_files, inspect_buffer_file, select_pending

    buf = Buffer(workspace.buffers, flush_size=10)
    for i in range(3):
        buf.add(f"document number {i} " * 20)
    first = buf.flush()
    buf.add("another night's text " * 20)
    second = buf.flush()
    (workspace.buffers / "broken.parquet").write_bytes(b"not parquet")
    files = find_buffer_files.fn(str(workspace.root))
    assert len(files) == 3
    inspected = [inspect_buffer_file.fn(f) for f in files]
    by_path = {i["path"]: i for i in inspected}
    assert by_path[str(first)]["rows"] == 3 and by_path[str(first)]["content_hash"] == content_hash(first)
    assert by_path[str(workspace.buffers / "broken.parquet")]["error"]

    lin = Lineage(workspace.lineage_db)
    lin.register_buffer_file(content_hash(second), second, 1, second.stat().st_size)
    with lin.transaction() as con:  # consumed by an earlier night
        con.execute("UPDATE buffer_files SET status = 'consumed' WHERE content_hash = ?", [content_hash(second)])
    pending = select_pending.fn(str(workspace.root), inspected)
    assert sorted(p["path"] for p in pending) == sorted([str(first), str(workspace.buffers / "broken.parquet")])


def test_adopt_outputs_links_cached_files(tmp_path):
    from tasks.data import adopt_outputs

    src, dst = tmp_path / "runA", tmp_path / "runB"
    (src / "shards" / "new").mkdir(parents=True)
    (src / "manifest.parquet").write_bytes(b"m")
    (src / "shards" / "new" / "shard-00000.bin").write_bytes(b"tokens")
    assert adopt_outputs.fn(str(src), str(dst), ["manifest.parquet", "shards"]) == 2
    assert (dst / "shards" / "new" / "shard-00000.bin").read_bytes() == b"tokens"
    assert os.stat(dst / "manifest.parquet").st_ino == os.stat(src / "manifest.parquet").st_ino
    with pytest.raises(FileNotFoundError, match="heldout"):
        adopt_outputs.fn(str(src), str(dst), ["heldout"])


def test_training_command_carries_config_meta_and_train_dir(tmp_path):
    from lib.config import load_config
    from lib.training.launch import training_command

    cfg = load_config(preset="tiny", overrides=["training.nproc_per_node=2"])
    cmd = training_command(cfg, str(tmp_path / "run"), str(tmp_path / "v1"), str(tmp_path / "run" / "train"),
                           parent=str(tmp_path / "v0"), init=False, resume=True, meta={"version": "v1"})
    assert "--nproc-per-node=2" in cmd and "--resume" in cmd
    assert cmd[cmd.index("--train-dir") + 1] == str(tmp_path / "run" / "train")
    written = load_config(cmd[cmd.index("--config") + 1])
    assert written.training.nproc_per_node == 2 and written.model.hidden_size == cfg.model.hidden_size
    assert '"version": "v1"' in Path(cmd[cmd.index("--meta") + 1]).read_text()


@pytest.mark.slow
def test_training_task_stops_at_the_time_limit_and_resumes(tmp_path):
    """The real trainer under torchrun through `train_checkpoint.fn`: past training.time_limit_s
    it stops with a snapshot (TrainingStopped says resume), and resume=True finishes the version."""
    from conftest import stdlib_texts
    from lib.config import SourceConfig, load_config
    from lib.data.sampling import prepare_training_data
    from lib.data.tokenizer import train_bpe
    from lib.training.launch import TrainingStopped
    from tasks.training import train_checkpoint

    texts = stdlib_texts(40)
    tok = train_bpe(texts, 512, tmp_path / "tok")
    (tmp_path / "src").mkdir()
    _parquet(tmp_path / "src" / "part-00000.parquet", texts)
    cfg = load_config(preset="tiny", overrides=[
        f"workspace.root={tmp_path / 'ws'}", "model.num_layers=1", "model.hidden_size=32", "model.num_heads=2",
        "model.intermediate_size=64", "model.pretrain_iterations=400", "training.total_batch_size=256",
        "training.device_batch_size=2", "training.seq_len=64", "training.snapshot_every=5", "training.time_limit_s=0.5",
        "training.device=cpu"])
    run = tmp_path / "run"
    prepare_training_data([SourceConfig(name="src", path=tmp_path / "src", weight=1.0, kind="corpus")], tok, run,
                          token_budget=400 * 256, sampling=cfg.sampling, seq_len=64, workers=1)
    out = tmp_path / "v0"  # 400 steps: well past 0.5 s even on a quiet machine (40 once finished inside it)
    with pytest.raises(TrainingStopped, match="resume"):
        train_checkpoint.fn(cfg, str(run), str(out), str(run / "train"), init=True, tokenizer_dir=str(tok))
    assert any((run / "train" / "snapshots").iterdir())
    unlimited = cfg.model_copy(update={"training": cfg.training.model_copy(update={"time_limit_s": None})})
    done = train_checkpoint.fn(unlimited, str(run), str(out), str(run / "train"), init=True, resume=True, tokenizer_dir=str(tok))
    assert done["final_metrics"]["steps"] == 400 and (out / "meta.json").is_file()
