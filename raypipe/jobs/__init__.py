"""The jobs floor: one module per job, the only code besides the CLI and the demo that reads the
whole `RaypipeConfig`, handing each component its own sections. `raypipe <command>` (raypipe.cli), the
`ray job submit` scripts (`jobs/*.py`) and Serve config files (`serve.app_from_config`) call these; the
components below take sections, never the composed config (tests/unit/test_layers.py).
"""
