"""The card publisher: gets the progress card of one analysis onto the platform, truthfully.

Contract (docs/design.md §Invariants I6, docs/reliability.md C1-C8):
- One card per analysis: posted once in the thread, then updated. A continuing analysis (a
  redirected turn's follow-up, a turn resumed on another worker) reuses the card it finds in the
  session's card record, as long as that card is not final.
- Updates coalesce: `show` only records the latest state; one flusher sends it at most once per
  `min_interval_s` (Slack `chat.update` is Tier 3, ~50/min; Feishu allows 5 QPS per message) and
  waits out a 429's `Retry-After`, after which it sends whatever is latest.
- Fenced by (lease token, sequence): every send is first claimed in the card record
  (`bot.publishing.card_record`) by a Lua script that refuses a writer with an older token and
  anything after a final state. A send that raced a final (a paused zombie whose claim predates the
  final) is followed by a re-read, and the stored final is sent again, so a final card stays
  final.
- The final state is recorded before it is sent; if it cannot be delivered now, the record says
  so (`delivered=0`) and the reaper delivers it later. A card deleted by a person (C7) does not
  stop the run: the final answer is posted as a new message.
- On Slack, a status line ("is investigating…") is refreshed before its 2-minute expiry and
  cleared on every exit path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from agent_core import AgentError, checkpoint
from bot.publishing.card_posting import post_card_once
from bot.publishing.card_record import CardRecord
from bot.publishing.platform import (
    CardGone,
    CardRef,
    CardTarget,
    ChatPlatform,
    PlatformError,
    PlatformRateLimited,
    PlatformUnavailable,
)
from bot.state.audit import AuditLog
from cards import CardStatus, ProgressCard

__all__ = ["CardPublisher", "PublisherOptions"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class PublisherOptions:
    """Pacing of card updates (seconds)."""

    min_interval_s: float = 1.0
    """Least time between two updates of one card."""
    status_refresh_s: float = 90.0
    """Slack's status line clears itself after 2 minutes: refresh it before that."""
    final_timeout_s: float = 20.0
    """How long the final update is retried before it is left to the reaper."""
    retry_s: float = 1.0
    """Back-off after a timeout or 5xx."""


