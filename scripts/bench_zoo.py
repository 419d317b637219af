#!/usr/bin/env python
"""Big models: fp16bisect's memory and time against a plain ONNX Runtime session (issue: big models).

    python scripts/export_zoo.py            # dev-only venv (torch, transformers, diffusers): writes build/zoo/
    for m in bert_base gpt2_medium vit_b16; do
        python scripts/plant_overflow.py build/zoo/$m.onnx build/zoo/$m.npz build/zoo/${m}_planted.onnx; done
    for m in sd_vae_decoder sd15_unet; do    # about a third of the way in (random weights: small activations)
        python scripts/plant_overflow.py build/zoo/$m.onnx build/zoo/$m.npz build/zoo/${m}_planted.onnx --margin 2; done
    python scripts/bench_zoo.py [--models bert_base gpt2_medium ...] [--zoo build/zoo] [--skip-scan]

For each model NAME of the zoo (``NAME.onnx``, ``NAME.npz``, ``NAME_planted.onnx`` from
``scripts/plant_overflow.py``), in fresh processes, one at a time:

* plain: ``scripts/plain_ort.py`` (an ``InferenceSession`` from the file, one run): session + run seconds,
  the process's peak RSS (medians of 3 processes);
* search: ``fp16bisect search NAME_planted.onnx --inputs NAME.npz`` on the emulate backend: seconds from
  the process's start to the line of its first evaluation, its peak RSS, the evaluations, the answer (the
  planted pair ``planted_up``, ``planted_down`` is the known answer) and each stage's seconds as it printed
  them;
* scan: ``fp16bisect scan NAME.onnx --inputs NAME.npz``: seconds and peak RSS.

Targets (the issue): peak RSS of search and scan at most 2x plain's, time to the first evaluation at most 4x
plain's session + run. Prints a Markdown table; ``--json`` writes the rows too. Peak RSS is the kernel's
``ru_maxrss`` of the process (``os.wait4``), file-backed pages it touched included.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["bert_base", "vit_b16", "sd_vae_decoder", "gpt2_medium", "sd15_unet"]
FP16BISECT = str(Path(sys.executable).parent / "fp16bisect")  # the console script of this environment
PLANTED = {"planted_up", "planted_down"}


def measure(argv: list[str], on_line=None) -> tuple[float, int, int, list[tuple[float, str]]]:
    """Run ``argv``; (seconds, peak RSS in bytes, exit code, [(seconds since start, stderr line)])."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    lines: list[tuple[float, str]] = []

    def read_stderr():
        for line in proc.stderr:
            lines.append((time.perf_counter() - start, f"[{_peak_so_far(proc.pid)}] " + line.rstrip("\n")))
            if on_line:
                on_line(lines[-1])

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        print(out[-2000:], "\n".join(t for _, t in lines[-20:]), file=sys.stderr)
    lines.append((seconds, "stdout: " + out.strip().splitlines()[-1] if out.strip() else ""))
    return seconds, usage.ru_maxrss * 1024, proc.returncode, lines


