"""Redis records and fenced writes: lease, settles and books, follow-ups, audit, turn jobs."""
