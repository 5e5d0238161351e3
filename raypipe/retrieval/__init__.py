"""Dense retrieval: encoders, the Ray Data index build, batched faiss search, and search backends."""

from raypipe.retrieval.backends import (
    HttpSearchBackend,
    SearchBackend,
    SearchBackendError,
    build_search_backend,
)
from raypipe.retrieval.encoders import Encoder, HFEncoder, build_encoder
from raypipe.retrieval.retriever import Hit, Retriever, load_retriever
from raypipe.retrieval.stage import RetrievalStage

__all__ = [
    "Encoder",
    "HFEncoder",
    "Hit",
    "HttpSearchBackend",
    "RetrievalStage",
    "Retriever",
    "SearchBackend",
    "SearchBackendError",
    "build_encoder",
    "build_search_backend",
    "load_retriever",
]
