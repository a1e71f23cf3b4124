"""Half a surrogate pair, escaped alone in JSON, is text like any other (docs/reliability.md X18).

Why this way: JSON may escape half of a UTF-16 surrogate pair on its own (the high half of an
emoji without its low half), and Python decodes it to a string that cannot be encoded as UTF-8,
so every writer of such text (the history store, the next model request, a card) would fail
on it. A model's stream is where a stranger's text most often comes back from, so the fake
provider streams one in an answer; the whole bot runs in one process (signed mentions through
the real ingress, the real worker), and the test reads the card, the stored history and the
follow-up request the provider was sent. A chat message carrying one is refused by the ingress
with a 400 (Slack and Feishu never send one), and that is checked too.
"""

from __future__ import annotations

import json

from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.inprocess_bot import SECRET, Bot
from tests.slack_view import card_text, cards_in, final_card, updates_of

LONE = "\ud83d"
"""The high half of an emoji's surrogate pair, alone."""


async def test_a_lone_surrogate_from_the_model_is_replaced_stored_and_sent_again(
    bot: Bot, fake_llm: fp.FakeProvider, slack_api
) -> None:
    fake_llm.script(
        fp.TextReply(f"Checkout is slow {LONE} since the deploy."), fp.TextReply("Still slow.")
    )
    worker = await bot.start_worker()
    thread = sg.slack_ts()
    await bot.post(sg.slack_app_mention(ts=thread))
    await worker.wait_finished(1)
    answered = "Checkout is slow \ufffd since the deploy."
    assert answered in card_text(final_card(slack_api, thread))
    shown = slack_api.calls_to("chat.postMessage") + slack_api.calls_to("chat.update")
    assert not [c for c in shown if LONE in card_text(c)]  # the live text was whole too
    again = f"<@{sg.SLACK_BOT_USER_ID}> and now?"
    await bot.post(sg.slack_app_mention(ts=sg.slack_ts(), thread_ts=thread, text=again))
    await worker.wait_finished(2)  # the history was stored, and read back for the follow-up
    first, second = fake_llm.requests
    assert first.status == second.status == 200
    said = [m["content"] for m in second.messages if m["role"] == "assistant"]
    assert said == [answered]
    latest = cards_in(slack_api, thread)[-1]  # the follow-up's own card
    assert "Still slow." in card_text(updates_of(slack_api, latest.response["ts"])[-1])


async def test_a_lone_surrogate_in_a_mention_is_refused_with_a_400(bot: Bot) -> None:
    mention = sg.slack_app_mention(text=f"<@{sg.SLACK_BOT_USER_ID}> why is {LONE} checkout slow?")
    body = json.dumps(mention).encode()  # ASCII escapes: the lone half is sent as `\ud83d`
    raw, headers = sg.slack_request(body, secret=SECRET)
    response = await bot.http.post("/slack/events", content=raw, headers=headers)
    assert response.status_code == 400
    assert response.json() == {"error": "malformed request"}
