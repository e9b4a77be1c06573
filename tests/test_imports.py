"""The product's layout: no import circles among the agent's modules, and no long product file
(Python, C or C++) without a reason.

Both rules read the source (the circles with `ast`) and import nothing of the product, so they run in
milliseconds.
`python tests/test_imports.py` prints the circles and the long files instead of asserting.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agent" / "cachewarm"

# Circles allowed (none). A circle (a strongly connected component of the import
# graph) is allowed when all its modules are in one entry; an entry that no circle falls in any more
# fails the test, so the allow-list only shrinks.
ALLOWED_CIRCLES: list[frozenset[str]] = []

# A product file over LONG_LINES lines says why near its top: a line within its first REASON_WITHIN
# lines (a comment or the module docstring) containing LONG_MARKER, then the reason. Splitting it into
# files with one idea each is the other way to pass.
LONG_LINES = 500
REASON_WITHIN = 30
LONG_MARKER = "why this file is long:"
PRODUCT_DIRS = ("agent/cachewarm", "lambdas", "infra/cachewarm_infra")
# The C and C++ product files (the agent's extension, the dumper and the code they share): the same
# rule, the marker in a comment.
NATIVE_DIRS = ("agent/cachewarm/datapath", "dumper-cpp/src", "dumper-cpp/core", "dumper-cpp/hashkit")
NATIVE_SUFFIXES = (".c", ".cc", ".h")
# Long files without a reason yet, each to be split or given one; an entry for a file that is no longer
# long, or that now has its reason, fails the test so the list only shrinks.
LONG_WITHOUT_REASON = {
    # Being changed elsewhere when the rule reached C++: to be split or explained once that lands.
    "dumper-cpp/src/stream_sink.cc",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def agent_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The agent modules `name` imports anywhere in its body: at module level, in functions and under
    `if TYPE_CHECKING:` alike (each is a dependency of the design, and a circle through a function-level
    import only moves the failure to run time)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                if not is_package:
                    base.pop()
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                # `from pkg import sub` imports the module pkg.sub; `from mod import name` imports mod.
                sub = f"{target}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif target in known:
                    found.add(target)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = agent_modules()
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def allowed(circle: frozenset[str]) -> bool:
    return any(circle <= a for a in ALLOWED_CIRCLES)


def describe(circle: frozenset[str], graph: dict[str, set[str]]) -> str:
    edges = sorted(f"{a} -> {b}" for a in circle for b in graph[a] if b in circle)
    return "\n    ".join(edges)


@dataclass(frozen=True)
class LongFile:
    path: str
    lines: int
    has_reason: bool


def product_files() -> list[Path]:
    python = [p for d in PRODUCT_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    native = [p for d in NATIVE_DIRS for p in sorted((ROOT / d).iterdir()) if p.suffix in NATIVE_SUFFIXES]
    return python + native


def long_files() -> list[LongFile]:
    found = []
    for p in product_files():
        text = p.read_text().splitlines()
        if len(text) > LONG_LINES:
            head = text[:REASON_WITHIN]
            reason = any(LONG_MARKER in line for line in head)
            found.append(LongFile(str(p.relative_to(ROOT)), len(text), reason))
    return found


def test_the_agent_has_no_import_circles() -> None:
    graph = import_graph()
    found = circles(graph)
    new = [c for c in found if not allowed(c)]
    assert not new, "import circles among the agent's modules:\n" + "\n".join(
        f"  {sorted(c)}:\n    {describe(c, graph)}" for c in new
    )
    gone = [sorted(a) for a in ALLOWED_CIRCLES if not any(c <= a for c in found)]
    assert not gone, f"circles allowed in tests/test_imports.py that are gone (drop them): {gone}"


def test_the_graph_sees_function_level_and_relative_imports() -> None:
    """The check itself: an import inside a function or `if TYPE_CHECKING:` is an edge."""
    graph = import_graph()
    assert graph["cachewarm.datapath.populate"] >= {"cachewarm.datapath.populate.loop"}
    assert "cachewarm.node_agent.identity" in graph["cachewarm.node_agent.cli"]  # imported in a function
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_long_product_files_say_why() -> None:
    found = long_files()
    unexplained = {f.path for f in found if not f.has_reason}
    new = sorted(unexplained - LONG_WITHOUT_REASON)
    assert not new, (
        f"product files over {LONG_LINES} lines: split them, or say why near the top "
        f"('{LONG_MARKER} ...'): {new}"
    )
    stale = sorted(LONG_WITHOUT_REASON - unexplained)
    assert not stale, f"no longer long or now explained, drop from LONG_WITHOUT_REASON: {stale}"


if __name__ == "__main__":
    graph = import_graph()
    print(f"{len(graph)} modules, {sum(len(v) for v in graph.values())} imports")
    for c in circles(graph):
        note = " (allowed)" if allowed(c) else ""
        print(f"circle of {len(c)}{note}:\n    {describe(c, graph)}")
    for f in long_files():
        print(f"{f.lines:5d} {f.path}{'  (says why)' if f.has_reason else ''}")
    sys.exit(0)
