"""Feishu ingress, rows F1–F11, F13 and A9: encrypted, signed requests, a real Redis.

Why this way: lark-oapi's own dispatcher checks no time window and no nonce and answers 500 on
a missing header or a wrong token, so the ingress does those checks itself; these tests prove
them from the outside. Requests are encrypted (AES-256-CBC, key sha256(encrypt_key),
base64(iv + ciphertext)) and signed (sha256(timestamp + nonce + key + body)) exactly as Feishu
does, posted to the real app over ASGI, and the outcome is read back from Redis. The bot's
identity is fetched at start-up from the fake Feishu Open API, as in production.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from agent_core import Keys
from bot.errors import BotConfigError
from bot.events import session_id_for
from bot.ingress.app import create_app
from bot.keys import BotKeys
from bot.settings import Settings
from tests.fakes import signing as sg
from tests.fakes.feishu_api import FakeFeishuAPI
from tests.rings import rings

ENCRYPT_KEY = "test-encrypt-key-0123456789"
TOKEN = "verification-token-abc"
KEYS = BotKeys()


def feishu_settings(api: FakeFeishuAPI, **overrides: Any) -> Settings:
    values = {
        "FEISHU_APP_ID": sg.FEISHU_APP_ID,
        "FEISHU_APP_SECRET": sg.FEISHU_APP_SECRET,
        "FEISHU_ENCRYPT_KEY": ENCRYPT_KEY,
        "FEISHU_VERIFICATION_TOKEN": TOKEN,
        "FEISHU_DOMAIN": api.base_url,
        **overrides,
    }
    return Settings(_env_file=None, **values)


class Feishu:
    """The app under test, started once (its lifespan asks the fake API who the bot is)."""

    def __init__(self, settings: Settings, redis: aioredis.Redis) -> None:
        self.app = create_app(settings, redis=redis)
        self.lifespan = self.app.router.lifespan_context(self.app)
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://t"
        )

    async def post(self, path: str, request: tuple[bytes, dict[str, str]]) -> httpx.Response:
        body, headers = request
        return await self.client.post(path, content=body, headers=headers)


@pytest.fixture
async def feishu(feishu_api: FakeFeishuAPI, redis_client: aioredis.Redis) -> AsyncIterator[Feishu]:
    app = Feishu(feishu_settings(feishu_api), redis_client)
    await app.lifespan.__aenter__()
    yield app
    await app.client.aclose()
    await app.lifespan.__aexit__(None, None, None)


def sealed(payload: dict[str, Any], **kwargs: Any) -> tuple[bytes, dict[str, str]]:
    return sg.feishu_request(payload, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, **kwargs)


async def stream_len(redis: aioredis.Redis) -> int:
    return int(await redis.xlen(KEYS.turns_stream))


async def test_f1_a_valid_mention_is_enqueued_once(feishu, redis_client) -> None:
    message = sg.feishu_message_receive()
    response = await feishu.post("/feishu/events", sealed(message))
    assert response.status_code == 200
    entries = await redis_client.xrange(KEYS.turns_stream)
    assert len(entries) == 1
    job = json.loads(entries[0][1][b"job"])
    assert job["event"]["text"] == "why is checkout returning 500s?"
    assert job["event"]["mentioned"] is True
    assert job["event"]["author"] == sg.FEISHU_USER_OPEN_ID


def test_f2_feishu_without_an_encrypt_key_refuses_to_start(feishu_api) -> None:
    with pytest.raises(BotConfigError, match="FEISHU_ENCRYPT_KEY"):
        create_app(feishu_settings(feishu_api, FEISHU_ENCRYPT_KEY=None), redis=object())  # type: ignore[arg-type]


async def test_f3_plaintext_while_a_key_is_configured_is_refused(feishu, redis_client) -> None:
    response = await feishu.post(
        "/feishu/events", sealed(sg.feishu_message_receive(), encrypt=False)
    )
    assert response.status_code in (400, 401)
    assert await stream_len(redis_client) == 0


@pytest.mark.parametrize(
    "drop", ["X-Lark-Request-Timestamp", "X-Lark-Request-Nonce", "X-Lark-Signature", "all"]
)
async def test_f4_missing_signature_headers_are_401(feishu, redis_client, drop) -> None:
    body, headers = sealed(sg.feishu_message_receive())
    for name in ("X-Lark-Request-Timestamp", "X-Lark-Request-Nonce", "X-Lark-Signature"):
        if drop in (name, "all"):
            del headers[name]
    response = await feishu.post("/feishu/events", (body, headers))
    assert response.status_code == 401
    assert response.json() == {"error": "request verification failed"}
    assert await stream_len(redis_client) == 0


@pytest.mark.parametrize("skew", [-301, 301, -30 * 24 * 3600])
async def test_f5_timestamps_outside_five_minutes_are_401(feishu, redis_client, skew) -> None:
    request = sealed(sg.feishu_message_receive(), timestamp=time.time() + skew)
    assert (await feishu.post("/feishu/events", request)).status_code == 401
    assert await stream_len(redis_client) == 0


async def test_f6_an_exact_replay_is_acknowledged_but_not_reprocessed(feishu, redis_client) -> None:
    request = sealed(sg.feishu_message_receive(), nonce="fixed-nonce-1")
    assert (await feishu.post("/feishu/events", request)).status_code == 200
    assert (await feishu.post("/feishu/events", request)).status_code == 200
    assert await stream_len(redis_client) == 1
    metrics = (await feishu.client.get("/metrics")).text
    assert 'chatops_ingress_events_total{outcome="replay",platform="feishu"} 1.0' in metrics


async def test_f7_redeliveries_of_one_event_id_are_processed_once(feishu, redis_client) -> None:
    message = sg.feishu_message_receive(event_id="ev-redelivered")
    for _ in range(4):  # Feishu redelivers up to 4 times; each is a fresh, signed request
        assert (await feishu.post("/feishu/events", sealed(message))).status_code == 200
    assert await stream_len(redis_client) == 1
    ttl = await redis_client.ttl(KEYS.seen_event("feishu", "ev-redelivered"))
    assert ttl > 23 * 3600, "kept 24 h: redelivery spans about 7 h"


async def test_f8_v1_events_are_deduped_on_their_uuid(feishu, redis_client) -> None:
    message = sg.feishu_message_receive_v1()
    for _ in range(2):
        assert (await feishu.post("/feishu/events", sealed(message))).status_code == 200
    assert await stream_len(redis_client) == 1


@pytest.mark.parametrize(
    "body",
    [
        b'{"encrypt": "not base64 at all!!"}',
        b'{"encrypt": "AAAAAAAAAAAAAAAAAAAAAA=="}',
        json.dumps({"encrypt": sg.feishu_encrypt(b'{"a": 1}', "another-key")}).encode(),
        b"\xff\xfe not json",
    ],
    ids=["not-base64", "short-ciphertext", "another-key", "not-json"],  # stable across processes
)
async def test_f9_undecryptable_bodies_are_400_with_a_generic_body(
    feishu, redis_client, body
) -> None:
    stamp, nonce = str(int(time.time())), "n-f9"
    headers = {
        "Content-Type": "application/json",
        "X-Lark-Request-Timestamp": stamp,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": sg.feishu_signature(stamp, nonce, ENCRYPT_KEY, body),
    }
    response = await feishu.post("/feishu/events", (body, headers))
    assert response.status_code == 400
    assert response.json() == {"error": "malformed request"}


async def test_f10_a_wrong_verification_token_is_401(feishu, redis_client) -> None:
    request = sg.feishu_request(
        sg.feishu_message_receive(), encrypt_key=ENCRYPT_KEY, verification_token="wrong"
    )
    assert (await feishu.post("/feishu/events", request)).status_code == 401
    assert await stream_len(redis_client) == 0


@pytest.mark.parametrize("encrypt", [True, False])
async def test_f11_the_challenge_is_echoed_and_dispatches_nothing(
    feishu, redis_client, encrypt
) -> None:
    challenge = sg.feishu_url_verification("ch-123")
    request = sealed(challenge, sign=False)
    if not encrypt:  # the plain variant is only valid for apps without a key: refused here
        request = sealed(challenge, sign=False, encrypt=False)
    response = await feishu.post("/feishu/events", request)
    if encrypt:
        assert response.status_code == 200
        assert response.json() == {"challenge": "ch-123"}
    else:
        assert response.status_code == 400
    assert await stream_len(redis_client) == 0


async def test_f13_a_stop_press_on_the_card_tombstones_its_turn_once(feishu, redis_client) -> None:
    root = "om_root_1"
    await feishu.post("/feishu/events", sealed(sg.feishu_message_receive(message_id=root)))
    job = json.loads((await redis_client.xrange(KEYS.turns_stream))[0][1][b"job"])
    press = sg.feishu_card_action(
        value={"action": "stop", "turn": job["turn_id"], "thread": root},
        open_message_id="om_card_1",
        event_id="ev-press-1",
    )
    session = session_id_for("feishu", sg.FEISHU_TENANT_KEY, sg.FEISHU_CHAT_ID, root)
    async with rings(redis_client, Keys().bell(session)) as bell:
        for _ in range(2):  # a replayed callback (new nonce each time) acts once
            response = await feishu.post("/feishu/card", sealed(press))
            assert response.status_code == 200
            assert response.json()["toast"]["type"] == "info"
        assert await bell.so_far() == [f"stop:{job['turn_id']}"]
    assert await redis_client.exists(Keys().tombstone(session, job["turn_id"])) == 1
    unsigned = sealed(press, sign=False)
    assert (await feishu.post("/feishu/card", unsigned)).status_code == 401


async def test_a_reply_in_the_thread_steers(feishu, redis_client) -> None:
    root = "om_root_2"
    await feishu.post("/feishu/events", sealed(sg.feishu_message_receive(message_id=root)))
    reply = sg.feishu_message_receive(text="看一下网关", mentions=[], root_id=root, parent_id=root)
    assert (await feishu.post("/feishu/events", sealed(reply))).status_code == 200
    session = session_id_for("feishu", sg.FEISHU_TENANT_KEY, sg.FEISHU_CHAT_ID, root)
    assert await redis_client.llen(Keys().steers(session)) == 1
    stop = sg.feishu_message_receive(text="停止", mentions=[], root_id=root, parent_id=root)
    assert (await feishu.post("/feishu/events", sealed(stop))).status_code == 200
    turns = await redis_client.smembers(KEYS.open_turns(session))
    assert all([await redis_client.exists(Keys().tombstone(session, t.decode())) for t in turns])


async def test_f14_a_legacy_card_callback_is_verified_with_the_token(feishu, redis_client) -> None:
    root = "om_root_3"
    await feishu.post("/feishu/events", sealed(sg.feishu_message_receive(message_id=root)))
    job = json.loads((await redis_client.xrange(KEYS.turns_stream))[0][1][b"job"])
    press = sg.feishu_legacy_card_action(
        value={"action": "stop", "turn": job["turn_id"], "thread": root},
        open_message_id="om_card_3",
    )
    forged = sg.feishu_legacy_card_request(press, verification_token="not-the-token")
    assert (await feishu.post("/feishu/card", forged)).status_code == 401
    session = session_id_for("feishu", sg.FEISHU_TENANT_KEY, sg.FEISHU_CHAT_ID, root)
    assert await redis_client.exists(Keys().tombstone(session, job["turn_id"])) == 0
    genuine = sg.feishu_legacy_card_request(press, verification_token=TOKEN)
    async with rings(redis_client, Keys().bell(session)) as bell:
        assert (await feishu.post("/feishu/card", genuine)).status_code == 200
        assert await redis_client.exists(Keys().tombstone(session, job["turn_id"])) == 1
        assert (await feishu.post("/feishu/card", genuine)).status_code == 200  # replay: no-op
        assert await bell.so_far() == [f"stop:{job['turn_id']}"]


def _receive_with(**message_fields: Any) -> dict[str, Any]:
    payload = sg.feishu_message_receive()
    payload["event"]["message"].update(message_fields)
    return payload


@pytest.mark.parametrize(
    "payload",
    [
        _receive_with(content={"text": "not a string"}),
        _receive_with(mentions="not a list"),
        _receive_with(create_time="abc"),
        _receive_with(chat_id=None, message_id=7),
        {**sg.feishu_message_receive(), "event": {"sender": None, "message": {}}},
    ],
)
async def test_f9_authentic_payloads_of_unexpected_shape_are_400_not_500(
    feishu, redis_client, payload
) -> None:
    response = await feishu.post("/feishu/events", sealed(payload))
    assert response.status_code in (200, 400)  # 200 only when the odd field is harmless
    assert response.status_code != 500
    if response.status_code == 400:
        assert response.json() == {"error": "malformed request"}


async def test_f9_absurdly_nested_json_is_400_even_unsigned(feishu, redis_client) -> None:
    body = b"[" * 200_000 + b"]" * 200_000
    for path in ("/feishu/events", "/feishu/card"):
        response = await feishu.post(path, (body, {"Content-Type": "application/json"}))
        assert response.status_code == 400


async def test_an_absurd_send_time_is_ignored_not_a_500(feishu, redis_client) -> None:
    response = await feishu.post("/feishu/events", sealed(_receive_with(create_time="9" * 400)))
    assert response.status_code == 200
    job = json.loads((await redis_client.xrange(KEYS.turns_stream))[0][1][b"job"])
    assert job["event"]["sent_at"] == 0


OTHER_APP = "cli_a1other0000000f2"
OTHER_TENANT = "736588c9260f175d"


def _naming(payload: dict[str, Any], **fields: str) -> dict[str, Any]:
    """`payload` with its envelope (schema 2.0 `header`, v1 `event`) naming other values."""
    envelope = payload["header"] if "header" in payload else payload["event"]
    envelope.update(fields)
    return payload


async def _started_turn(feishu: Feishu, redis: aioredis.Redis, root: str) -> tuple[str, str]:
    """Start a turn in thread `root`; return (session id, turn id)."""
    await feishu.post("/feishu/events", sealed(sg.feishu_message_receive(message_id=root)))
    entries: Any = await redis.xrange(KEYS.turns_stream)
    job = json.loads(entries[-1][1][b"job"])
    return session_id_for("feishu", sg.FEISHU_TENANT_KEY, sg.FEISHU_CHAT_ID, root), job["turn_id"]


def _stop_press(root: str, turn: str, **header: str) -> dict[str, Any]:
    press = sg.feishu_card_action(
        value={"action": "stop", "turn": turn, "thread": root}, open_message_id="om_card_a9"
    )
    press["header"].update(header)
    return press


@pytest.fixture
async def feishu_one_tenant(
    feishu_api: FakeFeishuAPI, redis_client: aioredis.Redis
) -> AsyncIterator[Feishu]:
    """The app with `FEISHU_TENANT_KEY` set to the fixtures' tenant."""
    app = Feishu(feishu_settings(feishu_api, FEISHU_TENANT_KEY=sg.FEISHU_TENANT_KEY), redis_client)
    await app.lifespan.__aenter__()
    yield app
    await app.client.aclose()
    await app.lifespan.__aexit__(None, None, None)


