"""One rule for a buffer file's rows (issue #28), through `consolidate buffer add` and through a
file dropped into `buffers/`: a null, blank or over-`buffer.max_text_bytes` text is a bad row, set
aside with its reason; the file's good rows are used. A file that does not read is refused whole.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from lib.buffer.ingest import bad_rows

LIMIT = 200
GOOD = ["The ferry to the outer island leaves at seven and returns at noon, weather allowing.",
        "Tide tables are posted on the harbour office door every Monday morning."]
TEXTS = [GOOD[0], None, "   ", "x" * (LIMIT + 1), GOOD[1]]  # rows 1, 2, 3 are bad


def write_partly_bad(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": pa.array(TEXTS, pa.string())}), path)
    return path


def test_the_rule_names_each_bad_row():
    reasons = bad_rows(TEXTS, LIMIT)
    assert sorted(reasons) == [1, 2, 3]
    assert reasons[1] == "null text" and "empty or whitespace" in reasons[2]
    assert "201 bytes in UTF-8, over the limit of 200 (buffer.max_text_bytes)" in reasons[3]


def test_buffer_add_keeps_the_good_rows_and_names_the_bad_ones(tmp_path):
    from cli.main import app
    from lib.buffer.store import Buffer
    from lib.buffer.records import read_buffer_files

    src = write_partly_bad(tmp_path / "in" / "day.parquet")
    ws = tmp_path / "ws"
    result = CliRunner().invoke(app, ["buffer", "add", str(src), "--workspace", str(ws), "--json",
                                      "--set", f"buffer.max_text_bytes={LIMIT}"])
    assert result.exit_code == 1, result.output  # something was set aside: the user hears it
    report = json.loads(result.stdout)
    assert report["added"] == 2 and report["inputs"] == {str(src): 2}
    assert [e.split(": ")[1] for e in report["errors"]] == ["row 1", "row 2", "row 3"], report["errors"]
    assert "over the limit of 200" in report["errors"][2]
    files = Buffer(ws / "buffers", recover=False).list_buffers()
    assert [r["text"] for r in read_buffer_files(files).to_pylist()] == GOOD


def test_a_dropped_file_keeps_the_good_rows_and_quarantines_the_bad_ones(workspace):
    from lib.buffer.records import content_hash
    from lib.buffer.ingest import ingest
    from lib.registry.lineage import Lineage

    path = write_partly_bad(workspace.buffers / "day.parquet")
    digest = content_hash(path)
    got = ingest(workspace, Lineage(workspace.lineage_db), max_text_bytes=LIMIT)
    assert got.texts == GOOD and got.counts["rows_quarantined"] == 3
    [rows] = workspace.quarantine.glob("day.*.bad-rows.parquet")
    assert pq.read_table(rows).column("text").to_pylist() == TEXTS[1:4]
    note = json.loads(rows.with_name(rows.name + ".reason.json").read_text())
    assert note["content_hash"] == digest and note["rows"] == [1, 2, 3]
    assert note["reasons"]["1"] == "null text" and "over the limit of 200" in note["reasons"]["3"]


def test_a_file_with_only_bad_rows_is_refused_by_buffer_add(tmp_path):
    from cli.main import app

    src = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"text": pa.array([None, " "], pa.string())}), src)
    result = CliRunner().invoke(app, ["buffer", "add", str(src), "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 1 and "no usable rows" in result.stderr, result.output
