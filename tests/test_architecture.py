"""The tree is the architecture: the import graph of lib/, tasks/, flows/ and cli/ read from the
source (`ast`, imports at module level and inside functions alike), checked against the layers.

- No cycle among the project's modules.
- No upward import: lib/ never imports tasks/, flows/ or cli/; tasks/ never imports flows/ or cli/;
  flows/ never imports cli/. lib/ never imports prefect.
- In lib/, tasks/ and flows/, the project's own modules are imported at module level (an import
  inside a function is what hides a cycle).
- No module of lib/ over 550 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("lib", "tasks", "flows", "cli")  # each may import only the layers before it
FORBIDDEN = {"lib": {"tasks", "flows", "cli", "prefect", "prefect_ray"}, "tasks": {"flows", "cli"}, "flows": {"cli"}}


def _modules() -> dict[str, Path]:
    out = {}
    for layer in LAYERS:
        for f in sorted((ROOT / layer).rglob("*.py")):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


MODULES = _modules()


def _resolve(dotted: str) -> str | None:
    """The project module a dotted import name lands in (`lib.curation.dedup.near_dedup` ->
    `lib.curation.dedup`), or None for a module of another package."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported name, line, inside a function) of every absolute import in the file."""
    out = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                out.append((child.module, child.lineno, in_function))
                out.extend((f"{child.module}.{a.name}", child.lineno, in_function) for a in child.names)
            walk(child, inside)

    walk(ast.parse(path.read_text(), str(path)), False)
    return out


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for mod, path in MODULES.items():
        for name, _, _ in _imports(path):
            target = _resolve(name)
            if target is not None and target != mod and not mod.startswith(target + "."):  # a package's own __init__
                graph[mod].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_walk_sees_the_tree():
    """The checks below read real modules: the graph has the layers and their known edges."""
    graph = _graph()
    assert {"lib.config", "lib.curation.dedup", "tasks.data", "flows.consolidate", "cli.main"} <= set(graph)
    assert "lib.curation.minhash" in graph["lib.curation.dedup"]
    assert any(t.startswith("lib.") for t in graph["tasks.data"])
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (move the shared names down into a module both can import): " + \
        "; ".join(" <-> ".join(c) for c in cycles)


def test_no_upward_import_and_lib_never_imports_prefect():
    bad = []
    for mod, path in MODULES.items():
        layer = mod.split(".")[0]
        for name, line, _ in _imports(path):
            if name.split(".")[0] in FORBIDDEN.get(layer, ()):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not bad, "upward imports (lib < tasks < flows < cli; lib never imports prefect):\n" + "\n".join(sorted(set(bad)))


def test_project_modules_are_imported_at_module_level():
    """Inside a function only a heavy third-party dependency may be imported (torch, transformers:
    seconds each); an import of the project's own module there is what hides a cycle."""
    bad = []
    for mod, path in MODULES.items():
        if mod.split(".")[0] == "cli":  # the CLI defers each command's stage: `consolidate --help` loads no stage
            continue
        for name, line, in_function in _imports(path):
            if in_function and _resolve(name) is not None:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name} inside a function")
    assert not bad, "\n".join(sorted(set(bad)))


MAX_LINES = 550  # a module longer than this mixes concerns (issue #27): split it by what it does


def test_no_lib_module_over_550_lines():
    long = {str(p.relative_to(ROOT)): n for m, p in MODULES.items() if m.startswith("lib")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"lib modules over {MAX_LINES} lines: {long}"
