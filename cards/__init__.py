"""Pure rendering of progress cards for Slack and Feishu (no I/O, no platform SDKs)."""

__all__: list[str] = []
