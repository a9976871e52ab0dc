"""flavour=5 answers as the 5.3.3 captures show."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from rmq_async.config import Timing
from rmq_async.embedded import EmbeddedCluster

from .rawclient import RawClient, decode_messages


@pytest.fixture
async def c5() -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(timing=Timing.fast(), flavour=5) as c:
        yield c


async def test_v5_answers(c5: EmbeddedCluster) -> None:
    async with RawClient(c5.namesrv_addr, version=479) as ns, RawClient(c5.brokers[0].addr, version=479) as b:
        r = await ns.request(105, {"topic": "Nope"})
        assert (
            r.version == 479
            and r.remark is not None
            and "https://rocketmq.apache.org/docs/bestPractice/06FAQ" in r.remark
        )
        await c5.create_topic("V5T")
        r = await ns.request(105, {"topic": "V5T"})
        assert json.loads(r.body)["brokerDatas"][0]["enableActingMaster"] is False
        r = await b.send("V5T", b"v5", tags="TagA", keys="k-0", uniq="FD01")
        assert r.version == 479 and r.ext_fields["transactionId"] == "FD01"
        r = await b.pull("g5", "V5T", 0, 0, sys_flag=4, subscription="*")
        assert set(r.ext_fields) == {
            "suggestWhichBrokerId",
            "nextBeginOffset",
            "minOffset",
            "maxOffset",
            "topicSysFlag",
            "groupSysFlag",
        }
        (m,) = decode_messages(r.body)
        assert m.props_text == (
            "MSG_REGION\x01DefaultRegion\x02UNIQ_KEY\x01FD01\x02CLUSTER\x01DefaultCluster\x02TAGS\x01TagA\x02"
            "KEYS\x01k-0\x02WAIT\x01true\x02TRACE_ON\x01true\x02"
        )
        r = await b.heartbeat("127.0.0.1@v5", "g5", {"V5T": "*"})
        assert r.ext_fields == {"IS_SUPPORT_HEART_BEAT_V2": "true", "IS_SUB_CHANGE": "true"}
        r = await b.request(14, {"consumerGroup": "g5", "topic": "%RETRY%g5", "queueId": "0"})
        assert (r.code, r.ext_fields) == (22, {})
        assert r.remark == "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        r = await b.request(14, {"consumerGroup": "g5", "topic": "V5T", "queueId": "0"})
        assert (r.code, r.ext_fields) == (0, {"offset": "0"})
        r = await b.request(
            15, {"consumerGroup": "unknown_g", "topic": "V5T", "queueId": "0", "commitOffset": "1"}
        )
        assert (r.code, r.remark) == (26, "Group unknown_g not exist!")
        body = {
            "clientId": "c",
            "consumerGroup": "g5",
            "onlyThisBroker": False,
            "mqSet": [{"brokerName": "broker-a", "queueId": 0, "topic": "V5T"}],
        }
        r = await b.request(41, {}, json.dumps(body).encode())
        assert json.loads(r.body)["lockOKMQSet"] == body["mqSet"]
