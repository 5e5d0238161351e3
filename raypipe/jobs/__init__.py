"""The jobs floor: one module per job, the only code that reads the whole `RaypipeConfig` and hands
each component its own section. `raypipe <command>` (raypipe.cli) and the `ray job submit` scripts
(`jobs/*.py`) call these; the components below take sections, never the composed config.

Jobs move here one by one (ARCHITECTURE.md §2): synth, models, index, label, train, augment, the
CRAG evaluator, the Self-Reasoning data and eval are here; serve is next.
"""
