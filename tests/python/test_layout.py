"""The house stays one where a newcomer finds the room for a change: each folder of
python/agentcore_slime is one job (a *room*), the rooms stand in layers, and imports only go down.

The import graph is read from the source (``ast``), every import counted: at the top, inside a
function (imported late) or under ``TYPE_CHECKING``; each is a dependency of the design. The
tests check that no two modules import each other (directly or round a loop), that every room is
declared in :data:`LAYERS`, and that no room imports a room of its own layer or above. A new room
(or a move) means a line in :data:`LAYERS`: docs/layout.md shows the same layers.

The tests mirror the package: each folder of tests/python is named for the room it tests, or is
one of the few cross-cutting folders in :data:`CROSS_CUTTING`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "python" / "agentcore_slime"

#: the rooms of agentcore_slime (its subpackages and top-level modules), lowest layer first; a room
#: may import rooms of lower layers only
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "addresses"),  # the one error every layer raises; this host's addresses (stdlib only)
    ("settings", "datasets", "cost"),  # every setting, declared once, read and checked; the JSONL datasets;
    # the cost model (rollout, report, bin/eval and bin/train's estimate price a run with it)
    ("rundir", "gateway", "episodes", "scripts"),  # run-dir writes; gateway; agent episodes; renders
    ("observe", "preflight"),  # what a run records; the checks bin/train gates on
    ("rollout", "report", "launch"),  # slime's rollout; bin/report; bin/train
    ("evaluate", "doctor"),  # bin/eval; bin/doctor
    ("rewards",),  # the path slime loads the reward hook from (agentcore_slime.rewards)
)
LAYER = {room: number for number, rooms in enumerate(LAYERS) for room in rooms}
#: the test folders that test no one room, and why
CROSS_CUTTING = {
    "e2e": "the bin/ commands end to end, as a user runs them",
    "ray_real": "the rendered scripts on a real Ray cluster (CPU, GPUs declared)",
    "slime_standin": "slime's own types and loaders, stood in (and the stand-in's own test)",
    "fakes": "stand-ins and fixtures the other folders share (no tests)",
    "examples": "examples/: the math agent, its grading, the data preparation",
}


@dataclass(frozen=True)
class Edge:
    """One import: ``source`` (a module) imports ``target`` (a module), at ``where``."""

    source: str
    target: str
    where: str


def module_name(root: Path, path: Path) -> tuple[str, bool]:
    """The dotted name of ``path`` under ``root``, and whether it is a package's ``__init__``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def import_edges(root: Path, package: str) -> Iterator[Edge]:
    """Every import of one of ``package``'s modules by another, found in the source under ``root``.

    :param root: the directory that holds the package directory.
    :param package: the top-level package name.
    """
    modules = {module_name(root, path)[0] for path in (root / package).rglob("*.py")}
    for path in sorted((root / package).rglob("*.py")):
        name, is_package = module_name(root, path)
        base = name.split(".") if is_package else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                start = base[: len(base) - node.level + 1] if node.level else []
                module = ".".join(start + ([node.module] if node.module else []))
                # from package import submodule: the submodule is what is imported
                targets = [
                    f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                if target == package or target.startswith(package + "."):
                    yield Edge(name, target, where)


def room_of(module: str) -> str:
    """The room of a module: its top-level subpackage or module (``""`` for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The import loops among modules (strongly connected components of more than one module, or
    a module importing itself), each as a sorted list of module names (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_violations(edges: list[Edge], layer: dict[str, int]) -> list[str]:
    """Each import from a room to a room not strictly below it, or to or from an undeclared room.

    :param edges: the imports.
    :param layer: room -> layer number (0 = lowest).
    """
    problems = []
    for edge in edges:
        source, target = room_of(edge.source), room_of(edge.target)
        if source == target or source == "" and target == "":
            continue
        if source not in layer or target not in layer:
            problems.append(f"{edge.where}: {edge.source} -> {edge.target}: a room not in LAYERS")
        elif layer[source] <= layer[target]:
            problems.append(
                f"{edge.where}: {edge.source} -> {edge.target}: {source} (layer {layer[source]}) "
                f"imports {target} (layer {layer[target]})"
            )
    return problems


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return list(import_edges(PACKAGE.parent, PACKAGE.name))


def test_every_room_is_declared_and_every_declared_room_exists() -> None:
    rooms = {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    rooms |= {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert rooms == set(LAYER), "declare a new room in LAYERS (and README's layout), or drop a gone one"


def test_every_test_folder_names_a_room_or_a_cross_cutting_job() -> None:
    tests = REPO / "tests" / "python"
    folders = {path.name for path in tests.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert folders - set(LAYER) - set(CROSS_CUTTING) == set(), (
        "a test folder is named for the room it tests (LAYERS), or is one of CROSS_CUTTING"
    )
    assert not list((tests / "fakes").glob("test_*.py")), "fakes/ holds what tests share, not tests"


def test_no_import_cycle_between_modules(edges: list[Edge]) -> None:
    assert cycles(edges) == []


def test_imports_only_go_down_the_layers(edges: list[Edge]) -> None:
    assert layer_violations(edges, LAYER) == []


def test_the_package_root_imports_nothing_of_its_own(edges: list[Edge]) -> None:
    """``import agentcore_slime`` stays free: slime and every launcher import it first."""
    assert [edge.where for edge in edges if edge.source == "agentcore_slime"] == []


def test_the_checks_find_a_planted_loop_and_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: a loop between two modules and an import from a low room to a high one."""
    package = tmp_path / "house"
    (package / "low").mkdir(parents=True)
    (package / "high").mkdir()
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text("from . import b\n")
    (package / "low" / "b.py").write_text("def f():\n    from house.low import a\n    from ..high import c\n")
    (package / "high" / "__init__.py").write_text("")
    (package / "high" / "c.py").write_text("x = 1\n")
    found = list(import_edges(tmp_path, "house"))
    assert cycles(found) == [["house.low.a", "house.low.b"]]
    assert layer_violations(found, {"low": 0, "high": 1}) == [
        "house/low/b.py:3: house.low.b -> house.high.c: low (layer 0) imports high (layer 1)"
    ]


def test_slimes_entry_points_load_as_slime_loads_them() -> None:
    """The dotted paths the rendered scripts pass to slime import and name the rollout's code."""
    from agentcore_slime.rollout import rewards
    from agentcore_slime.scripts.render import REWARD_POST_PROCESS, ROLLOUT_FUNCTION
    from agentcore_slime.settings.config import load_function

    assert ROLLOUT_FUNCTION == "agentcore_slime.rollout.generate_rollout"
    assert REWARD_POST_PROCESS == "agentcore_slime.rewards.normalize_episode_rewards"
    assert load_function(ROLLOUT_FUNCTION).__module__ == "agentcore_slime.rollout"
    assert load_function(REWARD_POST_PROCESS) is rewards.normalize_episode_rewards


def test_the_launchers_import_without_the_rollouts_dependencies() -> None:
    """bin/train, bin/eval and bin/doctor run on a python with only jinja2, pyyaml and
    python-dotenv (their private venv): their modules must not import the gateway's or the
    rollout's dependencies, which a blocker here refuses."""
    script = textwrap.dedent(
        """
        import importlib, importlib.abc, sys

        REFUSED = {"aiohttp", "httpx", "orjson", "numpy", "boto3", "botocore", "transformers",
                   "renderers", "matplotlib", "ray"}

        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in REFUSED:
                    raise ImportError(f"refused: {name}")
                return None

        sys.meta_path.insert(0, Refuse())
        for name in ("agentcore_slime.launch.cli", "agentcore_slime.evaluate.launch",
                     "agentcore_slime.evaluate.rehearse_launch",
                     "agentcore_slime.doctor.cli", "agentcore_slime.preflight"):
            importlib.import_module(name)
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO / "python",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr
