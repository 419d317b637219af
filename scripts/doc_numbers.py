#!/usr/bin/env python3
"""The measured numbers of the documentation and what regenerates them (issue 41 item 6).

Every measured number in README.md and docs/ (evaluations, node counts, seconds, sizes, ratios) follows a marker
that names what made it, invisible on the page::

    <!-- numbers: python scripts/bench_search.py | check | varies: seconds; plans/s -->

Its fields, separated by ``|``:

* the source, first: ``python scripts/NAME.py ARGS`` (run from the repository root; it prints the page's tables),
  ``pytest tests/test_NAME.py::test_name`` (a test that asserts the numbers), or either of them after
  ``at COMMIT:`` (measured on that older commit: check it out, ``git worktree add /tmp/at COMMIT``, and run the
  command there; today's code gives other numbers);
* ``check``: the source is a script that takes seconds (sample models, synthetic oracles, a small real model):
  ``tests/test_doc_numbers.py`` runs it and compares every table below the marker with the table of the same
  header it prints, cell by cell;
* ``varies: A; B``: the columns (by header) or rows (by first cell) that the machine decides, seconds and memory,
  left out of that comparison.

A marker covers what follows it up to the next marker or the next heading of its own level or above: the tables
and the prose there report what its source prints. Tables of measured numbers (their header names a measured
quantity) and sentences that count evaluations or nodes must be covered (``tests/test_doc_numbers.py``). The
page, the model, its samples (how they are made: a seed, a script, a wheel's file) and the machine are said in
the text next to the numbers; the source regenerates them.

    python scripts/doc_numbers.py              # every marker: page, line, source, checked or not
    python scripts/doc_numbers.py --check      # run the checked sources, compare their tables with the pages'
    python scripts/doc_numbers.py --update     # the same, then write the fresh tables into the pages
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!--\s*numbers:\s*(.*?)\s*-->", re.S)
SEPARATOR = re.compile(r"\s*\|(\s*:?-+:?\s*\|)+\s*")
HEADING = re.compile(r"(#{1,6})\s")
# A header cell naming a measured quantity: the table reports measurements (reference tables of flags, keys and
# exit codes name none)
MEASURED = re.compile(r"evaluation|evals|\bs\b|seconds|\bms\b|\bMB\b|\bGB\b|\bGiB\b|\bKB\b|bytes|ratio|rounds|"
                      r"\bruns\b|plans/s|speed-up|FP32 (set|nodes)|set (found|sizes)|\bset\b|nodes|error|lines|"
                      r"\bvalue\b|attempts|minimal|answer|candidates|\bbefore\b|\bafter\b", re.I)
# A sentence reporting a count of evaluations or nodes ("kept 16 nodes in 36 evaluations", "19 command evaluations")
COUNT = re.compile(r"(?<![\w.+-])\d[\d,]*(?:\s+(?:of|to|and)\s+\d[\d,]*)?\s+(?:more\s+|command\s+|emulated\s+|"
                   r"emulator\s+|single\s+)?(?:evaluations?|evals|nodes?)\b")
# ... but not a limit, a default or a formula ("at most 100 evaluations", "k + 2 evaluations")
NOT_A_COUNT = re.compile(r"(at most|at least|up to|default:?|budget|limit|within|under|over|than|every|per|each|"
                         r"[+x*/~]|k \+)\s*$", re.I)

# A quoted word or message, maybe over lines of one paragraph
QUOTED = re.compile(r"`(?:[^`\n]|\n(?!\s*\n))*`|\"(?:[^\"\n]|\n(?!\s*\n))*\"")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Source:
    """What a marker names: a script's command or a test, maybe at an older commit."""

    text: str
    check: bool = False
    varies: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "Source":
        first, *fields = [part.strip() for part in " ".join(text.split()).split("|")]
        varies: tuple[str, ...] = ()
        check = False
        for part in fields:
            if part == "check":
                check = True
            elif part.startswith("varies:"):
                varies = tuple(v.strip() for v in part[len("varies:"):].split(";") if v.strip())
            else:
                raise ValueError(f"numbers marker {text!r}: unknown field {part!r} (check, varies: A; B)")
        return cls(first, check, varies)

    @property
    def commit(self) -> str | None:
        found = re.match(r"at ([0-9a-f]{7,40}):", self.text)
        return found.group(1) if found else None

    @property
    def command(self) -> str:
        """The command, without its ``at COMMIT:``."""
        return re.sub(r"^at [0-9a-f]{7,40}:\s*", "", self.text)

    @property
    def words(self) -> list[str]:
        return shlex.split(self.command)

    def problem(self) -> str | None:
        """What is wrong with the source as written, or None."""
        words = self.words
        now = self.commit is None  # what it names must exist in this checkout
        if words[:1] == ["python"] and len(words) > 1 and words[1].startswith("scripts/"):
            if now and not (ROOT / words[1]).exists():
                return f"{words[1]} does not exist"
        elif words[:1] == ["pytest"] and len(words) > 1 and words[1].startswith("tests/"):
            for test in words[1:]:
                path, _, name = test.partition("::")
                if now and not (ROOT / path).exists():
                    return f"{path} does not exist"
                if now and name and not re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), re.M):
                    return f"no test {name} in {path}"
        elif words[:2] != ["wc", "-l"]:
            return ("give 'python scripts/NAME.py ARGS', 'pytest tests/FILE.py[::TEST]' or 'wc -l FILES', maybe "
                    "after 'at COMMIT:'")
        if self.check and (self.commit or words[0] != "python"):
            return "'check' runs a script of this checkout: not a test, not at an older commit"
        return None


