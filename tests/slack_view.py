"""What a person in a Slack thread sees of the bot's card, read from the fake Web API's records.

Shared by the end-to-end tests: the card is the first successful `chat.postMessage` in the
thread, its current state the last successful `chat.update` of that message (or the post).
"""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.slack_api import FakeSlackAPI, RecordedCall

__all__ = ["blocks", "card_text", "cards_in", "final_card", "stop_buttons", "updates_of"]


def cards_in(api: FakeSlackAPI, thread: str) -> list[RecordedCall]:
    """The bot's successful posts in `thread`."""
    return [
        c
        for c in api.calls_to("chat.postMessage")
        if c.params.get("thread_ts") == thread and c.status == 200
    ]


def blocks(call: RecordedCall) -> list[dict[str, Any]]:
    """The Block Kit blocks a post or update carried."""
    raw = call.params.get("blocks")
    return json.loads(raw) if isinstance(raw, str) else list(raw or [])


def stop_buttons(call: RecordedCall) -> list[dict[str, Any]]:
    """The buttons labelled "Stop" on a post or update."""
    return [
        element
        for block in blocks(call)
        if block.get("type") == "actions"
        for element in block.get("elements", [])
        if "Stop" in element.get("text", {}).get("text", "")
    ]


def card_text(call: RecordedCall) -> str:
    """Everything a post or update shows, as one string."""
    return json.dumps(blocks(call), ensure_ascii=False) + str(call.params.get("text", ""))


def updates_of(api: FakeSlackAPI, ts: str) -> list[RecordedCall]:
    """Successful `chat.update` calls of the message `ts`, in order."""
    return [c for c in api.calls_to("chat.update") if c.params.get("ts") == ts and c.status == 200]


def final_card(api: FakeSlackAPI, thread: str) -> RecordedCall:
    """The latest state of the thread's one card (fails when there is not exactly one)."""
    (posted,) = cards_in(api, thread)
    updates = updates_of(api, posted.response["ts"])
    return updates[-1] if updates else posted
