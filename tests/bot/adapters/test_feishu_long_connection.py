"""Feishu long-connection mode (docs/reliability.md F12), through lark-oapi's own frame handler.

Why this way: the websocket client is lark's, so the test hands a real protobuf frame to the
SDK's `_handle_data_frame` (on a thread with its own loop, as lark runs it) with our handler
installed, and reads the answer frame the SDK would send back: 200 once the event is in Redis,
500 (so Feishu redelivers) when Redis cannot take it. Only the socket write is replaced, to
capture that answer; nothing of ours is faked.
"""

from __future__ import annotations

import asyncio
import json

import lark_oapi as lark
import redis.asyncio as aioredis
from lark_oapi.ws.pb.pbbp2_pb2 import Frame
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from bot.adapters.feishu.inbound import FeishuIdentity
from bot.adapters.feishu.long_connection import EnqueueHandler
from bot.intake.queue import Queue
from bot.keys import BotKeys
from tests.conftest import free_port
from tests.fakes import signing as sg


def event_frame(payload: dict[str, object]) -> Frame:
    frame = Frame(SeqID=1, LogID=1, service=1, method=1)  # method 1: a data frame
    for key, value in {
        "type": "event",
        "message_id": "m1",
        "sum": "1",
        "seq": "0",
        "trace_id": "t1",
    }.items():
        header = frame.headers.add()
        header.key, header.value = key, value
    frame.payload = json.dumps(payload).encode()
    return frame


async def deliver(queue: Queue, payload: dict[str, object]) -> int:
    """Run lark's frame handler on its own thread and loop; return the answer's code."""
    handler = EnqueueHandler(
        queue, FeishuIdentity(sg.FEISHU_BOT_OPEN_ID), asyncio.get_running_loop()
    )
    client = lark.ws.Client(sg.FEISHU_APP_ID, sg.FEISHU_APP_SECRET, event_handler=handler)
    answers: list[bytes] = []

    async def capture(data: bytes) -> None:
        answers.append(data)

    client._write_message = capture  # the socket write: the one thing not run for real
    await asyncio.to_thread(asyncio.run, client._handle_data_frame(event_frame(payload)))
    answer = Frame()
    answer.ParseFromString(answers[0])
    return int(json.loads(answer.payload)["code"])


async def test_f12_an_event_over_the_long_connection_is_enqueued_then_acked(redis_client) -> None:
    message = sg.feishu_message_receive(event_id="ev-ws-1")
    assert await deliver(Queue(redis_client), message) == 200
    assert await redis_client.xlen(BotKeys().turns_stream) == 1
    assert await deliver(Queue(redis_client), message) == 200  # a redelivery: acked, not rerun
    assert await redis_client.xlen(BotKeys().turns_stream) == 1


async def test_f12_an_event_redis_cannot_take_is_answered_500_for_redelivery() -> None:
    down = aioredis.Redis(port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    assert await deliver(Queue(down), sg.feishu_message_receive()) == 500
    await down.aclose()


async def test_x14_an_event_holding_a_lone_surrogate_is_acked_and_dropped(redis_client) -> None:
    """X14: text that cannot be encoded is refused as malformed: acked (never redelivered)."""
    in_header = sg.feishu_message_receive(event_id="ev-ws-bad-1")
    in_header["header"]["tenant_key"] = "\ud800"
    in_content = sg.feishu_message_receive(event_id="ev-ws-bad-2", text="@_user_1 \udfff why")
    for payload in (in_header, in_content):
        assert await deliver(Queue(redis_client), payload) == 200
    assert await redis_client.xlen(BotKeys().turns_stream) == 0
    emoji = sg.feishu_message_receive(event_id="ev-ws-ok", text="@_user_1 \U0001f525 why")
    assert await deliver(Queue(redis_client), emoji) == 200
    assert await redis_client.xlen(BotKeys().turns_stream) == 1