@dataclass
class Table:
    line: int  # 1-based, of the header
    end: int  # 1-based, of the last row
    indent: str
    header: list[str]
    rows: list[list[str]]

    @property
    def measured(self) -> bool:
        return any(MEASURED.search(cell) for cell in self.header)


@dataclass
class Marker:
    page: Path
    line: int
    source: Source
    end: int  # the last line it covers
    tables: list[Table] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def tables(text: str) -> list[Table]:
    """The Markdown tables of a text (a header, its separator, its rows; indented ones in code blocks too)."""
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines) - 1:
        if lines[i].strip().startswith("|") and SEPARATOR.fullmatch(lines[i + 1]):
            start, indent = i, lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                i += 1
            found.append(Table(start + 1, i, indent, cells(lines[start]), [cells(r) for r in lines[start + 2:i]]))
        else:
            i += 1
    return found


@dataclass
class Page:
    path: Path
    lines: list[str]
    markers: list[Marker]
    tables: list[Table]
    code: set[int]  # 1-based lines inside code blocks
    comments: set[int]  # ... and inside HTML comments

    def covering(self, line: int) -> Marker | None:
        return next((m for m in self.markers if m.line < line <= m.end), None)

    def counts(self) -> list[tuple[int, str]]:
        """(line, its counts) of each line of prose (not code, tables or headings) counting evaluations or nodes."""
        shown = "\n".join("" if k in self.code or k in self.comments else text
                          for k, text in enumerate(self.lines, 1))
        # quoted words and messages are examples, not claims (a quote may run over lines: they stay)
        shown = QUOTED.sub(lambda m: "\n" * m.group(0).count("\n"), shown)
        found = []
        for k, prose in enumerate(shown.split("\n"), 1):
            if prose.lstrip().startswith(("|", "#")):
                continue
            counted = [m.group(0) for m in COUNT.finditer(prose) if not NOT_A_COUNT.search(prose[:m.start()])]
            if counted:
                found.append((k, "; ".join(counted)))
        return found


def read(path: Path) -> Page:
    from markdown_it import MarkdownIt

    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    code: set[int] = set()
    comments: set[int] = set()
    for token in MarkdownIt("commonmark").parse(text):
        if token.type in ("code_block", "fence", "html_block") and token.map:
            (comments if token.type == "html_block" else code).update(range(token.map[0] + 1, token.map[1] + 1))
    headings = [(k, len(m.group(1))) for k, line in enumerate(lines, 1)
                if k not in code and (m := HEADING.match(line))]
    found = [(line, m.group(1)) for m in MARKER.finditer(text)
             if (line := text.count("\n", 0, m.start()) + 1) not in code]  # an example in a code block is none
    markers = []
    for n, (line, body) in enumerate(found):
        level = next((lv for k, lv in reversed(headings) if k < line), 0)  # of the section it sits in
        ends = [k - 1 for k, lv in headings if k > line and lv <= max(level, 1)]
        if n + 1 < len(found):
            ends.append(found[n + 1][0] - 1)
        markers.append(Marker(path, line, Source.parse(body), min(ends, default=len(lines))))
    page = Page(path, lines, markers, tables(text), code, comments)
    for table in page.tables:
        if (marker := page.covering(table.line)) is not None:
            marker.tables.append(table)
    return page


