"""The model client, built from the settings (README §Models).

`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `CHATOPS_MODEL`, `CHATOPS_TOOL_CHOICE` and
`CHATOPS_MODEL_STREAMING`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core import OpenAIChatModel, openai_http_client
from bot.settings import Settings

if TYPE_CHECKING:
    import openai

__all__ = ["MODEL_MAX_RETRIES", "build_chat_model"]

MODEL_MAX_RETRIES = 2
"""The openai SDK retries connection errors, 408/409/429 and 5xx this many times with backoff
(honouring Retry-After) and never retries another 4xx, nor a 5xx that is a validation error of
the request (`openai_http_client`)."""


def build_chat_model(settings: Settings) -> tuple[OpenAIChatModel, openai.AsyncOpenAI]:
    """Return the chat model and its client (the caller closes the client on shutdown).

    One model per process: what it learns of the provider (that it cannot stream tool calls,
    that it reports no usage) is kept, and warned about, once.
    """
    import openai  # here, not at the top: only the processes that call a model import it

    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    client = openai.AsyncOpenAI(
        base_url=settings.openai_base_url,
        api_key=key or "unset",
        max_retries=MODEL_MAX_RETRIES,
        http_client=openai_http_client(),
    )
    model = OpenAIChatModel(
        client,
        settings.model,
        tool_choice=settings.tool_choice,
        streaming=settings.model_streaming,
    )
    return model, client
