"""Operators' work: the reaper, the scheduler and scheduled jobs, status, audit replay."""
