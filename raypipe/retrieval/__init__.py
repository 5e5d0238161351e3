"""Dense retrieval: encoders, the Ray Data index build, batched faiss search, and search backends.

`types` holds the vocabulary every other package uses (`Passage`, `Searcher`)."""

from raypipe.retrieval.backends import HttpSearchBackend, SearchBackendError, build_search_backend
from raypipe.retrieval.encoders import Encoder, HFEncoder, build_encoder
from raypipe.retrieval.retriever import DenseRetriever, load_retriever
from raypipe.retrieval.types import Passage, Searcher

__all__ = [
    "DenseRetriever",
    "Encoder",
    "HFEncoder",
    "HttpSearchBackend",
    "Passage",
    "SearchBackendError",
    "Searcher",
    "build_encoder",
    "build_search_backend",
    "load_retriever",
]
