"""Word lists and name spaces of the synthetic knowledge world (ARCHITECTURE.md §5).

Names are built from parts (first name x surname, syllable heads x tails) so that a few hundred
hand-written words give hundreds of thousands of distinct, pronounceable names without a download.
Everything here is static: the seed only decides which name goes to which entity (world_entities).

Two properties matter to the rest of raypipe and are checked by tests/unit/test_world.py:
- no base surname ends in "e", so the near-duplicate ``surname + "e"`` ("Harlow" -> "Harlowe") used
  for distractor people can never be another person's real name;
- no word that can end a sentence is one of spaCy's tokenizer abbreviations ("Mont.", "Mass."), so
  ``spacy.blank("en")`` + sentencizer splits generated outputs exactly at their sentence ends.
"""

from __future__ import annotations

import functools
import itertools

FIRST_NAMES: tuple[str, ...] = (
    "Ada", "Adrian", "Agnes", "Alan", "Alba", "Albert", "Alice", "Amara", "Amelia", "Anders", "Andrea",
    "Anna", "Arthur", "Astrid", "August", "Aurora", "Beatrix", "Benedict", "Bianca", "Boris", "Bruno",
    "Camille", "Carl", "Carmen", "Casimir", "Cecilia", "Celeste", "Clara", "Conrad", "Cyrus", "Dalia",
    "Daniel", "Delphine", "Dmitri", "Dora", "Edgar", "Edith", "Elena", "Elias", "Elise", "Emil", "Emma",
    "Erik", "Esther", "Eva", "Felix", "Flora", "Frida", "Gabriel", "Greta", "Gustav", "Hanna", "Hector",
    "Helena", "Henrik", "Hugo", "Ida", "Igor", "Ilse", "Ingrid", "Irene", "Isaac", "Isolde", "Ivan",
    "Jakob", "Johan", "John", "Jonas", "Josefa", "Julia", "Julian", "Karin", "Klaus", "Lara", "Laszlo",
    "Lena", "Leo", "Leona", "Lorenzo", "Louisa", "Lucas", "Lucia", "Ludwig", "Magnus", "Maja", "Marco",
    "Margit", "Maria", "Marius", "Marta", "Mateo", "Mila", "Milan", "Mira", "Nadia", "Nikolai", "Nils",
    "Nina", "Nora", "Olga", "Oliver", "Oscar", "Otto", "Paula", "Petra", "Philip", "Pia", "Rafael",
    "Rosa", "Ruben", "Ruth", "Sabine", "Samuel", "Sara", "Selma", "Simon", "Sofia", "Stefan", "Stella",
    "Sven", "Tamara", "Teodor", "Thea", "Tobias", "Tomas", "Ursula", "Valentin", "Vera", "Victor",
    "Viktoria", "Vilma", "Walter", "Wanda", "Xavier", "Yara", "Yusuf", "Zelda", "Zofia", "Zoran",
)

SURNAME_HEADS: tuple[str, ...] = (
    "Ash", "Bal", "Bel", "Bran", "Brim", "Cal", "Car", "Cor", "Dal", "Dun", "Eld", "Fal", "Fen", "Gar",
    "Gil", "Hal", "Har", "Hol", "Jar", "Ket", "Kin", "Lar", "Lin", "Mar", "Mor", "Nes", "Nor", "Ost",
    "Pel", "Pen", "Quin", "Rad", "Ros", "Sel", "Sten", "Tal", "Thorn", "Ul", "Vant", "Ver", "Wes",
    "Wil", "Yar", "Zel", "Brack", "Crom", "Dray", "Fitz", "Grim", "Hux", "Kell", "Lock", "Mab", "Pim",
    "Rook", "Sax", "Tarn", "Wend", "Whit", "Ald",
)
SURNAME_TAILS: tuple[str, ...] = (
    "low", "ton", "wick", "mar", "den", "ford", "ley", "by", "well", "win", "stead", "field", "wood",
    "worth", "ham", "burn", "croft", "holm", "mont", "son", "man", "ner", "ling", "ster", "rick", "ett",
    "ard", "ell", "ock", "in", "an", "ey", "ow", "ing", "ers", "gard", "rup", "sen", "berg", "dal",
    "vik", "strom", "quist", "ich", "ov", "ski", "ak", "ic", "ador", "ani",
)

