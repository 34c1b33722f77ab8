"""README.md, the docs and benchmarks/README.md stay true to the code they document."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: the pages a user reads: every relative link in them must resolve
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md")

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_INDENTED = re.compile(r"^(?: {4}|\t).*$", re.MULTILINE)
_CODE_SPAN = re.compile(r"(`+).*?\1", re.DOTALL)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text without code blocks and code spans (where `[x](y)` is not a link)."""
    return _CODE_SPAN.sub("", _INDENTED.sub("", _FENCE.sub("", text)))


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file (lowercase, punctuation dropped,
    spaces to hyphens, -1, -2 ... for repeats)."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in _FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"#{1,6} +(.*?) *#* *$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_every_relative_link_resolves() -> None:
    """Each relative link of README.md, docs/*.md and benchmarks/README.md names a file that
    exists, and its #anchor, if any, a heading of that file."""
    broken = []
    for page in PAGES:
        for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z][a-z+.-]*:", target):  # https:, mailto:
                continue
            name, _, anchor = target.partition("#")
            path = (page.parent / name).resolve() if name else page
            where = f"{page.relative_to(ROOT)}: ({target})"
            if not path.exists():
                broken.append(f"{where}: no such file")
            elif anchor and (path.suffix != ".md" or anchor not in _anchors(path)):
                broken.append(f"{where}: no such heading")
    assert broken == []


def test_the_link_check_sees_links_and_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A `bin/x`: y\n\n## A `bin/x`: y\n\n    [code](nowhere.md)\n", encoding="utf-8")
    assert _anchors(page) == {"a-binx-y", "a-binx-y-1"}
    assert _LINK.findall(_prose("[a](b.md#c) `[d](e)` ![f](g.png)")) == ["b.md#c", "g.png"]


def test_env_reference_table_is_the_generated_one() -> None:
    """The env-file reference (docs/launcher.md, linked from README) is generated from the
    launcher's schema: every key, its default."""
    from agentcore_slime.settings.schema import KEYS, reference_table

    launcher = (ROOT / "docs" / "launcher.md").read_text(encoding="utf-8")
    assert reference_table() in launcher
    for key in KEYS:
        assert f"| `{key.name}` |" in launcher
    assert "(docs/launcher.md#reference)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "exec tests/run" in ci
    assert "\n    tests/run\n" in readme


def test_benchmarks_readme_names_every_benchmark() -> None:
    """benchmarks/README.md has every tracked benchmark script, and each it names exists."""
    text = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "benchmarks/bench_*.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert {"benchmarks/bench_merge.py", "benchmarks/bench_gateway.py"} <= set(tracked)
    assert [name for name in tracked if Path(name).name not in text] == []
    named = set(re.findall(r"\bbench_\w+\.py\b", text))
    assert [name for name in sorted(named) if not (ROOT / "benchmarks" / name).is_file()] == []


def test_user_facing_docs_point_only_at_what_users_can_see() -> None:
    """README, docs/, benchmarks/README.md and examples/ must not cite the issue tracker, the
    development seeds or section numbers of contract files that ship with neither the
    repository nor a release."""
    files = [*PAGES, *sorted((ROOT / "examples").rglob("*"))]
    hidden = re.compile(
        r"\bthe issue\b|\bissues? #?\d|\bseeds?'|\bthe seeds\b|contract\.md|§\s*\d|\bsection \d",
        re.IGNORECASE,
    )
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        if path.is_file() and path.suffix in (".md", ".py", ".env", ".txt", "")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if hidden.search(line)
    ]
    assert found == []
