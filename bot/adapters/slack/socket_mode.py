"""Slack Socket Mode (`SLACK_APP_TOKEN`): an alternative receiver feeding the same pipeline.

Contract (docs/design.md §Platform facts, the same as the webhook's): every envelope is normalized
by the webhook's own parser (`parse_slack`, on the payload re-encoded as the webhook body it stands
for), decided and written by `route_event`, and acknowledged with its `envelope_id` only after the
write succeeded. An envelope whose write failed or did not finish within the ack budget (Redis down
or too slow) is not acknowledged, so Slack delivers it again (`retry_attempt` 1..3); the queue's
dedupe on `event_id` makes redeliveries and twin deliveries harmless. An envelope that can never
be accepted (a malformed payload, a type we do not act on) is acknowledged and dropped, like the
webhook's 400 with `X-Slack-No-Retry`.

No signature is verified, and none could be: Socket Mode payloads carry no `X-Slack-Signature`.
The socket itself is authenticated: its single-use URL comes from `apps.connections.open`, called
with the app-level token over TLS, so what arrives on it comes from Slack.

Tasks: slack_sdk's `SocketModeClient` runs its own receive, monitor and processing tasks and runs
each message's listeners in a detached task. Our listener there only hands the request to an
inbox; normalizing, writing and acknowledging run in handler tasks of a TaskGroup inside the
receiver's dispatcher task. `stop()` refuses new envelopes (unacknowledged, so Slack redelivers
them), drains the handlers (each bounded by the ack budget), closes the socket and the SDK's
aiohttp session, and waits for the SDK's tasks to end.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlencode

from aiohttp import ClientError
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import StoreError
from bot.adapters.slack.client import DEFAULT_SLACK_API_URL
from bot.adapters.slack.inbound import SlackIdentity, parse_slack
from bot.errors import BotConfigError, MalformedRequest, QueueUnavailable
from bot.events import ChatEvent
from bot.intake.metrics import IngressMetrics
from bot.intake.queue import Queue
from bot.intake.routing import Submit, route_event
from bot.settings import Settings

__all__ = ["SlackSocketReceiver", "SocketModeOptions", "run_socket_mode", "socket_web_client"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class SocketModeOptions:
    """Timing and capacity of a Socket Mode receiver."""

    ack_budget_s: float = 2.5
    """Time allowed for one envelope's Redis work; Slack expects the ack within 3 s."""
    connect_timeout_s: float = 10.0
    """`start()` fails when Slack's `hello` has not arrived by then."""
    ping_interval_s: float = 5.0
    """slack_sdk's ping interval, also its pause between reconnect attempts."""
    max_in_flight: int = 64
    """Envelopes handled at once; more wait in the inbox (late ones are retried by Slack)."""
    close_timeout_s: float = 5.0
    """Longest `stop()` waits for the WebSocket's closing handshake."""