CITY_HEADS: tuple[str, ...] = (
    "Kor", "Vel", "Ess", "Mir", "Tav", "Oth", "Zan", "Quel", "Bra", "Dro", "Ilm", "Ney", "Sul", "Tor",
    "Aru", "Pesh", "Vold", "Lum", "Gra", "Yss", "Orm", "Kes", "Nal", "Sor", "Tir", "Ume", "Vask",
    "Zor", "Amb", "Cim", "Dov", "Fre", "Hesk", "Jor", "Kal", "Mev", "Pra", "Riv", "Sab", "Tur",
)
CITY_MIDDLES: tuple[str, ...] = ("", "a", "e", "i", "o", "an", "en", "ar", "or", "il", "ul", "as")
CITY_TAILS: tuple[str, ...] = (
    "vik", "grad", "stad", "polis", "heim", "mora", "dun", "bury", "port", "haven", "sk", "lin", "ros",
    "thal", "kar", "mir", "ova", "ast", "ent", "usk", "oria", "gate", "field", "holt", "dor",
)

COUNTRY_HEADS: tuple[str, ...] = (
    "Vel", "Kor", "Ost", "Mar", "Tel", "Sav", "Bren", "Cal", "Dor", "Ele", "Fal", "Gal", "Hel", "Ist",
    "Lut", "Nov", "Pal", "Rod", "Sel", "Ter",
)
COUNTRY_MIDDLES: tuple[str, ...] = ("or", "an", "av", "en", "ir", "un", "ad", "es")

TITLE_ADJECTIVES: tuple[str, ...] = (
    "Silent", "Golden", "Hidden", "Broken", "Distant", "Quiet", "Crimson", "Endless", "Forgotten",
    "Gentle", "Hollow", "Iron", "Last", "Lonely", "Lost", "Narrow", "Northern", "Pale", "Restless",
    "Scarlet", "Secret", "Shining", "Silver", "Southern", "Sleeping", "Stone", "Summer", "Wandering",
    "Wild", "Amber", "Bitter", "Burning", "Dark", "Deep", "Eastern", "Empty", "Fading",
    "First", "Frozen", "Glass", "Green", "High", "Long", "Midnight", "Morning", "Painted", "Red",
    "Rising", "Salt", "Shadowed", "Small", "Still", "Sunken", "Velvet", "Western", "White", "Whispering",
    "Blue", "Copper",
)
TITLE_NOUNS: tuple[str, ...] = (
    "River", "Harbor", "Garden", "Bridge", "Tower", "Forest", "Island", "Mountain", "Valley", "Road",
    "House", "Window", "Mirror", "Lantern", "Orchard", "Field", "Shore", "Meadow", "Lake", "Storm",
    "Winter", "Voyage", "Letter", "Promise", "Kingdom", "Station", "Archive", "Cathedral", "Crown",
    "Door", "Feather", "Fountain", "Gate", "Horizon", "Journey", "Key", "Ladder", "Lighthouse", "Map",
    "Market", "Mill", "Moon", "Night", "Ocean", "Path", "Pilgrim", "Queen", "Rain", "Sail", "Season",
    "Sky", "Song", "Star", "Stream", "Sun", "Tide", "Traveler", "Tree", "Wall", "Well", "Wheel", "Wind",
    "Wing", "Workshop", "Citadel", "Compass", "Dream", "Ember", "Fortress", "Glacier", "Hunter",
    "Kite", "Labyrinth", "Monastery", "Quarry", "Refuge", "Shepherd", "Signal", "Spire", "Vineyard",
)
TITLE_TAILS: tuple[str, ...] = ("", " of Winter", " at Dawn", " in Blue", " of the North", " by Night")

