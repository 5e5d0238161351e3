"""The reflection-token vocabulary: the one place these strings are spelled out.

The strings are those of the released Self-RAG checkpoints (selfrag_llama2_7b), so a released
checkpoint serves unchanged. Everything else in raypipe imports the names defined here.

An augmented output (Self-RAG paper, Figure 2 and Table 4) is a sequence of segments::

    [Retrieval]<paragraph>Title\\ntext</paragraph>[Relevant]A sentence.[Fully supported]
    [Continue to Use Evidence]Next one.[Utility:5]

`parse` turns such a string into an `AugmentedOutput`, and `format_output` turns it back; the round
trip is exact (whitespace included) so that training data can be audited and re-emitted byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

# --- the tokens ----------------------------------------------------------------------------------

RETRIEVAL = "[Retrieval]"
NO_RETRIEVAL = "[No Retrieval]"
CONTINUE = "[Continue to Use Evidence]"
RELEVANT = "[Relevant]"
IRRELEVANT = "[Irrelevant]"
FULLY_SUPPORTED = "[Fully supported]"
PARTIALLY_SUPPORTED = "[Partially supported]"
NO_SUPPORT = "[No support / Contradictory]"
UTILITY = tuple(f"[Utility:{i}]" for i in range(1, 6))
PARAGRAPH_OPEN = "<paragraph>"
PARAGRAPH_CLOSE = "</paragraph>"


class Group(str, Enum):
    """The reflection-token groups (paper Table 1). RETRIEVE_INPUT is the yes/no decision from the
    input alone (App. D Table 8); RETRIEVE is the three-way decision given preceding segments."""

    RETRIEVE = "retrieve"
    IS_REL = "is_rel"
    IS_SUP = "is_sup"
    IS_USE = "is_use"


GROUP_TOKENS: dict[Group, tuple[str, ...]] = {
    Group.RETRIEVE: (RETRIEVAL, NO_RETRIEVAL, CONTINUE),
    Group.IS_REL: (RELEVANT, IRRELEVANT),
    Group.IS_SUP: (FULLY_SUPPORTED, PARTIALLY_SUPPORTED, NO_SUPPORT),
    Group.IS_USE: UTILITY,
}

#: The token each group prefers; the critique score s_G of Eq. 4 is built from these.
DESIRABLE: dict[Group, str] = {
    Group.RETRIEVE: RETRIEVAL,
    Group.IS_REL: RELEVANT,
    Group.IS_SUP: FULLY_SUPPORTED,
    Group.IS_USE: UTILITY[4],
}

REFLECTION_TOKENS: tuple[str, ...] = tuple(t for g in Group for t in GROUP_TOKENS[g])
#: Everything added to a tokenizer as single special tokens.
SPECIAL_TOKENS: tuple[str, ...] = REFLECTION_TOKENS + (PARAGRAPH_OPEN, PARAGRAPH_CLOSE)

TOKEN_GROUP: dict[str, Group] = {t: g for g, ts in GROUP_TOKENS.items() for t in ts}


def utility_token(score: int) -> str:
    """`[Utility:score]` for score in 1..5."""
    if not 1 <= score <= 5:
        raise ValueError(f"utility score must be 1..5, got {score}")
    return UTILITY[score - 1]


def utility_value(token: str) -> int:
    """The 1..5 value of a `[Utility:i]` token."""
    return UTILITY.index(token) + 1


def strip_reflection(text: str) -> str:
    """Plain text without reflection tokens or paragraphs: what a user of the generator reads."""
    text = _PARAGRAPH_RE.sub("", text)
    for tok in REFLECTION_TOKENS:
        text = text.replace(tok, "")
    return text


# --- the structure -------------------------------------------------------------------------------


@dataclass
class Segment:
    """One output segment (a sentence, in the paper's experiments).

    `tail` keeps whitespace that follows the IsSup token, so that formatting is byte-exact.
    `paragraph` is the raw text between `<paragraph>` and `</paragraph>` (title, newline, body).
    """

    text: str
    retrieve: str | None = None
    paragraph: str | None = None
    is_rel: str | None = None
    is_sup: str | None = None
    tail: str = ""

    @property
    def paragraph_title(self) -> str | None:
        if self.paragraph is None:
            return None
        return self.paragraph.split("\n", 1)[0]


@dataclass
class AugmentedOutput:
    segments: list[Segment] = field(default_factory=list)
    utility: str | None = None
    trailing: str = ""

    @property
    def plain_text(self) -> str:
        """What a reader sees: equal to `strip_reflection(format_output(self))`, whitespace included."""
        return "".join(s.text + s.tail for s in self.segments) + self.trailing

    def tokens(self) -> list[str]:
        """Every reflection token in order; used for token-distribution statistics."""
        out: list[str] = []
        for s in self.segments:
            out.extend(t for t in (s.retrieve, s.is_rel, s.is_sup) if t is not None)
        if self.utility is not None:
            out.append(self.utility)
        return out


class ReflectionFormatError(ValueError):
    """A malformed augmented output; `offset` is the character offset of the problem."""

    def __init__(self, message: str, offset: int, text: str):
        self.offset = offset
        snippet = text[max(0, offset - 20) : offset + 20].replace("\n", "\\n")
        super().__init__(f"{message} at character {offset} (near {snippet!r})")


# --- parse / format ------------------------------------------------------------------------------

_PARAGRAPH_RE = re.compile(re.escape(PARAGRAPH_OPEN) + r".*?" + re.escape(PARAGRAPH_CLOSE), re.S)
# Every short single-line bracket is a candidate; `_looks_like_token` decides. "<" and ">" are excluded
# so that a bracket inside a passage can never swallow its `</paragraph>`.
_STRUCT_RE = re.compile(r"\[[^\[\]<>\n]{1,60}\]|<paragraph>|</paragraph>")
# A bracket whose content *starts* like a reflection token, in any case or in the paper's notation
# ("[Utility: 7]", "[Retrieve=Yes]", "[ISREL=Relevant]", "[Fully Supported]", "[relevant]"). Starting
# (not containing) is deliberate: prose placeholders in instruction data such as "[1]",
# "[citation needed]" or "[Name of the relevant office]" must stay text.
_TOKEN_LIKE_RE = re.compile(
    r"\s*(?:is\s*_?\s*(?:rel|sup|use)\b|(?:no\s+)?retriev|continue\s+to\s+use|(?:ir)?relevant|"
    r"(?:fully|partially)\s+support|(?:no\s+)?support|contradict|utility)",
    re.IGNORECASE,
)


def _looks_like_token(tok: str) -> bool:
    if tok in TOKEN_GROUP or tok in (PARAGRAPH_OPEN, PARAGRAPH_CLOSE):
        return True
    return _TOKEN_LIKE_RE.match(tok[1:-1]) is not None


def _first_visible(text: str, start: int, end: int) -> int:
    """Offset of the first non-whitespace character in text[start:end]: where stray text begins."""
    return start + len(text[start:end]) - len(text[start:end].lstrip())


def parse(text: str) -> AugmentedOutput:
    """Parse an augmented output into segments; raises ReflectionFormatError with the offset."""
    out = AugmentedOutput()
    seg: Segment | None = None
    pos = 0

    def current() -> Segment:
        nonlocal seg
        if seg is None:
            seg = Segment(text="")
            out.segments.append(seg)
        return seg

    def close() -> None:
        nonlocal seg
        seg = None

    for m in _STRUCT_RE.finditer(text):
        tok = m.group(0)
        if not _looks_like_token(tok):
            continue
        if m.start() < pos:  # inside a paragraph already consumed
            continue
        gap = text[pos : m.start()]
        if out.utility is not None:
            if gap.strip():
                raise ReflectionFormatError(
                    "text after the utility token", _first_visible(text, pos, m.start()), text
                )
            raise ReflectionFormatError(
                "two utility tokens" if tok in UTILITY else f"{tok!r} after the utility token",
                m.start(),
                text,
            )
        if gap:
            s = current()
            if s.is_sup is not None:
                if gap.strip():
                    # text after IsSup starts a new segment without a retrieve token
                    close()
                    current().text = gap
                else:
                    s.tail += gap
            else:
                s.text += gap
        pos = m.end()
        group = TOKEN_GROUP.get(tok)
        if tok == PARAGRAPH_OPEN:
            end = text.find(PARAGRAPH_CLOSE, m.end())
            if end < 0:
                raise ReflectionFormatError("unclosed <paragraph>", m.start(), text)
            s = current()
            if s.paragraph is not None or s.text or s.is_rel is not None:
                close()
                s = current()
            s.paragraph = text[m.end() : end]
            pos = end + len(PARAGRAPH_CLOSE)
        elif tok == PARAGRAPH_CLOSE:
            raise ReflectionFormatError("</paragraph> without <paragraph>", m.start(), text)
        elif group is Group.RETRIEVE:
            close()
            current().retrieve = tok
        elif group is Group.IS_REL:
            s = current()
            if s.text or s.is_rel is not None:
                close()
                s = current()
            s.is_rel = tok
        elif group is Group.IS_SUP:
            s = current()
            if s.is_sup is not None:
                raise ReflectionFormatError(f"{tok} is a second IsSup token for one segment", m.start(), text)
            if not s.text.strip():
                raise ReflectionFormatError(f"{tok} without segment text", m.start(), text)
            s.is_sup = tok
        elif group is Group.IS_USE:
            out.utility = tok
            close()
        else:
            raise ReflectionFormatError(f"unknown reflection token {tok!r}", m.start(), text)

    rest = text[pos:]
    if rest:
        if out.utility is not None:
            if rest.strip():
                raise ReflectionFormatError(
                    "text after the utility token", _first_visible(text, pos, len(text)), text
                )
            out.trailing = rest
        else:
            s = current()
            if s.is_sup is not None:
                if rest.strip():
                    close()
                    current().text = rest
                else:
                    s.tail += rest
            else:
                s.text += rest
    return out


def format_segment(s: Segment) -> str:
    parts = [s.retrieve or ""]
    if s.paragraph is not None:
        parts.append(PARAGRAPH_OPEN + s.paragraph + PARAGRAPH_CLOSE)
    parts += [s.is_rel or "", s.text, s.is_sup or "", s.tail]
    return "".join(parts)


def format_output(out: AugmentedOutput) -> str:
    """Inverse of `parse`: `format_output(parse(s)) == s` for every well-formed `s`."""
    return "".join(format_segment(s) for s in out.segments) + (out.utility or "") + out.trailing


def passage_text(title: str, text: str) -> str:
    """`Title\\ntext`: a passage as the models read it (inside `<paragraph>`, as the critic's evidence,
    as the tiny tokenizer's training text); the title line is written even when the title is empty.
    The one spelling of it: `retrieval.types.Passage.text_for_model` renders a passage with it."""
    return f"{title}\n{text}"


def format_paragraph(title: str, text: str) -> str:
    """`<paragraph>Title\\ntext</paragraph>`: the passage shape the released checkpoints saw."""
    return f"{PARAGRAPH_OPEN}{passage_text(title, text)}{PARAGRAPH_CLOSE}"
