"""The documentation site as a reader at 1280 px meets it (mkdocs.yml, docs/stylesheets/extra.css): the API page
gives each function a short heading and its signature as a code block with defaults as values; code blocks wrap
instead of being cut off. Checked by looking at the pages in headless Chromium (the commit that made it says
how); here, the built HTML that look depends on."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra: pip install '.[docs]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    where = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(where)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return where


def heading(page: str, anchor: str) -> str:
    """The text of the heading with this id."""
    found = re.search(rf'<h(\d) id="{re.escape(anchor)}"[^>]*>(.*?)</h\1>', page, re.S)
    assert found, anchor
    return found.group(1) + ":" + " ".join(re.sub(r"<[^>]+>|&para;", " ", found.group(2)).split())


def test_the_api_page_names_each_function_and_shows_its_signature_with_values_below(site):
    page = (site / "api" / "index.html").read_text()
    for name in ("search", "check", "scan", "apply"):
        level, text = heading(page, f"fp16bisect.api.functions.{name}").split(":", 1)
        assert level == "3" and text.split()[-1] == name, text  # the name alone, no parameters
    def signature(anchor: str) -> str:
        found = re.search(r'class="doc-signature[^"]*".*?</div>', page[page.index(f'id="{anchor}"'):], re.S)
        return re.sub(r"<[^>]+>", "", found.group(0))

    assert "judge: Given[Judge] = None" in signature("fp16bisect.api.functions.search")
    tolerance = signature("fp16bisect.tolerance.values.Tolerance")
    assert "atol: float = 0.01" in tolerance and "rtol: float = 0.01" in tolerance
    assert "DEFAULT_ATOL" not in page and "DEFAULT_RTOL" not in page
    # an option record's field: its default, and its help with its flag (scripts/griffe_literal_defaults.py)
    assert "opt_level: int | None = None" in signature("fp16bisect.run.options.Judge") and "option(" not in page
    assert "tensorrt: builder optimisation level (None: 3). The flag <code>--opt-level</code> of search, check." in page


def test_code_blocks_wrap_and_the_contents_leave_the_text_its_width():
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text()
    assert re.search(r"pre > code \{[^}]*white-space: pre-wrap", css)
    assert "- toc.integrate" in (ROOT / "mkdocs.yml").read_text()
