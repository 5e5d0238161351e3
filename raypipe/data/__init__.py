"""Data: row schemas, validating readers/writers (`io`), sentence segmentation (`segment`), seeded
draws keyed by row id (`stable_random`) and the synthetic knowledge world. Import from the
submodules; this package imports nothing so that loading one part (e.g. the schemas in a Ray worker)
does not pull in spaCy."""
