"""The toolkit's bash library in a rendered script: only the functions that script can call.

``templates/lib/*.sh`` are the one source of the library (the bats tests and bin/doctor source
them). A rendered script carries, after its ``main``, the functions of those files that it can
call: the transitive closure, over the library's functions, of the function names that the
script's own text (configuration, flag arrays, ``main`` and the template's functions) names. A
name counts wherever it stands as a word on a line that is not a comment: a call, a trap's
string, an argument (``run_interruptibly sleep 2``). A function comes with the comment lines
right above it, and with a comment block that stands alone right above those (it introduces
the function); a file's other top-level statements (its variables) come with its functions.
Everything is copied unchanged, in the file's order, common.sh first.

The library's Python is in ``templates/lib/*_helper.py`` (ruff and mypy check them). A
rendered script runs them from its own directory (``TOOLKIT_HELPER_DIR``), so the render
writes, beside the script, the helpers whose names the script's text holds, unchanged: a copy
of the run directory on another node runs with python3 alone, and a re-render is byte for byte
the same.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

#: the line of a rendered template that the library's functions replace
MARKER = "# @@toolkit-library@@\n"
#: the library file whose functions come first (say, die: what every other one uses)
FIRST = "common.sh"
_FUNCTION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\(\) \{")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RULE = "# " + "-" * 75 + "\n"


@dataclass(frozen=True)
class Block:
    """One piece of a library file: a function (with its comments) or a top-level statement.

    :param name: the function's name; ``None`` for a top-level statement.
    :param text: the lines, as in the file.
    """

    name: str | None
    text: str


def parse(text: str) -> list[Block]:
    """The blocks of one library file, in order, without its header (the lines before the
    first blank line). A comment block that stands alone goes with the function after it."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
    blocks: list[Block] = []
    pending: list[str] = []  # lines since the last blank line
    intro = ""  # a comment block that stood alone, waiting for its function
    i = start
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip():
            if pending and all(p.lstrip().startswith("#") for p in pending):
                intro += "".join(pending) + "\n"
            elif pending:
                blocks.append(Block(None, intro + "".join(pending)))
                intro = ""
            pending = []
            continue
        match = _FUNCTION.match(line)
        if not match:
            pending.append(line)
            continue
        body = [*pending, line]
        while i < len(lines) and lines[i].rstrip("\n") != "}":
            body.append(lines[i])
            i += 1
        body.append(lines[i] if i < len(lines) else "}\n")
        i += 1
        blocks.append(Block(match.group(1), intro + "".join(body)))
        pending, intro = [], ""
    if pending or intro:
        blocks.append(Block(None, intro + "".join(pending)))
    return blocks


def code_words(text: str) -> set[str]:
    """The words of ``text``'s lines that are not comment lines."""
    words: set[str] = set()
    for line in text.splitlines():
        if not line.lstrip().startswith("#"):
            words.update(_WORD.findall(line))
    return words


def library_files(lib_dir: Path) -> list[Path]:
    """templates/lib/*.sh in the order the script carries them: common.sh, then by name."""
    return sorted(lib_dir.glob("*.sh"), key=lambda path: (path.name != FIRST, path.name))


def called(script: str, lib_dir: Path) -> dict[str, list[Block]]:
    """The blocks of each library file that ``script`` (its text without the library) can
    call: file name -> blocks in the file's order (files that give none are left out)."""
    parsed = {path.name: parse(path.read_text(encoding="utf-8")) for path in library_files(lib_dir)}
    functions = {b.name: b for blocks in parsed.values() for b in blocks if b.name is not None}
    wanted: set[str] = set()
    queue = sorted(code_words(script) & functions.keys())
    while queue:
        name = queue.pop()
        if name in wanted:
            continue
        wanted.add(name)
        queue.extend(sorted(code_words(functions[name].text) & functions.keys() - wanted))
    chosen: dict[str, list[Block]] = {}
    for name, blocks in parsed.items():
        if any(b.name in wanted for b in blocks):
            chosen[name] = [b for b in blocks if b.name is None or b.name in wanted]
    return chosen


def link(script: str, lib_dir: Path, calls: str = "") -> str:
    """``script`` with its :data:`MARKER` line replaced by the library functions it can call.

    :param script: a rendered template holding :data:`MARKER` once.
    :param lib_dir: templates/lib.
    :param calls: top-level code to run after the library (before what follows the marker);
        the functions it names are carried too.
    """
    before, after = script.split(MARKER)
    chosen = called(before + calls + after, lib_dir)
    parts = [
        _RULE,
        "# The toolkit's functions that this script calls: those of templates/lib/*.sh that the code\n"
        "# above names, and those they name in turn, copied unchanged (the files have the rest).\n",
        _RULE,
    ]
    for name, blocks in chosen.items():
        parts.append(f"\n# --- templates/lib/{name} ---\n")
        parts.extend("\n" + block.text for block in blocks)
    return before + "".join(parts) + "\n" + calls + after


def helpers(script: str, lib_dir: Path) -> dict[str, str]:
    """The Python helpers (templates/lib/*.py) whose file names ``script`` holds: name -> text.

    :param script: a whole rendered script.
    :param lib_dir: templates/lib.
    """
    return {
        path.name: path.read_text(encoding="utf-8")
        for path in sorted(lib_dir.glob("*.py"))
        if re.search(rf"(?<![\w.]){re.escape(path.name)}", script)
    }


#: the line of a rendered template's header that names the script's Python helpers
HELPERS_MARKER = "# @@toolkit-helpers@@\n"


def finish(script: str, lib_dir: Path) -> tuple[str, dict[str, str]]:
    """The whole script (its library linked, its header naming its helpers, the check that they
    are beside it as rendered) and the helpers.

    :param script: a rendered template holding :data:`MARKER` and :data:`HELPERS_MARKER` once.
    :param lib_dir: templates/lib.
    :returns: the script's text, and the helper files to write beside it (name -> text).
    """
    files = helpers(link(script, lib_dir), lib_dir)
    text = link(script, lib_dir, _check_call(files))
    names = ", ".join(files) or "none"
    line = _wrap(f"The Python its functions run is beside it (copies of templates/lib/*.py): {names}.")
    return text.replace(HELPERS_MARKER, line), files


def _check_call(files: dict[str, str]) -> str:
    """The call that checks, before ``main`` runs, that ``files`` are beside the script as
    rendered (``check_helpers``, templates/lib/common.sh): name and sha256's first 12 digits."""
    digests = [f"{name}={hashlib.sha256(text.encode()).hexdigest()[:12]}" for name, text in files.items()]
    return (
        "# The Python helpers this script runs, as rendered beside it (sha256, first 12 digits): a\n"
        "# missing one stops the script here; one that differs is named.\n"
        + " \\\n  ".join(["check_helpers", *digests])
        + "\n\n"
    )


def _wrap(sentence: str, width: int = 96) -> str:
    """``sentence`` as comment lines of at most ``width`` characters."""
    lines, line = [], "#"
    for word in sentence.split():
        if len(line) + 1 + len(word) > width and line != "#":
            lines.append(line)
            line = "#"
        line += " " + word
    return "\n".join([*lines, line]) + "\n"
