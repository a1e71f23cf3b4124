"""The model boundary: wire conversion, the client, and what a provider's errors mean.

`convert` is pure; `client` does the requests; `provider_errors` maps the SDK's exceptions.
"""

from agent_core._llm.client import (
    ChatModel,
    ForcedTool,
    ModelResponse,
    ModelStreaming,
    OpenAIChatModel,
    ToolChoice,
    Usage,
)
from agent_core._llm.provider_errors import openai_http_client

__all__ = [
    "ChatModel",
    "ForcedTool",
    "ModelResponse",
    "ModelStreaming",
    "OpenAIChatModel",
    "ToolChoice",
    "Usage",
    "openai_http_client",
]
