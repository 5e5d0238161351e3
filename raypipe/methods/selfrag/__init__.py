"""Self-RAG (Asai et al.): reflection-token scores (`scoring`, Eq. 3-4) and the segment-level beam
search (`search.SelfRAG`, §3.3), behind the method interface."""