class SlackSocketReceiver:
    """Receives Slack events and interactions over Socket Mode and writes them to the queue.

    Use it as an async context manager, or call `start()` and `stop()`. `wait()` returns once the
    receiver is stopped and raises if it broke on its own.
    """

    def __init__(
        self,
        *,
        app_token: str,
        web_client: AsyncWebClient,
        queue: Queue,
        identity: SlackIdentity,
        options: SocketModeOptions | None = None,
        metrics: IngressMetrics | None = None,
        submit: Submit | None = None,
    ) -> None:
        """Prepare a receiver; nothing connects before `start()`.

        Args:
            app_token: The app-level token (`xapp-…`, scope `connections:write`).
            web_client: Calls `apps.connections.open` (its own token is not used for that).
            queue: Where accepted events are written.
            identity: Who the bot is, so its own posts are never input.
            options: Timing and capacity.
            metrics: The ingress counters to feed, if any (the webhook's labels).
            submit: Takes in each event (`bot.intake.accept`: presses and commands decided too);
                default: routed and written to `queue` only.
        """
        self._app_token = app_token
        self._web_client = web_client
        self._queue = queue
        self._submit = submit or (lambda event: route_event(queue, event))
        self._identity = identity
        self._options = options or SocketModeOptions()
        self._metrics = metrics
        self._inbox: asyncio.Queue[SocketModeRequest | None] = asyncio.Queue()
        self._slots = asyncio.Semaphore(self._options.max_in_flight)
        self._hello = asyncio.Event()
        self._closing = False
        self._client: SocketModeClient | None = None
        self._dispatcher: asyncio.Task[None] | None = None
        self._shutdown: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open the socket and wait for Slack's `hello`; on any failure, clean up and raise.

        Raises:
            BotConfigError: Slack refused the app token (`apps.connections.open` failed).
            TimeoutError: No `hello` within `connect_timeout_s`.
            RuntimeError: The receiver was started before.
        """
        if self._client is not None:
            raise RuntimeError("a SlackSocketReceiver starts once")
        # Built here, not in __init__: the SDK's constructor starts a task and opens a session.
        client = SocketModeClient(
            app_token=self._app_token,
            web_client=self._web_client,
            ping_interval=self._options.ping_interval_s,
        )
        self._client = client
        client.message_listeners.append(self._on_message)
        client.socket_mode_request_listeners.append(self._on_request)
        self._dispatcher = asyncio.create_task(self._dispatch(), name="slack-socket-dispatch")
        try:
            async with asyncio.timeout(self._options.connect_timeout_s):
                # Asked here rather than in connect(), which retries a refused token forever.
                client.wss_uri = await self._open_url(client)
                await client.connect()  # type: ignore[no-untyped-call]
                await self._hello.wait()
        except BaseException:
            await self.stop()
            raise
        log.info("slack socket mode connected")

    async def wait(self) -> None:
        """Wait until the receiver is stopped.

        Cancelling the caller does not stop the receiver (`stop()` does).

        Raises:
            RuntimeError: The receiver was never started, or broke without being stopped.
        """
        if self._dispatcher is None:
            raise RuntimeError("the receiver was not started")
        await asyncio.wait({self._dispatcher})
        if not self._closing:
            task = self._dispatcher
            cause = None if task.cancelled() else task.exception()
            raise RuntimeError("the Slack socket mode receiver stopped on its own") from cause

    async def stop(self) -> None:
        """Refuse new envelopes, finish in-flight ones, close the socket and its session.

        Idempotent. The cleanup is shielded and time-bounded: a cancelled caller still leaves
        nothing open, then gets its `CancelledError`.
        """
        if self._client is None:
            return
        self._closing = True
        if self._shutdown is None:
            self._shutdown = asyncio.create_task(self._close(self._client))
        try:
            await asyncio.shield(self._shutdown)
        except asyncio.CancelledError:
            await asyncio.wait({self._shutdown})  # bounded: finish the cleanup, then propagate
            raise

    @staticmethod
    async def _open_url(client: SocketModeClient) -> str:
        try:
            return await client.issue_new_wss_url()
        except SlackApiError as exc:
            error = exc.response.get("error")
            raise BotConfigError(f"Slack apps.connections.open failed: {error}") from exc

    # -- SDK listeners (run in slack_sdk's detached tasks: hand over and return)

    async def _on_message(
        self, client: AsyncBaseSocketModeClient, message: dict[str, Any], raw: str | None
    ) -> None:
        if message.get("type") == "hello":
            self._hello.set()

    async def _on_request(
        self, client: AsyncBaseSocketModeClient, request: SocketModeRequest
    ) -> None:
        if self._closing:
            log.info("slack envelope %s refused while stopping (redelivered)", request.envelope_id)
            return
        self._inbox.put_nowait(request)
        log.debug("slack envelope %s (%s) queued", request.envelope_id, request.type)

    # -- our tasks

    async def _dispatch(self) -> None:
        async with asyncio.TaskGroup() as handlers:
            while (request := await self._inbox.get()) is not None:
                await self._slots.acquire()
                handlers.create_task(self._handle(request))

    async def _handle(self, request: SocketModeRequest) -> None:
        try:
            if await self._accept(request):
                await self._ack(request.envelope_id)
        except Exception:
            log.exception("slack envelope %s failed; not acknowledged", request.envelope_id)
        finally:
            self._slots.release()

    async def _accept(self, request: SocketModeRequest) -> bool:
        """Normalize and write one envelope; True when it may be acknowledged."""
        try:
            event = self._normalize(request)
        except MalformedRequest as exc:
            if self._metrics is not None:
                self._metrics.rejected.labels("slack", str(exc.status)).inc()
            log.info("slack envelope %s dropped: %s", request.envelope_id, exc.detail)
            return True  # it can never be accepted: the ack stops Slack's retries
        if event is None:
            return True
        try:
            async with asyncio.timeout(self._options.ack_budget_s):
                outcome = await self._submit(event)
        except (TimeoutError, QueueUnavailable, StoreError) as exc:
            if self._metrics is not None:
                self._metrics.unavailable.inc()
            log.warning("slack event %s not written, not acknowledged: %s", event.event_id, exc)
            return False
        if self._metrics is not None:
            self._metrics.event(event.platform.value, outcome)
        return True

    def _normalize(self, request: SocketModeRequest) -> ChatEvent | None:
        # Re-encoded as the webhook body it stands for, so one parser serves both transports.
        # ASCII escapes: a lone surrogate the SDK's json.loads let through cannot be encoded as
        # UTF-8, but escaped it reaches the parser, which refuses it as malformed (X14).
        if request.type == "events_api":
            body = json.dumps(request.payload).encode()
            return parse_slack(body, "application/json", self._identity).event
        if request.type == "interactive":
            form = urlencode({"payload": json.dumps(request.payload)})
            return parse_slack(
                form.encode(), "application/x-www-form-urlencoded", self._identity
            ).event
        return None  # slash commands and newer types: not acted on, acknowledged

    async def _ack(self, envelope_id: str) -> None:
        assert self._client is not None, "handlers run only while started"
        try:
            await self._client.send_socket_mode_response(SocketModeResponse(envelope_id))
        except (ConnectionError, ClientError) as exc:  # written: the redelivery is deduplicated
            log.warning("slack envelope %s written, ack not sent: %s", envelope_id, exc)

    async def _close(self, client: SocketModeClient) -> None:
        if self._dispatcher is not None:
            self._inbox.put_nowait(None)
            drain_s = self._options.ack_budget_s + 1.0  # the write's budget plus the ack
            done, _ = await asyncio.wait({self._dispatcher}, timeout=drain_s)
            if not done:
                self._dispatcher.cancel()
                await asyncio.wait({self._dispatcher})
        try:
            async with asyncio.timeout(self._options.close_timeout_s):
                await client.close()  # type: ignore[no-untyped-call]
        except TimeoutError:
            log.warning("slack socket did not close in time; dropped")
        finally:
            if not client.aiohttp_client_session.closed:
                await client.aiohttp_client_session.close()
        sdk_tasks = {
            task
            for task in (
                client.message_processor,
                client.message_receiver,
                client.current_session_monitor,
            )
            if task is not None
        }
        for task in sdk_tasks:
            task.cancel()  # close() cancels them too, unless it timed out first
        if sdk_tasks:
            await asyncio.wait(sdk_tasks)


def socket_web_client(settings: Settings) -> AsyncWebClient:
    """The Web API client for `apps.connections.open`, at `SLACK_API_URL` or Slack's address.

    It holds no token: slack_sdk passes the app-level token with that one call.
    """
    base = settings.slack_api_url or DEFAULT_SLACK_API_URL
    return AsyncWebClient(base_url=base if base.endswith("/") else base + "/")


async def run_socket_mode(
    settings: Settings,
    queue: Queue,
    identity: SlackIdentity,
    *,
    metrics: IngressMetrics | None = None,
    options: SocketModeOptions | None = None,
    submit: Submit | None = None,
) -> None:
    """Receive Slack over Socket Mode until cancelled (what `chatops serve` runs for it).

    Args:
        settings: `SLACK_APP_TOKEN` and, if set, `SLACK_API_URL`.
        queue: Where accepted events are written.
        identity: The bot's identity (`fetch_identity`).
        metrics: The ingress counters to feed, if any.
        options: Timing and capacity.
        submit: Takes in each event (default: routed and written to `queue` only).

    Raises:
        BotConfigError: `SLACK_APP_TOKEN` is not set, or Slack refused it.
        TimeoutError: Slack's `hello` did not arrive in time.
        RuntimeError: The receiver broke on its own.
    """
    if settings.slack_app_token is None:
        raise BotConfigError("SLACK_APP_TOKEN is not set")
    receiver = SlackSocketReceiver(
        app_token=settings.slack_app_token.get_secret_value(),
        web_client=socket_web_client(settings),
        queue=queue,
        identity=identity,
        options=options,
        metrics=metrics,
        submit=submit,
    )
    async with receiver:
        await receiver.wait()