def _peak_so_far(pid: int) -> str:
    """The process's peak RSS so far (VmHWM), in GiB, as a line arrives."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "?"
    found = re.search(r"VmHWM:\s+(\d+) kB", status)
    return f"{int(found.group(1)) / 2**20:.2f} GiB" if found else "?"


def plain(model: Path, inputs: Path, repeats: int = 3) -> dict:
    """The median of ``repeats`` fresh processes (ONNX Runtime's session set-up varies by 2x from run to run)."""
    rows = []
    for _ in range(repeats):
        seconds, peak, code, lines = measure([sys.executable, str(ROOT / "scripts" / "plain_ort.py"), str(model),
                                              str(inputs)])
        session, run = (float(x) for x in lines[-1][1].split()[-2:])
        rows.append({"session_s": session, "run_s": run, "plain_s": session + run, "plain_rss": peak,
                     "plain_wall_s": seconds})
    rows.sort(key=lambda r: r["plain_s"])
    middle = dict(rows[len(rows) // 2])
    middle["plain_s_all"] = [round(r["plain_s"], 2) for r in rows]
    middle["plain_rss"] = sorted(r["plain_rss"] for r in rows)[len(rows) // 2]
    return middle


def search(model: Path, inputs: Path, out: Path) -> dict:
    argv = [FP16BISECT, "search", str(model), "--inputs", str(inputs), "-o", str(out),
            "--restart"]
    seconds, peak, code, lines = measure(argv, on_line=lambda line: print(f"    {line[0]:7.1f} s  {line[1][:150]}",
                                                                         file=sys.stderr, flush=True))
    first = next((t for t, text in lines if re.search(r"evaluation 1 on ", text)), None)
    stages = {m.group(1): float(m.group(2)) for _, text in lines
              if (m := re.match(r"\[[^]]*\] fp16bisect: (.*): ([0-9.]+) s$", text))}
    row = {"search_s": seconds, "first_eval_s": first, "search_rss": peak, "exit": code, "stages": stages}
    if code == 0:
        data = json.loads(out.read_text())
        row["evaluations"] = data["search"]["evaluations"]
        row["answer"] = sorted(n["name"] for n in data["fp32_nodes"])
        row["candidates"] = data["search"].get("candidates")
    return row


def scan(model: Path, inputs: Path) -> dict:
    seconds, peak, code, _ = measure([FP16BISECT, "scan", str(model), "--inputs", str(inputs)])
    return {"scan_s": seconds, "scan_rss": peak, "scan_exit": code}


def gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def table(rows: list[dict]) -> str:
    head = ("| model | file GB | candidates | plain s (session+run) | plain GiB | first evaluation s | ratio (<= 4) "
            "| search GiB | ratio (<= 2) | scan GiB | ratio (<= 2) | evaluations | answer | planted pair |")
    lines = [head, "|" + "|".join("---" for _ in range(14)) + "|"]
    for r in rows:
        first = r.get("first_eval_s")
        lines.append("| " + " | ".join([
            r["model"], f"{r['file_bytes'] / 1e9:.2f}", str(r.get("candidates", "?")),
            f"{r['plain_s']:.1f} ({r['session_s']:.1f}+{r['run_s']:.1f})", gib(r["plain_rss"]),
            f"{first:.1f}" if first else "-", f"{first / r['plain_s']:.1f}" if first else "-",
            gib(r["search_rss"]), f"{r['search_rss'] / r['plain_rss']:.1f}",
            gib(r["scan_rss"]) if "scan_rss" in r else "-",
            f"{r['scan_rss'] / r['plain_rss']:.1f}" if "scan_rss" in r else "-",
            str(r.get("evaluations", "-")), ", ".join(r.get("answer", [])) or "(none)",
            "found" if set(r.get("answer", [])) == PLANTED else "NOT found",
        ]) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--zoo", default=str(ROOT / "build" / "zoo"))
    parser.add_argument("--skip-scan", action="store_true")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    zoo = Path(args.zoo)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-zoo-") as tmp:
        for name in args.models:
            model, planted, inputs = zoo / f"{name}.onnx", zoo / f"{name}_planted.onnx", zoo / f"{name}.npz"
            if not planted.exists():
                print(f"{name}: {planted} missing (run scripts/export_zoo.py and scripts/plant_overflow.py)",
                      file=sys.stderr)
                continue
            data = model.with_suffix(".onnx.data")
            row = {"model": name, "file_bytes": model.stat().st_size + (data.stat().st_size if data.exists() else 0)}
            print(f"{name}: plain ONNX Runtime", file=sys.stderr, flush=True)
            row.update(plain(model, inputs))
            print(f"{name}: search (planted)", file=sys.stderr, flush=True)
            row.update(search(planted, inputs, Path(tmp) / f"{name}.json"))
            if not args.skip_scan:
                print(f"{name}: scan", file=sys.stderr, flush=True)
                row.update(scan(model, inputs))
            rows.append(row)
            print(table([row]).splitlines()[-1], file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
