"""Settings: the config sections of the jobs, one module per area, the paths that derive from the run
folder (`paths`), and the YAML loader (`loader`).

They sit below everything that reads them (data, models, retrieval, methods, jobs), so any layer can
import its section. A decoding method's settings live in its own package
(`raypipe.methods.<name>.settings`), and `raypipe.config` composes both into the run's config.
"""
