"""`raypipe crag train-evaluator`, the offline job behind CRAG's retrieval evaluator (CRAG §4.2,
App. B.3): (question, document) pairs from the world's ground truth, a cross-encoder regressed to
+1 / -1 on Ray Train, the held-out report. The scorer that reads the exported folder at decode time
is `raypipe.retrieval.cross_encoder`."""
