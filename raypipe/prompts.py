"""Prompt formats: the generator's prompt and the critic's per-aspect judgements.

Two readers see a critic judgement (Self-RAG §3.2.1):
- the *teacher* (GPT-4 in the paper, any OpenAI-compatible model here) gets the aspect's instruction,
  a few demonstrations and the example, and answers with a label and an explanation (App. A.1, D);
- the *critic LM* is trained on the same instruction and example without demonstrations, in the
  generator's prompt format, with the label token as its target (Eq. 1). The tiny critic has a short
  context, so its prompt carries only the fields the aspect reads.

The instructions paraphrase the definitions of Table 1, App. A.1 and App. D (Tables 8-12); the
demonstrations are about invented entities, in the spirit of the paper's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Literal

from raypipe.tokens import (
    CONTINUE,
    FULLY_SUPPORTED,
    GROUP_TOKENS,
    IRRELEVANT,
    NO_RETRIEVAL,
    NO_SUPPORT,
    PARTIALLY_SUPPORTED,
    RELEVANT,
    RETRIEVAL,
    UTILITY,
    Group,
    utility_token,
)

# --- the generator's prompt ----------------------------------------------------------------------


def format_generator_prompt(instruction: str, input: str = "") -> str:
    """The Alpaca-style prompt the released Self-RAG checkpoints were trained on (ARCHITECTURE.md §3)."""
    if input:
        return f"### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
    return f"### Instruction:\n{instruction}\n\n### Response:\n"


def chat_prompt(tokenizer: Any, user: str) -> str:
    """`user` as the one user turn of the tokenizer's chat template, ready for the assistant's reply;
    a tokenizer without a template gets the text as it is."""
    if not getattr(tokenizer, "chat_template", None):
        return user + "\n"
    return tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                         add_generation_prompt=True)


def as_document(title: str, text: str) -> str:
    """A passage as one text: its title line, then its text (CRAG App. B.3 scores the question
    concatenated with each document; RAG's prompt lists passages the same way)."""
    return f"{title}\n{text}" if title else text


#: `selfrag`: the Alpaca-style layout above; `chat`: the model's own chat template, the instruction
#: (and input) as the user's turn, the output (reflection tokens and all) as the assistant's
PromptFormatName = Literal["selfrag", "chat"]


@dataclass(frozen=True)
class GeneratorPrompt:
    """How one generator's prompts are written. A pretrained instruct model answers far better in the
    layout it was tuned on: SmolLM2-135M-Instruct, shown the gold passage, answered 11 of 14 held-out
    questions through its chat template and 3 of 14 in the Alpaca layout, and after the same short
    fine-tune on D_gen 9 of 14 against 5. So a generator fine-tuned from a chat model keeps its chat
    template, and the trained folder records the format (`raypipe.models.prompt_format`); a folder
    without that record (a released Self-RAG checkpoint) uses the Alpaca layout."""

    name: PromptFormatName = "selfrag"
    #: the tokenizer whose chat template renders `chat` prompts
    tokenizer: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.name == "chat" and not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("the chat prompt format needs a tokenizer with a chat template")

    def __call__(self, instruction: str, input: str = "") -> str:
        if self.name == "selfrag":
            return format_generator_prompt(instruction, input)
        user = f"{instruction}\n\n{input}" if input else instruction
        return self.tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                                  add_generation_prompt=True)


SELFRAG_PROMPT = GeneratorPrompt()


# --- aspects -------------------------------------------------------------------------------------


def task_input(instruction: str, input: str = "") -> str:
    """The task input x as one retrieval query: the instruction, then the input when there is one."""
    return f"{instruction}\n{input}" if input else instruction


def format_choices(question: str, choices: dict[str, str]) -> str:
    """A multiple-choice input: the question, then one "A: text" line per option (ARC/OBQA style)."""
    return question + "\n" + "\n".join(f"{key}: {text}" for key, text in choices.items())


class Aspect(str, Enum):
    """What the critic judges. Retrieve has two forms (App. D): from the input alone (yes/no, Table 8)
    and for an output sentence given preceding sentences and evidence (three classes, Table 9)."""

    RETRIEVE_INPUT = "retrieve_input"
    RETRIEVE = "retrieve"
    IS_REL = "is_rel"
    IS_SUP = "is_sup"
    IS_USE = "is_use"


ASPECT_GROUP: dict[Aspect, Group] = {
    Aspect.RETRIEVE_INPUT: Group.RETRIEVE,
    Aspect.RETRIEVE: Group.RETRIEVE,
    Aspect.IS_REL: Group.IS_REL,
    Aspect.IS_SUP: Group.IS_SUP,
    Aspect.IS_USE: Group.IS_USE,
}

