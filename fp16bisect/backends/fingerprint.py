"""A judge command's own account of where it runs: its ``--fingerprint`` output, asked once, recorded verbatim.

The command backend cannot know what runtime, GPU or driver a user's command uses, so it asks: it runs the
command's words before its first placeholder (``python judge.py {model} {outputs}`` -> ``python judge.py``)
followed by ``--fingerprint``, once, for at most ``SECONDS``. When that exits 0 and prints a JSON object, or
only ``key: value`` lines, that is the fingerprint (a JSON object as printed; lines as strings). Anything else
(another exit code, a timeout, other output, no words before the first placeholder) means the command has
none: nothing is recorded beyond the command itself. Never raises.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

FLAG = "--fingerprint"
SECONDS = 10.0  # a fingerprint is a few version lookups, not an evaluation
MAX_BYTES = 64 * 1024


def fingerprint_line(template: str, placeholders) -> str | None:
    """The line asked for the fingerprint: ``template``'s whole words before its first placeholder, then
    ``--fingerprint``; None when no word comes before it."""
    pattern = re.compile(r"(?<!\$)\{(" + "|".join(map(re.escape, placeholders)) + r")\}")
    found = pattern.search(template)
    head = template if found is None else template[:found.start()]
    if found is not None and head and not head[-1].isspace():  # a word like --onnx={model}: drop it whole
        head = head[:max(head.rfind(" "), head.rfind("\t"), head.rfind("\n"), 0)]
    head = " ".join(head.split())
    return f"{head} {FLAG}" if head else None


def parse(text: str) -> dict | None:
    """A JSON object, or ``key: value`` lines, as a dict; None for anything else (or nothing)."""
    text = text.strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            found = json.loads(text)
        except ValueError:
            return None
        return found if isinstance(found, dict) and found else None
    found = {}
    for line in filter(None, (line.strip() for line in text.splitlines())):
        key, colon, value = line.partition(":")
        if not colon or not key.strip():
            return None
        found[key.strip()] = value.strip()
    return found


def ask(template: str, placeholders, seconds: float = SECONDS) -> dict | None:
    """The command's fingerprint (see the module's docstring), or None."""
    line = fingerprint_line(template, placeholders)
    if line is None:
        return None
    try:
        process = subprocess.Popen(line, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
    try:
        out, _ = process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the shell and what it started: its own session
        except OSError:
            pass
        process.communicate()
        return None
    if process.returncode != 0 or len(out) > MAX_BYTES:
        return None
    return parse(out.decode("utf-8", "replace"))
