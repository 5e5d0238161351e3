"""Entities of the synthetic world (people, works, organisations, cities, countries) and their ids.

Nothing is stored per entity: every attribute is a hash of (seed, attribute, entity index), and names
come from seeded permutations of fixed-size name spaces. So any entity can be computed on demand in any
order, shards can be written independently, and memory does not grow with the world. The facts about
entities live in world_facts, the passages stating them in world_passages.
"""

from __future__ import annotations

import bisect
import functools
import math
import random
import zlib
from dataclasses import dataclass

import numpy as np

from raypipe.data import world_vocab as vocab
from raypipe.errors import ConfigError
from raypipe.settings.data import WorldConfig

_M64 = (1 << 64) - 1
#: name indices kept free past the last real person/work, used as wrong answer options
SPARE_NAMES = 1000
#: rejection-sampling attempts before a world is declared unable to supply such a person
_MAX_DRAWS = 10_000


def _mix(x: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


@functools.cache
def _salt(what: str) -> int:
    # crc32, not hash(): str hashes change between processes (PYTHONHASHSEED) and would break determinism
    return zlib.crc32(what.encode())


class Hasher:
    """Deterministic random draws addressed by (what, index) instead of by call order."""

    def __init__(self, seed: int):
        self._key = _mix(seed & _M64)

    def bits(self, what: str, index: int) -> int:
        return _mix(self._key ^ _mix((_salt(what) << 32) | index))

    def draw(self, what: str, index: int, n: int) -> int:
        return self.bits(what, index) % n

    def chance(self, what: str, index: int) -> float:
        return self.bits(what, index) / 2**64


@dataclass(frozen=True)
class WorldSize:
    """How many entities of each kind a world of `instances` instances has."""

    people: int
    distractors: int
    works: int
    orgs: int
    cities: int
    countries: int

    @classmethod
    def for_config(cls, cfg: WorldConfig) -> WorldSize:
        budget = max(60, math.ceil(cfg.instances * cfg.entities_per_instance))
        people = max(20, round(0.45 * budget))
        cities_wanted = max(12, round(0.15 * budget))
        countries = min(max(6, cities_wanted // 50), len(vocab.country_stems()))
        size = cls(
            people=people,
            distractors=round(people * cfg.distractor_fraction),
            works=min(people, max(8, round(0.25 * budget))),
            orgs=max(6, round(0.15 * budget)),
            cities=max(2 * countries, cities_wanted),
            countries=countries,
        )
        size._check_capacity()
        return size

    def _check_capacity(self) -> None:
        capacity = {
            "people": (self.people + SPARE_NAMES, len(vocab.FIRST_NAMES) * len(vocab.surnames())),
            "works": (self.works + SPARE_NAMES, _title_capacity()),
            "organisations": (self.orgs, len(vocab.surnames()) * len(vocab.ORG_KINDS)),
            "cities": (self.cities, len(vocab.city_names())),
        }
        for kind, (needed, available) in capacity.items():
            if needed > available:
                raise ConfigError(
                    f"world.instances / world.entities_per_instance: the world needs {needed} {kind} names "
                    f"but the vocabulary holds {available}; lower world.entities_per_instance"
                )

    @property
    def total(self) -> int:
        return self.people + self.distractors + self.works + self.orgs + self.cities + self.countries


def _title_capacity() -> int:
    return len(vocab.TITLE_ADJECTIVES) * len(vocab.TITLE_NOUNS) * len(vocab.TITLE_TAILS)


@dataclass(frozen=True)
class Country:
    index: int
    entity_id: str
    name: str
    demonym: str
    capital: str
    passage_id: str
    capital_passage_id: str


@dataclass(frozen=True)
class City:
    index: int
    entity_id: str
    name: str
    country: Country
    founded: int
    population: str
    passage_id: str

    @property
    def is_capital(self) -> bool:
        return self.index == self.country.index


@dataclass(frozen=True)
class Org:
    index: int
    entity_id: str
    name: str
    kind: str
    founded: int
    base: City
    founder: str
    founder_heldout: bool
    passage_id: str


@dataclass(frozen=True)
class Work:
    index: int
    entity_id: str
    title: str
    kind: str
    year: int
    author: str
    author_index: int
    passage_id: str
    #: its page in the web corpus
    web_passage: str

    @property
    def created(self) -> str:
        return vocab.WORK_VERBS[self.kind][0]

    @property
    def appeared(self) -> str:
        return vocab.WORK_VERBS[self.kind][1]


@dataclass(frozen=True)
class Person:
    """A person. `early_passage` states birth and occupation, `career_passage` residence, employer
    and best-known work; `web_passage`, the person's web page, states all of them. For web-only people
    the career passage is a stub, so their career facts live on the web only."""

    index: int
    entity_id: str
    name: str
    birth_year: int
    birthplace: City
    occupation: str
    residence: City
    employer: Org
    work: Work | None
    heldout: bool
    web_only: bool
    early_passage: str
    career_passage: str
    web_passage: str

    @property
    def nationality(self) -> str:
        return self.birthplace.country.demonym

    @property
    def career_sources(self) -> tuple[str, ...]:
        """Where the career facts (residence, employer, best-known work) are stated."""
        return (self.web_passage,) if self.web_only else (self.career_passage, self.web_passage)


class World:
    """The whole world, computed on demand from a WorldConfig."""

    def __init__(self, cfg: WorldConfig):
        self.cfg = cfg
        self.size = WorldSize.for_config(cfg)
        self.hash = Hasher(cfg.seed)
        rng = np.random.default_rng(self.hash.bits("name-permutations", 0))
        self._surnames = vocab.surnames()
        self._cities = vocab.city_names()
        self._stems = vocab.country_stems()
        self._org_kinds = tuple(vocab.ORG_KINDS)
        self.occupations = tuple(vocab.OCCUPATIONS)
        # the permutations have the size of the (fixed) name spaces, not of the world
        self._person_perm = rng.permutation(len(vocab.FIRST_NAMES) * len(self._surnames))
        self._title_perm = rng.permutation(_title_capacity())
        self._org_perm = rng.permutation(len(self._surnames) * len(self._org_kinds))
        self._city_perm = rng.permutation(len(self._cities))
        self._country_perm = rng.permutation(len(self._stems))
        s = self.size
        counts = (s.people, s.distractors, s.works, s.orgs, s.cities, s.countries)
        self._entity_offsets = tuple(int(x) for x in np.cumsum((0,) + counts[:-1]))
        # people have two passages each (early life, career); every other entity has one
        self._passage_offsets = tuple(int(x) for x in np.cumsum((0, 2 * s.people) + counts[1:-1]))
        self._passage_blocks = ("person", "distractor", "work", "org", "city", "country")
        self.n_passages = 2 * s.people + sum(counts[1:])
        # the web: a page per person, per work and per distractor (the look-alikes), in that order
        self._web_offsets = (0, s.people, s.people + s.works)
        self._web_blocks = ("person", "work", "distractor")
        self.n_web_passages = s.people + s.works + s.distractors

    # --- ids -------------------------------------------------------------------------------------

    def _eid(self, block: int, index: int) -> str:
        return f"e{self._entity_offsets[block] + index:06d}"

    def _pid(self, block: int, index: int) -> str:
        return f"p{self._passage_offsets[block] + index:07d}"

    def _wid(self, block: int, index: int) -> str:
        return f"w{self._web_offsets[block] + index:07d}"

    # --- names -----------------------------------------------------------------------------------

    def _person_name_parts(self, i: int) -> tuple[str, str]:
        first, surname = divmod(int(self._person_perm[i]), len(self._surnames))
        return vocab.FIRST_NAMES[first], self._surnames[surname]

    def person_name(self, i: int) -> str:
        """Names of people; indices past `size.people` are spare names of nobody (answer options)."""
        return " ".join(self._person_name_parts(i))

    def title(self, i: int) -> str:
        """Work titles; indices past `size.works` are spare titles of no work (answer options)."""
        rest, tail = divmod(int(self._title_perm[i]), len(vocab.TITLE_TAILS))
        adj, noun = divmod(rest, len(vocab.TITLE_NOUNS))
        return f"The {vocab.TITLE_ADJECTIVES[adj]} {vocab.TITLE_NOUNS[noun]}{vocab.TITLE_TAILS[tail]}"

    def spare_person_name(self, k: int) -> str:
        return self.person_name(self.size.people + k % SPARE_NAMES)

    def spare_title(self, k: int) -> str:
        return self.title(self.size.works + k % SPARE_NAMES)

    def city_name(self, c: int) -> str:
        return self._cities[int(self._city_perm[c])]

    def locate_passage(self, index: int) -> tuple[str, int]:
        """Wiki passage `index` -> (kind of entity, index within that kind); for "person" the index
        counts passages (two per person: early life, career)."""
        block = bisect.bisect_right(self._passage_offsets, index) - 1
        return self._passage_blocks[block], index - self._passage_offsets[block]

    def locate_web_passage(self, index: int) -> tuple[str, int]:
        """Web page `index` in [0, n_web_passages) -> (kind of entity, index within that kind)."""
        block = bisect.bisect_right(self._web_offsets, index) - 1
        return self._web_blocks[block], index - self._web_offsets[block]

    # --- entities --------------------------------------------------------------------------------

    def is_heldout(self, i: int) -> bool:
        return self.hash.chance("heldout", i) < self.cfg.heldout_fraction

    def country(self, k: int) -> Country:
        stem = self._stems[int(self._country_perm[k])]
        # country k's capital is city k
        return Country(k, self._eid(5, k), stem + "ia", stem + "ian", self.city_name(k), self._pid(5, k),
                       self._pid(4, k))

    def city(self, c: int) -> City:
        k = c if c < self.size.countries else self.hash.draw("city.country", c, self.size.countries)
        population = 5_000 + 1_000 * self.hash.draw("city.population", c, 3_000)
        return City(c, self._eid(4, c), self.city_name(c), self.country(k),
                    700 + self.hash.draw("city.founded", c, 1_200), f"{population:,}", self._pid(4, c))

    def org(self, o: int) -> Org:
        surname, kind = divmod(int(self._org_perm[o]), len(self._org_kinds))
        founder = self.hash.draw("org.founder", o, self.size.people)
        return Org(o, self._eid(3, o), f"{self._surnames[surname]} {self._org_kinds[kind]}",
                   vocab.ORG_KINDS[self._org_kinds[kind]], 1500 + self.hash.draw("org.founded", o, 490),
                   self.city(self.hash.draw("org.base", o, self.size.cities)), self.person_name(founder),
                   self.is_heldout(founder), self._pid(3, o))

    def _occupation(self, i: int) -> str:
        return self.occupations[self.hash.draw("person.occupation", i, len(self.occupations))]

    def _birth_year(self, i: int) -> int:
        return 1600 + self.hash.draw("person.birth_year", i, 380)

    def work(self, w: int) -> Work:
        """Work w is the best-known work of person w."""
        year = min(2020, self._birth_year(w) + 22 + self.hash.draw("work.year", w, 50))
        return Work(w, self._eid(2, w), self.title(w), vocab.OCCUPATIONS[self._occupation(w)], year,
                    self.person_name(w), w, self._pid(2, w), self._wid(1, w))

    def person(self, i: int) -> Person:
        heldout = self.is_heldout(i)
        return Person(
            index=i, entity_id=self._eid(0, i), name=self.person_name(i), birth_year=self._birth_year(i),
            birthplace=self.city(self.hash.draw("person.birthplace", i, self.size.cities)),
            occupation=self._occupation(i),
            residence=self.city(self.hash.draw("person.residence", i, self.size.cities)),
            employer=self.org(self.hash.draw("person.employer", i, self.size.orgs)),
            work=self.work(i) if i < self.size.works else None,
            heldout=heldout,
            web_only=heldout and self.hash.chance("person.web_only", i) < self.cfg.web_only_fraction,
            early_passage=self._pid(0, 2 * i), career_passage=self._pid(0, 2 * i + 1),
            web_passage=self._wid(0, i),
        )

    def distractor(self, j: int) -> Person:
        """The near-namesake of person j: same first name and occupation, surname + "e", other facts.
        Distractors exist only as passages (a wiki passage and a web page, the look-alikes a search
        for person j meets); no instance is about them."""
        first, surname = self._person_name_parts(j)
        return Person(
            index=j, entity_id=self._eid(1, j), name=f"{first} {vocab.distractor_surname(surname)}",
            birth_year=1600 + self.hash.draw("distractor.birth_year", j, 380),
            birthplace=self.city(self.hash.draw("distractor.birthplace", j, self.size.cities)),
            occupation=self._occupation(j),
            residence=self.city(self.hash.draw("distractor.residence", j, self.size.cities)),
            employer=self.org(self.hash.draw("distractor.employer", j, self.size.orgs)),
            work=None, heldout=False, web_only=False,
            early_passage=self._pid(1, j), career_passage=self._pid(1, j), web_passage=self._wid(2, j),
        )

    # --- sampling --------------------------------------------------------------------------------

    def sample_person(self, rng: random.Random, *, heldout: bool, with_work: bool = False) -> Person:
        """A uniformly drawn person that is (or is not) held out. Rejection sampling keeps memory
        flat; a world where (almost) nobody qualifies is a config error, not an endless loop."""
        limit = self.size.works if with_work else self.size.people
        for _ in range(_MAX_DRAWS):
            i = rng.randrange(limit)
            if self.is_heldout(i) == heldout:
                return self.person(i)
        which = "held-out" if heldout else "training"
        raise ConfigError(f"world.heldout_fraction={self.cfg.heldout_fraction}: no {which} person found in "
                          f"{_MAX_DRAWS} draws; lower world.heldout_fraction or raise world.instances")

    def heldout_people(self) -> list[int]:
        """Indices of held-out people (about `heldout_fraction` of people; small)."""
        return [i for i in range(self.size.people) if self.is_heldout(i)]