#: The reflection tokens each aspect may answer.
ASPECT_LABELS: dict[Aspect, tuple[str, ...]] = {
    Aspect.RETRIEVE_INPUT: (RETRIEVAL, NO_RETRIEVAL),
    Aspect.RETRIEVE: GROUP_TOKENS[Group.RETRIEVE],
    Aspect.IS_REL: GROUP_TOKENS[Group.IS_REL],
    Aspect.IS_SUP: GROUP_TOKENS[Group.IS_SUP],
    Aspect.IS_USE: UTILITY,
}

# Which example fields each aspect reads (Table 1: Retrieve x / x,y; IsRel x,d; IsSup x,d,y; IsUse x,y),
# and which of them must be filled. An example that fills a field its aspect does not read is a bug in
# the caller (e.g. evidence given to IsUse, which is judged independently of evidence), so it raises.
_FIELD_LABELS = {
    "instruction": "Instruction",
    "input": "Input",
    "preceding": "Preceding sentences",
    "evidence": "Evidence",
    "output": "Output",
}
_ASPECT_FIELDS: dict[Aspect, tuple[str, ...]] = {
    Aspect.RETRIEVE_INPUT: ("instruction", "input"),
    Aspect.RETRIEVE: ("instruction", "input", "preceding", "evidence", "output"),
    Aspect.IS_REL: ("instruction", "input", "preceding", "evidence"),
    Aspect.IS_SUP: ("instruction", "input", "preceding", "evidence", "output"),
    Aspect.IS_USE: ("instruction", "input", "output"),
}
_REQUIRED_FIELDS: dict[Aspect, tuple[str, ...]] = {
    Aspect.RETRIEVE_INPUT: ("instruction",),
    Aspect.RETRIEVE: ("instruction", "output"),
    Aspect.IS_REL: ("instruction", "evidence"),
    Aspect.IS_SUP: ("instruction", "evidence", "output"),
    Aspect.IS_USE: ("instruction", "output"),
}


@dataclass(frozen=True)
class CriticExample:
    """The fields of one judgement. `evidence` is a passage as "Title\\ntext"; `output` is the whole
    output (IsUse) or the one sentence being judged (Retrieve, IsSup), after `preceding` sentences."""

    aspect: Aspect
    instruction: str
    input: str = ""
    output: str = ""
    evidence: str | None = None
    preceding: str = ""

    def __post_init__(self) -> None:
        aspect = Aspect(self.aspect)
        object.__setattr__(self, "aspect", aspect)  # accept "is_rel" as well as Aspect.IS_REL
        for name in _REQUIRED_FIELDS[aspect]:
            if not getattr(self, name):
                raise ValueError(f"{aspect.value} example needs a non-empty {name!r}")
        for f in fields(self):
            if f.name != "aspect" and getattr(self, f.name) and f.name not in _ASPECT_FIELDS[aspect]:
                raise ValueError(f"{aspect.value} example does not read {f.name!r}, but it is set")

    def render(self) -> str:
        """The example's filled fields, one labelled block each, in a fixed order."""
        return "\n".join(
            f"{_FIELD_LABELS[name]}: {getattr(self, name)}"
            for name in _ASPECT_FIELDS[self.aspect]
            if getattr(self, name)
        )


@dataclass(frozen=True)
class Demonstration:
    """A worked judgement shown to the teacher: the example, its label token and why."""

    example: CriticExample
    label: str
    explanation: str


# --- instructions (our words, after Table 1, App. A.1 and App. D) -------------------------------

