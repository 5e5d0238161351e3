"""Instance templates of the synthetic world: the training mix and the held-out eval items.

The training mix mirrors Self-RAG's Table 3 (App. A.3): instruction-following data that mostly needs no
retrieval (creative, arithmetic and string tasks stand in for Alpaca/FLAN/ShareGPT; `instruct_explain`
for their knowledge questions) and knowledge-intensive data: short factual QA (Natural Questions),
multi-sentence biographies (ASQA / Wizard of Wikipedia), fact verification (FEVER) and multiple choice
(ARC-Easy / OpenBookQA, which in the paper rarely need retrieval, so half of ours do not).

Every grounded output sentence restates facts from `World` and records, per sentence, which passages
support it ("full": the passage states every fact of the sentence; "partial": some of them) and the
fact values it asserts (`facts`), so the support labels can be checked against the passage texts.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from raypipe.data import world_facts as facts_of
from raypipe.data import world_vocab as vocab
from raypipe.data.world_entities import World
from raypipe.data.world_facts import Fact, wrong_values
from raypipe.errors import ConfigError
from raypipe.prompts import format_choices

DATASET_TASK: dict[str, str] = {
    "instruct_creative": "instruction",
    "instruct_arith": "instruction",
    "instruct_string": "instruction",
    "instruct_explain": "instruction",
    "factual_qa": "qa",
    "bio": "longform",
    "fact_verification": "fact_verification",
    "multiple_choice": "multiple_choice",
}
FACT_INSTRUCTION = "Is the following statement correct or not? Say true if it's correct; otherwise say false."
MC_INSTRUCTION = "Given four answer candidates, A, B, C and D, choose the best answer choice."
LETTERS = ("A", "B", "C", "D")
#: how often each kind of entity is the subject of a training question
_SUBJECT_WEIGHTS = {"person": 45, "work": 20, "org": 15, "city": 12, "country": 8}
_NUMBER_WORDS = {2: "two", 3: "three"}


@dataclass
class Draft:
    """An instance before it gets its id: what the templates below produce."""

    instruction: str
    sentences: list[dict[str, Any]]
    utility: int
    needs_retrieval: bool
    input: str = ""
    entity_id: str | None = None
    entity: str | None = None
    relevant_passages: list[str] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)

    def row(self, row_id: str, dataset: str) -> dict[str, str]:
        """The INSTANCE_SCHEMA row; `meta` follows the contract in ARCHITECTURE.md §5."""
        meta = {
            "entity_id": self.entity_id, "entity": self.entity, "needs_retrieval": self.needs_retrieval,
            "sentences": self.sentences, "relevant_passages": self.relevant_passages,
            "utility": self.utility, **self.extras,
        }
        return {
            "id": row_id, "instruction": self.instruction, "input": self.input,
            "output": " ".join(s["text"] for s in self.sentences), "task": DATASET_TASK[dataset],
            "dataset": dataset, "meta": json.dumps(meta, ensure_ascii=False, separators=(",", ":")),
        }


def _plain(text: str) -> dict[str, Any]:
    """A sentence that needs no evidence (no factual claim about the world)."""
    return {"text": text, "needs_retrieval": False, "support": {}, "facts": []}


def _grounded(text: str, facts: list[str], support: dict[str, str]) -> dict[str, Any]:
    return {"text": text, "needs_retrieval": True, "support": support, "facts": facts}


def _full(passages: tuple[str, ...] | list[str]) -> dict[str, str]:
    return dict.fromkeys(passages, "full")


def _stated(fact: Fact) -> dict[str, Any]:
    return _grounded(fact.statement(), [fact.value], _full(fact.passages))


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


@dataclass(frozen=True)
class Subject:
    """An entity a training instance is about, with the facts a training instance may state."""

    entity_id: str
    name: str
    mention: str  # how a sentence refers to it ("the Harlow Institute")
    facts: list[Fact]


def training_subject(world: World, rng: random.Random) -> Subject:
    """A random entity that is not held out; facts naming a held-out person are left out."""
    kind = rng.choices(tuple(_SUBJECT_WEIGHTS), weights=tuple(_SUBJECT_WEIGHTS.values()))[0]
    if kind == "person":
        p = world.sample_person(rng, heldout=False)
        subject = Subject(p.entity_id, p.name, p.name, facts_of.person_facts(p))
    elif kind == "work":
        w = world.sample_person(rng, heldout=False, with_work=True).work
        assert w is not None  # with_work=True draws from people who have one
        subject = Subject(w.entity_id, w.title, w.title, facts_of.work_facts(world, w))
    elif kind == "org":
        o = world.org(rng.randrange(world.size.orgs))
        subject = Subject(o.entity_id, o.name, f"the {o.name}", facts_of.org_facts(o))
    elif kind == "city":
        c = world.city(rng.randrange(world.size.cities))
        subject = Subject(c.entity_id, c.name, c.name, facts_of.city_facts(c))
    else:
        k = world.country(rng.randrange(world.size.countries))
        subject = Subject(k.entity_id, k.name, k.name, facts_of.country_facts(k))
    return Subject(subject.entity_id, subject.name, subject.mention,
                   [f for f in subject.facts if not f.mentions_heldout])


def _about(subject: Subject, sentences: list[dict[str, Any]], relevant: list[str], **kw: Any) -> Draft:
    return Draft(sentences=sentences, entity_id=subject.entity_id, entity=subject.name,
                 relevant_passages=_unique(relevant), needs_retrieval=True, **kw)


# --- instruction following that needs no retrieval ---------------------------------------------------


def instruct_creative(world: World, rng: random.Random, imperfect: bool) -> Draft:
    noun, color, mood = rng.choice(vocab.NOUNS), rng.choice(vocab.COLORS), rng.choice(vocab.MOODS)
    place, theme = rng.choice(vocab.PLACES), rng.choice(vocab.THEMES)
    n = rng.choice((2, 3))
    instruction = rng.choice((
        f"Write a {_NUMBER_WORDS[n]}-sentence story about a {noun}.",
        f"Describe a {mood} evening at {place} in {_NUMBER_WORDS[n]} sentences.",
        f"Write {_NUMBER_WORDS[n]} sentences about {theme}, mentioning a {noun}.",
    ))
    pool = [
        f"The {noun} waited near {place} until the sky turned {color}.",
        f"Nobody expected a {mood} {noun} to teach anyone about {theme}.",
        f"By nightfall the whole street smelled of rain and {color} paint.",
        f"A child laughed, and the {noun} seemed to laugh along!",
        f"Some evenings are {mood}, and this one felt like a promise.",
        f"In the end, {theme} was the only thing worth carrying home.",
        f"Somewhere near {place} a {color} light kept blinking.",
    ]
    chosen = rng.sample(pool, 1 if imperfect else n)
    # a story shorter than asked for is on topic but incomplete
    utility = 2 if imperfect else rng.choice((4, 5, 5))
    return Draft(instruction, [_plain(s) for s in chosen], utility, needs_retrieval=False)


@dataclass(frozen=True)
class Problem:
    """An instruction with one exact answer (arithmetic, string tasks): the training instance states
    `output`; the held-out no-retrieval eval set judges `answer`."""

    instruction: str
    input: str
    answer: str
    output: str
    #: how an off-target output of the training mix refers to the problem
    topic: str = ""


def arith_problem(rng: random.Random) -> Problem:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    op = rng.choice(("plus", "minus", "times"))
    if op == "minus" and b > a:
        a, b = b, a
    result = {"plus": a + b, "minus": a - b, "times": a * b}[op]
    if rng.random() < 0.5:
        instruction, inp = f"What is {a} {op} {b}?", ""
    else:
        instruction, inp = "Compute the following expression.", f"{a} {op} {b}"
    return Problem(instruction, inp, str(result), f"{a} {op} {b} is {result}.", topic=f"{a} {op} {b}")


def string_problem(rng: random.Random) -> Problem:
    word = rng.choice(vocab.STRING_WORDS)
    kind = rng.randrange(4)
    if kind == 0:
        return Problem(f"Reverse the letters of the word {word}.", "", word[::-1],
                       f"Reversed, {word} becomes {word[::-1]}.")
    if kind == 1:
        return Problem(f"Write the word {word} in capital letters.", "", word.upper(),
                       f"In capital letters it is {word.upper()}.")
    if kind == 2:
        return Problem(f"How many letters does the word {word} have?", "", str(len(word)),
                       f"The word {word} has {len(word)} letters.")
    words = rng.sample(vocab.STRING_WORDS, 3)
    first, second, third = sorted(words)
    listed = f"{first}, {second} and {third}"
    return Problem(f"Sort these words alphabetically: {', '.join(words)}.", "", listed,
                   f"In alphabetical order the words are {listed}.")


def instruct_arith(world: World, rng: random.Random, imperfect: bool) -> Draft:
    p = arith_problem(rng)
    if imperfect:
        return Draft(p.instruction, [_plain(f"The result of {p.topic} is a whole number.")], 1,
                     needs_retrieval=False, input=p.input)
    return Draft(p.instruction, [_plain(p.output)], 5, needs_retrieval=False, input=p.input)


def instruct_string(world: World, rng: random.Random, imperfect: bool) -> Draft:
    p = string_problem(rng)
    if imperfect:
        return Draft(p.instruction, [_plain("That is a simple word puzzle.")], 1, needs_retrieval=False)
    return Draft(p.instruction, [_plain(p.output)], 5, needs_retrieval=False)


# --- knowledge-intensive tasks --------------------------------------------------------------------------


def instruct_explain(world: World, rng: random.Random, imperfect: bool) -> Draft:
    s = training_subject(world, rng)
    instruction = rng.choice((f"Tell me about {s.mention}.", f"What should I know about {s.mention}?",
                              f"Give me a short introduction to {s.mention}."))
    relevant = [p for f in s.facts for p in f.passages]
    if imperfect:
        # on topic but says nothing: relevant evidence exists, the answer is not useful
        return _about(s, [_plain(f"That is an interesting question about {s.mention}.")], relevant,
                      instruction=instruction, utility=1)
    facts = rng.sample(s.facts, min(len(s.facts), rng.choice((2, 3))))
    return _about(s, [_stated(f) for f in facts], relevant, instruction=instruction,
                  utility=5 if len(facts) >= 3 else 4)


def factual_qa(world: World, rng: random.Random, imperfect: bool) -> Draft:
    s = training_subject(world, rng)
    fact = rng.choice(s.facts)
    question = rng.choice(fact.questions)
    stated = fact
    if imperfect:
        # a true, supported statement about the subject that does not answer the question
        stated = rng.choice([f for f in s.facts if f is not fact])
    return _about(s, [_stated(stated)], list(fact.passages), instruction=question,
                  utility=2 if imperfect else 5, extras={"answer": fact.value})


def bio(world: World, rng: random.Random, imperfect: bool) -> Draft:
    """A multi-sentence biography (ASQA / WoW-like long form): sentences supported by one or two
    passages, sentences only partially supported by each of two passages, and generic sentences."""
    p = world.sample_person(rng, heldout=False)
    n, early, career, web = p.name, p.early_passage, p.career_passage, p.web_passage
    instruction = rng.choice((f"Write a short biography of {n}.", f"Tell me the life story of {n}.",
                              f"Summarize the life of {n} in a few sentences."))
    nat, occ, org = p.nationality, p.occupation, p.employer.name
    # the web page states every fact of the person (world_passages), so it fully supports each sentence
    grounded = [_grounded(f"{n} was born in {p.birth_year} in {p.birthplace.name}.",
                          [str(p.birth_year), p.birthplace.name], {early: "full", web: "full"})]
    if rng.random() < 0.35:
        grounded.append(_grounded(f"{n} was {vocab.article(nat)} {nat} {occ} who worked at the {org}.",
                                  [nat, occ, org], {early: "partial", career: "partial", web: "full"}))
    else:
        grounded.append(_grounded(f"{n} was {vocab.article(nat)} {nat} {occ}.", [nat, occ],
                                  {early: "full", web: "full"}))
        grounded.append(_grounded(f"{n} worked at the {org}.", [org], {career: "full", web: "full"}))
    if rng.random() < 0.5:
        grounded.append(_grounded(f"{n} lived in {p.residence.name} for many years.", [p.residence.name],
                                  {career: "full", web: "full"}))
    relevant = [early, career, web]
    if p.work is not None:
        w = p.work
        grounded.append(_grounded(f"{n} is best known for the {w.kind} {w.title}, {w.appeared} in {w.year}.",
                                  [w.kind, w.title, str(w.year)],
                                  _full((career, web, w.passage_id, w.web_passage))))
        relevant += [w.passage_id, w.web_passage]
    if imperfect:
        grounded = grounded[:1]
    sentences = grounded
    if rng.random() < 0.4:
        opener = rng.choice(("Here is a short biography.", "Here is a brief overview."))
        sentences = [_plain(opener)] + sentences
    if rng.random() < 0.3:
        sentences = sentences + [_plain("Further details can be found in the sources about this life.")]
    utility = 3 if imperfect else (5 if len(grounded) >= 4 else 4)
    return Draft(instruction, sentences, utility, needs_retrieval=True, entity_id=p.entity_id, entity=n,
                 relevant_passages=relevant)


def _claim(world: World, fact: Fact, rng: random.Random) -> tuple[str, str, str]:
    """(claim, "true"|"false", the value it claims): the fact itself or the fact with a wrong value."""
    if rng.random() < 0.5:
        return fact.statement(), "true", fact.value
    wrong = wrong_values(world, fact, rng, 1)[0]
    return fact.statement(wrong), "false", wrong


def _options(world: World, fact: Fact, rng: random.Random) -> tuple[dict[str, str], str]:
    """Four answer options, the true value among them, and its letter."""
    values = [fact.value] + wrong_values(world, fact, rng, 3)
    rng.shuffle(values)
    return dict(zip(LETTERS, values, strict=True)), LETTERS[values.index(fact.value)]


def _verdict(fact: Fact, label: str) -> str:
    """A verdict written after the fact it rests on: "Ada Quill was born in 1901, so the statement is
    false."

    Ours (FEVER's outputs are the bare label): generators trained on "true" / "false" alone leaned one
    way whatever the passage said. Restating the passage's value first is the copying these generators
    do well, as the multiple-choice answers write the choice's text before its letter (what it moved:
    docs/results/demo.md). The eval reads the first "true" or "false" in the answer (App. B.2's string
    matching); fact values never contain either.
    """
    return f"{fact.statement().removesuffix('.')}, so the statement is {label}."


def _fact_draft(s: Subject, fact: Fact, claim: str, label: str, claimed: str) -> Draft:
    """`meta.claimed`: the value the claim states, what a verdict compares with the passage's."""
    # the passage stating the true value supports the verdict whether the claim is true or not
    return _about(s, [_grounded(_verdict(fact, label), [fact.value], _full(fact.passages))], list(fact.passages),
                  instruction=FACT_INSTRUCTION, input=claim, utility=5, extras={"label": label, "claimed": claimed})


