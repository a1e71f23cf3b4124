"""Two local servers for `make demo`: the service to investigate and the rehearsal model.

`demo_service_app()` is a "checkout" service whose dependency `payments-db` is failing;
`rehearsal_app(service_url)` is an OpenAI-compatible endpoint that plays a scripted
investigation of it, so the whole bot runs end to end without an API key. Both are Starlette
apps; serve them with uvicorn.
"""

from bot.demo.investigation import ScriptedReply, next_reply
from bot.demo.rehearsal import LABEL, REHEARSAL_MODEL, rehearsal_app
from bot.demo.service import FAILING_DEPENDENCY, KEY_LOG_LINE, demo_service_app

__all__ = [
    "FAILING_DEPENDENCY",
    "KEY_LOG_LINE",
    "LABEL",
    "REHEARSAL_MODEL",
    "ScriptedReply",
    "demo_service_app",
    "next_reply",
    "rehearsal_app",
]