ASPECT_INSTRUCTIONS: dict[Aspect, str] = {
    Aspect.RETRIEVE_INPUT: (
        "Decide whether looking things up in external documents, such as encyclopedia articles, would "
        f"help to write a better response to the task. Answer {RETRIEVAL} when a good response rests on "
        "facts about particular people, places, works, organisations or events that a reference could "
        f"confirm. Answer {NO_RETRIEVAL} when the task is creative, personal, arithmetic, or only asks to "
        "transform the given text, so no document would improve the response."
    ),
    Aspect.RETRIEVE: (
        "Judge one output sentence, given the task, the sentences written before it (if any) and a "
        f"piece of evidence. Answer {CONTINUE} when the evidence alone is enough to check every fact in "
        f"the sentence. Answer {NO_RETRIEVAL} when the sentence states nothing that needs checking, such "
        f"as an opinion, a transition or common sense. Answer {RETRIEVAL} when the sentence makes factual "
        "claims that the evidence does not cover, so further documents are needed to check it."
    ),
    Aspect.IS_REL: (
        "Decide whether the evidence helps with the task, reading any preceding sentences as context "
        f"(the sentence to come is the one that matters). Answer {RELEVANT} when the passage offers "
        f"information that is useful for completing the task; answer {IRRELEVANT} when it is off topic "
        "or concerns a different entity, even one with a similar name."
    ),
    Aspect.IS_SUP: (
        "Measure how much of the output sentence is backed by the evidence. Use only the evidence, not "
        "your own knowledge, and do not judge whether the output follows the task. Answer "
        f"{FULLY_SUPPORTED} when every claim in the sentence can be found in the evidence, almost word "
        f"for word or by direct extraction. Answer {PARTIALLY_SUPPORTED} when the evidence backs some of "
        f"it but an important claim is not mentioned there. Answer {NO_SUPPORT} when the sentence "
        "ignores the evidence, is unrelated to it or disagrees with it."
    ),
    Aspect.IS_USE: (
        f"Rate how helpful and informative the output is as a response to the task, from {UTILITY[0]} to "
        f"{UTILITY[4]}, whether or not its facts are true. {UTILITY[4]}: complete and detailed, meets the "
        f"request fully. {UTILITY[3]}: meets the request; small gains in detail, structure or coherence "
        f"are possible. {UTILITY[2]}: acceptable, but needs substantial additions. {UTILITY[1]}: touches "
        f"the main request but is incomplete or drifts off it. {UTILITY[0]}: barely on topic or irrelevant."
    ),
}

_R_IN, _R, _REL, _SUP, _USE = (
    Aspect.RETRIEVE_INPUT,
    Aspect.RETRIEVE,
    Aspect.IS_REL,
    Aspect.IS_SUP,
    Aspect.IS_USE,
)
_PAINTER = (
    "Ilse Marrow\nIlse Marrow (born 1961) is a Dutch painter known for her harbour scenes. She trained "
    "at the art academy in Utrecht and has lived in Zeeland since 1990."
)
_CHEMIST = (
    "Tomas Verin\nTomas Verin (1902-1971) was a Chilean chemist. In 1938 he isolated the mineral "
    "verinite, which is named after him."
)