def fact_verification(world: World, rng: random.Random, imperfect: bool) -> Draft:
    s = training_subject(world, rng)
    fact = rng.choice(s.facts)
    return _fact_draft(s, fact, *_claim(world, fact, rng))


def fact_verification_twins(world: World, rng: random.Random, imperfect: bool) -> tuple[Draft, Draft]:
    """A claim and its contradicting twin, in a random order: the same subject, fact and passage, one
    claim with the true value and one with a wrong value, their labels opposite (`world.fact_twins`).

    Ours (FEVER has no such pairs): a generator that sees the verdict turn on the value alone, with the
    passage unchanged, cannot answer from the claim's wording or the label's frequency."""
    s = training_subject(world, rng)
    fact = rng.choice(s.facts)
    wrong = wrong_values(world, fact, rng, 1)[0]
    pair = [(fact.statement(), "true", fact.value), (fact.statement(wrong), "false", wrong)]
    rng.shuffle(pair)
    first, second = (_fact_draft(s, fact, *claim) for claim in pair)
    return first, second


@functools.cache
def _nouns_by_length() -> dict[int, list[str]]:
    by_length: dict[int, list[str]] = {}
    for w in vocab.NOUNS:
        by_length.setdefault(len(w), []).append(w)
    return by_length


def _general_mc(rng: random.Random) -> tuple[str, dict[str, str], str]:
    """A multiple-choice question answerable without any world knowledge."""
    if rng.random() < 0.5:
        numbers = rng.sample(range(10, 1000), 4)
        key = LETTERS[numbers.index(max(numbers))]
        choices = dict(zip(LETTERS, map(str, numbers), strict=True))
        return "Which of these numbers is the largest?", choices, key
    by_length = _nouns_by_length()
    words = [rng.choice(by_length[n]) for n in rng.sample(sorted(by_length), 4)]
    key = LETTERS[words.index(max(words, key=len))]
    return "Which of these words has the most letters?", dict(zip(LETTERS, words, strict=True)), key


