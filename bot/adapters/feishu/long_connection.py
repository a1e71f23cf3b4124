"""Feishu's long-connection mode (`lark.ws.Client`) as an alternative receiver.

lark-oapi's websocket client is synchronous: `start()` blocks its thread and runs the SDK's own
event loop. It runs in a daemon thread here, and its handler only normalizes and enqueues: the
write is handed to the app's event loop and awaited for at most the ack budget. If the write
fails or is late the handler raises, the SDK answers the frame with 500, and Feishu delivers the
event again (docs/reliability.md F12). Events arrive decrypted and authenticated by the connection,
so there is no signature to check; dedupe still applies (the same `header.event_id`).

lark-oapi has no way to stop a started client: the thread ends with the process.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import lark_oapi as lark

from bot.adapters import untrusted_json
from bot.adapters.feishu.inbound import FeishuIdentity, normalize_event
from bot.errors import MalformedRequest
from bot.intake.queue import Queue
from bot.intake.routing import Submit, route_event
from bot.settings import Settings

__all__ = ["ACK_BUDGET_S", "EnqueueHandler", "start_long_connection"]

log = logging.getLogger(__name__)

ACK_BUDGET_S = 2.5
"""Longest the handler waits for the write; Feishu expects an answer within 3 s."""


class EnqueueHandler:
    """The event handler lark's websocket client calls, on the client's own thread.

    lark calls `_do_without_validation(payload)` with the plaintext event JSON; it is the same
    hook its `EventDispatcherHandler` provides, implemented here without the dispatcher so the
    only work done is normalize → enqueue.
    """

    def __init__(
        self,
        queue: Queue,
        identity: FeishuIdentity,
        loop: asyncio.AbstractEventLoop,
        submit: Submit | None = None,
    ) -> None:
        self._queue = queue
        self._submit = submit or (lambda event: route_event(queue, event))
        self._identity = identity
        self._loop = loop

    def _do_without_validation(self, payload: bytes) -> Any:
        try:
            event = normalize_event(untrusted_json.loads(payload), self._identity)
        except MalformedRequest as exc:  # it can never be accepted: acked, so never redelivered
            log.info("feishu ws event dropped: %s", exc.detail)
            return None
        if event is None:
            return None
        pending = asyncio.run_coroutine_threadsafe(self._submit(event), self._loop)
        try:
            outcome = pending.result(timeout=ACK_BUDGET_S)
        except BaseException:
            pending.cancel()
            raise  # lark answers 500: Feishu redelivers
        log.debug("feishu ws event %s: %s", event.event_id, outcome)
        return None


def start_long_connection(
    settings: Settings,
    queue: Queue,
    identity: FeishuIdentity,
    *,
    submit: Submit | None = None,
) -> threading.Thread:
    """Start lark's websocket client in a daemon thread, feeding the running loop's queue.

    `submit` takes in each event (`bot.intake.accept`); default: routed and written to `queue` only.
    """
    assert settings.feishu_app_id and settings.feishu_app_secret is not None
    handler = EnqueueHandler(queue, identity, asyncio.get_running_loop(), submit)
    client = lark.ws.Client(
        settings.feishu_app_id,
        settings.feishu_app_secret.get_secret_value(),
        event_handler=handler,  # duck-typed: the one hook lark calls
        domain=settings.feishu_domain or lark.FEISHU_DOMAIN,
    )
    thread = threading.Thread(target=client.start, name="feishu-long-connection", daemon=True)
    thread.start()
    return thread
