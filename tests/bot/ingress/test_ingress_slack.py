"""Slack ingress, docs/reliability.md rows S1–S17: the real app, signed requests, a real Redis.

Why this way: the webhook's promises (verify over the raw bytes, never 500, write before the 200,
dedupe retries and twin deliveries, 503 so Slack retries when Redis cannot take an event) are
about the HTTP boundary and Redis together. Requests are built and signed exactly as Slack sends
them (slack_sdk's own signer), posted to the real FastAPI app over ASGI, and the outcome is read
back from Redis: the turns stream, the steer queue, the tombstones. Each test names its row.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from agent_core import Keys, load_message
from bot.adapters.slack.inbound import SlackIdentity
from bot.events import session_id_for
from bot.ingress.app import MAX_BODY_BYTES, create_app, ingress_redis
from bot.keys import BotKeys
from bot.settings import Settings
from tests.conftest import free_port
from tests.fakes import signing as sg
from tests.loopback import spawn_redis, stop_process
from tests.rings import rings

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
KEYS = BotKeys()


@pytest.fixture
def settings() -> Settings:
    return Settings(
        _env_file=None, SLACK_SIGNING_SECRET=SECRET, SLACK_BOT_TOKEN="xoxb-test", REDIS_URL=None
    )


class Ingress:
    """The app under test, opened (lifespan run) on first use; a new one per Redis client."""

    def __init__(self, settings: Settings, redis: aioredis.Redis) -> None:
        self.settings, self.redis = settings, redis
        self.opened: list[tuple[Any, httpx.AsyncClient]] = []

    async def _client(self, redis: aioredis.Redis | None) -> httpx.AsyncClient:
        if redis is not None or not self.opened:
            identity = SlackIdentity(sg.SLACK_BOT_USER_ID, sg.SLACK_BOT_ID, sg.SLACK_TEAM_ID)
            app = create_app(self.settings, redis=redis or self.redis, slack=identity)
            lifespan = app.router.lifespan_context(app)
            await lifespan.__aenter__()
            transport = httpx.ASGITransport(app=app)
            self.opened.append(
                (lifespan, httpx.AsyncClient(transport=transport, base_url="http://t"))
            )
        return self.opened[-1][1]

    async def __call__(
        self, body: bytes, headers: dict[str, str], *, redis: aioredis.Redis | None = None
    ) -> httpx.Response:
        client = await self._client(redis)
        return await client.post("/slack/events", content=body, headers=headers)

    async def get(self, path: str) -> httpx.Response:
        return await (await self._client(None)).get(path)

    async def close(self) -> None:
        for lifespan, client in self.opened:
            await client.aclose()
            await lifespan.__aexit__(None, None, None)


@pytest.fixture
async def post(settings: Settings, redis_client: aioredis.Redis) -> AsyncIterator[Ingress]:
    ingress = Ingress(settings, redis_client)
    yield ingress
    await ingress.close()


def unreachable_redis() -> aioredis.Redis:
    """A client for a port nobody listens on, failing fast (no retries)."""
    return aioredis.Redis(port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))


async def stream_len(redis: aioredis.Redis) -> int:
    return int(await redis.xlen(KEYS.turns_stream))


def signed(payload: Any, **kwargs: Any) -> tuple[bytes, dict[str, str]]:
    return sg.slack_request(payload, secret=SECRET, **kwargs)


def session_of(thread: str) -> str:
    return session_id_for("slack", sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)


async def test_s1_valid_mention_is_acknowledged_and_enqueued_once(post, redis_client) -> None:
    response = await post(*signed(sg.slack_app_mention(ts="1700000000.000100")))
    assert response.status_code == 200
    assert await stream_len(redis_client) == 1
    entry = (await redis_client.xrange(KEYS.turns_stream))[0][1]
    job = json.loads(entry[b"job"])
    assert job["event"]["text"] == "why is checkout returning 500s?"
    assert job["session_id"] == session_of("1700000000.000100")


@pytest.mark.parametrize("skew", [-301, 301])
async def test_s2_timestamps_outside_five_minutes_are_refused(post, redis_client, skew) -> None:
    response = await post(*signed(sg.slack_app_mention(), timestamp=time.time() + skew))
    assert response.status_code == 401
    assert await stream_len(redis_client) == 0


@pytest.mark.parametrize("skew", [-299, 299])
async def test_s3_timestamps_inside_the_window_are_accepted(post, redis_client, skew) -> None:
    response = await post(*signed(sg.slack_app_mention(), timestamp=time.time() + skew))
    assert response.status_code == 200
    assert await stream_len(redis_client) == 1


@pytest.mark.parametrize(
    "drop", ["X-Slack-Signature", "X-Slack-Request-Timestamp", "both", "empty"]
)
async def test_s4_missing_or_empty_headers_are_401(post, redis_client, drop) -> None:
    body, headers = signed(sg.slack_app_mention())
    if drop == "empty":
        headers["X-Slack-Signature"] = ""
    for name in ("X-Slack-Signature", "X-Slack-Request-Timestamp"):
        if drop in (name, "both"):
            del headers[name]
    assert (await post(body, headers)).status_code == 401
    assert await stream_len(redis_client) == 0


@pytest.mark.parametrize("timestamp", ["abc", "1e3", "1" + "0" * 30, "-5", " 17", "1.5"])
async def test_s5_malformed_timestamps_are_401_not_500(post, redis_client, timestamp) -> None:
    response = await post(*signed(sg.slack_app_mention(), timestamp=timestamp))
    assert response.status_code == 401
    assert response.json() == {"error": "request verification failed"}


async def test_s6_signature_covers_the_raw_bytes(post, redis_client) -> None:
    body, headers = signed(sg.slack_app_mention(text=f"<@{sg.SLACK_BOT_USER_ID}> 数据库 🔥 down?"))
    tampered = body.replace(b"down", b"dawn")
    assert (await post(tampered, headers)).status_code == 401
    reserialized = json.dumps(json.loads(body), indent=1, sort_keys=True).encode()
    assert (await post(reserialized, headers)).status_code == 401
    broken = body.replace("数".encode(), b"\xff\xfe\xfd")  # correctly signed, not UTF-8
    stamp = headers["X-Slack-Request-Timestamp"]
    mac = hmac.new(SECRET.encode(), f"v0:{stamp}:".encode() + broken, hashlib.sha256)
    garbled = {**headers, "X-Slack-Signature": f"v0={mac.hexdigest()}"}
    assert (await post(broken, garbled)).status_code == 401
    response = await post(body, headers)  # the multibyte original passes
    assert response.status_code == 200
    job = json.loads((await redis_client.xrange(KEYS.turns_stream))[0][1][b"job"])
    assert job["event"]["text"] == "数据库 🔥 down?"


@pytest.mark.parametrize("mangle", ["v1", "upper", "short", "long"])
async def test_s7_signature_variants_are_refused(post, redis_client, mangle) -> None:
    body, headers = signed(sg.slack_app_mention())
    sig = headers["X-Slack-Signature"]
    headers["X-Slack-Signature"] = {
        "v1": sig.replace("v0=", "v1="),
        "upper": "v0=" + sig[3:].upper(),
        "short": sig[:-2],
        "long": sig + "00",
    }[mangle]
    assert (await post(body, headers)).status_code == 401
    assert await stream_len(redis_client) == 0


async def test_s8_retries_are_processed_once(post, redis_client) -> None:
    payload = sg.slack_app_mention()
    for retry in (None, 1, 2, 3):
        reason = None if retry is None else ("http_timeout" if retry % 2 else "http_error")
        response = await post(*signed(payload, retry_num=retry, retry_reason=reason))
        assert response.status_code == 200
    assert await stream_len(redis_client) == 1


async def test_s9_concurrent_duplicates_start_one_run(post, redis_client) -> None:
    request = signed(sg.slack_app_mention())
    await post(*signed(sg.slack_url_verification()))  # open the app before the race
    responses = await asyncio.gather(*(post(*request) for _ in range(8)))
    assert {r.status_code for r in responses} == {200}
    assert await stream_len(redis_client) == 1


async def test_s10_a_delivery_that_failed_before_its_write_is_processed_on_retry(
    post, redis_client
) -> None:
    down = unreachable_redis()
    payload = sg.slack_app_mention()
    first = await post(*signed(payload), redis=down)
    assert first.status_code == 503 and "x-slack-no-retry" not in first.headers
    retry = await post(*signed(payload, retry_num=1, retry_reason="http_error"), redis=redis_client)
    assert retry.status_code == 200
    assert await stream_len(redis_client) == 1
    await down.aclose()


async def test_s11_app_mention_and_message_twins_start_one_run(post, redis_client) -> None:
    ts = sg.slack_ts()
    assert (await post(*signed(sg.slack_app_mention(ts=ts)))).status_code == 200
    assert (await post(*signed(sg.slack_message(ts=ts)))).status_code == 200
    assert await stream_len(redis_client) == 1


async def test_s12_the_bots_own_posts_and_other_bots_are_not_input(post, redis_client) -> None:
    thread = sg.slack_ts()
    await post(*signed(sg.slack_app_mention(ts=thread)))
    own = sg.slack_own_message(thread_ts=thread)
    other = sg.slack_bot_message(thread_ts=thread)
    for payload in (own, other):
        assert (await post(*signed(payload))).status_code == 200
    assert await stream_len(redis_client) == 1
    assert await redis_client.llen(Keys().steers(session_of(thread))) == 0


async def test_s13_url_verification_and_ssl_check(post, redis_client) -> None:
    challenge = sg.slack_url_verification()
    response = await post(*signed(challenge))
    assert response.status_code == 200
    assert response.json() == {"challenge": challenge["challenge"]}
    ssl = sg.slack_request(
        sg.slack_ssl_check(), secret=SECRET, content_type="application/x-www-form-urlencoded"
    )
    assert (await post(*ssl)).status_code == 200
    unsigned = (ssl[0], {"Content-Type": "application/x-www-form-urlencoded"})
    assert (await post(*unsigned)).status_code == 401


@pytest.mark.slow
async def test_s14_a_redis_too_slow_for_the_deadline_gets_503_not_200(
    post, redis_client, redis_server
) -> None:
    client = ingress_redis(redis_server)  # the client `chatops serve` builds, timeouts and all
    await post(*signed(sg.slack_url_verification()), redis=client)  # up before Redis stalls
    admin = aioredis.Redis.from_url(redis_server)
    await admin.execute_command("CLIENT", "PAUSE", "4000", "ALL")
    try:
        started = time.monotonic()
        response = await post(*signed(sg.slack_app_mention()))
        elapsed = time.monotonic() - started
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
        await admin.aclose()
    assert response.status_code == 503 and "x-slack-no-retry" not in response.headers
    assert elapsed < 3.0  # Slack gives up at 3 s; a late 200 would be a lost event
    assert await stream_len(redis_client) == 0
    # The abandoned command's late reply must not be read as the answer to the next one.
    assert (await post(*signed(sg.slack_app_mention()))).status_code == 200
    assert await stream_len(redis_client) == 1
    await client.aclose()


@pytest.mark.parametrize(
    "payload", [{"type": "mystery"}, b"not json at all", [1, 2], {"type": "event_callback"}]
)
async def test_s15_permanently_invalid_payloads_are_400_without_retry(
    post, redis_client, payload
) -> None:
    response = await post(*signed(payload))
    assert response.status_code == 400
    assert response.headers["x-slack-no-retry"] == "1"
    assert "Traceback" not in response.text


async def test_s16_oversized_bodies_are_413_before_signature_work(post, redis_client) -> None:
    body = b'{"type": "event_callback", "pad": "' + b"x" * MAX_BODY_BYTES + b'"}'
    response = await post(body, {"Content-Type": "application/json"})  # not even signed
    assert response.status_code == 413


async def test_s17_a_replayed_button_press_acts_once(post, redis_client) -> None:
    thread = sg.slack_ts()
    await post(*signed(sg.slack_app_mention(ts=thread)))
    job = json.loads((await redis_client.xrange(KEYS.turns_stream))[0][1][b"job"])
    turn = job["turn_id"]
    press = sg.slack_block_actions(
        action_id="stop", value=turn, message_ts=sg.slack_ts(), thread_ts=thread
    )
    async with rings(redis_client, Keys().bell(session_of(thread))) as bell:
        for _ in range(2):
            response = await post(*sg.slack_interactivity(press, secret=SECRET))
            assert response.status_code == 200
        assert await bell.so_far() == [f"stop:{turn}"], "one stop, one ring"
    tomb = Keys().tombstone(session_of(thread), turn)
    assert await redis_client.get(tomb) == b"alice"
    stale = sg.slack_interactivity(press, secret=SECRET, timestamp=time.time() - 600)
    assert (await post(*stale)).status_code == 401


async def test_a_human_reply_steers_and_stop_stops(post, redis_client) -> None:
    thread = sg.slack_ts()
    await post(*signed(sg.slack_app_mention(ts=thread)))
    session = session_of(thread)
    reply = sg.slack_message(text="it's the gateway, not the db", thread_ts=thread)
    assert (await post(*signed(reply))).status_code == 200
    steers = await redis_client.lrange(Keys().steers(session), 0, -1)
    assert [load_message(s).content for s in steers] == ["it's the gateway, not the db"]
    assert (await post(*signed(sg.slack_message(text="stop", thread_ts=thread)))).status_code == 200
    open_turns = await redis_client.smembers(KEYS.open_turns(session))
    assert len(open_turns) == 1
    turn = next(iter(open_turns)).decode()
    assert await redis_client.exists(Keys().tombstone(session, turn)) == 1
    assert await stream_len(redis_client) == 1, "neither the steer nor the stop starts a run"


async def test_health_readiness_and_metrics(post, redis_client) -> None:
    await post(*signed(sg.slack_app_mention()))
    await post(*signed({"type": "mystery"}))
    assert (await post.get("/healthz")).json() == {"status": "ok"}
    assert (await post.get("/readyz")).status_code == 200
    metrics = (await post.get("/metrics")).text
    assert 'chatops_ingress_events_total{outcome="start",platform="slack"} 1.0' in metrics
    assert 'chatops_ingress_rejected_total{platform="slack",status="400"} 1.0' in metrics


async def test_readyz_is_503_when_redis_is_unreachable(post) -> None:
    down = unreachable_redis()
    await post(*signed(sg.slack_url_verification()), redis=down)
    assert (await post.get("/readyz")).status_code == 503
    await down.aclose()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[aioredis.Redis]:
    """A redis-server of this test's own, free to be made a replica or run out of memory."""
    proc, port = spawn_redis(tmp_path)
    yield aioredis.Redis(port=port)
    stop_process(proc)


