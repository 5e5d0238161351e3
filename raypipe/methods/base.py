"""The method interface: what decoding, eval and serving know of a retrieval-augmented method.

A method (Self-RAG, CRAG, Self-Reasoning, plain RAG) takes a batch of neutral requests and returns
neutral results, plus a method-specific `trace` (Self-RAG: segments and reflection-token
distributions). It is built from a `Toolkit` (engine, retriever, second search source, ...) and
run with its own settings (a `MethodSettings` model in its package's `settings.py`: its config section
`methods.<name>`, and the schema of its per-request controls). A method knows nothing of Ray, HTTP or Ray Data: eval wraps
it in a Ray Data actor, serving in a Serve deployment, both through the registry
(`raypipe.methods.get_method`). See ARCHITECTURE.md, "Methods".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar, get_args

from raypipe.errors import ConfigError
from raypipe.methods.closed_set import Option
from raypipe.methods.settings import MethodSettings
from raypipe.retrieval.types import Passage, Searcher

if TYPE_CHECKING:  # the engine module imports torch and transformers: seconds the HTTP ingress need not pay
    from raypipe.inference.engines.base import Engine
    from raypipe.methods.crag.rewrite import Rewriter


class RelevanceScorer(Protocol):
    """Scores (query, document) pairs, higher = more relevant; CRAG's evaluator gives [-1, 1]."""

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]: ...

#: the tools a method may ask for: `Toolkit` has one field per name, in this order
ToolName = Literal["engine", "retriever", "web", "evaluator", "lm", "rewriter"]
#: what a tool is called with: an `Engine`, a `Searcher`, a `RelevanceScorer` or a query `Rewriter`
ToolKind = Literal["engine", "searcher", "scorer", "rewriter"]
#: each tool's kind: eval's memo and serving's proxies wrap a tool by its kind, so neither lists the tools
TOOL_KINDS: dict[ToolName, ToolKind] = {"engine": "engine", "retriever": "searcher", "web": "searcher",
                                        "evaluator": "scorer", "lm": "engine", "rewriter": "rewriter"}


@dataclass(frozen=True)
class MethodRequest:
    """One question to answer. `options` are a closed-set task's answer options (empty for open-ended
    generation); `query` is what x is for retrieval when it is not instruction + input (a closed-set
    task's instruction is the same boilerplate for every item, so the papers retrieve with the claim
    or the question alone). `long_form`: the answer is a passage (a biography, an ASQA answer), so a
    method that writes a short answer beside a long one (Self-Reasoning) answers with the long one."""

    instruction: str
    input: str = ""
    options: tuple[Option, ...] = ()
    query: str | None = None
    long_form: bool = False

    def retrieval_text(self) -> str:
        """x as a search query: `query` when set, else instruction and input."""
        parts = [self.query] if self.query is not None else [self.instruction, self.input]
        return "\n".join(p for p in parts if p)


def search_requests(searcher: Searcher, requests: Sequence[MethodRequest], k: int) -> Sequence[Sequence[Passage]]:
    """The top k of every request's retrieval text (x) in one search call, each query saying whose it is."""
    if not requests:
        return []
    return searcher.search([r.retrieval_text() for r in requests], k, requests=list(range(len(requests))))


@dataclass(frozen=True)
class Citation:
    passage_id: str
    title: str


@dataclass
class MethodResult:
    """A method's answer. `n_retrievals` counts retrieval calls made for the request; `option` and
    `option_scores` are set for closed-set requests; `trace` is whatever the method shows of its work
    (JSON-serializable)."""

    text: str
    citations: list[Citation] = field(default_factory=list)
    n_retrievals: int = 0
    option: str | None = None
    option_scores: dict[str, float] = field(default_factory=dict)
    trace: dict[str, Any] = field(default_factory=dict)

    @property
    def retrieved(self) -> bool:
        return self.n_retrievals > 0

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "citations": [asdict(c) for c in self.citations],
                "n_retrievals": self.n_retrievals, "retrieved": self.retrieved, "option": self.option,
                "option_scores": self.option_scores, "trace": self.trace}


@dataclass(frozen=True)
class Variant:
    """One setting of a method to evaluate; `sweep` and `value` say what it varies (for the plots)."""

    name: str
    method: str
    sweep: str
    value: float | str
    settings: MethodSettings


@dataclass(frozen=True)
class Toolkit:
    """What methods are built from. Each tool is optional: a toolkit holds what the configured methods
    need (`Method.uses`), so an eval of `mode: never` loads no index. Whoever assembles one from tool
    names (raypipe.tools' loaders, eval's memo, serving's proxies) does it with `build`, so adding a
    tool adds a field here, its kind, its loader in raypipe.tools and the deployment serving binds."""

    engine: Engine | None = None
    retriever: Searcher | None = None
    #: the second search source (CRAG's web search): another index or an HTTP search API
    web: Searcher | None = None
    #: CRAG's retrieval evaluator (CRAG §4.2): scores (question, document) pairs in [-1, 1]
    evaluator: RelevanceScorer | None = None
    #: a plain instruct LM (chat template): CRAG's and RAG's generator, CRAG's `lm` query rewriter
    lm: Engine | None = None
    #: CRAG's `openai` query rewriter (§4.5): an OpenAI-compatible chat endpoint (`crag.rewriter`)
    rewriter: Rewriter | None = None

    @classmethod
    def build(cls, names: Iterable[ToolName], make: Callable[[ToolName], Any]) -> Toolkit:
        """The toolkit of `make(name)` for each of `names`, made in `ToolName` order whatever the
        order of `names` (loading order stays fixed)."""
        wanted = set(names)
        return cls(**{name: make(name) for name in get_args(ToolName) if name in wanted})

    def held(self) -> list[ToolName]:
        """The names of the tools it holds, in `ToolName` order."""
        return [name for name in get_args(ToolName) if getattr(self, name) is not None]

    def map(self, wrap: Callable[[ToolName, Any], Any]) -> Toolkit:
        """A toolkit of `wrap(name, tool)` for every tool this one holds."""
        return Toolkit.build(self.held(), lambda name: wrap(name, getattr(self, name)))

    def get(self, name: ToolName, method: str) -> Any:
        tool = getattr(self, name)
        if tool is None:
            raise ConfigError(f"method {method!r} needs a {name}, and none was configured or loaded")
        return tool


C = TypeVar("C", bound=MethodSettings)


class Method(ABC, Generic[C]):
    """A decoding method. Subclasses set `name`, `settings_type` and `tool_names`, and are listed by
    name in `raypipe.methods.REGISTRY`."""

    name: ClassVar[str]
    settings_type: ClassVar[type[MethodSettings]]
    #: every tool the method may use under some settings: what a server must bind for it
    tool_names: ClassVar[tuple[ToolName, ...]]

    def __init__(self, toolkit: Toolkit):
        self.toolkit = toolkit

    @classmethod
    def uses(cls, settings: C) -> set[ToolName]:
        """The tools these settings need (default: all of `tool_names`)."""
        return set(cls.tool_names)

    @abstractmethod
    def decode(self, requests: Sequence[MethodRequest], settings: C) -> list[MethodResult]:
        """Answer `requests` in lock step under `settings`, retrieving `settings.top_k` documents per
        search."""

    @classmethod
    def variants(cls, settings: C, sweeps: Any = None) -> list[Variant]:
        """The settings eval runs for this method under its `eval.sweeps.<name>` section (None when it
        has none): its own sweeps (default: `settings` alone)."""
        return [Variant(cls.name, cls.name, "method", cls.name, settings)]