#: occupation -> the kind of work such a person is known for
OCCUPATIONS: dict[str, str] = {
    "novelist": "novel",
    "painter": "painting",
    "composer": "symphony",
    "film director": "film",
    "playwright": "play",
    "sculptor": "sculpture",
    "mathematician": "treatise",
    "physicist": "treatise",
    "historian": "treatise",
    "poet": "poetry collection",
    "opera composer": "opera",
    "architect": "building",
}
#: work kind -> (verb for its creation, verb for its first appearance)
WORK_VERBS: dict[str, tuple[str, str]] = {
    "novel": ("written", "published"),
    "painting": ("painted", "completed"),
    "symphony": ("composed", "first performed"),
    "film": ("directed", "released"),
    "play": ("written", "first staged"),
    "sculpture": ("sculpted", "unveiled"),
    "treatise": ("written", "published"),
    "poetry collection": ("written", "published"),
    "opera": ("composed", "first performed"),
    "building": ("designed", "completed"),
}
#: organisation name suffix -> what such an organisation is
ORG_KINDS: dict[str, str] = {
    "Institute": "research institute",
    "Academy": "academy of arts",
    "Museum": "museum",
    "Orchestra": "orchestra",
    "Press": "publishing house",
    "Observatory": "observatory",
    "Library": "public library",
    "Conservatory": "music school",
    "Gallery": "art gallery",
    "Theatre": "theatre company",
}

# --- everyday vocabulary for the instruction-following tasks that need no retrieval ------------------

NOUNS: tuple[str, ...] = (
    "lighthouse", "garden", "kettle", "lantern", "river", "violin", "bicycle", "window", "harbor",
    "meadow", "notebook", "teapot", "forest", "bridge", "compass", "feather", "mountain", "orchard",
    "candle", "balloon", "library", "market", "ocean", "pebble", "ribbon", "sparrow", "tunnel", "umbrella",
    "village", "whistle", "blanket", "cabin", "dragonfly", "engine", "fountain", "glacier", "island",
)
COLORS: tuple[str, ...] = ("amber", "blue", "crimson", "golden", "green", "grey", "silver", "violet", "white")
MOODS: tuple[str, ...] = ("quiet", "bright", "restless", "gentle", "stormy", "sleepy", "cheerful", "misty")
PLACES: tuple[str, ...] = ("the old pier", "the hill", "the station", "the square", "the shore", "the attic")
THEMES: tuple[str, ...] = ("friendship", "courage", "patience", "curiosity", "kindness", "change", "home")
STRING_WORDS: tuple[str, ...] = (
    "apple", "planet", "garden", "silver", "rocket", "window", "pencil", "forest", "candle", "marble",
    "harbor", "ladder", "meadow", "bottle", "cactus", "dragon", "falcon", "guitar", "island", "jacket",
    "kitten", "lemon", "mirror", "needle", "orange", "parrot", "quartz", "rabbit", "saddle", "tunnel",
)


@functools.cache
def surnames() -> tuple[str, ...]:
    """Distinct surnames, none ending in "e" (see the module docstring)."""
    names = {h + t for h, t in itertools.product(SURNAME_HEADS, SURNAME_TAILS)}
    return tuple(sorted(n for n in names if not n.endswith("e")))


@functools.cache
def country_stems() -> tuple[str, ...]:
    """Stems of country names: "Velor" gives the country "Veloria" and the demonym "Velorian"."""
    return tuple(sorted({h + m for h, m in itertools.product(COUNTRY_HEADS, COUNTRY_MIDDLES)}))


@functools.cache
def city_names() -> tuple[str, ...]:
    """Distinct city names that are neither surnames nor country names."""
    taken = set(surnames()) | {s + "ia" for s in country_stems()}
    names = {(h + m + t).capitalize() for h, m, t in itertools.product(CITY_HEADS, CITY_MIDDLES, CITY_TAILS)}
    return tuple(sorted(names - taken))


def distractor_surname(surname: str) -> str:
    """The near-duplicate of a surname ("Harlow" -> "Harlowe"); never a base surname."""
    return surname + "e"


def article(word: str) -> str:
    """'a' or 'an' for the word that follows."""
    return "an" if word[0].lower() in "aeiou" else "a"


def possessive(name: str) -> str:
    """"Harlow's", but "Harlows'" for names ending in s."""
    return name + ("'" if name.endswith("s") else "'s")
