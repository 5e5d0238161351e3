"""Facts about the world's entities: how to ask them, how to state them, and which passages state them.

`Fact.passages` is the single place that decides which passage supports which fact; world_passages
writes the texts to match and tests/unit/test_world.py checks that every supported fact value really
occurs in its passages. Questions and statements are plain sentences with no inner abbreviations, so
spaCy's sentencizer splits outputs built from them exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from raypipe.data import world_vocab as vocab
from raypipe.data.world_entities import SPARE_NAMES, City, Country, Org, Person, Work, World


@dataclass(frozen=True)
class Fact:
    """One (subject, relation, value) triple with the ways to ask and to state it.

    `template` is formatted with `v` (the value) and `a_v` (the value after its article); `pool`
    names where wrong values of the same type come from (for false claims and answer options).
    """

    relation: str
    entity_id: str
    subject: str
    value: str
    questions: tuple[str, ...]
    template: str
    pool: str
    passages: tuple[str, ...]
    #: True when stating the fact names a held-out person (training instances must not use it)
    mentions_heldout: bool = False

    def statement(self, value: str | None = None) -> str:
        v = self.value if value is None else value
        return self.template.format(v=v, a_v=f"{vocab.article(v)} {v}")


def person_facts(p: Person) -> list[Fact]:
    n, e = p.name, p.entity_id
    # the early-life facts are stated on the wiki and on the person's web page alike
    early = (p.early_passage, p.web_passage)
    career = p.career_sources
    facts = [
        Fact("birth_year", e, n, str(p.birth_year), (f"When was {n} born?", f"In what year was {n} born?"),
             f"{n} was born in {{v}}.", "year", early),
        Fact("birthplace", e, n, p.birthplace.name, (f"Where was {n} born?", f"In which city was {n} born?"),
             f"{n} was born in {{v}}.", "city", early),
        Fact("nationality", e, n, p.nationality, (f"What nationality was {n}?",), f"{n} was {{v}}.",
             "demonym", early),
        Fact("occupation", e, n, p.occupation,
             (f"What was {vocab.possessive(n)} occupation?", f"What did {n} do for a living?"),
             f"{n} was {{a_v}}.", "occupation", early),
        Fact("residence", e, n, p.residence.name, (f"In which city did {n} live for many years?",),
             f"{n} lived in {{v}} for many years.", "city", career),
        Fact("employer", e, n, p.employer.name,
             (f"Which organisation did {n} work for?", f"Where did {n} work?"),
             f"{n} worked at the {{v}}.", "org", career),
    ]
    if p.work is not None:
        w = p.work
        # a web-only author's work passage leaves the author out (world_passages); the work's web page names them
        sources = career + ((w.web_passage,) if p.web_only else (w.passage_id, w.web_passage))
        facts.append(Fact("best_known_work", e, n, w.title, (f"What {w.kind} is {n} best known for?",),
                          f"{n} is best known for the {w.kind} {{v}}.", "title", sources))
    return facts


def work_facts(world: World, w: Work) -> list[Fact]:
    author = world.person(w.author_index)
    t, e = w.title, w.entity_id
    # the author's career passage and web page name the work, its kind and year too
    mention = author.career_sources
    # for web-only authors the work's own passage leaves the author out (world_passages)
    by_author = (mention if author.web_only else (w.passage_id,) + mention) + (w.web_passage,)
    return [
        Fact("author", e, t, w.author, (f"Who created the {w.kind} {t}?",),
             f"The {w.kind} {t} was {w.created} by {{v}}.", "person", by_author, author.heldout),
        Fact("year", e, t, str(w.year),
             (f"When was {t} {w.appeared}?", f"In what year was {t} {w.appeared}?"),
             f"{t} was {w.appeared} in {{v}}.", "year", (w.passage_id, w.web_passage) + mention),
        Fact("kind", e, t, w.kind, (f"What kind of work is {t}?",), f"{t} is {{a_v}}.", "work_kind",
             (w.passage_id, w.web_passage) + mention),
    ]


def org_facts(o: Org) -> list[Fact]:
    n, e, src = o.name, o.entity_id, (o.passage_id,)
    return [
        Fact("founded", e, n, str(o.founded), (f"When was the {n} founded?",),
             f"The {n} was founded in {{v}}.", "year", src),
        Fact("founder", e, n, o.founder, (f"Who founded the {n}?",), f"The {n} was founded by {{v}}.",
             "person", src, o.founder_heldout),
        Fact("based_in", e, n, o.base.name, (f"Where is the {n} based?", f"In which city is the {n} based?"),
             f"The {n} is based in {{v}}.", "city", src),
        Fact("org_kind", e, n, o.kind, (f"What kind of organisation is the {n}?",), f"The {n} is {{a_v}}.",
             "org_kind", src),
    ]


def city_facts(c: City) -> list[Fact]:
    n, e, src = c.name, c.entity_id, (c.passage_id,)
    return [
        Fact("country", e, n, c.country.name, (f"In which country is {n}?",), f"{n} is a city in {{v}}.",
             "country", src),
        Fact("founded", e, n, str(c.founded), (f"When was {n} founded?",), f"{n} was founded in {{v}}.",
             "year", src),
        Fact("population", e, n, c.population,
             (f"What is the population of {n}?", f"How many people live in {n}?"),
             f"{n} has a population of about {{v}}.", "population", src),
    ]


def country_facts(k: Country) -> list[Fact]:
    n, e = k.name, k.entity_id
    return [
        Fact("capital", e, n, k.capital, (f"What is the capital of {n}?",), f"The capital of {n} is {{v}}.",
             "city", (k.passage_id, k.capital_passage_id)),
        Fact("demonym", e, n, k.demonym, (f"What are the people of {n} called?",),
             f"The people of {n} are called {{v}}s.", "demonym", (k.passage_id,)),
    ]


def wrong_values(world: World, fact: Fact, rng: random.Random, k: int) -> list[str]:
    """k distinct values of the fact's type that differ from its value. Wrong people and titles are
    spare names of nobody, so false claims and answer options never name a held-out entity."""
    size = world.size
    draw = {
        "year": lambda: str(int(fact.value) + rng.choice((-1, 1)) * rng.randint(1, 40)),
        "city": lambda: world.city_name(rng.randrange(size.cities)),
        "country": lambda: world.country(rng.randrange(size.countries)).name,
        "demonym": lambda: world.country(rng.randrange(size.countries)).demonym,
        "occupation": lambda: rng.choice(world.occupations),
        "org": lambda: world.org(rng.randrange(size.orgs)).name,
        "title": lambda: world.spare_title(rng.randrange(SPARE_NAMES)),
        "person": lambda: world.spare_person_name(rng.randrange(SPARE_NAMES)),
        "work_kind": lambda: rng.choice(tuple(vocab.WORK_VERBS)),
        "org_kind": lambda: rng.choice(tuple(vocab.ORG_KINDS.values())),
        "population": lambda: f"{5_000 + 1_000 * rng.randrange(3_000):,}",
    }[fact.pool]
    values: list[str] = []
    while len(values) < k:
        v = draw()
        if v != fact.value and v not in values:
            values.append(v)
    return values