class CardPublisher:
    """Publishes one analysis's card; owned by the actor (its `run` task lives in its group)."""

    def __init__(
        self,
        platform: ChatPlatform,
        record: CardRecord,
        target: CardTarget,
        token: int,
        options: PublisherOptions | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        self._platform = platform
        self._audit = audit
        self._audited: CardStatus | None = None
        """The last status recorded in the audit (each change is recorded once)."""
        self._record = record
        self._target = target
        self._token = token
        self._options = options or PublisherOptions()
        self._ref: CardRef | None = None
        self._desired: ProgressCard | None = None
        self._claimed: ProgressCard | None = None
        self._changed = asyncio.Event()
        self._last_sent = float("-inf")
        self._status_at = float("-inf")
        self._status_shown = False
        self.sent = 0
        """Platform calls that changed the card (posts and updates), for tests and metrics."""

    @property
    def ref(self) -> CardRef | None:
        """Where the card is, once posted."""
        return self._ref

    async def attach(self) -> None:
        """Become the writer of the analysis's live card (if any), without showing anything."""
        message_id = await self._record.attach(self._token, self._target)
        if message_id:
            self._ref = CardRef(self._target.platform, self._target.channel, message_id)

    async def open(self, card: ProgressCard) -> None:
        """Post the card (or attach to the analysis's live card) and show `card` on it."""
        await self._deliver_leftover()
        await self.attach()
        self.show(card)
        await self._flush()
        await self._refresh_status(card, force=True)

    def show(self, card: ProgressCard) -> None:
        """Make `card` the state to publish next (earlier unsent states are dropped)."""
        self._desired = card
        self._changed.set()

    async def run(self) -> None:
        """Send changes as they come, paced, until cancelled (the final goes via `finish`)."""
        while True:
            checkpoint()  # redis-py on 3.11 can swallow a cancel (see `checkpoint`)
            wait = self._options.status_refresh_s
            try:
                async with asyncio.timeout(wait):
                    await self._changed.wait()
            except TimeoutError:
                if self._desired is not None:
                    await self._refresh_status(self._desired)
                continue
            pause = self._last_sent + self._options.min_interval_s - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            await self._flush(protected=True)
            if self._desired is not None:
                await self._refresh_status(self._desired)

    async def flush(self) -> bool:
        """Send the latest state now (the flusher task is gone); True when it was shown."""
        return await self._flush()

    async def finish(self, card: ProgressCard) -> bool:
        """Record and deliver the final state; clear the status line. True when delivered.

        Call it shielded: it must run even when the turn was cancelled. Idempotent.
        """
        assert card.is_final
        self.show(card)
        delivered = False
        try:
            async with asyncio.timeout(self._options.final_timeout_s):
                delivered = await self._flush()
        except TimeoutError:
            log.warning("final card of %s not delivered yet: left to the reaper", card.turn_id)
        finally:
            if not delivered and self._claimed is card:
                await self._hand_over()
            await self._clear_status()
        return delivered

    async def _hand_over(self) -> None:
        try:
            await self._record.drop_delivery()
        except AgentError as exc:
            log.warning("final card left to the reaper's stale-delivery check: %s", exc)

    async def _flush(self, *, protected: bool = False) -> bool:
        """Send the latest state, retrying throttles and outages. True when it was shown.

        Each state is claimed in the card record once (the fence), then delivered until the
        platform takes it, is refused for good, or a newer live state replaces it. `protected`
        (the flusher's own sends): a send under way is not cut by a cancellation
        (`_send_whole`); `finish` keeps its own deadline instead.
        """
        while True:
            checkpoint()
            card = self._desired
            if card is None:
                return True
            self._changed.clear()
            try:
                if card is not self._claimed:
                    if not await self._record.claim(self._token, card):
                        log.info("card update for %s refused by the fence", card.turn_id)
                        return False
                    self._claimed = card
                await (self._send_whole(card) if protected else self._send(card))
                return True
            except PlatformRateLimited as exc:
                await asyncio.sleep(exc.retry_after_s)
            except PlatformUnavailable as exc:
                log.info("card update failed (%s); retrying", exc)
                await asyncio.sleep(self._options.retry_s)
            except (PlatformError, AgentError) as exc:
                log.warning("card update not made: %s", exc)
                return False
            except Exception:  # a card that cannot be shown must never end the analysis
                log.exception("card update failed unexpectedly")
                return False

    async def _send_whole(self, card: ProgressCard) -> None:
        """`_send`, not cut by a cancellation once under way (for `final_timeout_s` at most).

        The flusher is cancelled when its turn ends, often while an update is in flight: the
        platform may have shown it, and only a send that runs to its end records it in the
        audit trail, so the trail says what the platform was sent (a stop's `stopping`
        included). The final state follows through `finish` either way.
        """
        sending = asyncio.get_running_loop().create_task(self._send(card))
        try:
            await asyncio.shield(sending)
        except asyncio.CancelledError:
            try:
                await asyncio.wait({sending}, timeout=self._options.final_timeout_s)
            finally:  # past the grace, or cancelled again: the send goes too
                if not sending.done():
                    sending.cancel()
            if sending.done() and not sending.cancelled():
                sending.exception()  # seen here; the cancellation is what goes on
            raise

    async def _send(self, card: ProgressCard) -> None:
        await self._deliver(card)
        self._last_sent = time.monotonic()
        self.sent += 1
        if self._audit is not None and card.status is not self._audited:
            self._audited = card.status
            session = self._record.session_id
            event = self._audit.event(session, card.turn_id, "card", status=card.status.value)
            await self._audit.record(event)
        if card.is_final:
            await self._record.mark_delivered()
        else:
            await self._heal()

    async def _deliver(self, card: ProgressCard) -> None:
        if self._ref is not None:
            try:
                await self._platform.update_card(self._ref, card)
                return
            except CardGone:
                log.warning("card %s was deleted; posting anew", self._ref.message_id)
                self._ref = None
                if not card.is_final:
                    return  # the run goes on; its final answer is posted as a new message
        self._ref = await post_card_once(self._platform, self._record, self._target, card)

    async def _heal(self) -> None:
        """After a live update: if a final (or a newer writer) landed meanwhile, re-send it."""
        stored = await self._record.read()
        raced = stored.get("final") == "1" or int(stored.get("token") or "0") > self._token
        if raced and stored.get("state") and self._ref is not None:
            final = ProgressCard.from_json(stored["state"])
            if final.is_final:
                await self._platform.update_card(self._ref, final)

    async def _deliver_leftover(self) -> None:
        """Show a previous analysis's final state that its worker could not deliver.

        Attaching starts a new record for the session; without this, a final recorded during a
        platform outage would be forgotten with the old record (the reaper delivers it later
        otherwise). Best effort: a failure here is logged, and the new analysis goes on.
        """
        try:
            fields = await self._record.read()
            if fields.get("final") != "1" or fields.get("delivered") == "1":
                return
            if not fields.get("state") or not fields.get("message_id"):
                return
            if not await self._record.take_delivery(stale_s=0):
                return
            ref = CardRef(self._target.platform, fields.get("channel", ""), fields["message_id"])
            await self._platform.update_card(ref, ProgressCard.from_json(fields["state"]))
            await self._record.mark_delivered()
        except Exception as exc:
            log.warning("a previous final card could not be delivered: %s", exc)

    async def _refresh_status(self, card: ProgressCard, *, force: bool = False) -> None:
        if card.is_final:
            return
        now = time.monotonic()
        if not force and now - self._status_at < self._options.status_refresh_s:
            return
        text = "is stopping…" if card.status is CardStatus.STOPPING else "is investigating…"
        try:
            await self._platform.set_status(self._target, text)
            self._status_at, self._status_shown = now, True
        except PlatformError as exc:
            log.info("status line not set: %s", exc)

    async def clear_status(self) -> None:
        """Clear the status line (every exit path of an analysis ends with this)."""
        await self._clear_status()

    async def _clear_status(self) -> None:
        if not self._status_shown:
            return
        try:
            await self._platform.set_status(self._target, "")
            self._status_shown = False
        except PlatformError as exc:
            log.warning("status line not cleared: %s", exc)