@cache
def output(command: str) -> str:
    """What a checked source prints (run once per command)."""
    words = shlex.split(command)
    done = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise RuntimeError(f"{command} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def fresh(marker: Marker) -> list[tuple[Table, Table | None]]:
    """Each table the marker covers with the table of the same header its source prints now (in order)."""
    printed = tables(output(marker.source.command))
    taken: dict[tuple[str, ...], int] = {}
    pairs = []
    for table in marker.tables:
        key = tuple(table.header)
        same = [t for t in printed if tuple(t.header) == key]
        k = taken.get(key, 0)
        taken[key] = k + 1
        pairs.append((table, same[k] if k < len(same) else None))
    return pairs


def differences(marker: Marker, page: Table, printed: Table | None) -> list[str]:
    """How the page's table differs from the printed one, the columns and rows that vary left out."""
    if printed is None:
        return [f"{marker.source.command} prints no table with the header {' | '.join(page.header)}"]
    varies = set(marker.source.varies)
    keep = [k for k, name in enumerate(page.header) if name not in varies]
    def shown(rows: list[list[str]]) -> list[list[str]]:
        return [[row[k] if k < len(row) else "" for k in keep] for row in rows if row and row[0] not in varies]
    ours, theirs = shown(page.rows), shown(printed.rows)
    found = [f"line {page.line + 2 + k}: the page says {' | '.join(a)}; now {' | '.join(b)}"
             for k, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    if len(ours) != len(theirs):
        found.append(f"table at line {page.line}: {len(ours)} row(s) on the page, {len(theirs)} printed now")
    return found


def unprinted(page: Page, marker: Marker) -> list[str]:
    """The counts in the prose a checked marker covers that its source no longer prints anywhere (a number that
    moved: "16 nodes in 36 evaluations" when it prints 72)."""
    printed = {n.replace(",", "") for n in re.findall(r"\d[\d,]*", output(marker.source.command))}
    found = []
    for line, said in page.counts():
        if marker.line < line <= marker.end:
            found += [f"line {line}: {n} ({said}) is not in what {marker.source.command} prints"
                      for n in re.findall(r"\d[\d,]*", said) if n.replace(",", "") not in printed]
    return found


def update(page: Page, pairs: list[tuple[Table, Table]]) -> None:
    """Write the printed tables in place of the page's (its separator row kept: alignment is the page's)."""
    lines = list(page.lines)
    for old, new in sorted(pairs, key=lambda p: -p[0].line):
        body = [old.indent + "| " + " | ".join(row) + " |" for row in new.rows]
        lines[old.line + 1:old.end] = body
    page.path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="run the checked sources and compare their tables")
    parser.add_argument("--update", action="store_true", help="... and write their tables into the pages")
    args = parser.parse_args()
    failed = 0
    for path in pages():
        page = read(path)
        pending = []
        for marker in page.markers:
            source = marker.source
            if not (args.check or args.update):
                print(f"{marker.where}: {'checked' if source.check else 'listed '} {source.text}")
                continue
            if not source.check:
                continue
            for problem in unprinted(page, marker):
                print(f"{marker.where}: {problem}")
                failed += 1
            for old, new in fresh(marker):
                problems = differences(marker, old, new)
                for problem in problems:
                    print(f"{marker.where}: {problem}")
                failed += bool(problems)
                if problems and args.update and new is not None:
                    pending.append((old, new))
        if pending:
            update(page, pending)
            print(f"{path.relative_to(ROOT)}: {len(pending)} table(s) written; say the run's machine and load")
    return 1 if failed and not args.update else 0


if __name__ == "__main__":
    sys.exit(main())
