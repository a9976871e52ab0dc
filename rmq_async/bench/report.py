"""Aggregation and output for the benchmark harness: summary lines, the human table, plots, profiles.

Strategy: pure functions over the per-run dicts the workers print. A summary is one JSON-ready dict
per (scenario, loop) with medians and min-max spread; fields that do not apply are None. Plots use
matplotlib (the ``bench`` extra), imported lazily with the Agg backend; without it the harness says
so and writes everything else.
"""

from __future__ import annotations

import itertools
import pstats
import re
from collections.abc import Sequence
from io import StringIO
from pathlib import Path
from typing import Any

from .machine import spread

__all__ = ["format_stage_table", "format_table", "paired_ratio", "plot", "profile_text", "summarize"]

_SHORTEN = re.compile(r"\S*/(rmq_async|anyio|asyncio|sniffio|sortedcontainers)/")

_EXTRA = (
    "cpu_us_per_msg",
    "born_p50_ms",
    "born_p99_ms",
    "offered_msgs_per_s",
    "target_rate",
    "max_cached_msgs",
    "max_cached_mb",
    "rss_before_mb",
    "startup_s",
    "join_s",
    "leave_s",
    "a_released_s",
    "b_startup_s",
)


def _round(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 1) if abs(x) >= 100 else round(x, 3)
    if isinstance(x, list):
        return [_round(v) for v in x]
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    return x


