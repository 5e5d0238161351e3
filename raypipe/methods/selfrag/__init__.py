"""Self-RAG (Asai et al.): reflection-token scores (`scoring`, Eq. 3-4), the segment-level beam search
(`beam.BeamSearch`, §3.3) and the `selfrag` method over them (`method.SelfRAG`)."""
