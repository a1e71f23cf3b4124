"""Pure rendering of progress cards for Slack, Feishu and the console (no I/O, no platform SDKs).

`ProgressCard` is what a person in the thread sees of a turn; `render_slack` and `render_feishu`
turn it into each platform's JSON within the limits in `cards._limits`, `render_console` into
plain text for a terminal. A `Notice` (a message the bot posts on its own, such as an alert's
root message) is rendered alike by `render_slack_notice`, `render_feishu_notice` and
`render_console_notice`. Posting and updating is `bot`'s job.
"""

from cards._console import render_console
from cards._feishu import render_feishu
from cards._limits import (
    ELLIPSIS,
    FEISHU,
    SLACK,
    FeishuLimits,
    LimitExceeded,
    SlackLimits,
    truncate,
)
from cards._model import (
    CardApproval,
    CardChild,
    CardStatus,
    CardStep,
    Intervention,
    InterventionKind,
    ProgressCard,
    StepState,
)
from cards._notice import (
    Notice,
    render_console_notice,
    render_feishu_notice,
    render_slack_notice,
    safe_url,
)
from cards._slack import render_slack, slack_text

__all__ = [
    "CardApproval",
    "CardChild",
    "ELLIPSIS",
    "FEISHU",
    "SLACK",
    "CardStatus",
    "CardStep",
    "FeishuLimits",
    "Intervention",
    "InterventionKind",
    "LimitExceeded",
    "Notice",
    "ProgressCard",
    "SlackLimits",
    "StepState",
    "render_console",
    "render_console_notice",
    "render_feishu",
    "render_feishu_notice",
    "render_slack",
    "render_slack_notice",
    "safe_url",
    "slack_text",
    "truncate",
]
