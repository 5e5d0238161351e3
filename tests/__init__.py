"""A package, so that tests and benchmarks import the shared helpers as `tests.<module>` from the
repository root (pytest's `pythonpath`, or `python -m benchmarks.<name>`)."""
