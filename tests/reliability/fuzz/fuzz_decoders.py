"""Coverage-guided fuzzing of the decoders with atheris (libFuzzer); runs only when asked.

Usage: ``python tests/reliability/fuzz/fuzz_decoders.py DECODER [-runs=N] [-max_len=65536]`` with
DECODER one of ``frame_decoder``, ``decode_frame``, ``decode_messages``, ``fastjson``; or ``all``
with ``--runs N`` to run each in a child process and rewrite ``RESULTS.md`` (``--label ci|long``).
A decoder may raise only our ``ProtocolError``; anything else is a crash (libFuzzer keeps the input).
Inputs are seeded from the wire captures. Hangs are caught by ``-timeout`` (default 5 s per input),
unbounded allocation by ``-rss_limit_mb`` / ``-malloc_limit_mb``.
"""

from __future__ import annotations

import atexit
import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

DECODERS = ["frame_decoder", "decode_frame", "decode_messages", "fastjson"]


def seeds(corpus: Path) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    if any(corpus.iterdir()):
        return
    for i, f in enumerate(sorted((ROOT / "tests" / "fixtures").glob("*.jsonl"))):
        for j, line in enumerate(f.read_text().splitlines()[:40]):
            frame = bytes.fromhex(json.loads(line)["frame_hex"])
            (corpus / f"seed-{i}-{j}").write_bytes(frame[:65536])


def run_one(name: str, argv: list[str]) -> None:
    import atheris

    with atheris.instrument_imports():
        from rmq_async.errors import ProtocolError
        from rmq_async.protocol import fastjson
        from rmq_async.protocol.command import FrameDecoder, decode_frame
        from rmq_async.protocol.stored import decode_messages

    count = [0]

    def target(data: bytes) -> None:
        count[0] += 1
        try:
            if name == "frame_decoder":
                dec = FrameDecoder(1 << 20)
                cut = data[0] % (len(data) or 1) if data else 0
                dec.feed(data[:cut])
                dec.feed(data[cut:])
            elif name == "decode_frame":
                decode_frame(data)
            elif name == "decode_messages":
                decode_messages(data)
            else:
                fastjson.loads(data)
        except ProtocolError:
            pass

    atexit.register(lambda: print(f"FUZZ-INPUTS {name} {count[0]}", flush=True))
    corpus = HERE / "corpus" / name
    seeds(corpus)
    atheris.Setup([sys.argv[0], *argv, str(corpus)], target)
    atheris.Fuzz()


def run_all(runs: int, label: str) -> None:
    rows = []
    for name in DECODERS:
        t0 = time.monotonic()
        p = subprocess.run(
            [
                sys.executable,
                __file__,
                name,
                f"-runs={runs}",
                "-max_len=65536",
                "-timeout=5",
                "-rss_limit_mb=1024",
                "-malloc_limit_mb=256",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        m = re.search(r"Done (\d+) runs", p.stdout + p.stderr)
        crashed = p.returncode != 0
        rows.append((name, int(m.group(1)) if m else 0, round(time.monotonic() - t0, 1), crashed))
        if crashed:
            print(p.stderr[-3000:], file=sys.stderr)
    out = HERE / "RESULTS.md"
    text = out.read_text() if out.exists() else "# Atheris fuzzing of the decoders\n\n"
    text = re.sub(rf"\n## {label}\n.*?(?=\n## |\Z)", "\n", text, flags=re.S).rstrip() + "\n"
    text += f"\n## {label}\n\nRun {time.strftime('%Y-%m-%d %H:%M')}, `--runs {runs}` per decoder.\n\n"
    text += "| decoder | inputs tried | seconds | crashes/hangs/OOM |\n|---|---:|---:|---:|\n"
    text += "".join(f"| {n} | {c} | {s} | {int(x)} |\n" for n, c, s, x in rows)
    out.write_text(text)
    print(text)
    if any(r[3] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    if sys.argv[1] == "all":
        runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 20000
        label = sys.argv[sys.argv.index("--label") + 1] if "--label" in sys.argv else "ci"
        run_all(runs, label)
    else:
        run_one(sys.argv[1], sys.argv[2:])