async def test_readyz_is_503_while_redis_answers_pings_but_refuses_writes(
    post, own_redis: aioredis.Redis
) -> None:
    """A replica (after a failover, the old primary) and a full Redis still answer PING."""
    await post(*signed(sg.slack_url_verification()), redis=own_redis)
    assert (await post.get("/readyz")).json() == {"status": "ready"}

    await own_redis.replicaof("127.0.0.1", free_port())  # a primary nobody runs: read-only
    assert await own_redis.ping()
    answer = await post.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["status"] == "redis refuses writes"
    assert "read only replica" in answer.json()["error"]
    mention = sg.slack_app_mention()
    assert (await post(*signed(mention))).status_code == 503  # as said: no event is taken
    await own_redis.replicaof("NO", "ONE")
    assert (await post.get("/readyz")).status_code == 200

    await own_redis.config_set("maxmemory-policy", "noeviction")
    await own_redis.config_set("maxmemory", "1")
    answer = await post.get("/readyz")
    assert answer.status_code == 503 and "maxmemory" in answer.json()["error"]
    await own_redis.config_set("maxmemory", "0")
    assert (await post.get("/readyz")).status_code == 200
    assert await own_redis.pttl(KEYS.ready_probe) > 0  # the probe expires on its own
    await own_redis.aclose()


