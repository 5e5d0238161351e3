"""Passage texts of the synthetic world: the wiki corpus (passages/) and the web corpus (web/passages/).

Wiki: two passages per person (early life; career), one per distractor, work, organisation, city and
country, titled with the entity's name. Web: pages, one paragraph per line, as a search that fetches
them returns them (CRAG App. B.3: a page's `<p>` paragraphs): a page per person (birth and
occupation; career; a paragraph stating nothing), a page per work (what, by whom, when; a paragraph
stating nothing) and a page per distractor (the look-alike a web search for its namesake meets). Most
facts are stated on the wiki and the web alike, as the real web mirrors Wikipedia for such entities;
the career facts of web-only held-out people only on their web page (the wiki has a stub), and a
web-only author's name on the work's web page but not in its wiki passage (CRAG's reason to search
elsewhere). The texts state exactly the facts that world_facts says they state.
"""

from __future__ import annotations

from raypipe.data import world_vocab as vocab
from raypipe.data.world_entities import City, Hasher, Org, Person, Work, World


def passage(world: World, index: int) -> tuple[str, str, str]:
    """(id, title, text) of wiki passage `index` in [0, world.n_passages)."""
    kind, i = world.locate_passage(index)
    pid = f"p{index:07d}"
    if kind == "person":
        p = world.person(i // 2)
        return pid, p.name, (_career_text(p) if i % 2 else _early_text(p, world.hash))
    if kind == "distractor":
        d = world.distractor(i)
        return pid, d.name, _distractor_text(d)
    if kind == "work":
        w = world.work(i)
        return pid, w.title, _work_text(w, world.person(w.author_index).web_only)
    if kind == "org":
        o = world.org(i)
        return pid, o.name, _org_text(o)
    if kind == "city":
        c = world.city(i)
        return pid, c.name, _city_text(c)
    k = world.country(i)
    return pid, k.name, (f"{k.name} is a country whose capital is {k.capital}. "
                         f"The people of {k.name} are called {k.demonym}s.")


def web_passage(world: World, index: int) -> tuple[str, str, str]:
    """(id, title, text) of web page `index` in [0, world.n_web_passages)."""
    kind, i = world.locate_web_passage(index)
    if kind == "work":
        w = world.work(i)
        return w.web_passage, w.title, _work_page(w)
    p = world.person(i) if kind == "person" else world.distractor(i)
    return p.web_passage, p.name, _person_page(p)


def _person_page(p: Person) -> str:
    """Three paragraphs: birth and occupation, career, and one that states nothing (a page's
    boilerplate, for CRAG's refinement to filter out)."""
    b, nat = p.birthplace, p.nationality
    early = f"{p.name}, born in {b.name} in {p.birth_year}, was {vocab.article(nat)} {nat} {p.occupation}."
    about = (f"This profile of {p.name} was compiled from local archives and notes sent by readers. "
             "Corrections are welcome.")
    return "\n".join((early, _career_sentences(p), about))


def _work_page(w: Work) -> str:
    return "\n".join((f"{w.title} is {vocab.article(w.kind)} {w.kind} by {w.author}, {w.appeared} in {w.year}.",
                      f"Copies of {w.title} are kept in several private collections. Reviews of the time "
                      "are quoted in later histories."))


def _early_text(p: Person, h: Hasher) -> str:
    b, nat = p.birthplace, p.nationality
    if h.draw("person.early_style", p.index, 2):
        return (f"{p.name} ({p.birth_year}) was {vocab.article(nat)} {nat} {p.occupation} born in {b.name}, "
                f"{b.country.name}.")
    return (f"{p.name} was born in {p.birth_year} in {b.name}, a city in {b.country.name}. "
            f"{p.name} was {vocab.article(nat)} {nat} {p.occupation}.")


def _career_sentences(p: Person) -> str:
    text = f"{p.name} lived in {p.residence.name} for many years. {p.name} worked at the {p.employer.name}."
    if p.work is not None:
        w = p.work
        text += f" {p.name} is best known for the {w.kind} {w.title}, {w.appeared} in {w.year}."
    return text


def _career_text(p: Person) -> str:
    if p.web_only:
        # a stub: about the right person, relevant-looking, but it cannot answer career questions
        return f"Little is recorded about the later life of {p.name}. Archives mention {p.name} only briefly."
    return _career_sentences(p)


def _distractor_text(d: Person) -> str:
    b, nat = d.birthplace, d.nationality
    return (f"{d.name} was born in {d.birth_year} in {b.name}, {b.country.name}. "
            f"{d.name} was {vocab.article(nat)} {nat} {d.occupation} who worked at the {d.employer.name}.")


def _work_text(w: Work, author_web_only: bool) -> str:
    by = "whose author is not named in this record" if author_web_only else f"by {w.author}"
    return f"{w.title} is {vocab.article(w.kind)} {w.kind} {by}. It was {w.appeared} in {w.year}."


def _org_text(o: Org) -> str:
    return (f"The {o.name} is {vocab.article(o.kind)} {o.kind} based in {o.base.name}. "
            f"It was founded in {o.founded} by {o.founder}.")


def _city_text(c: City) -> str:
    text = (f"{c.name} is a city in {c.country.name}. It was founded in {c.founded} and has a population "
            f"of about {c.population}.")
    if c.is_capital:
        text += f" {c.name} is the capital of {c.country.name}."
    return text
