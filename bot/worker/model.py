"""The model client, built from `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `CHATOPS_MODEL`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core import OpenAIChatModel
from bot.settings import Settings

if TYPE_CHECKING:
    import openai

__all__ = ["MODEL_MAX_RETRIES", "build_chat_model"]

MODEL_MAX_RETRIES = 2
"""The openai SDK retries connection errors, 408/409/429 and 5xx this many times with backoff
(honouring Retry-After) and never retries another 4xx."""


def build_chat_model(settings: Settings) -> tuple[OpenAIChatModel, openai.AsyncOpenAI]:
    """Return the chat model and its client (the caller closes the client on shutdown)."""
    import openai  # here, not at the top: only the processes that call a model import it

    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    client = openai.AsyncOpenAI(
        base_url=settings.openai_base_url, api_key=key or "unset", max_retries=MODEL_MAX_RETRIES
    )
    return OpenAIChatModel(client, settings.model), client
