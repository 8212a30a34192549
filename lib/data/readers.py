"""The one reader of input documents: files a user hands to `consolidate init --replay`,
`consolidate buffer add`, `consolidate dedup` and `consolidate quality train`, one rule per file type.

- `.parquet`: a document per row of the `text` column (or `text_column`); optional `id`, `kind`
  and `source` columns. Read in batches of `BATCH_ROWS` rows.
- `.jsonl`, `.ndjson`: a document per non-blank line, a JSON object with a `text` field (a string,
  or null/absent: a document without text, which callers skip or refuse) and optional `id`,
  `kind`, `source`.
- Text: `.txt`, `.md`, `.rst`, `.text`, `.markdown` (kind prose) and source code (`.py`, `.js`,
  ..., kind code): the whole file is one document, read as UTF-8, its id the file's relative path.
- Ids, where the file gives none: `<file>:<row>` (parquet, from 0), `<file>:<line>` (JSON Lines,
  from 1), the file itself (text).
- A folder is the supported files under it, recursively and sorted, hidden paths (.git, editor
  files) left out (`files_under`); files of other types are counted and skipped.

Trade-off: a text file is one document, never one per line: a paragraph, a source file, a page
of notes stays whole (what replay and the buffer need); a list of one-line examples is a JSON
Lines file (a line per document, any text, with ids).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from lib.files import JsonLineError, json_lines


class InputDocument(NamedTuple):
    id: str
    text: str | None  # None: the file gave no text for it (null, absent)
    kind: str | None  # prose | code | what the file declared
    source: object  # the file's `source` for it (JSON Lines: as written), else None
    at: int  # where in the file: its row (parquet, from 0), its line (JSON Lines, from 1), 0 (text)


PARQUET_SUFFIXES = {".parquet"}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
PROSE_SUFFIXES = {".txt", ".md", ".rst", ".text", ".markdown"}
CODE_SUFFIXES = {".py", ".js", ".ts", ".java", ".c", ".h", ".cc", ".cpp", ".hpp", ".go", ".rs", ".rb", ".sh",
                 ".sql", ".kt", ".swift", ".scala", ".php", ".cs", ".lua", ".r", ".jl", ".m", ".toml", ".yaml", ".yml"}
SUPPORTED = PARQUET_SUFFIXES | JSONL_SUFFIXES | PROSE_SUFFIXES | CODE_SUFFIXES
BATCH_ROWS = 4096  # parquet rows per batch: a file streams, never read whole


class DocumentFileError(ValueError):
    """An input file that cannot be read as documents, and why; `line` (JSON Lines) or `row`
    (parquet) says where when one line or row is the problem. Callers prefix the file's name."""

    def __init__(self, problem: str, line: int | None = None):
        super().__init__(f"line {line}: {problem}" if line is not None else problem)
        self.problem, self.line = problem, line


def files_under(folder: Path) -> tuple[list[Path], int]:
    """The supported files under `folder`, recursively and sorted, leaving out hidden paths (.git,
    editor files); and how many other files it holds (binaries, unknown types), which are skipped.
    What `consolidate init --replay` and `consolidate buffer add` take from a folder."""
    files, unsupported = [], 0
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        if any(part.startswith(".") for part in f.relative_to(folder).parts):
            continue
        if f.suffix.lower() in SUPPORTED:
            files.append(f)
        else:
            unsupported += 1
    return files, unsupported




def kind_of_file(path: Path) -> str:
    return "code" if path.suffix.lower() in CODE_SUFFIXES else "prose"


def _parquet_docs(path: Path, rel: str, text_column: str) -> Iterator[InputDocument]:
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:
        raise DocumentFileError(f"not a readable parquet file ({type(exc).__name__}: {exc})") from None
    names = pf.schema_arrow.names
    if text_column not in names:
        raise DocumentFileError(f"no `{text_column}` column (columns: {', '.join(names) or 'none'}); pass --text-column")
    ttype = pf.schema_arrow.field(text_column).type
    if not (pa.types.is_string(ttype) or pa.types.is_large_string(ttype)):
        raise DocumentFileError(f"column `{text_column}` has type {ttype}, expected strings")
    cols = [text_column] + [c for c in ("id", "kind", "source") if c in names and c != text_column]
    row = 0
    try:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=cols):
            texts = batch.column(text_column).to_pylist()
            ids = batch.column("id").to_pylist() if "id" in cols else [None] * len(texts)
            kinds = batch.column("kind").to_pylist() if "kind" in cols else [None] * len(texts)
            sources = batch.column("source").to_pylist() if "source" in cols else [None] * len(texts)
            for text, doc_id, kind, source in zip(texts, ids, kinds, sources):
                yield InputDocument(str(doc_id) if doc_id is not None else f"{rel}:{row}", text, kind if isinstance(kind, str) else None, source, row)
                row += 1
    except DocumentFileError:
        raise
    except Exception as exc:  # corrupt pages, invalid UTF-8, anything pyarrow raises on read
        raise DocumentFileError(f"row {row}: cannot be read ({type(exc).__name__}: {exc})") from None


def _jsonl_docs(path: Path, rel: str, text_column: str) -> Iterator[InputDocument]:
    with open(path, "rb") as fh:
        try:
            for n, obj in json_lines(fh):
                text = obj.get(text_column)
                if text is not None and not isinstance(text, str):
                    raise DocumentFileError(f"`{text_column}` is {type(text).__name__}, expected a string", line=n)
                doc_id = obj.get("id")
                kind = obj.get("kind")
                yield InputDocument(str(doc_id) if doc_id is not None else f"{rel}:{n}", text, kind if isinstance(kind, str) else None, obj.get("source"), n)
        except JsonLineError as exc:
            raise DocumentFileError(exc.problem, line=exc.line) from None


def _text_docs(path: Path, rel: str) -> Iterator[InputDocument]:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentFileError(f"not valid UTF-8 at byte {exc.start} ({exc.reason}); convert it first, e.g. "
                                "`iconv -f latin1 -t utf-8`") from None
    yield InputDocument(rel, text, kind_of_file(path), None, 0)


def read_documents(path: Path, rel: str, text_column: str = "text") -> Iterator[InputDocument]:
    """The documents of one input file, streamed, by the rule of its type (this module's
    docstring); `rel` names it in the ids it makes up. DocumentFileError names the problem (the
    caller adds the file)."""
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return _parquet_docs(path, rel, text_column)
    if suffix in JSONL_SUFFIXES:
        return _jsonl_docs(path, rel, text_column)
    return _text_docs(path, rel)
