"""Pure rendering of progress cards for Slack and Feishu (no I/O, no platform SDKs).

`ProgressCard` is what a person in the thread sees of a turn; `render_slack` and `render_feishu`
turn it into each platform's JSON within the limits in `cards.limits`. Posting and updating the
card is `bot`'s job.
"""

from cards.feishu import render_feishu
from cards.limits import (
    ELLIPSIS,
    FEISHU,
    SLACK,
    FeishuLimits,
    LimitExceeded,
    SlackLimits,
    truncate,
)
from cards.model import (
    CardStatus,
    CardStep,
    Intervention,
    InterventionKind,
    ProgressCard,
    StepState,
)
from cards.slack import render_slack, slack_text

__all__ = [
    "ELLIPSIS",
    "FEISHU",
    "SLACK",
    "CardStatus",
    "CardStep",
    "FeishuLimits",
    "Intervention",
    "InterventionKind",
    "LimitExceeded",
    "ProgressCard",
    "SlackLimits",
    "StepState",
    "render_feishu",
    "render_slack",
    "slack_text",
    "truncate",
]
