"""The reliability report: ``tests/reliability/README.md``, written only on request.

A test run never rewrites a tracked file. At the end of every run that includes reliability scenarios,
``conftest.py`` saves the rows and the rendered report under the untracked ``.pytest_cache/rmq_reliability/``
(``results.json``, ``README.md``); the hypothesis fuzz of ``tests/unit/protocol/test_fuzz_decoders.py``
saves its counts there too (``hypothesis.json``). The tracked files are written by an explicit command:

* ``python -m tests.reliability.report`` renders ``tests/reliability/README.md`` from the last saved run
  (and copies the last full fuzz counts to ``tests/reliability/fuzz/hypothesis.json``);
* or ``RMQ_WRITE_RELIABILITY_REPORT=1 python -m pytest -m reliability`` writes them at the end of the run.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: the tracked report and fuzz counts
README = HERE / "README.md"
FUZZ_DIR = HERE / "fuzz"
TRACKED_COUNTS = FUZZ_DIR / "hypothesis.json"
#: where every run saves its figures (ignored by git: .pytest_cache/)
OUT_DIR = HERE.parents[1] / ".pytest_cache" / "rmq_reliability"
SAVED_RESULTS = OUT_DIR / "results.json"
SAVED_README = OUT_DIR / "README.md"
SAVED_COUNTS = OUT_DIR / "hypothesis.json"
#: set to 1 to have a test run write the tracked files itself
WRITE_ENV = "RMQ_WRITE_RELIABILITY_REPORT"


def write_requested() -> bool:
    return os.environ.get(WRITE_ENV, "") not in ("", "0")


def save_fuzz_counts(counts: dict[str, Any]) -> Path:
    """Save the hypothesis fuzz counts of a full passing run; returns the file written."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    text = json.dumps(counts, indent=1) + "\n"
    SAVED_COUNTS.write_text(text)
    if write_requested():
        TRACKED_COUNTS.write_text(text)
        return TRACKED_COUNTS
    return SAVED_COUNTS


def save_results(rows: list[dict[str, Any]], profile: str) -> Path:
    """Save a run's rows and rendered report under OUT_DIR (and the tracked README when requested)."""
    run_at = time.strftime("%Y-%m-%d %H:%M:%S")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    saved = {"profile": profile, "run_at": run_at, "rows": rows}
    SAVED_RESULTS.write_text(json.dumps(saved, indent=1) + "\n")
    text = render(rows, profile, run_at, _counts_file())
    SAVED_README.write_text(text)
    if write_requested():
        README.write_text(text)
        return README
    return SAVED_README


def _counts_file() -> Path:
    """The fuzz counts to show: the tracked ones when a run was asked to write them, else the freshest."""
    if write_requested() or not SAVED_COUNTS.exists():
        return TRACKED_COUNTS
    return SAVED_COUNTS


