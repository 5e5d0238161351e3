"""CRAG (Corrective Retrieval Augmented Generation): the retrieval evaluator, the action trigger,
knowledge strips, query rewriting, web search selection, the corrective step that chains them
(`knowledge`), and the `crag` method (`method.CRAG`). Its baseline `rag` and `selfcrag` are methods of
their own (methods.rag, methods.selfcrag)."""
