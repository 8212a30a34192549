"""lib.tables' label/value tables: what `corpus build-stdlib`, `demo`, `buffer stats` and `init` print."""

from __future__ import annotations

import io

from rich.console import Console

from lib.tables import adoption_table, corpus_table, fields_table


def _render(table) -> list[str]:
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(table.rich())
    return console.file.getvalue().splitlines()


def test_a_fields_table_has_no_header_and_right_aligned_values():
    lines = _render(fields_table("memory buffer", [("records", "12"), ("bytes on disk", "1,024")]))
    assert lines[0].strip() == "memory buffer"
    assert not any("field" in line or "value" in line for line in lines)  # the column names stay hidden
    rows = [line for line in lines if "records" in line or "bytes on disk" in line]
    assert rows[0].index("12") > rows[0].index("records") + len("bytes on disk")  # right-aligned under a wider value
    assert rows[1].split("│")[2].strip() == "1,024"


def test_corpus_and_adoption_tables_list_their_fields_in_order():
    stats = {"docs": 3, "kinds": {"code": 2, "prose": 1}, "bytes": 1200, "train_docs": 2, "train_bytes": 800,
             "val_docs": 1, "val_bytes": 400, "shards": [{}, {}], "skipped": {"binary": 1}, "python": "3.11"}
    table = corpus_table(stats, "corpus")
    assert [r[0] for r in table.rows] == ["documents", "text bytes", "train", "validation", "shards", "skipped files", "python"]
    assert table.rows[0][1] == "3  (2 code, 1 prose)" and table.rows[4][1] == "2"
    out = {"version": "v0", "path": "/ws/checkpoints/v0",
           "model": {"architecture": "LlamaForCausalLM", "parameters": 2.5e6, "storage_dtype": "float32", "digest": "ab" * 32,
                     "original_lr": 3e-4},
           "tokenizer": {"document_separator": "</s>", "vocab_size": 512},
           "corpus": {"name": "replay", "train_docs": 10, "val_docs": 2, "bytes": 999, "rejected": []}}
    table = adoption_table(out, lr_scale=0.1)
    assert table.title == "adopted as v0 (champion)" and not table.header
    assert dict(table.rows)["original LR"] == "0.0003 (nights: × training.lr_scale 0.1)"
    assert "old_val" not in dict(table.rows) and "rejected files" not in dict(table.rows)
    assert table.left == ("field", "value")  # both columns left-aligned: the values are sentences
