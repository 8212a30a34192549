"""`consolidate buffer add|flush|ls|stats`: put text into the buffer and look at it.

`add` takes plain text / markdown / source files (one record each), `.jsonl` (a `text` field per
line, an optional `source`), `.parquet` (a `text` column, optional `source` and `id` columns,
checked like the nightly ingest checks a file dropped into `buffers/`), folders (the supported
files under them, recursively, hidden paths left out: the rule of `init --replay`) and `-`
(stdin, one record).

- A file is imported all or nothing. Anything wrong with it (invalid UTF-8, bad JSON, an empty
  or oversized record, a missing or non-string column, a corrupt parquet page, anything the
  reader raises) refuses that file with a message naming it and the line or row; the other
  files of the command are imported, and the command exits 1 at the end.
- A file with no records is refused, the same rule as the nightly ingest (which quarantines
  one dropped into `buffers/`).
- Whole files are packed into buffer files of about `buffer.flush_size` records (a larger input
  gets one of its own); each is written atomically (`Buffer.add_file`), so a crash leaves a
  file imported whole or not at all. `--no-flush` writes through the write-ahead log instead
  (records durable one chunk at a time, turned into parquet by the next flush).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

import typer

from cli.common import ConfigOpt, JsonOpt, PresetOpt, SetOpt, WorkspaceOpt, resolve_config

STDIN = "-"
PROGRESS_MIN_RECORDS = 2000  # smaller imports finish before a bar would be worth drawing
ADD_CHUNK = 1000  # records per add_many (one fsync each): bounds the log write and moves the bar


class FileRejected(ValueError):
    """One input file cannot be imported; the message names the file (and line or row)."""


@dataclass
class ParsedInput:
    name: str
    texts: list[str] = field(default_factory=list)
    sources: list[str | None] = field(default_factory=list)
    bad_rows: dict[int, str] = field(default_factory=dict)  # rows set aside: row -> what was wrong


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileRejected(
            f"{name}: not valid UTF-8 at byte {exc.start} ({exc.reason}); convert it first, e.g. "
            f"`iconv -f latin1 -t utf-8`"
        ) from None


def parse_input(name: str, source: str | None, max_text_bytes: int) -> ParsedInput:
    """Read one input into validated records, or raise FileRejected."""
    from lib.buffer.records import InvalidRecordError, validate_text

    out = ParsedInput(name)
    default_source = source or ("stdin" if name == STDIN else f"file:{name}")

    def take(text: object, where: str, src: object = None) -> None:
        try:
            validate_text(text, max_text_bytes, where)
        except InvalidRecordError as exc:
            raise FileRejected(str(exc)) from None
        if src is not None and not isinstance(src, str):
            raise FileRejected(f"{where}: source must be a string, got {type(src).__name__}")
        out.texts.append(text)
        out.sources.append(source or src or default_source)

    if name == STDIN:
        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read() if stream is not None else sys.stdin.read().encode("utf-8", "surrogateescape")
        take(_decode(data, "stdin"), "stdin")
        return out
    path = Path(name)
    if not path.exists():
        raise FileRejected(f"{name}: no such file")
    if path.is_dir():  # expand_inputs replaced every folder that has files by its files
        raise FileRejected(f"{name}: a folder with no text, markdown, source code, JSONL or parquet files")
    from lib.data.readers import JSONL_SUFFIXES, DocumentFileError, read_documents

    suffix = path.suffix.lower()
    if suffix == ".parquet":  # checked as a buffer file, as the nightly ingest checks one
        from lib.buffer.ingest import BadBufferFile, bad_rows, read_buffer_table

        try:
            _, texts, _, sources = read_buffer_table(path)
        except BadBufferFile as exc:
            raise FileRejected(f"{name}: {exc}") from None
        except Exception as exc:  # not parquet, a corrupt footer or page: whatever pyarrow raises
            raise FileRejected(f"{name}: not a readable parquet file ({type(exc).__name__}: {exc})") from None
        # the rule a night applies to a file dropped into buffers/: bad rows are set aside (and
        # named), the good rows are imported
        bad = bad_rows(texts, max_text_bytes)
        out.bad_rows = {row: f"{name}: row {row}: {reason}" for row, reason in bad.items()}
        for row, (text, src) in enumerate(zip(texts, sources)):
            if row not in bad:
                take(text, f"{name}: row {row}: text", src)
        if not out.texts:
            raise FileRejected(f"{name}: no usable rows ({'; '.join(sorted(set(bad.values())))})")
        return out
    jsonl = suffix in JSONL_SUFFIXES
    try:  # lib.data.readers: a record per JSON line, a text file whole
        for doc in read_documents(path, name):
            take(doc.text, f"{name}:{doc.at}: text" if jsonl else f"{name}: text", doc.source)
    except DocumentFileError as exc:
        raise FileRejected(f"{name}:{exc.line}: {exc.problem}" if exc.line is not None else f"{name}: {exc.problem}") from None
    except OSError as exc:
        raise FileRejected(f"{name}: cannot be read ({exc.strerror or exc})") from None
    if jsonl and not out.texts:
        raise FileRejected(f"{name}: no records (empty JSONL file)")
    return out


def expand_inputs(names: list[str]) -> tuple[list[str], dict[str, int]]:
    """The inputs with every folder replaced by the supported files under it (recursively,
    sorted, hidden paths left out: lib.data.readers.files_under, the rule `init --replay` uses), and
    per folder how many files of other types were skipped."""
    from lib.data.readers import files_under

    out: list[str] = []
    skipped: dict[str, int] = {}
    for name in names:
        path = Path(name)
        if name != STDIN and path.is_dir():
            files, unsupported = files_under(path)
            out += [str(f) for f in files]
            if unsupported:
                skipped[name] = unsupported
            if not files:
                out.append(name)  # refused by parse_input with a message naming the folder
        else:
            out.append(name)
    return out, skipped


def pack_inputs(parsed: list[ParsedInput], flush_size: int) -> list[list[ParsedInput]]:
    """Whole inputs, in order, grouped into buffer files of at least `flush_size` records (the
    last may be smaller); an input is never split, so each file is imported whole or not at all."""
    groups: list[list[ParsedInput]] = []
    current: list[ParsedInput] = []
    records = 0
    for p in parsed:
        current.append(p)
        records += len(p.texts)
        if records >= flush_size:
            groups.append(current)
            current, records = [], 0
    if current:
        groups.append(current)
    return groups


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="The buffer: captured text waiting for the nightly consolidation.", no_args_is_help=True)

    def open_buffer(config, preset, set_, workspace, recover: bool = True):
        from lib.buffer.store import Buffer

        cfg, ws = resolve_config(config, preset, set_, workspace)
        return cfg, ws, Buffer.from_config(ws.buffers, cfg, recover=recover)

    @group.command("add")
    def add(
        files: Annotated[list[str], typer.Argument(help="Text/markdown/code files (one record each), .jsonl (`text` per line), .parquet (`text` column), folders (their supported files, recursively), or - for stdin.")],
        source: Annotated[Optional[str], typer.Option("--source", help="Source label for every record (default: the file's `source` field/column, else file:<path> or stdin).")] = None,
        flush: Annotated[bool, typer.Option("--flush/--no-flush", help="Write parquet buffer files now, each input whole or not at all (--no-flush: into the write-ahead log, parquet at the next flush).")] = True,
        config: ConfigOpt = None,
        preset: PresetOpt = "default",
        set_: SetOpt = None,
        workspace: WorkspaceOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Add files (or stdin) to the buffer, durably."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        if files.count(STDIN) > 1:
            raise ValueError("stdin (-) can be given only once")
        files, skipped = expand_inputs(files)
        cfg, ws, buf = open_buffer(config, preset, set_, workspace)
        errors: list[str] = []
        added: dict[str, int] = {}
        parsed: list[ParsedInput] = []
        for name in files:
            try:
                parsed.append(parse_input(name, source, buf.max_text_bytes))
                errors.extend(f"{reason}; not imported, the file's other rows were" for reason in parsed[-1].bad_rows.values())
            except FileRejected as exc:
                errors.append(str(exc))
            except Exception as exc:  # never let one input stop the others
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
        total = sum(len(p.texts) for p in parsed)
        console = Console(stderr=True)
        progress = Progress(
            TextColumn("[bold]buffer add"), BarColumn(), MofNCompleteColumn(), TextColumn("records"), TimeRemainingColumn(),
            console=console, transient=True, disable=json_ or total < PROGRESS_MIN_RECORDS,
        )
        before = set(buf.list_buffers())
        with progress:
            task = progress.add_task("add", total=total)
            if flush:
                for group in pack_inputs(parsed, buf.flush_size):
                    n = sum(len(p.texts) for p in group)
                    try:
                        buf.add_file([t for p in group for t in p.texts], [s for p in group for s in p.sources])
                    except OSError as exc:  # disk full, permissions: these files are not imported, whole
                        errors.extend(f"{p.name}: not written ({exc})" for p in group)
                        continue
                    added.update((p.name, len(p.texts)) for p in group)
                    progress.advance(task, n)
            else:
                for p in parsed:
                    for start in range(0, len(p.texts), ADD_CHUNK):
                        chunk = slice(start, start + ADD_CHUNK)
                        buf.add_many(p.texts[chunk], p.sources[chunk])
                        progress.advance(task, len(p.texts[chunk]))
                    added[p.name] = len(p.texts)
        written = sorted(set(buf.list_buffers()) - before)
        result = {
            "added": sum(added.values()),
            "inputs": added,
            "skipped_in_folders": skipped,
            "errors": errors,
            "flushed": [Path(f).name for f in written],
            "pending_log": buf.pending(),
        }
        if json_:
            typer.echo(json.dumps(result, indent=2))
        else:
            where = f"; written to {', '.join(result['flushed'])}" if written else (
                f"; {buf.pending()} in the write-ahead log" if buf.pending() else "")
            typer.echo(f"added {result['added']} records from {len(added)} of {len(files)} inputs{where}")
            for folder, n in skipped.items():
                typer.echo(f"skipped {n} files of other types in {folder} (binaries, unknown suffixes)")
        for message in errors:
            typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
        buf.close(flush=flush)
        if errors:
            raise typer.Exit(1)

    @group.command("flush")
    def flush_cmd(
        config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Recover write-ahead logs left by stopped writers into parquet files.
        Records held by live writers (a running server) stay with them until they flush."""
        cfg, ws, buf = open_buffer(config, preset, set_, workspace, recover=False)
        before = set(buf.list_buffers())
        buf.flush()
        report = dict(buf.recovered)
        stats = buf.stats()
        report.update(
            files_written=[Path(f).name for f in sorted(set(buf.list_buffers()) - before)],
            live_writer_records=stats["pending_log"],
            live_writer_logs=stats["log_segments"],
        )
        if json_:
            typer.echo(json.dumps(report, indent=2))
            return
        typer.echo(
            f"replayed {report['records']} records from {report['segments']} logs of stopped writers"
            + (f" into {', '.join(report['files_written'])}" if report["files_written"] else "")
        )
        if report["dropped_bytes"]:
            typer.echo(f"dropped {report['dropped_bytes']} bytes of torn log tails (writes that never returned)")
        if report["live_writer_logs"]:
            typer.echo(f"{report['live_writer_records']} records stay in {report['live_writer_logs']} logs of live writers")

    @group.command("ls")
    def ls(
        config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """List the buffer's parquet files: rows, size, lineage status (pending/consumed/quarantined)."""
        import pyarrow.parquet as pq

        from lib.buffer.records import content_hash

        cfg, ws, buf = open_buffer(config, preset, set_, workspace, recover=False)
        status: dict[str, str] = {}
        if ws.lineage_db.exists():
            from lib.registry.lineage import Lineage

            status = {f.content_hash: f.status for f in Lineage(ws.lineage_db).buffer_files()}
        rows = []
        for name in buf.list_buffers():
            path = Path(name)
            try:
                n = pq.ParquetFile(path).metadata.num_rows
            except Exception as exc:  # a foreign or broken file: list it, say why
                n = None
                state = f"unreadable: {exc}"
            else:
                state = status.get(content_hash(path), "unregistered")
            rows.append({"file": path.name, "rows": n, "bytes": path.stat().st_size, "status": state})
        if json_:
            typer.echo(json.dumps(rows, indent=2))
            return
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"buffer {buf.buffer_dir}")
        # whole file names: they are what `buffer ls` is for
        table.add_column("file", no_wrap=True, min_width=max([len(r["file"]) for r in rows], default=4))
        for col, justify in (("rows", "right"), ("bytes", "right"), ("status", "left")):
            table.add_column(col, justify=justify)
        for r in rows:
            table.add_row(r["file"], "?" if r["rows"] is None else f"{r['rows']:,}", f"{r['bytes']:,}", r["status"])
        Console().print(table)

    @group.command("stats")
    def stats_cmd(
        config: ConfigOpt = None, preset: PresetOpt = "default", set_: SetOpt = None, workspace: WorkspaceOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Records, bytes and files in the buffer, and records pending in write-ahead logs."""
        cfg, ws, buf = open_buffer(config, preset, set_, workspace, recover=False)
        stats = buf.stats()
        if json_:
            typer.echo(json.dumps(stats, indent=2))
            return
        from rich.console import Console

        from lib.tables import fields_table

        labels = (("files", "parquet files"), ("records", "records in files"), ("bytes", "bytes on disk"),
                  ("pending_log", "records pending in write-ahead logs"), ("log_segments", "write-ahead logs"),
                  ("abandoned_segments", "  of stopped writers (replayed on next open)"), ("log_bytes", "log bytes"))
        Console().print(fields_table(f"buffer {stats['buffer_dir']}", [(label, f"{stats[key]:,}") for key, label in labels]).rich())
        for problem in stats["unreadable_files"]:
            typer.secho(f"warning: unreadable {problem}", fg=typer.colors.YELLOW, err=True)

    app.add_typer(group, name="buffer")