@pytest.mark.parametrize(
    "payload",
    [
        _naming(sg.feishu_message_receive(), app_id=OTHER_APP),
        _naming(sg.feishu_message_receive_v1(), app_id=OTHER_APP),
    ],
    ids=["v2", "v1"],
)
async def test_a9_an_event_for_another_app_is_acknowledged_and_dropped(
    feishu, redis_client, payload, caplog
) -> None:
    """A9: 200, so Feishu does not deliver it again; nothing written; no body logged."""
    caplog.set_level(logging.INFO, logger="bot")
    request = sealed(payload)
    response = await feishu.post("/feishu/events", request)
    assert response.status_code == 200
    assert await stream_len(redis_client) == 0
    dropped = [r.getMessage() for r in caplog.records if "not ours" in r.getMessage()]
    assert dropped == [f"feishu event {_event_id(payload)} from app {OTHER_APP} dropped: not ours"]
    assert all(request[0].decode() not in r.getMessage() for r in caplog.records)


def _event_id(payload: dict[str, Any]) -> str:
    return str(payload["header"]["event_id"] if "header" in payload else payload["uuid"])


async def test_a9_a_card_press_for_another_app_stops_nothing(feishu, redis_client) -> None:
    """A9: a Stop press from another app's card is acknowledged and changes nothing."""
    root = "om_root_a9_app"
    session, turn = await _started_turn(feishu, redis_client, root)
    async with rings(redis_client, Keys().bell(session)) as bell:
        press = sealed(_stop_press(root, turn, app_id=OTHER_APP))
        foreign = await feishu.post("/feishu/card", press)
        assert foreign.status_code == 200
        assert "toast" not in foreign.json()
        assert await bell.so_far() == []
    assert await redis_client.exists(Keys().tombstone(session, turn)) == 0
    ours = await feishu.post("/feishu/card", sealed(_stop_press(root, turn)))
    assert ours.json()["toast"]["type"] == "info"
    assert await redis_client.exists(Keys().tombstone(session, turn)) == 1


