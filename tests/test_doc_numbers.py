"""The documentation's measured numbers name what regenerates them, and the cheap ones still come out as printed
(issue 41 item 6): ``scripts/doc_numbers.py`` reads the ``<!-- numbers: ... -->`` markers; docs/benchmarks.md says
their form. No timings are compared: a marker's ``varies:`` leaves those columns out."""

from __future__ import annotations

import sys
import textwrap

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import doc_numbers  # noqa: E402  (a script, not a module of the package)

PAGES = [doc_numbers.read(path) for path in doc_numbers.pages()]
MARKERS = [marker for page in PAGES for marker in page.markers]


def uncovered(page: doc_numbers.Page) -> list[str]:
    """The tables of measured numbers and the sentences counting evaluations or nodes that follow no marker."""
    found = [f"{page.path.name}:{t.line}: a table of {' | '.join(t.header)[:60]}" for t in page.tables
             if t.measured and page.covering(t.line) is None]
    return found + [f"{page.path.name}:{line}: {text!r}" for line, text in page.counts()
                    if page.covering(line) is None]


def page_of(tmp_path, text: str) -> doc_numbers.Page:
    path = tmp_path / "page.md"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return doc_numbers.read(path)


def test_every_measured_number_in_the_docs_follows_a_marker_naming_its_source():
    # README.md is the orchestrator's to edit (its markers, once there, are checked like any page's)
    missing = [line for page in PAGES if page.path.name != "README.md" for line in uncovered(page)]
    assert not missing, ("measured numbers with no '<!-- numbers: SOURCE -->' before them (docs/benchmarks.md, "
                         "'How the numbers are made'):\n" + "\n".join(missing))


def test_every_marker_names_a_script_or_a_test_that_exists():
    problems = [f"{m.where}: {problem}" for m in MARKERS if (problem := m.source.problem())]
    assert not problems, "\n".join(problems)
    assert sum(m.source.check for m in MARKERS) >= 4  # the guide pages' and the search's tables at least


def test_the_numbers_no_test_reruns_are_listed_with_their_command_in_the_benchmarks_page():
    listed = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split("## How the numbers are made")[1]
    listed = listed.split("\n## ")[0]
    scripts = {m.source.words[1] for m in MARKERS
               if not m.source.check and m.source.commit is None and m.source.words[0] == "python"}
    assert scripts and not {s for s in scripts if f"python {s}" not in listed}, scripts


def test_a_table_or_a_count_with_no_marker_is_found(tmp_path):
    page = page_of(tmp_path, """\
        # Page

        The defaults keep 2 of 41 nodes in 4 evaluations; at most 100 evaluations by default.

        | model | evaluations |
        |---|---:|
        | transformer_block | 4 |

        | flag | default |
        |---|---|
        | --atol | 0.01 |
        """)
    assert uncovered(page) == ["page.md:5: a table of model | evaluations",
                               "page.md:3: '2 of 41 nodes; 4 evaluations'"]
    covered = page_of(tmp_path, """\
        ## Section

        <!-- numbers: python scripts/bench_guide.py --pages quickstart | check -->

        The defaults keep 2 of 41 nodes in 4 evaluations.

        ## Next

        It took 9 evaluations.
        """)
    assert uncovered(covered) == ["page.md:9: '9 evaluations'"]  # a marker ends at the next heading of its level


def test_a_marker_with_an_unknown_field_or_a_missing_script_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown field 'cheap'"):
        doc_numbers.Source.parse("python scripts/bench_guide.py | cheap")
    assert doc_numbers.Source.parse("python scripts/bench_nothing.py").problem() == \
        "scripts/bench_nothing.py does not exist"
    assert doc_numbers.Source.parse("at 1e2f1b7: python scripts/bench_nothing.py").problem() is None
    assert "not at an older commit" in doc_numbers.Source.parse("at 1e2f1b7: python scripts/bench_guide.py | "
                                                                 "check").problem()


def test_a_checked_table_that_no_longer_matches_its_source_is_reported_apart_from_what_varies(tmp_path):
    page = page_of(tmp_path, """\
        <!-- numbers: python scripts/bench_guide.py --pages quickstart | check | varies: seconds -->

        | model | evaluations | seconds |
        |---|---:|---:|
        | transformer_block | 5 | 0.1 |
        | cnn_batchnorm | 4 | 0.2 |
        """)
    (marker,) = page.markers
    (table,) = marker.tables
    printed = doc_numbers.tables("| model | evaluations | seconds |\n|---|---:|---:|\n"
                                 "| transformer_block | 4 | 9.9 |\n| cnn_batchnorm | 4 | 0.3 |\n")[0]
    assert doc_numbers.differences(marker, table, printed) == [
        "line 5: the page says transformer_block | 5; now transformer_block | 4"]


CHECKED = [m for m in MARKERS if m.source.check]


@pytest.mark.slow
@pytest.mark.parametrize("marker", CHECKED, ids=[m.where for m in CHECKED])
def test_the_cheap_numbers_come_out_of_their_source_as_the_page_gives_them(marker):
    page = next(page for page in PAGES if marker in page.markers)
    problems = [p for old, new in doc_numbers.fresh(marker) for p in doc_numbers.differences(marker, old, new)]
    problems += doc_numbers.unprinted(page, marker)
    assert not problems, (f"{marker.source.command} now prints other numbers than {marker.where} gives "
                          "(python scripts/doc_numbers.py --update writes them; say what moved in the CHANGELOG):\n"
                          + "\n".join(problems))