DEMONSTRATIONS: dict[Aspect, tuple[Demonstration, ...]] = {
    _R_IN: (
        Demonstration(
            CriticExample(_R_IN, "Who designed the Varholm Bridge?"),
            RETRIEVAL,
            "The answer is a specific fact about a named structure; a reference on the bridge would "
            "ground it.",
        ),
        Demonstration(
            CriticExample(_R_IN, "Write a four-line poem about autumn rain."),
            NO_RETRIEVAL,
            "A short poem is a creative task; there is nothing for a document to verify.",
        ),
        Demonstration(
            CriticExample(_R_IN, "Multiply the two numbers.", input="17 and 6"),
            NO_RETRIEVAL,
            "Arithmetic is solved by calculation; no document would state this exact result.",
        ),
        Demonstration(
            CriticExample(_R_IN, "Explain what the Oskarsen process is used for."),
            RETRIEVAL,
            "Describing a named technical process accurately benefits from a source that documents it.",
        ),
    ),
    _R: (
        Demonstration(
            CriticExample(
                _R,
                "Tell me about the painter Ilse Marrow.",
                preceding="Ilse Marrow is a Dutch painter known for harbour scenes.",
                evidence=_PAINTER,
                output="She trained at the art academy in Utrecht.",
            ),
            CONTINUE,
            "The passage already states where she trained, so the same evidence verifies the sentence.",
        ),
        Demonstration(
            CriticExample(
                _R,
                "Tell me about the painter Ilse Marrow.",
                preceding="Ilse Marrow is a Dutch painter known for harbour scenes.",
                evidence=_PAINTER,
                output="In 1999 she won the Brennan Prize for landscape painting.",
            ),
            RETRIEVAL,
            "The passage says nothing about prizes; another document is needed to check the award.",
        ),
        Demonstration(
            CriticExample(
                _R,
                "Tell me about the painter Ilse Marrow.",
                preceding="Ilse Marrow is a Dutch painter known for harbour scenes.",
                evidence=_PAINTER,
                output="Her calm pictures are a pleasure to look at.",
            ),
            NO_RETRIEVAL,
            "This is a subjective remark with no fact to verify.",
        ),
    ),
    _REL: (
        Demonstration(
            CriticExample(
                _REL,
                "When was the Calder Library founded?",
                evidence="Calder Library\nThe Calder Library in Ostvik was founded in 1884 by the merchant "
                "Ruth Calder and holds 40,000 volumes.",
            ),
            RELEVANT,
            "The passage gives the founding year the question asks for.",
        ),
        Demonstration(
            CriticExample(
                _REL,
                "Who founded Marlow Press?",
                evidence="Marlowe Pressworks\nMarlowe Pressworks is a printing-machine maker set up by "
                "Edda Lund in Kestrel in 1952.",
            ),
            IRRELEVANT,
            "The passage is about a different company with a similar name, so it does not help.",
        ),
        Demonstration(
            CriticExample(
                _REL,
                "Choose the best answer.",
                input="What is the main export of Tarvin Island? A: wool B: copper C: tea D: salt",
                evidence="Tarvin Island\nTarvin Island's economy rests on sheep farming; most of its "
                "wool is shipped to the mainland.",
            ),
            RELEVANT,
            "The passage points to wool as the island's main product, which settles the choice.",
        ),
    ),
    _SUP: (
        Demonstration(
            CriticExample(
                _SUP,
                "Who isolated verinite?",
                evidence=_CHEMIST,
                output="Verinite was isolated by Tomas Verin in 1938.",
            ),
            FULLY_SUPPORTED,
            "Both the person and the year appear in the passage.",
        ),
        Demonstration(
            CriticExample(
                _SUP,
                "Tell me about Tomas Verin.",
                evidence=_CHEMIST,
                output="Tomas Verin, a Chilean chemist, isolated verinite and later taught in Lyon.",
            ),
            PARTIALLY_SUPPORTED,
            "Nationality, profession and verinite are in the passage; teaching in Lyon is not.",
        ),
        Demonstration(
            CriticExample(
                _SUP,
                "Tell me about Tomas Verin.",
                evidence=_CHEMIST,
                output="Tomas Verin was an Argentine physicist.",
            ),
            NO_SUPPORT,
            "The passage calls him a Chilean chemist, which contradicts the sentence.",
        ),
    ),
    _USE: (
        Demonstration(
            CriticExample(
                _USE,
                "Name the three largest moons of the planet Kesh.",
                output="The three largest moons of Kesh are Arun, Bell and Tavi. Arun is the biggest, "
                "about 3,100 km across, followed by Bell and then Tavi.",
            ),
            utility_token(5),
            "It names all three moons and adds their order by size: the request is fully met.",
        ),
        Demonstration(
            CriticExample(
                _USE,
                "Give two reasons to water garden plants in the morning.",
                output="Watering in the morning lets leaves dry during the day, which reduces fungal "
                "disease.",
            ),
            utility_token(3),
            "One sound reason is given, but the task asked for two.",
        ),
        Demonstration(
            CriticExample(
                _USE,
                "Name the three largest moons of the planet Kesh.",
                output="Arun is one of the moons of Kesh.",
            ),
            utility_token(2),
            "It stays on the topic but names one moon, not the three requested.",
        ),
        Demonstration(
            CriticExample(_USE, "How long should I boil an egg for a soft yolk?", output="Hens lay eggs."),
            utility_token(1),
            "The output does not address the question at all.",
        ),
    ),
}


# --- the critic LM's input -----------------------------------------------------------------------


def critic_prompt(ex: CriticExample) -> str:
    """What the critic LM reads; its target is the label token. No demonstrations: the paper trains
    the critic without them, and the tiny critic's context is short."""
    return format_generator_prompt(ASPECT_INSTRUCTIONS[ex.aspect], ex.render())


# --- the teacher's messages and reply ------------------------------------------------------------


_REPLY = "Reply:"


def _answer_format(aspect: Aspect) -> str:
    labels = ", ".join(ASPECT_LABELS[aspect])
    return (
        f"Reply with the label alone on the first line, exactly one of: {labels}. "
        "On the second line, explain your judgement in one or two sentences."
    )


def teacher_messages(ex: CriticExample) -> list[dict]:
    """Chat messages for an OpenAI-compatible teacher: instruction, reply format and worked examples
    in the system message (App. A.1: instruction and demonstrations), the example as the user turn."""
    demos = "\n\n".join(
        f"Example {i}\n{d.example.render()}\n{_REPLY}\n{d.label}\n{d.explanation}"
        for i, d in enumerate(DEMONSTRATIONS[ex.aspect], start=1)
    )
    system = f"{ASPECT_INSTRUCTIONS[ex.aspect]}\n\n{_answer_format(ex.aspect)}\n\n{demos}"
    return [{"role": "system", "content": system}, {"role": "user", "content": f"{ex.render()}\n{_REPLY}"}]