async def test_a9_another_tenant_is_dropped_when_our_tenant_is_set(
    feishu_one_tenant, redis_client
) -> None:
    """A9 with `FEISHU_TENANT_KEY`: events and card callbacks of another tenant."""
    feishu = feishu_one_tenant
    foreign = _naming(sg.feishu_message_receive(), tenant_key=OTHER_TENANT)
    assert (await feishu.post("/feishu/events", sealed(foreign))).status_code == 200
    foreign_v1 = _naming(sg.feishu_message_receive_v1(), tenant_key=OTHER_TENANT)
    assert (await feishu.post("/feishu/events", sealed(foreign_v1))).status_code == 200
    assert await stream_len(redis_client) == 0

    root = "om_root_a9_tenant"
    session, turn = await _started_turn(feishu, redis_client, root)
    assert await stream_len(redis_client) == 1  # our own tenant's event is accepted
    value = {"action": "stop", "turn": turn, "thread": root}
    legacy = sg.feishu_legacy_card_action(value=value, open_message_id="om_card_a9")
    legacy["tenant_key"] = OTHER_TENANT
    request = sg.feishu_legacy_card_request(legacy, verification_token=TOKEN)
    assert (await feishu.post("/feishu/card", request)).status_code == 200
    press = _stop_press(root, turn, tenant_key=OTHER_TENANT)
    assert (await feishu.post("/feishu/card", sealed(press))).status_code == 200
    assert await redis_client.exists(Keys().tombstone(session, turn)) == 0

    # A person of another organization in a shared chat presses our card: the callback is
    # still ours (its header names our tenant), so it counts.
    shared = _stop_press(root, turn)
    shared["event"]["operator"]["tenant_key"] = OTHER_TENANT
    assert (await feishu.post("/feishu/card", sealed(shared))).json()["toast"]["type"] == "info"
    assert await redis_client.exists(Keys().tombstone(session, turn)) == 1


async def test_a9_without_our_tenant_set_the_tenant_is_not_checked(feishu, redis_client) -> None:
    """A9: `FEISHU_TENANT_KEY` unset (documented): only the app id is compared."""
    other_tenant = _naming(sg.feishu_message_receive(), tenant_key=OTHER_TENANT)
    assert (await feishu.post("/feishu/events", sealed(other_tenant))).status_code == 200
    assert await stream_len(redis_client) == 1
