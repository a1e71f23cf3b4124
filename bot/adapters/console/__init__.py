"""The console platform: the inbound side, its cards stream, and the terminal's channel."""