async def test_a_stop_cancels_a_request_sent_before_it_that_arrives_after_it(
    post, redis_client
) -> None:
    """docs/design.md §Invariants I4: a stop that arrives before its turn's start still wins."""
    down = unreachable_redis()
    thread = "1700000100.000100"
    mention = sg.slack_app_mention(ts=thread)
    assert (await post(*signed(mention), redis=down)).status_code == 503  # Slack will retry
    stop = sg.slack_message(text="stop", ts="1700000105.000100", thread_ts=thread)
    assert (await post(*signed(stop), redis=redis_client)).status_code == 200
    retry = await post(*signed(mention, retry_num=1, retry_reason="http_error"))
    assert retry.status_code == 200
    assert await stream_len(redis_client) == 0, "sent before the stop: never starts"
    later = sg.slack_app_mention(ts="1700000110.000100", thread_ts=thread)
    assert (await post(*signed(later))).status_code == 200
    assert await stream_len(redis_client) == 1, "a request sent after the stop runs"
    metrics = (await post.get("/metrics")).text
    assert 'chatops_ingress_events_total{outcome="cancelled",platform="slack"} 1.0' in metrics
    await down.aclose()


def _mention_with(**event_fields: Any) -> dict[str, Any]:
    payload = sg.slack_app_mention()
    payload["event"].update(event_fields)
    return payload


