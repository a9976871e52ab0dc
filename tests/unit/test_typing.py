"""A user's script under mypy --strict, without the pydantic plugin: what it sees of the public API.

The package is found through MYPYPATH, one of the README's two set-ups: as a source tree, so its own
modules are checked too, under the user's plain ``--strict`` (no pydantic plugin, no overrides for
untyped third-party packages): nothing may be reported inside the package either. The other set-up, an
editable install in compat mode, is a path entry in site-packages: an installed, ``py.typed`` package,
whose own modules mypy does not report on.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

USER_SCRIPT = """\
from rmq_async import ConsumeResult, ConsumerConfig, LitePullConfig, LitePullConsumer, Message, Producer
from rmq_async import PushConsumer, Timing
from rmq_async.spark.options import parse_options


async def main() -> None:
    c = PushConsumer("g", namesrv_addr="127.0.0.1:9876", subscriptions={"T": "*"}, concurrency=4)
    async with c, c.deliveries() as stream:
        async for d in stream:
            reveal_type(d)  # line 10
            reveal_type(d.message)  # line 11
            await d.ack()
            await d.retry(delay_level=0)
    reveal_type(c.health().lag)  # line 14
    PushConsumer("g", concurrency="4")  # line 15: refused
    PushConsumer("g", concurency=4)  # line 16: refused
    ConsumerConfig(group="g", pull_batch_size=8)  # defaults seen without the pydantic plugin
    LitePullConfig(group="g")
    Timing(request_timeout=1.0)
    parse_options({"namesrv": "n:9876", "topic": "T", "secretKey": "s", "accessKey": "a"}, streaming=True)
    print(ConsumeResult.SUCCESS, Message("T", b"x"), Producer("p"), LitePullConsumer("g"))
"""


def _compat_install(tmp_path: Path) -> Path:
    """A Python environment where the checkout is installed as ``pip install -e . --config-settings
    editable_mode=compat`` installs it: a ``.pth`` path entry in site-packages (with this environment's
    packages as further entries). Returns its interpreter."""
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=60)
    py = env_dir / "bin" / "python"
    site_dir = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    ours = [p for p in sys.path if p.endswith("site-packages")]
    (Path(site_dir) / "__editable__rmq_async.pth").write_text("\n".join([str(ROOT), *ours]) + "\n")
    return py


@pytest.mark.timeout(120)
@pytest.mark.parametrize("setup", ["MYPYPATH", "editable compat"])
def test_a_user_script_sees_delivery_and_message_types_and_option_types(tmp_path: Path, setup: str) -> None:
    pytest.importorskip("mypy")
    script = tmp_path / "user.py"
    script.write_text(USER_SCRIPT)
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n")  # no plugins: a user's plain mypy --strict
    env = {k: v for k, v in os.environ.items() if k != "MYPYPATH"}
    cmd = [sys.executable, "-m", "mypy", "--strict", "--config-file", str(config)]
    if setup == "MYPYPATH":
        env["MYPYPATH"] = str(ROOT)
    else:
        cmd += ["--python-executable", str(_compat_install(tmp_path))]
    cmd += ["--cache-dir", str(tmp_path / "cache"), "--no-error-summary", "--hide-error-context", str(script)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=110).stdout
    mine: dict[int, list[str]] = {}
    for line in out.splitlines():
        m = re.match(r".*user\.py:(\d+): (\w+): (.*)", line)
        if m:
            mine.setdefault(int(m.group(1)), []).append(f"{m.group(2)}: {m.group(3)}")
    inside = [line for line in out.splitlines() if "rmq_async" in line.split(":")[0]]
    assert inside == [], out  # the package itself is clean under a user's plain --strict
    assert mine.pop(10) == ['note: Revealed type is "rmq_async.consumer.delivery.Delivery"'], out
    assert mine.pop(11) == ['note: Revealed type is "rmq_async.protocol.stored.MessageExt"'], out
    assert mine.pop(14) == ['note: Revealed type is "int | None"'], out
    (concurrency,) = mine.pop(15)
    assert (
        'Argument "concurrency" to "PushConsumer" has incompatible type "str"; expected "int"' in concurrency
    )
    assert any('Unexpected keyword argument "concurency"' in e for e in mine.pop(16)), out
    assert mine == {}, out  # nothing else: the config models' defaults, deliveries(), d.ack() typed


def test_push_consumer_keyword_options_are_the_config_fields_with_their_defaults() -> None:
    import inspect

    from rmq_async import ConsumerConfig, PushConsumer
    from rmq_async.config import CONSUMER_OPTION_DEFAULTS

    params = inspect.signature(PushConsumer).parameters
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())  # no **options
    fields = {n: f.default for n, f in ConsumerConfig.model_fields.items() if n != "group"}
    assert fields == CONSUMER_OPTION_DEFAULTS
    assert {n: params[n].default for n in fields} == fields  # the same names and defaults, no drift
