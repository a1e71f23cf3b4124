"""The model boundary: pure wire conversion (`convert`) and the streaming client (`client`)."""

from agent_core._llm.client import ChatModel, ModelResponse, OpenAIChatModel, Usage

__all__ = ["ChatModel", "ModelResponse", "OpenAIChatModel", "Usage"]