@pytest.mark.parametrize(
    "payload",
    [
        _mention_with(text={"rich": "text"}),
        _mention_with(ts=1700000000.0001),
        _mention_with(thread_ts=["x"]),
        _mention_with(channel=None),
        {**sg.slack_app_mention(), "event": ["not", "an", "object"]},
        {**sg.slack_app_mention(), "event_id": 42},
        _mention_with(type="message", subtype="message_changed", message="nope"),
    ],
)
async def test_s15_authentic_payloads_of_unexpected_shape_are_400_not_500(
    post, redis_client, payload
) -> None:
    response = await post(*signed(payload))
    assert response.status_code == 400
    assert response.headers["x-slack-no-retry"] == "1"
    assert await stream_len(redis_client) == 0


async def test_s15_absurdly_nested_json_is_400(post, redis_client) -> None:
    response = await post(*signed(b"[" * 200_000 + b"]" * 200_000))
    assert response.status_code == 400


@pytest.mark.parametrize("ts", ["nan", "1e999"])
async def test_a_non_finite_ts_never_makes_a_job_that_cannot_be_read(
    post, redis_client, ts
) -> None:
    from bot.state.turn_jobs import TurnJob

    assert (await post(*signed(_mention_with(ts=ts)))).status_code == 200
    entry = (await redis_client.xrange(KEYS.turns_stream))[0][1][b"job"]
    assert TurnJob.model_validate_json(entry).event.sent_at == 0


async def test_a9_an_event_from_another_workspace_is_acknowledged_and_dropped(
    post, redis_client
) -> None:
    foreign = sg.slack_app_mention(ts="1700000000.000900", team_id="T0OTHERTEAM")
    response = await post(*signed(foreign))
    assert response.status_code == 200  # acknowledged: Slack must not retry it
    assert await stream_len(redis_client) == 0  # never acted on
