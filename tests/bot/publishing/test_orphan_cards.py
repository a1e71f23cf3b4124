"""A writer killed between the platform taking its post and the card record naming it (row C11).

Why this way: the kill is the one step that matters, a `CardRecord.set_message` that never
returns (raising `Killed`, which no `except Exception` in the publisher catches, the way a
SIGKILL ends the task there). Everything else is real: the Slack and Feishu adapters against
their protocol fakes, the card record and the lease on a real Redis, the successor a new
`CardPublisher` under a newer lease token, or the `Reaper`. What is checked is what people in
the thread see: one card, showing the latest state.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis

from bot.adapters.feishu.cards import FeishuCards
from bot.adapters.slack.cards import SlackCards
from bot.events import Platform, session_id_for
from bot.keys import BotKeys
from bot.ops.reaper import Reaper
from bot.publishing.card_publisher import CardPublisher
from bot.publishing.card_record import CardRecord
from bot.publishing.platform import CardTarget, ChatPlatform
from bot.settings import Settings
from bot.state.lease import Leases
from bot.state.settle import SettleWriter
from cards import CardStatus, ProgressCard
from tests.fakes import signing as sg
from tests.fakes.feishu_api import FakeFeishuAPI
from tests.fakes.signing import FEISHU_APP_ID, FEISHU_APP_SECRET, FEISHU_CHAT_ID
from tests.fakes.slack_api import FakeSlackAPI, RecordedCall, ratelimited, slack_error
from tests.slack_view import card_text, cards_in, final_card, stop_buttons, updates_of

KEYS = BotKeys()
ROOT = "om_" + "b" * 32
"""The Feishu mention the thread hangs off."""


class Killed(BaseException):
    """The worker's process ended here."""


@dataclass
class Thread:
    """One incident thread: where its card goes, and the session's record and leases."""

    client: ChatPlatform
    redis: aioredis.Redis
    session: str
    target: CardTarget

    @property
    def record(self) -> CardRecord:
        return CardRecord(self.redis, KEYS, self.session)

    @property
    def leases(self) -> Leases:
        return Leases(self.redis, KEYS, ttl_s=30)

    async def publisher(self, worker: str, turn: str) -> CardPublisher:
        """The card publisher of a worker that takes the session now (any earlier lease lost)."""
        await self.redis.delete(KEYS.live_turn(self.session))
        lease = await self.leases.try_acquire(self.session, worker, turn)
        assert lease is not None
        return CardPublisher(self.client, self.record, self.target, lease.token)

    async def killed_mid_post(self, card: ProgressCard) -> None:
        """A worker posts `card` and dies before the record names the message."""
        doomed = await self.publisher("doomed", card.turn_id)

        async def dies(message_id: str) -> None:
            raise Killed(message_id)

        doomed._record.set_message = dies  # type: ignore[method-assign]
        with pytest.raises(Killed):
            await doomed.open(card)
        fields = await self.record.read()
        assert fields["message_id"] == "" and fields["posting"]  # the post was never recorded


@pytest.fixture
async def slack(slack_api: FakeSlackAPI, redis_client: aioredis.Redis) -> AsyncIterator[Thread]:
    thread = sg.slack_ts()
    slack_api.add_message(sg.SLACK_CHANNEL_ID, thread, "@chatops why is checkout slow?")
    client = SlackCards.from_settings(
        Settings(_env_file=None, SLACK_BOT_TOKEN=slack_api.token, SLACK_API_URL=slack_api.base_url)
    )
    session = session_id_for("slack", sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)
    yield Thread(
        client, redis_client, session, CardTarget(Platform.SLACK, sg.SLACK_CHANNEL_ID, thread)
    )
    await client.aclose()


def live_card(thread: Thread, turn: str = "t1") -> ProgressCard:
    return ProgressCard(title="why is checkout slow?", turn_id=turn, thread=thread.target.thread)


def latest(api: FakeSlackAPI, posted: RecordedCall) -> RecordedCall:
    """The latest state of the card `posted` made."""
    updates = updates_of(api, posted.response["ts"])
    return updates[-1] if updates else posted


async def test_c11_a_successor_shows_its_state_on_the_card_a_killed_worker_posted(
    slack: Thread, slack_api: FakeSlackAPI
) -> None:
    live = live_card(slack)
    await slack.killed_mid_post(live)
    (orphan,) = cards_in(slack_api, slack.target.thread)

    heir = await slack.publisher("heir", "t1")
    await heir.open(live.evolve(elapsed_s=12.0))
    assert heir.ref is not None and heir.ref.message_id == orphan.response["ts"]
    await heir.finish(live.evolve(status=CardStatus.ANSWERED, answer="The cache is cold."))

    assert len(cards_in(slack_api, slack.target.thread)) == 1  # no second card
    final = final_card(slack_api, slack.target.thread)
    assert "The cache is cold." in card_text(final) and not stop_buttons(final)
    fields = await slack.record.read()
    assert fields["message_id"] == orphan.response["ts"] and "posting" not in fields
    (lookup,) = slack_api.calls_to("conversations.replies")
    assert lookup.params.get("include_all_metadata") in (True, "true", "1")


