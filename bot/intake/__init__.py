"""Accepting an event, whichever transport: routing it for its session's state and writing it."""
