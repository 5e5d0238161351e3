"""CRAG (Corrective Retrieval Augmented Generation) and Self-CRAG: the retrieval evaluator, the action
trigger, knowledge strips, query rewriting, web search selection, and the `crag`, `rag` and `selfcrag`
methods."""