async def test_c11_the_reaper_finalizes_the_card_a_killed_worker_posted(
    slack: Thread, slack_api: FakeSlackAPI, redis_client: aioredis.Redis
) -> None:
    await slack.killed_mid_post(live_card(slack, "t2"))
    await redis_client.sadd(KEYS.open_turns(slack.session), "t2")  # queued by the ingress,
    await redis_client.set(KEYS.session.begun(slack.session, "t2"), "1")  # begun by the runtime
    await redis_client.delete(KEYS.live_turn(slack.session))  # and its worker's lease expired

    reaper = Reaper(
        redis=redis_client,
        keys=KEYS,
        leases=slack.leases,
        settle=SettleWriter(redis_client, KEYS),
        platforms={Platform.SLACK: slack.client},
    )
    report = await reaper.sweep(2**62)

    assert report.interrupted == 1
    (posted,) = cards_in(slack_api, slack.target.thread)  # the orphan, not a second card
    final = final_card(slack_api, slack.target.thread)
    assert "Interrupted" in card_text(final) and not stop_buttons(final)
    fields = await slack.record.read()
    assert fields["message_id"] == posted.response["ts"] and fields["delivered"] == "1"


async def test_c11_a_post_the_lookup_cannot_find_is_made_again_not_lost(
    slack: Thread, slack_api: FakeSlackAPI
) -> None:
    # The killed worker's post never reached Slack: the mark names a card nobody has.
    heir = await slack.publisher("heir", "t3")
    await heir.attach()
    await slack.record.begin_post()  # and then the process died, before `chat.postMessage`

    await heir.open(live_card(slack, "t3"))

    (posted,) = cards_in(slack_api, slack.target.thread)
    assert heir.ref is not None and heir.ref.message_id == posted.response["ts"]
    assert len(slack_api.calls_to("conversations.replies")) == 1


async def test_c11_a_throttled_lookup_is_waited_out_and_finds_the_orphan(
    slack: Thread, slack_api: FakeSlackAPI
) -> None:
    live = live_card(slack)
    await slack.killed_mid_post(live)
    slack_api.script("conversations.replies", ratelimited(1))

    heir = await slack.publisher("heir", "t1")
    await heir.open(live.evolve(elapsed_s=3.0))

    assert [c.status for c in slack_api.calls_to("conversations.replies")] == [429, 200]
    (orphan,) = cards_in(slack_api, slack.target.thread)
    assert heir.ref is not None and heir.ref.message_id == orphan.response["ts"]


async def test_c11_a_lookup_refused_for_good_posts_the_card_rather_than_none(
    slack: Thread, slack_api: FakeSlackAPI
) -> None:
    # A token without channels:history cannot look: a second card is better than no card.
    live = live_card(slack)
    await slack.killed_mid_post(live)
    refused = slack_error("missing_scope", needed="channels:history")
    slack_api.script("conversations.replies", refused)

    heir = await slack.publisher("heir", "t1")
    await heir.open(live.evolve(elapsed_s=3.0))
    await heir.finish(live.evolve(status=CardStatus.ANSWERED, answer="Found it."))

    _, card = cards_in(slack_api, slack.target.thread)
    assert heir.ref is not None and heir.ref.message_id == card.response["ts"]
    assert "Found it." in card_text(latest(slack_api, card))


async def test_c11_an_earlier_analysis_card_is_never_taken_for_the_orphan(
    slack: Thread, slack_api: FakeSlackAPI
) -> None:
    # The thread holds the final card of an earlier analysis (posted with its own key); the
    # next analysis's worker dies mid-post before Slack took it: its heir posts a new card.
    first = await slack.publisher("w1", "t1")
    done = live_card(slack, "t1")
    await first.open(done)
    await first.finish(done.evolve(status=CardStatus.ANSWERED, answer="First answer."))

    heir = await slack.publisher("heir", "t2")
    await heir.attach()
    assert heir.ref is None  # the last card is final: the next analysis gets a fresh record
    await slack.record.begin_post()
    await heir.open(live_card(slack, "t2"))

    posts = cards_in(slack_api, slack.target.thread)
    assert len(posts) == 2 and heir.ref is not None
    assert heir.ref.message_id == posts[1].response["ts"]
    assert "First answer." in card_text(latest(slack_api, posts[0]))


async def test_c11_on_feishu_the_repeated_post_is_the_first_card(
    feishu_api: FakeFeishuAPI, redis_client: aioredis.Redis
) -> None:
    feishu_api.add_message(ROOT, text="@chatops checkout returns 500")
    settings = Settings(
        _env_file=None,
        FEISHU_APP_ID=FEISHU_APP_ID,
        FEISHU_APP_SECRET=FEISHU_APP_SECRET,
        FEISHU_DOMAIN=feishu_api.base_url,
    )
    session = session_id_for("feishu", feishu_api.tenant_key, FEISHU_CHAT_ID, ROOT)
    target = CardTarget(Platform.FEISHU, FEISHU_CHAT_ID, ROOT)
    feishu = Thread(FeishuCards.from_settings(settings), redis_client, session, target)
    live = ProgressCard(title="why 500?", turn_id="t1", thread=ROOT)
    await feishu.killed_mid_post(live)
    (orphan,) = feishu_api.bot_messages(FEISHU_CHAT_ID)

    heir = await feishu.publisher("heir", "t1")
    await heir.open(live.evolve(elapsed_s=12.0))
    await heir.finish(live.evolve(status=CardStatus.ANSWERED, answer="A bad deploy."))

    (card,) = feishu_api.bot_messages(FEISHU_CHAT_ID)  # still one
    assert heir.ref is not None
    assert card["message_id"] == orphan["message_id"] == heir.ref.message_id
    assert "A bad deploy." in json.dumps(json.loads(card["body"]["content"]), ensure_ascii=False)
    replies = feishu_api.calls_to("im.v1.message.reply")
    assert len({c.params["uuid"] for c in replies}) == 1 and len(replies) == 2
    await feishu.client.aclose()
