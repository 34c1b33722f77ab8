"""README.md stays true to the code it documents."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_env_reference_table_is_the_generated_one() -> None:
    """The env-file table in README is generated from the launcher's schema (every key, default)."""
    from agentcore_slime.settings.schema import KEYS, reference_table

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


def test_user_facing_docs_point_only_at_what_users_can_see() -> None:
    """README, docs/ and examples/ must not cite the issue tracker, the development seeds or
    section numbers of contract files that ship with neither the repository nor a release."""
    import re

    files = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "examples").rglob("*")),
    ]
    hidden = re.compile(
        r"\bthe issue\b|\bseeds?'|\bthe seeds\b|contract\.md|§\s*\d|\bsection \d", re.IGNORECASE
    )
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        if path.is_file() and path.suffix in (".md", ".py", ".env", ".txt", "")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if hidden.search(line)
    ]
    assert found == []