def render(rows: list[dict[str, Any]], profile: str, run_at: str, counts: Path = TRACKED_COUNTS) -> str:
    lines = [
        "# Reliability suite: results",
        "",
        "Generated from a run of the suite by `python -m tests.reliability.report` (or by a run with "
        f"`{WRITE_ENV}=1`); do not edit by hand. A plain test run writes its figures only under "
        "`.pytest_cache/rmq_reliability/` (untracked), see `tests/reliability/report.py`.",
        "",
        "Run it alone: `python -m pytest -m reliability` (short profile, the one CI runs, about 1 min "
        "on 2 cores). Long profile for local runs: `RMQ_RELIABILITY_PROFILE=long python -m pytest -m "
        "reliability` (5x the messages, rounds and fault durations).",
        "",
        "Each scenario sends messages identified by their UNIQ_KEY (`msg_id`) and accounts for every one "
        "of them against what the handlers saw. *lost* must be 0; *duplicates* are extra deliveries "
        "of sent messages (at-least-once); *recovery* is the time from the end of the fault to the last "
        "new message consumed (empty when the scenario has no single fault end). Orderly scenarios also "
        "give *order violations* per queue id (`q0/q1/...`, must be 0: messages a member process consumed "
        "with a lower send index than the previous one it consumed of that queue; the redelivery of an "
        "uncommitted batch by the member that takes a queue over is not one, see "
        "`test_sigkill_orderly.py`) and the *hand-over* (min-max over the kills, from the SIGKILL to the "
        "first consumption by another member of a queue the dead member held: at least the broker lock "
        "expiry, the dead member's locks outlive it).",
        "",
        f"Profile: **{profile}**, run at {run_at}.",
        "",
        "| scenario | sent | consumed | lost | duplicates | order violations | hand-over (s) | recovery (s) "
        "| run (s) | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(rows, key=lambda r: str(r["scenario"])):
        rec = "" if r["recovery_s"] is None else r["recovery_s"]
        lines.append(
            f"| {r['scenario']} | {r['sent']} | {r['consumed']} | {r['lost']} | {r['duplicates']} | "
            f"{r.get('order_violations', '')} | {r.get('handover_s', '')} | {rec} | {r['seconds']} | "
            f"{r['notes']} |"
        )
    lines += fuzz_section(FUZZ_DIR, counts)
    return "\n".join(lines) + "\n"


def _atheris_inputs(results: Path) -> dict[str, dict[str, str]]:
    """``{"ci"|"long": {decoder: inputs tried}}`` from the atheris harness's RESULTS.md tables."""
    out: dict[str, dict[str, str]] = {}
    label = ""
    for line in results.read_text().splitlines():
        if line.startswith("## "):
            label = "ci" if "CI" in line else "long"
        cells = [c.strip() for c in line.strip("|").split("|")]
        if label and line.startswith("|") and len(cells) >= 2 and cells[1].isdigit():
            out.setdefault(label, {})[cells[0]] = cells[1]
    return out


def fuzz_section(fuzz: Path, counts: Path | None = None) -> list[str]:
    """The README's fuzzing part: hypothesis inputs per decoder in the CI unit run next to atheris's."""
    results = fuzz / "RESULTS.md"
    counts = counts if counts is not None else fuzz / "hypothesis.json"
    if not results.exists() and not counts.exists():
        return []
    lines = ["", "## Fuzzing", ""]
    atheris = _atheris_inputs(results) if results.exists() else {}
    hyp: dict[str, Any] = json.loads(counts.read_text()) if counts.exists() else {}
    if hyp:
        lines += [
            "Inputs tried per decoder: the hypothesis fuzz of "
            "`tests/unit/protocol/test_fuzz_decoders.py` (part of "
            f"every CI run; `max_examples={hyp['max_examples']}` per test, counted by the tests themselves, "
            f"last full run {hyp['run_at']}, {hyp['seconds']} s; FrameDecoder.feed is fuzzed by three "
            "tests; fastjson has property tests in `test_fastjson.py`, not counted here) next to the "
            "atheris (coverage-guided) runs of `fuzz/fuzz_decoders.py`. The figures are saved only by "
            "a run where every fuzz test passed: no input raised anything but `ProtocolError`.",
            "",
            "| decoder | hypothesis (CI) | atheris CI run | atheris long run |",
            "|---|---:|---:|---:|",
        ]
        names = sorted(set(hyp["inputs_per_decoder"]) | set(atheris.get("ci", {})))
        for name in names:
            lines.append(
                f"| {name} | {hyp['inputs_per_decoder'].get(name, '-')} | "
                f"{atheris.get('ci', {}).get(name, '-')} | {atheris.get('long', {}).get(name, '-')} |"
            )
        lines.append("")
    if results.exists():
        lines.append("Atheris details (seconds, crashes): [fuzz/RESULTS.md](fuzz/RESULTS.md).")
    return lines


def main() -> int:
    """Write the tracked README (and fuzz counts) from the last run saved under OUT_DIR."""
    if not SAVED_RESULTS.exists():
        print(f"no saved run in {SAVED_RESULTS}: run the suite first (-m reliability)", file=sys.stderr)
        return 1
    saved = json.loads(SAVED_RESULTS.read_text())
    if SAVED_COUNTS.exists():
        shutil.copyfile(SAVED_COUNTS, TRACKED_COUNTS)
    README.write_text(render(saved["rows"], saved["profile"], saved["run_at"], TRACKED_COUNTS))
    print(f"wrote {README}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
