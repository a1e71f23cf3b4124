"""Slack Socket Mode receiver: the real slack_sdk client, a loopback Socket Mode server, real Redis.

Why this way: the receiver's promise is an ordering between two systems (an envelope is written
to Redis before its ack goes out on the socket, and never acked when the write failed), so both
are real: slack_sdk's aiohttp `SocketModeClient` gets its URL from `apps.connections.open` and
talks the Socket Mode protocol to `tests.fakes.slack_socket`, and the outcome is read back from
Redis and from the ack frames the server recorded. Every wait is on an event (an ack, a
connection, a log record); nothing sleeps.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import Keys
from bot.adapters.slack.inbound import SlackIdentity
from bot.adapters.slack.socket_mode import SlackSocketReceiver, SocketModeOptions, run_socket_mode
from bot.control.approval_desk import ApprovalDesk
from bot.control.killswitch import KillSwitch, KillSwitchDesk
from bot.errors import BotConfigError
from bot.events import session_id_for
from bot.intake.accept import Intake
from bot.intake.metrics import IngressMetrics
from bot.intake.queue import Queue
from bot.keys import BotKeys
from bot.settings import Settings
from tests.conftest import free_port
from tests.fakes import signing as sg
from tests.fakes.slack_socket import FakeSocketModeSlack, disconnect, events_api, interactive

KEYS = BotKeys()
IDENTITY = SlackIdentity(sg.SLACK_BOT_USER_ID, sg.SLACK_BOT_ID, sg.SLACK_TEAM_ID)
OPTIONS = SocketModeOptions(connect_timeout_s=3.0, close_timeout_s=2.0)
HOLD_WRITES_MS = 300
"""How long Redis holds writes in the ordering test (well inside the 2.5 s ack budget)."""


@asynccontextmanager
async def receiving(
    fake: FakeSocketModeSlack,
    redis: aioredis.Redis,
    *,
    app_token: str | None = None,
    metrics: IngressMetrics | None = None,
) -> AsyncIterator[SlackSocketReceiver]:
    receiver = SlackSocketReceiver(
        app_token=app_token or fake.app_token,
        web_client=AsyncWebClient(base_url=fake.base_url),
        queue=Queue(redis),
        identity=IDENTITY,
        options=OPTIONS,
        metrics=metrics,
    )
    async with receiver:
        yield receiver


class LogWatch(logging.Handler):
    """The receiver's log records (DEBUG included), awaitable by content."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []
        self._changed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self._changed.set()

    async def wait_for(self, matches: Callable[[str], bool]) -> None:
        async with asyncio.timeout(5):
            while not any(matches(m) for m in self.messages):
                self._changed.clear()
                await self._changed.wait()


@pytest.fixture
def receiver_log() -> Iterator[LogWatch]:
    logger = logging.getLogger("bot.adapters.slack.socket_mode")
    watch, level = LogWatch(), logger.level
    logger.addHandler(watch)
    logger.setLevel(logging.DEBUG)
    yield watch
    logger.removeHandler(watch)
    logger.setLevel(level)


@pytest.fixture
async def slack_socket() -> AsyncIterator[FakeSocketModeSlack]:
    async with FakeSocketModeSlack() as fake:
        yield fake


def unreachable_redis() -> aioredis.Redis:
    """A client for a port nobody listens on, failing fast (no retries)."""
    return aioredis.Redis(port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))


async def jobs(redis: aioredis.Redis) -> list[dict[str, Any]]:
    entries = await redis.xrange(KEYS.turns_stream) or []
    return [json.loads(fields[b"job"]) for _, fields in entries if fields]


async def stream_len(redis: aioredis.Redis) -> int:
    return int(await redis.xlen(KEYS.turns_stream))