def _choice_answer(choices: dict[str, str], key: str) -> str:
    """A multiple-choice answer written as the choice's text, then its letter: "1987 (C)".

    A generator trained on bare letters read the right passage yet wrote the wrong letter (the gold
    choice's text was in the cited passage for 23 of 50 held-out items; the letter was right for 3).
    Copying a value from a passage is what it does well, and the closed-set matcher maps an answer to
    its option by the choice's text (Self-RAG App. B.2's string matching); the letter stays for readers.
    """
    return f"{choices[key]} ({key})"


def multiple_choice(world: World, rng: random.Random, imperfect: bool) -> Draft:
    if rng.random() < 0.5:
        question, choices, key = _general_mc(rng)
        return Draft(MC_INSTRUCTION, [_plain(_choice_answer(choices, key))], 5, needs_retrieval=False,
                     input=format_choices(question, choices), extras={"choices": choices, "answerKey": key})
    s = training_subject(world, rng)
    fact = rng.choice(s.facts)
    choices, key = _options(world, fact, rng)
    answer = _grounded(_choice_answer(choices, key), [fact.value], _full(fact.passages))
    return _about(s, [answer], list(fact.passages), instruction=MC_INSTRUCTION,
                  input=format_choices(rng.choice(fact.questions), choices), utility=5,
                  extras={"choices": choices, "answerKey": key})


