"""Slack: signature checks and normalization, the Web API client, Socket Mode, cards."""
