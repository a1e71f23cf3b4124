"""Protocol-faithful servers for the three outside boundaries (LLM provider, Slack, Feishu)."""
