"""No import cycles among the project's modules (function-level imports included), and the
layering of ../shared/design.md: the proxy never imports the load tester or deploy, and the
load tester never imports the proxy."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("proxy", "loadtest", "deploy")


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def graph() -> dict[str, set[str]]:
    modules = {_module(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            edges[name] |= {t for t in targets if t in modules and t != name}
    return edges


def test_no_import_cycles() -> None:
    edges = graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    # a package importing its own submodules (proxy.cache -> proxy.cache.x) is not a cycle
    real = [c for c in cycles if not all(m.startswith(c[0] + ".") or m == c[0] for m in c)]
    assert real == [], real


def test_layering() -> None:
    for name, targets in graph().items():
        if name.startswith("proxy"):
            assert not any(t.startswith(("loadtest", "deploy")) for t in targets), name
        if name.startswith("loadtest"):
            assert not any(t.startswith("proxy") for t in targets), name


def test_settings_are_read_from_the_environment_at_the_entry_points_only() -> None:
    """proxy.settings (the Settings object, its checks) is a leaf any module may import;
    proxy.settings_env (PROXY_* variables, flags) is read by the entry points alone: the rest
    of the proxy is handed a Settings."""
    edges = graph()
    assert edges["proxy.settings"] <= {"proxy.cache.config"}, edges["proxy.settings"]
    readers = {name for name, targets in edges.items() if "proxy.settings_env" in targets}
    assert readers <= {"proxy.__main__", "proxy.app", "proxy.cache.evaluate"}, readers


def test_the_evaluation_command_stays_out_of_the_served_proxy() -> None:
    """proxy.cache.evaluate and the pairs file it reads (proxy.cache.pairs) are an offline
    command: nothing else imports them, and the pairs reader imports nothing of the proxy."""
    edges = graph()
    users = {name for name, targets in edges.items()
             if targets & {"proxy.cache.evaluate", "proxy.cache.pairs"}}
    assert users <= {"proxy.cache.evaluate"}, users
    assert edges["proxy.cache.pairs"] == set(), edges["proxy.cache.pairs"]


def test_the_stored_entry_knows_nothing_of_serving_it() -> None:
    """proxy.cache.entry (the record) is read by the stores and by proxy.cache.serve (whether
    and how an entry answers a request); neither imports more of the proxy than its types."""
    edges = graph()
    assert edges["proxy.cache.entry"] <= {"proxy.types"}, edges["proxy.cache.entry"]
    assert edges["proxy.cache.serve"] <= {"proxy.types", "proxy.cache.entry"}, \
        edges["proxy.cache.serve"]


def test_the_semantic_tier_knows_nothing_of_single_flight() -> None:
    """proxy.cache.semantic (search by meaning) is lookup.py's: it neither imports the lookup
    nor the flights and claims that lookup.py keeps."""
    edges = graph()
    flights = {"proxy.cache.lookup", "proxy.cache.flight", "proxy.cache.claims",
               "proxy.cache.redis_claims"}
    assert not edges["proxy.cache.semantic"] & flights, edges["proxy.cache.semantic"]
    users = {name for name, targets in edges.items() if "proxy.cache.semantic" in targets}
    assert users <= {"proxy.cache.lookup"}, users


def test_a_sweep_points_verdict_and_plot_import_no_sweep() -> None:
    """loadtest.verdict (what one point says) and loadtest.sweep_plot (its PNG) are read by the
    rate and concurrency sweeps and the GPU benches; neither imports a sweep."""
    edges = graph()
    assert edges["loadtest.verdict"] <= {"loadtest.stats"}, edges["loadtest.verdict"]
    assert edges["loadtest.sweep_plot"] <= {"loadtest.plots"}, edges["loadtest.sweep_plot"]
