"""README.md stays true to the code it documents."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_env_reference_table_is_the_generated_one() -> None:
    """The env-file table in README is generated from the launcher's schema (every key, default)."""
    from agentcore_slime.launch.schema import KEYS, reference_table

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert reference_table() in readme
    for key in KEYS:
        assert f"| `{key.name}` |" in readme


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "exec tests/run" in ci
    assert "\n    tests/run\n" in readme


def test_readme_benchmarks_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ("bench_merge.py", "bench_result_detection.py", "bench_gateway.py"):
        assert f"benchmarks/{name}" in readme
        assert (ROOT / "benchmarks" / name).is_file()
