"""Self-RAG inference (paper §3.3): engines with exact reflection-token probabilities
(`engines.make_engine`), the segment-level beam search (`selfrag.SelfRAGDecoder`), its scores
(`scoring`) and closed-set answer aggregation (`closed_set`)."""
