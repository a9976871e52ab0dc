"""A user's script under mypy --strict, without the pydantic plugin: what it sees of the public API (#25).

The package is found through MYPYPATH (as a source tree: its own modules are checked too, so only the
script's lines are looked at); an installed copy is found through its ``py.typed``.
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
from rmq_async import ConsumerConfig, LitePullConfig, PushConsumer, Timing


async def main() -> None:
    c = PushConsumer("g", namesrv_addr="127.0.0.1:9876", subscriptions={"T": "*"}, concurrency=4)
    async with c, c.deliveries() as stream:
        async for d in stream:
            reveal_type(d)  # line 8
            reveal_type(d.message)  # line 9
            await d.ack()
            await d.retry(delay_level=0)
    reveal_type(c.health().lag)  # line 12
    PushConsumer("g", concurrency="4")  # line 13: refused
    PushConsumer("g", concurency=4)  # line 14: refused
    ConsumerConfig(group="g", pull_batch_size=8)  # defaults seen without the pydantic plugin
    LitePullConfig(group="g")
    Timing(request_timeout=1.0)
"""


@pytest.mark.timeout(120)
def test_a_user_script_sees_delivery_and_message_types_and_option_types(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    script = tmp_path / "user.py"
    script.write_text(USER_SCRIPT)
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n")  # no plugins: a user's plain mypy --strict
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "mypy", "--strict", "--config-file", str(config)]
    cmd += ["--cache-dir", str(tmp_path / "cache"), "--no-error-summary", "--hide-error-context", str(script)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=110).stdout
    mine: dict[int, list[str]] = {}
    for line in out.splitlines():
        m = re.match(r".*user\.py:(\d+): (\w+): (.*)", line)
        if m:
            mine.setdefault(int(m.group(1)), []).append(f"{m.group(2)}: {m.group(3)}")
    assert mine.pop(8) == ['note: Revealed type is "rmq_async.consumer.delivery.Delivery"'], out
    assert mine.pop(9) == ['note: Revealed type is "rmq_async.protocol.stored.MessageExt"'], out
    assert mine.pop(12) == ['note: Revealed type is "int | None"'], out
    (concurrency,) = mine.pop(13)
    assert (
        'Argument "concurrency" to "PushConsumer" has incompatible type "str"; expected "int"' in concurrency
    )
    assert any('Unexpected keyword argument "concurency"' in e for e in mine.pop(14)), out
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