def summarize(scenario: str, loop: str, namesrv: str, runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One summary for a scenario on one loop: medians over the runs, with min and max."""
    ok = [r for r in runs if "error" not in r and "skipped" not in r]
    skipped = next((r["skipped"] for r in runs if "skipped" in r), None)
    rate = spread([r.get("msgs_per_s") for r in ok])
    out: dict[str, Any] = {
        "scenario": scenario,
        "msgs_per_s": rate["median"],
        "msgs_per_s_min": rate["min"],
        "msgs_per_s_max": rate["max"],
        "runs": [
            {
                k: r.get(k)
                for k in ("msgs_per_s", "p50_ms", "p99_ms", "peak_rss_mb", "seconds", *_EXTRA)
                if k in r
            }
            for r in ok
        ],
        "p50_ms": spread([r.get("p50_ms") for r in ok])["median"],
        "p99_ms": spread([r.get("p99_ms") for r in ok])["median"],
        "peak_rss_mb": spread([r.get("peak_rss_mb") for r in ok])["median"],
        "loop": loop,
        "namesrv": namesrv,
        "skipped": skipped,
        "errors": [r["error"] for r in runs if "error" in r],
    }
    for k in _EXTRA:
        vals = [r.get(k) for r in ok if r.get(k) is not None]
        if vals:
            s = spread(vals)
            out[k] = s["median"]
            if k in ("join_s", "leave_s"):
                out[k + "_min"], out[k + "_max"] = s["min"], s["max"]
    lat = [r for r in ok if r.get("stages")]
    if lat:  # the latency scenario: each cell the median over the runs
        out["store_to_handler"] = _median_cells([r.get("store_to_handler") or {} for r in lat])
        out["stages"] = {
            name: _median_cells([r["stages"].get(name) or {} for r in lat]) for name in lat[0]["stages"]
        }
        out["client_over_100ms"] = max(r.get("client_over_100ms") or 0 for r in lat)
        out["missing"] = max(r.get("missing") or 0 for r in lat)
        out["gc_max_ms"] = max((r.get("gc") or {}).get("max_ms") or 0.0 for r in lat)
    rounded: dict[str, Any] = _round(out)
    return rounded


def _median_cells(cells: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Cell by cell (``p50``, ``max``, ...), the median over the runs of the values they have."""
    keys = [k for c in cells for k in c]
    return {k: spread([c.get(k) for c in cells])["median"] for k in dict.fromkeys(keys)}


def paired_ratio(
    push_runs: Sequence[dict[str, Any]], raw_runs: Sequence[dict[str, Any]]
) -> dict[str, float | None]:
    """Push against raw-pull over paired runs (run r of each, run back to back on one loop):
    ``vs_raw_pull``, the median of push / raw-pull msgs/s, with ``vs_raw_pull_min`` / ``_max`` (the
    spread of those per-pair ratios: on a shared machine one pair moves by +-0.15, so a median of a
    few pairs is only as good as that spread says) and ``vs_raw_pull_pairs`` (how many); and
    ``vs_raw_pull_cpu``, the median of raw-pull / push consumer CPU per message (above 1: push spends
    less). Pairs where either run failed, was skipped or lacks the value are left out; None when no
    pair is left (or raw-pull was not run)."""
    rates: list[float | None] = []
    cpus: list[float | None] = []
    for push, raw in zip(push_runs, raw_runs, strict=False):
        if any("error" in x or "skipped" in x for x in (push, raw)):
            continue
        p_rate, r_rate = push.get("msgs_per_s"), raw.get("msgs_per_s")
        if isinstance(p_rate, (int, float)) and isinstance(r_rate, (int, float)) and r_rate > 0:
            rates.append(p_rate / r_rate)
        p_cpu, r_cpu = push.get("cpu_us_per_msg"), raw.get("cpu_us_per_msg")
        if isinstance(p_cpu, (int, float)) and isinstance(r_cpu, (int, float)) and p_cpu > 0:
            cpus.append(r_cpu / p_cpu)
    r = spread(rates)
    out: dict[str, float | None] = {
        "vs_raw_pull": r["median"],
        "vs_raw_pull_min": r["min"],
        "vs_raw_pull_max": r["max"],
        "vs_raw_pull_pairs": len(rates) or None,
        "vs_raw_pull_cpu": spread(cpus)["median"],
    }
    rounded: dict[str, float | None] = _round(out)
    return rounded


def _num(x: Any, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def format_table(summaries: Sequence[dict[str, Any]], *, markdown: bool = False) -> str:
    """A fixed-width table of the summaries (what the harness prints and writes as table.txt), or a
    Markdown table (table.md)."""
    head = ("scenario", "loop", "msgs/s (median)", "min-max", "p50 ms", "p99 ms", "peak RSS MB", "notes")
    rows: list[tuple[str, ...]] = []
    for s in summaries:
        notes: list[str] = []
        if s.get("skipped"):
            notes.append("skipped: " + s["skipped"])
        if s.get("errors"):
            notes.append(f"{len(s['errors'])} run(s) failed: {s['errors'][0]}")
        if s.get("cpu_us_per_msg") is not None and s["scenario"] in ("push", "raw-pull", "push-orderly"):
            notes.append(f"consumer CPU {s['cpu_us_per_msg']:.2f} us/msg")
        if s.get("vs_raw_pull") is not None:
            cpu = s.get("vs_raw_pull_cpu")
            pairs = s.get("vs_raw_pull_pairs")
            lo, hi = s.get("vs_raw_pull_min"), s.get("vs_raw_pull_max")
            notes.append(
                f"push/raw {s['vs_raw_pull']:.2f} ("
                + (f"{pairs} paired runs {lo:.2f}-{hi:.2f}" if pairs and lo is not None else "paired runs")
                + (f"; CPU {cpu:.2f})" if cpu is not None else ")")
            )
        if s.get("offered_msgs_per_s") is not None:
            notes.append(
                f"offered {s['offered_msgs_per_s']:,.0f}/s; born p50/p99 "
                f"{_num(s.get('born_p50_ms'), '.1f')}/{_num(s.get('born_p99_ms'), '.1f')} ms"
            )
        if s.get("max_cached_msgs") is not None and s["scenario"] == "backlog":
            notes.append(
                f"max cached {s['max_cached_msgs']:,} msgs / {s['max_cached_mb']:.1f} MiB; "
                f"RSS before start {_num(s.get('rss_before_mb'), '.1f')} MB"
            )
        if s.get("join_s") is not None:
            notes.append(
                f"join {s['join_s']:.2f} s ({s['join_s_min']:.2f}-{s['join_s_max']:.2f}), "
                f"leave {_num(s.get('leave_s'), '.2f')} s ({_num(s.get('leave_s_min'), '.2f')}-"
                f"{_num(s.get('leave_s_max'), '.2f')})"
            )
        rows.append(
            (
                s["scenario"],
                s["loop"],
                _num(s["msgs_per_s"]),
                f"{_num(s['msgs_per_s_min'])}-{_num(s['msgs_per_s_max'])}" if s["msgs_per_s"] else "-",
                _num(s["p50_ms"], ".1f"),
                _num(s["p99_ms"], ".1f"),
                _num(s["peak_rss_mb"], ".1f"),
                "; ".join(notes),
            )
        )
    if markdown:
        md = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * 5 + "---|"]
        return "\n".join(md + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


_STAGE_STATS = ("p50", "p90", "p99", "p99.9", "max")


def format_stage_table(summaries: Sequence[dict[str, Any]]) -> str:
    """For each latency summary: store -> handler over every message, then each stage interval over
    the sampled pulled batches (ms: p50, p90, p99, p99.9, max, and how many samples); empty when
    no summary has stages."""
    blocks: list[str] = []
    for s in summaries:
        stages = s.get("stages")
        if not stages:
            continue
        rate = s.get("target_rate")
        title = f"{s['scenario']} / {s['loop']}" + (f" at {rate:,.0f} msgs/s" if rate else "")
        title += f", offered {_num(s.get('offered_msgs_per_s'))}/s"
        rows = [("store -> handler, every message", s.get("store_to_handler") or {})]
        rows += [(name.replace("_to_", " -> ").replace("_", " "), cell) for name, cell in stages.items()]
        head = ("stage (ms)", *_STAGE_STATS, "samples")
        body = [
            (label, *(_num(cell.get(k), ".3f") for k in _STAGE_STATS), _num(cell.get("count")))
            for label, cell in rows
        ]
        widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(head)]
        lines = [title, "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in body]
        lines.append(
            f"sampled batches over 100 ms (socket read -> handler): {s.get('client_over_100ms', 0)}; "
            f"missing messages: {s.get('missing', 0)}; longest GC pause {_num(s.get('gc_max_ms'), '.1f')} ms"
        )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def profile_text(path: str | Path, top: int = 15) -> str:
    """The top entries of a pstats file, by own time and by cumulative time, paths shortened."""

    def table(key: str) -> str:
        buf = StringIO()
        pstats.Stats(str(path), stream=buf).sort_stats(key).print_stats(top)
        lines = buf.getvalue().splitlines()
        start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
        body = [ln for ln in lines[start:] if ln.strip()]
        return "\n".join(_SHORTEN.sub(r"\1/", ln) for ln in body)

    return f"By own time (tottime):\n{table('tottime')}\n\nBy cumulative time:\n{table('cumulative')}\n"


def plot(
    results: dict[tuple[str, str], list[dict[str, Any]]], out: Path, *, cdf_file: str | Path | None = None
) -> list[str]:
    """Throughput over time, latency CDF and RSS over time, as PNGs in ``out`` (the CDF also to
    ``cdf_file`` when given); returns the files written (an empty list, with the reason on stderr,
    when matplotlib is not installed)."""
    try:
        import importlib

        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        import sys

        print("rmq-async bench: no plots (pip install 'rmq_async[bench]' for matplotlib)", file=sys.stderr)
        return []
    written: list[str] = []

    def first_ok(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
        return next((r for r in runs if "error" not in r and "skipped" not in r), None)

    series = {k: first_ok(v) for k, v in results.items()}
    tl = {k: r["timeline"] for k, r in series.items() if r and len(r.get("timeline") or []) > 2}
    if tl:
        fig, ax = plt.subplots(figsize=(9, 5))
        for (sc, lp), rows in sorted(tl.items()):
            ts = [r[0] for r in rows]
            rates = [0.0] + [(b[1] - a[1]) / max(1e-9, b[0] - a[0]) for a, b in itertools.pairwise(rows)]
            ax.plot(ts, rates, label=f"{sc} / {lp}", linewidth=1)
        ax.set(xlabel="seconds since consumer start", ylabel="messages / s", title="Throughput (run 1)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "throughput.png", dpi=110)
        plt.close(fig)
        written.append("throughput.png")
    lat = {k: r for k, r in series.items() if r and r.get("samples_store_ms")}
    if lat:
        fig, ax = plt.subplots(figsize=(9, 5))
        curves = (
            ("samples_store_ms", "-", "store->handler"),
            ("samples_born_ms", "--", "born->handler"),
            ("samples_client_ms", ":", "socket read->handler (sampled batches)"),
        )
        for (label, lp), r in sorted(lat.items()):
            for key, style, what in curves:
                xs = [x for x in r.get(key) or [] if x > 0]  # (a log axis)
                if xs:
                    ys = [(i + 1) / len(xs) for i in range(len(xs))]
                    ax.plot(xs, ys, style, label=f"{label} / {lp}: {what}", linewidth=1)
        ax.set_xscale("log")
        ax.set(xlabel="ms (log)", ylabel="fraction", title="Latency CDF (run 1)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "latency_cdf.png", dpi=110)
        written.append("latency_cdf.png")
        if cdf_file is not None:
            fig.savefig(cdf_file, dpi=110)
            written.append(str(cdf_file))
        plt.close(fig)
    mem = {k: v for k, v in tl.items() if k[0] == "backlog"}
    if mem:
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
        for (_, lp), rows in sorted(mem.items()):
            ax1.plot([r[0] for r in rows], [r[2] for r in rows], label=f"RSS, {lp}", linewidth=1)
            ax2.plot(
                [r[0] for r in rows], [r[4] / 2**20 for r in rows], label=f"cached bodies, {lp}", linewidth=1
            )
        ax1.set(ylabel="RSS MiB", title="Backlog drain: memory over time (run 1)")
        ax2.set(xlabel="seconds since consumer start", ylabel="cached MiB")
        ax1.legend(fontsize=8)
        ax2.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "rss.png", dpi=110)
        plt.close(fig)
        written.append("rss.png")
    return written