def sample(metrics: IngressMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def session_of(thread: str) -> str:
    return session_id_for("slack", sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)


async def test_a_mention_is_written_once_and_acknowledged_after_the_write(
    slack_socket: FakeSocketModeSlack, redis_client: aioredis.Redis
) -> None:
    written_at_ack: list[int] = []

    async def probe(frame: dict[str, Any]) -> None:  # runs as the ack arrives, before recording
        written_at_ack.append(await stream_len(redis_client))

    slack_socket.on_frame = probe
    async with receiving(slack_socket, redis_client):
        conn = await slack_socket.wait_for_connection()
        # Writes (the submit script) wait out the pause; reads, the probe's XLEN among them, do
        # not. An ack sent before the write would arrive while the stream is still empty.
        await redis_client.execute_command("CLIENT", "PAUSE", str(HOLD_WRITES_MS), "WRITE")
        envelope_id = await conn.send(events_api(sg.slack_app_mention(ts="1700000000.000100")))
        ack = await slack_socket.wait_for_ack(envelope_id)
    assert ack == {"envelope_id": envelope_id}
    assert written_at_ack == [1], "the entry was in Redis when the ack arrived"
    (job,) = await jobs(redis_client)
    assert job["event"]["text"] == "why is checkout returning 500s?"
    assert job["session_id"] == session_of("1700000000.000100")
    assert slack_socket.opened == [slack_socket.app_token]


async def test_a_redelivered_envelope_is_acknowledged_and_not_written_twice(
    slack_socket: FakeSocketModeSlack, redis_client: aioredis.Redis
) -> None:
    mention = sg.slack_app_mention()
    async with receiving(slack_socket, redis_client):
        conn = await slack_socket.wait_for_connection()
        first = await conn.send(events_api(mention))
        await slack_socket.wait_for_ack(first)
        again = await conn.send(events_api(mention, retry_attempt=1, retry_reason="timeout"))
        await slack_socket.wait_for_ack(again)
        twin = await conn.send(events_api(sg.slack_message(ts=mention["event"]["ts"])))
        await slack_socket.wait_for_ack(twin)
    assert await stream_len(redis_client) == 1


async def test_the_bots_own_message_is_acknowledged_and_ignored(
    slack_socket: FakeSocketModeSlack, redis_client: aioredis.Redis
) -> None:
    thread = sg.slack_ts()
    async with receiving(slack_socket, redis_client):
        conn = await slack_socket.wait_for_connection()
        mention = await conn.send(events_api(sg.slack_app_mention(ts=thread)))
        await slack_socket.wait_for_ack(mention)
        own = await conn.send(events_api(sg.slack_own_message(thread_ts=thread)))
        await slack_socket.wait_for_ack(own)
    assert await stream_len(redis_client) == 1
    assert await redis_client.llen(Keys().steers(session_of(thread))) == 0


async def test_an_envelope_redis_cannot_take_is_not_acknowledged_and_its_retry_is(
    slack_socket: FakeSocketModeSlack, redis_client: aioredis.Redis, receiver_log: LogWatch
) -> None:
    mention = sg.slack_app_mention()
    metrics = IngressMetrics()
    down = unreachable_redis()
    try:
        async with receiving(slack_socket, down, metrics=metrics):
            conn = await slack_socket.wait_for_connection()
            lost = await conn.send(events_api(mention))
            await receiver_log.wait_for(lambda m: "not written, not acknowledged" in m)
        await conn.closed.wait()  # everything the client sent before closing has been read
        assert not slack_socket.acked(lost)
        assert sample(metrics, "chatops_ingress_unavailable_total") == 1
        async with receiving(slack_socket, redis_client, metrics=metrics):
            conn = await slack_socket.wait_for_connection(2)
            retry = await conn.send(events_api(mention, retry_attempt=1, retry_reason="timeout"))
            await slack_socket.wait_for_ack(retry)
    finally:
        await down.aclose()
    assert await stream_len(redis_client) == 1
    assert sample(metrics, "chatops_ingress_events_total", platform="slack", outcome="start") == 1


async def test_stopping_finishes_the_envelope_in_flight_and_refuses_new_ones(
    slack_socket: FakeSocketModeSlack, redis_client: aioredis.Redis, receiver_log: LogWatch
) -> None:
    async with receiving(slack_socket, redis_client) as receiver:
        conn = await slack_socket.wait_for_connection()
        await redis_client.execute_command("CLIENT", "PAUSE", str(HOLD_WRITES_MS), "WRITE")
        in_flight = await conn.send(events_api(sg.slack_app_mention()))
        await receiver_log.wait_for(
            lambda m: m == f"slack envelope {in_flight} (events_api) queued"
        )
        stopping = asyncio.create_task(receiver.stop())  # while the write waits out the pause
        late = await conn.send(events_api(sg.slack_app_mention()))
        await receiver_log.wait_for(lambda m: f"slack envelope {late} refused while stopping" in m)
        await stopping
    await conn.closed.wait()
    assert conn.acks() == [in_flight], "acked before the socket closed; the late one never"
    assert await stream_len(redis_client) == 1


async def test_a_stop_button_over_the_socket_tombstones_the_turn(
    slack_socket: FakeSocketModeSlack, redis_client: aioredis.Redis
) -> None:
    thread = sg.slack_ts()
    async with receiving(slack_socket, redis_client):
        conn = await slack_socket.wait_for_connection()
        await slack_socket.wait_for_ack(
            await conn.send(events_api(sg.slack_app_mention(ts=thread)))
        )
        (job,) = await jobs(redis_client)
        press = sg.slack_block_actions(
            action_id="stop", value=job["turn_id"], message_ts=sg.slack_ts(), thread_ts=thread
        )
        await slack_socket.wait_for_ack(await conn.send(interactive(press)))
    tomb = Keys().tombstone(session_of(thread), job["turn_id"])
    assert await redis_client.get(tomb) == b"alice"


async def test_malformed_and_unhandled_envelopes_are_acknowledged_and_dropped(
    slack_socket: FakeSocketModeSlack, redis_client: aioredis.Redis
) -> None:
    slash = {
        "envelope_id": "slash-1",
        "type": "slash_commands",
        "accepts_response_payload": True,
        "payload": {"command": "/incident", "text": "", "user_id": sg.SLACK_USER_ID},
    }
    metrics = IngressMetrics()
    async with receiving(slack_socket, redis_client, metrics=metrics):
        conn = await slack_socket.wait_for_connection()
        for frame in (events_api({"type": "mystery"}), events_api({"type": "event_callback"})):
            await slack_socket.wait_for_ack(await conn.send(frame))
        await slack_socket.wait_for_ack(await conn.send(slash))
    assert await stream_len(redis_client) == 0
    assert sample(metrics, "chatops_ingress_rejected_total", platform="slack", status="400") == 2


async def test_x14_envelopes_holding_lone_surrogates_are_acknowledged_and_dropped(
    slack_socket: FakeSocketModeSlack, redis_client: aioredis.Redis
) -> None:
    """X14: a lone surrogate is malformed, so acked and dropped; an escaped emoji passes."""
    metrics = IngressMetrics()
    bad = [
        sg.slack_app_mention(text=f"<@{sg.SLACK_BOT_USER_ID}> \ud800 why?"),
        sg.slack_app_mention(text=f"<@{sg.SLACK_BOT_USER_ID}> why? \udfff"),
    ]
    good = sg.slack_app_mention(text=f"<@{sg.SLACK_BOT_USER_ID}> \U0001f525 why?")
    async with receiving(slack_socket, redis_client, metrics=metrics):
        conn = await slack_socket.wait_for_connection()
        for payload in bad:
            await slack_socket.wait_for_ack(await conn.send(events_api(payload)))
        assert await stream_len(redis_client) == 0
        await slack_socket.wait_for_ack(await conn.send(events_api(good)))
    assert await stream_len(redis_client) == 1
    assert sample(metrics, "chatops_ingress_rejected_total", platform="slack", status="400") == 2


async def test_a_refresh_moves_to_a_new_connection_and_keeps_receiving(
    slack_socket: FakeSocketModeSlack, redis_client: aioredis.Redis
) -> None:
    async with receiving(slack_socket, redis_client):
        first = await slack_socket.wait_for_connection()
        await first.send(disconnect("refresh_requested"))
        second = await slack_socket.wait_for_connection(2)
        await slack_socket.wait_for_ack(await second.send(events_api(sg.slack_app_mention())))
        await first.closed.wait()
    assert len(slack_socket.opened) == 2
    assert await stream_len(redis_client) == 1


@pytest.mark.parametrize("token", ["xapp-1-wrong", "xoxb-a-bot-token"])
async def test_a_refused_app_token_fails_start(
    slack_socket: FakeSocketModeSlack, redis_client: aioredis.Redis, token: str
) -> None:
    with pytest.raises(BotConfigError, match="apps.connections.open"):
        async with receiving(slack_socket, redis_client, app_token=token):
            pytest.fail("started with a refused token")
    assert slack_socket.connections == []


async def test_run_socket_mode_serves_until_cancelled(
    slack_socket: FakeSocketModeSlack, redis_client: aioredis.Redis
) -> None:
    settings = Settings(
        _env_file=None, SLACK_APP_TOKEN=slack_socket.app_token, SLACK_API_URL=slack_socket.base_url
    )
    serving = asyncio.create_task(run_socket_mode(settings, Queue(redis_client), IDENTITY))
    try:
        conn = await slack_socket.wait_for_connection()
        await slack_socket.wait_for_ack(await conn.send(events_api(sg.slack_app_mention())))
    finally:
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
    await conn.closed.wait()
    assert await stream_len(redis_client) == 1
    with pytest.raises(BotConfigError, match="SLACK_APP_TOKEN"):
        await run_socket_mode(Settings(_env_file=None), Queue(redis_client), IDENTITY)


async def test_an_admins_kill_switch_command_over_the_socket_is_carried_out(
    slack_socket: FakeSocketModeSlack, redis_client: aioredis.Redis
) -> None:
    # What `chatops serve` wires: the socket takes events in like the webhook (bot.intake.accept).
    queue = Queue(redis_client)
    switch = KillSwitch(redis_client)
    switch_desk = KillSwitchDesk(switch, admins=["U0ADMIN"])
    intake = Intake(queue, ApprovalDesk(redis_client, KEYS), switch_desk, redis_client)
    receiver = SlackSocketReceiver(
        app_token=slack_socket.app_token,
        web_client=AsyncWebClient(base_url=slack_socket.base_url),
        queue=queue,
        identity=IDENTITY,
        options=OPTIONS,
        submit=intake.submit,
    )
    command = f"<@{sg.SLACK_BOT_USER_ID}> killswitch on"
    async with receiver:
        conn = await slack_socket.wait_for_connection()
        outsider = events_api(sg.slack_app_mention(text=command, user="U0SOMEONE"))
        await slack_socket.wait_for_ack(await conn.send(outsider))
        assert not (await switch.state()).on
        admin = events_api(sg.slack_app_mention(text=command, user="U0ADMIN"))
        await slack_socket.wait_for_ack(await conn.send(admin))
    state = await switch.state()
    assert state.on and state.by == "U0ADMIN"
    assert await stream_len(redis_client) == 0  # a command, never an analysis
    await switch.release()
