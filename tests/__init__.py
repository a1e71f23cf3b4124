"""The chatops test suite."""
