"""`chatops worker`: the turns stream, keeping an entry, the assembly from settings, metrics."""
