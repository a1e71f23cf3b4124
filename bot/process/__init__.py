"""What every process has: the loop-lag monitor, the metrics endpoint, task errors, failpoints."""
