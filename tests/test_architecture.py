"""The layout docs/ARCHITECTURE.md draws: no import circles, a graph that knows no runner, a short pipeline/.

The layer contract itself is import-linter's (pyproject.toml, `make lint`); these are the checks it cannot
state: a circle anywhere in the tree, and what the graph reaches through any chain of imports.
"""
from pathlib import Path

import grimp

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "components", "artifacts", "models", "data", "stackenv")


def _graph():
    return grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), written here, not taken from grimp."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return circles


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_in_the_tree():
    graph = _graph()
    edges = {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    assert _circles(edges) == []


def test_the_pipeline_graph_reaches_nothing_of_a_runner():
    graph = _graph()
    reached = graph.find_upstream_modules("pipeline.graph")
    runners = sorted(m for m in reached if m.startswith(("pipeline.kubeflow", "pipeline.local", "pipeline.cli")))
    assert runners == []


def test_pipeline_holds_at_most_fifteen_modules_directly():
    direct = sorted(p.name for p in (PROJECT_ROOT / "pipeline").glob("*.py"))
    assert len(direct) <= 15, direct