#: dataset -> builder(world, rng, imperfect); `imperfect` asks for a deliberately worse output (lower
#: utility) where the task has one; label-style tasks (true/false, a letter) ignore it
BUILDERS: dict[str, Callable[[World, random.Random, bool], Draft]] = {
    "instruct_creative": instruct_creative,
    "instruct_arith": instruct_arith,
    "instruct_string": instruct_string,
    "instruct_explain": instruct_explain,
    "factual_qa": factual_qa,
    "bio": bio,
    "fact_verification": fact_verification,
    "multiple_choice": multiple_choice,
}


def check_mix(mix: dict[str, float]) -> None:
    unknown = sorted(set(mix) - set(BUILDERS))
    if unknown:
        raise ConfigError(f"world.mix: unknown dataset(s) {unknown}; known: {sorted(BUILDERS)}")
    if any(w < 0 for w in mix.values()) or not sum(mix.values()) > 0:
        raise ConfigError("world.mix: weights must be >= 0 and sum to more than 0")


# --- held-out evaluation ----------------------------------------------------------------------------------


def _heldout_facts(world: World, i: int) -> tuple[str, list[Fact]]:
    p = world.person(i)
    facts = facts_of.person_facts(p)
    if p.work is not None:
        facts += facts_of.work_facts(world, p.work)
    return p.name, facts


