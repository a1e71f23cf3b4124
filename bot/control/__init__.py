"""Controls over running analyses: the kill switch, approvals, sub-agents."""