# How a teacher may write each label, besides the token itself (matched case-insensitively).
_RETRIEVE_ALIASES = {RETRIEVAL: ("retrieval", "yes"), NO_RETRIEVAL: ("no retrieval", "no")}
_ALIASES: dict[Aspect, dict[str, tuple[str, ...]]] = {
    Aspect.RETRIEVE_INPUT: _RETRIEVE_ALIASES,
    Aspect.RETRIEVE: {**_RETRIEVE_ALIASES, CONTINUE: ("continue to use evidence", "continue")},
    Aspect.IS_REL: {RELEVANT: ("relevant",), IRRELEVANT: ("irrelevant",)},
    Aspect.IS_SUP: {
        FULLY_SUPPORTED: ("fully supported",),
        PARTIALLY_SUPPORTED: ("partially supported",),
        NO_SUPPORT: (r"no support\s*/\s*contradictory", "no support", "contradictory"),
    },
    Aspect.IS_USE: {tok: (rf"utility\s*[:=]?\s*{i}", str(i)) for i, tok in enumerate(UTILITY, start=1)},
}
_MARKDOWN_RE = re.compile(r"[*`]")
# Field names a model tends to echo before the label ("**Rating:** [Relevant]", "Need retrieval? [Yes]").
_PREFIX_RE = re.compile(
    r"^[\s#>]*(?:(?:rating|score|answer|label|judge?ment|need retrieval\??|perceived utility)\s*[:=]?\s*)?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class _ReplyGrammar:
    """The label patterns of one aspect. A reply's first line must start with a label (bracketed, or
    bare and not glued to a word); a second, different label in brackets anywhere on that line, or
    right after a hedge ("Relevant / Irrelevant", "4 or 5", "4-5"), makes it ambiguous. Bare words
    later on the line are read as an inline explanation ("[Irrelevant] It is not relevant.")."""

    aliases: tuple[tuple[str, str], ...]  # (pattern, token), longest pattern first
    start: re.Pattern[str]
    bracketed: re.Pattern[str]
    hedge: re.Pattern[str]

    @classmethod
    def build(cls, aspect: Aspect) -> _ReplyGrammar:
        aliases = sorted(
            ((pattern, tok) for tok, patterns in _ALIASES[aspect].items() for pattern in patterns),
            key=lambda pair: -len(pair[0]),
        )
        alt = "|".join(f"(?:{pattern})" for pattern, _ in aliases)
        label = rf"(?:\[\s*(?P<b>{alt})\s*\]|(?P<n>{alt})(?![\w\]]|[.,]\d))"
        return cls(
            aliases=tuple(aliases),
            start=re.compile(rf"^{label}", re.IGNORECASE),
            bracketed=re.compile(rf"\[\s*(?P<b>{alt})\s*\]", re.IGNORECASE),
            hedge=re.compile(rf"^\s*(?:/|\||-|–|\bor\b|\bto\b)\s*{label}", re.IGNORECASE),
        )

    def token(self, m: re.Match[str]) -> str:
        said = m.group("b") or m.group("n")
        return next(tok for pattern, tok in self.aliases if re.fullmatch(pattern, said, re.IGNORECASE))

    def read(self, line: str) -> str | None:
        m = self.start.match(line)
        if m is None:
            return None
        label = self.token(m)
        rest = line[m.end() :]
        others = [self.token(o) for o in self.bracketed.finditer(rest)]
        hedge = self.hedge.match(rest)
        if hedge is not None:
            others.append(self.token(hedge))
        return None if any(tok != label for tok in others) else label


_GRAMMARS = {aspect: _ReplyGrammar.build(aspect) for aspect in Aspect}


def parse_teacher_reply(aspect: Aspect, reply: str) -> str | None:
    """The label token a teacher's reply gives, or None when the reply does not follow the format.

    Strict on purpose: like the paper (App. A.1), replies that do not name exactly one expected label
    are discarded rather than guessed at, so a noisy teacher lowers the yield, not the label quality.
    """
    first_line = _MARKDOWN_RE.sub("", reply.strip().split("\n", 1)[0])
    while (stripped := _PREFIX_RE.sub("", first_line, count=1)) != first_line:
        first_line = stripped
    return _GRAMMARS[Aspect(aspect)].read(first_line)