def heldout_fact_deal(world: World, rng: random.Random, people: list[int]) -> Iterator[tuple[str, Fact]]:
    """Every (held-out person, fact) pair once: the people in a shuffled order, round by round, each
    round one not yet asked fact of every person who has one left. So the first rows of a split ask
    about every person before any is asked twice (an eval limited to its first rows is spread over
    the population), and no item repeats another's (person, fact): a split holds at most this many
    distinct items."""
    order = people[:]
    rng.shuffle(order)
    decks = []
    for i in order:
        entity, facts = _heldout_facts(world, i)
        rng.shuffle(facts)
        decks.append((entity, facts))
    for k in range(max((len(facts) for _, facts in decks), default=0)):
        for entity, facts in decks:
            if k < len(facts):
                yield entity, facts[k]


def heldout_qa(world: World, rng: random.Random, entity: str, fact: Fact, item_id: str) -> dict[str, Any]:
    return {"id": item_id, "question": rng.choice(fact.questions), "answers": [fact.value], "entity": entity,
            "passage_ids": list(fact.passages), "relation": fact.relation}


def heldout_fact(world: World, rng: random.Random, entity: str, fact: Fact, item_id: str) -> dict[str, Any]:
    claim, label, _ = _claim(world, fact, rng)
    return {"id": item_id, "claim": claim, "label": label, "entity": entity,
            "passage_ids": list(fact.passages), "relation": fact.relation}


def heldout_mc(world: World, rng: random.Random, entity: str, fact: Fact, item_id: str) -> dict[str, Any]:
    choices, key = _options(world, fact, rng)
    return {"id": item_id, "question": rng.choice(fact.questions), "choices": choices, "answerKey": key,
            "entity": entity, "passage_ids": list(fact.passages), "relation": fact.relation}


#: the categories of the no-retrieval eval set, drawn with equal weight
NORET_CATEGORIES = ("arith", "string", "creative")


def heldout_noret(world: World, rng: random.Random, item_id: str) -> dict[str, Any]:
    """An instruction that needs no retrieval (Self-RAG §3.3: adaptive retrieval should not fire on
    it), drawn from the training mix's arithmetic, string and creative templates with this split's
    own seed. Arithmetic and string items carry their one exact answer; creative items have none
    (`answers` is empty): they only count for retrieval frequency.
    A drawn item can coincide with a training instance by chance (the templates and word lists are
    small); that does not matter for what this set measures, whether retrieval fires."""
    category = rng.choice(NORET_CATEGORIES)
    if category == "creative":
        draft = instruct_creative(world, rng, False)
        instruction, inp, answers = draft.instruction, draft.input, []
        reference = " ".join(s["text"] for s in draft.sentences)
    else:
        problem = (arith_problem if category == "arith" else string_problem)(rng)
        instruction, inp, answers, reference = problem.instruction, problem.input, [problem.answer], problem.output
    return {"id": item_id, "instruction": instruction, "input": inp, "answers": answers, "category": category,
            "reference": reference}


def heldout_longform(world: World, rng: random.Random, i: int, item_id: str) -> dict[str, Any]:
    """A biography of held-out person `i` (the long-form set: CRAG's Biography, Self-Reasoning's
    long-form QA). `facts`: the value of every world fact about the person and their work, what
    FactScore checks a generated sentence against (raypipe.eval.factscore); `answers`: the person's
    own fact values (EM recall); `sentences`: a reference biography, one fact per sentence, with the
    passages that support it; `passage_ids` (= `relevant_passages`): every passage stating one of
    them. `rng` is unused: the instruction is fixed."""
    p = world.person(i)
    own = facts_of.person_facts(p)
    every = own + (facts_of.work_facts(world, p.work) if p.work is not None else [])
    passages = sorted({pid for f in own for pid in f.passages})
    return {"id": item_id, "instruction": f"Write a short biography of {p.name}.", "input": "",
            "answers": [f.value for f in own], "facts": _unique([f.value for f in every]), "entity": p.name,
            "sentences": [_stated(f) for f in own], "relevant_passages": passages, "passage_ids": passages}


#: the held-out splits whose items each ask about one (held-out person, fact)
FACT_SPLITS: dict[str, Callable[[World, random.Random, str, Fact, str], dict[str, Any]]] = {
    "heldout_qa": heldout_qa,
    "heldout_fact": heldout_fact,
    "heldout_mc": heldout_mc,
}
EVAL_SPLITS = (*FACT_SPLITS, "heldout_noret", "heldout_longform")
#: draws per wanted no-retrieval item before a split settles for fewer distinct ones
_NORET_DRAWS_PER_ITEM = 20


def heldout_split(world: World, split: str, people: list[int], n: int, rng: random.Random) -> list[dict[str, Any]]:
    """Up to `n` items of one held-out split, no two alike: a fact split asks each (person, fact) of
    `people` at most once (`heldout_fact_deal`), the long-form split writes each person's biography
    once, the no-retrieval split redraws an (instruction, input) it already holds. A split the
    population cannot fill holds fewer than `n` (the caller reports it): repeated items would only
    look like a larger eval."""
    def item_id(j: int) -> str:
        return f"{split}-{j:05d}"

    if split in FACT_SPLITS:
        build = FACT_SPLITS[split]
        pairs = list(itertools.islice(heldout_fact_deal(world, rng, people), n))
        return [build(world, rng, entity, fact, item_id(j)) for j, (entity, fact) in enumerate(pairs)]
    if split == "heldout_longform":
        order = people[:]
        rng.shuffle(order)
        return [heldout_longform(world, rng, i, item_id(j)) for j, i in enumerate(order[:n])]
    if split == "heldout_noret":
        rows: list[dict[str, Any]] = []
        seen: set[tuple[str, str]] = set()
        for _ in range(_NORET_DRAWS_PER_ITEM * n):
            if len(rows) == n:
                break
            row = heldout_noret(world, rng, item_id(len(rows)))
            if (row["instruction"], row["input"]) not in seen:
                seen.add((row["instruction"], row["input"]))
                rows.append(row)
        return rows
    raise ValueError(f"unknown held-out split {split!r}; known: {', '.join(EVAL_SPLITS)}")
