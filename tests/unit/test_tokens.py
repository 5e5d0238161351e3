"""The reflection-token grammar, checked on the Self-RAG paper's own examples.

Every example is transcribed by hand from the Self-RAG paper into raypipe's vocabulary
([Retrieve=Yes] -> [Retrieval], <p>..<p> -> <paragraph>Title\\ntext</paragraph>, ...), keeping the
output texts verbatim (long passages shortened). The expected structures were read off the examples
by hand, not produced by the parser. Typographic spaces *between two tokens* in Tables 6 and 7
("[Retrieve]=Yes] <p>") are dropped, since the released data writes tokens back to back; spaces that
touch text are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from raypipe.tokens import (
    CONTINUE,
    DESIRABLE,
    FULLY_SUPPORTED,
    GROUP_TOKENS,
    IRRELEVANT,
    NO_RETRIEVAL,
    NO_SUPPORT,
    PARAGRAPH_CLOSE,
    PARAGRAPH_OPEN,
    PARTIALLY_SUPPORTED,
    RELEVANT,
    RETRIEVAL,
    SPECIAL_TOKENS,
    UTILITY,
    AugmentedOutput,
    Group,
    ReflectionFormatError,
    Segment,
    format_output,
    format_paragraph,
    parse,
    strip_reflection,
    utility_token,
    utility_value,
)


@dataclass(frozen=True)
class Expected:
    """One segment as read by hand: its tokens, the title of its passage, the start of its text."""

    retrieve: str | None
    title: str | None
    is_rel: str | None
    text_start: str
    is_sup: str | None


@dataclass(frozen=True)
class PaperExample:
    name: str
    output: str
    segments: tuple[Expected, ...]
    utility: str | None


# --- Table 4: training examples ------------------------------------------------------------------

MEMORY_P1 = (
    "Computer memory\nComputer memory – In computing, memory refers to the computer hardware integrated "
    "circuits that store information for immediate use in a computer; it is synonymous with the term "
    "“primary storage”. ... The term “memory”, meaning “primary storage” or “main memory”, is"
)
MEMORY_P2 = (
    "Computer memory\nComputer memory—often associated with addressable semiconductor memory. There are "
    "two main kinds of semiconductor memory, volatile and non-volatile. ... offering lower memory"
)
TABLE4_MEMORY = (
    f"[Retrieval]<paragraph>{MEMORY_P1}</paragraph>[Relevant]Primary memory, also known as main memory, "
    "is the memory that the computer can directly access and manipulate. [Fully supported] "
    f"[Retrieval]<paragraph>{MEMORY_P2}</paragraph>[Relevant]Primary memory can be accessed quickly, but "
    "it is volatile, meaning that the data is lost if the power is turned off.[Partially supported]..."
    "[Utility:5]"
)

TABLE4_DELEGATE = (
    "[No Retrieval]The manager realizes that there is an extensive list of tasks that need to be "
    "completed in order to make the event a success."
    "[Retrieval]<paragraph>Delegation\nDelegation is the assignment of any responsibility or authority "
    "to another person (normally from a manager to a subordinate) to carry out specific activities. ... "
    "The opposite of effective delegation is micromanagement, where a manager provides too much "
    "input,</paragraph>[Relevant]This includes tasks such as creating a guest list, designing and sending "
    "invitations, booking a venue, coordinating with vendors, planning the event’s program, and "
    "monitoring the budget.[Partially supported]"
    "[No Retrieval]Since it is not possible for the manager to handle everything alone, they must "
    "delegate tasks to their team members."
    "[No Retrieval]The manager would then assign each team member specific responsibilities based on "
    "their individual skillsets and strengths."
    "[Retrieval]<paragraph>Joint application design\nSubject Matter Experts: These are the business "
    "users, the IS professionals, and the outside experts that will be needed for a successful "
    "workshop. This group is the backbone of the meeting</paragraph>[Irrelevant]For instance, the "
    "team’s graphic designer might be tasked with designing the invitations, while the event "
    "coordinator would be in charge of planning the program and working with vendors..."
    "[No Retrieval]By delegating tasks, the manager can ensure that all necessary tasks are completed "
    "in a timely manner, while also empowering their team members to take on responsibilities and "
    "contribute to the success of the event.[Utility:5]"
)

TABLE4_POEM = (
    "[No Retrieval]The stars begin to twinkle bright the trees, scattered throughout the night; "
    "[No Retrieval]The stars begin to twinkle bright the trees, scattered throughout the night "
    "[No Retrieval] They flicker like a silent dance, A peaceful moment in its trance. "
    "[No Retrieval] They flicker like a silent dance, A peaceful moment in its trance. "
    "[No Retrieval] A chorus of crickets sing a lullaby, To every creature that roams the sky "
    "[Utility:5]"
)

TABLE4_WALKING_DEAD = (
    "[Retrieval]<paragraph>The Walking Dead (season 7)\nThe Walking Dead (season 7) The seventh season "
    "of “The Walking Dead”, an American post-apocalyptic horror television series on AMC, premiered "
    "on October 23, 2016, and concluded on April 2, 2017, consisting of 16 episodes. ..."
    "</paragraph>[Relevant]October 23, 2016[Fully supported][Utility:5]"
)

TABLE4_SHEPHERD = (
    "hey also are easily trained, obedient, and intelligent."
    "[Retrieval]<paragraph>German Shepherd\na simple difference of opinion, it is the fundamental issue "
    "of the breeds’ essential conformation and movement. ... They are known for being easy to train "
    "and good for performing tasks and following instructions. </paragraph>[Relevant]Because of this, "
    "they are often used for disability assistance and for police work. [Partially supported]"
    "[Utility:2]"
)

# --- Table 6: human-evaluation examples ("Reference [1]" replaced by the reference's text) ----------

TABLE6_ASTRONOMY = (
    "[Retrieval]<paragraph>A Question and Answer Guide to Astronomy\nA Question and Answer Guide to "
    "Astronomy is a book about astronomy and cosmology and is intended for a general audience. ..."
    "</paragraph>[Relevant] A Question and Answer Guide to Astronomy is a non-fiction book that falls "
    "under the genre of Astronomy and Cosmology. [Fully supported][Utility:5]"
)

TABLE6_THE_LIE = (
    "[Retrieval]<paragraph>Lying (book)\nLying is a 2011 long-form essay book by American author and "
    "neuroscience expert Sam Harris.</paragraph>[Relevant] The author of The Lie is Sam Harris. "
    "[Fully supported][Utility:5]"
)

TABLE6_RONALDINHO = (
    "[Retrieval]<paragraph>Ronaldinho\nRonaldo de Assis Moreira (born 21 March 1980), commonly known as "
    "Ronaldinho Gaúcho or simply Ronaldinho, is a Brazilian retired professional footballer who played "
    "mostly as an attacking midfielder ...</paragraph>[Relevant] Ronaldinho is a retired professional "
    "footballer from Brazil. [Fully supported][Continue to Use Evidence] He played as an attacking "
    "midfielder and was known for his technical skills, creativity, dribbling ability, and accuracy "
    "from free kicks. [Continue to Use Evidence] He won two FIFA World Player of the Year awards and a "
    "Ballon d'Or. [Utility:5]"
)

TABLE6_BODROV = (
    "[Retrieval]<paragraph>Sergei Bodrov\nSergei Vladimirovich Bodrov (born June 28, 1948) is a Russian "
    "film director, screenwriter, and producer. In 2003 he was the President of the Jury at the 25th "
    "Moscow International Film Festival.</paragraph>[Relevant] Sergei Vladimirovich Bodrov (born June "
    "28, 1948) is a Russian film director, screenwriter, and producer. [Fully supported]"
    "[Continue to Use Evidence] He was born in Moscow, Russia. [Continue to Use Evidence] He is the "
    "president of the Russian Guild of Film Producers. [Utility:5]"
)

# --- Table 7: model outputs ------------------------------------------------------------------------

TABLE7_SUNDAY = (
    "[Retrieval]<paragraph>Sunday\nEmperor Constantine then enacted the first Sunday Laws, for “the "
    "venerable Day of the Sun” in 321 A.D. ...</paragraph>[Relevant] In 321 AD, the Roman Emperor "
    "Constantine the Great made Sunday a day of rest from labor, stating: “On the venerable Day of the "
    "Sun let the magistrates and people residing in cities rest, and let all workshops be closed”."
    "[Fully supported] [Retrieval]<paragraph>Sunday\nDespite the official adoption of Sunday as a day "
    "of rest by Constantine, the seven-day week and the nundial cycle continued to be used side-by-side "
    "...</paragraph>[Relevant] The official adoption of Sunday as a day of rest by Constantine the "
    "Great in AD 321 made Sunday the seventh day of the week.[2][Fully supported][Utility:5]"
)

TABLE7_TAPNER = (
    "<paragraph>Rory Tapner\nRory Tapner is a UK businessman who, in September 2010 was appointed CEO of "
    "Coutts, the Wealth Management division of Royal Bank of Scotland Group. In February 2015 he stepped "
    "down as CEO when he was replaced in the role by Alison Rose</paragraph>[Relevant] Rory Tapner is a "
    "British businessman who has served as the Chief Executive Officer of Coutts, a private banking and "
    "wealth management company, since 2010.[No support / Contradictory], "
    "<paragraph>Rory Tapner\nRory Tapner (born 30 September 1959) is a UK businessman ...</paragraph>"
    "[Relevant] Rory Tapner was born on 30 September 1959 in London, England.[Fully supported]"
)

TABLE7_VENUGOPAL = (
    "[Retrieval]<paragraph>G. Venugopal\nG Venugopal (born 10 December 1960) is an Indian playback "
    "singer known for his work in Malayalam films. ... Since then he has sung in more than 300 films; "
    "and has over 500 private albums to his credit.</paragraph>[Relevant] G. Venugopal is a popular "
    "playback singer in the Malayalam film industry. [Continue to Use Evidence] He has sung over 300 "
    "songs in Malayalam, Tamil, and Hindi movies.[Partially supported] [Retrieval]<paragraph>G. "
    "Venugopal\nKerala State Film Awards: Kerala Film Critics Award ... G Venugopal (born 10 December "
    "1960) is an Indian playback singer known for his work in Malayalam films.</paragraph>G. Venugopal "
    "was born on December 10, 1960 in India.[Fully supported]"
)

# --- Figure 2: the two shapes described in §3.2.2 (the figure itself is an image) ---------------

FIGURE2_NO_RETRIEVAL = (
    "[No Retrieval]My best summer vacation was a week of sailing between small islands with my "
    "family.[Utility:5]"
)
FIGURE2_RETRIEVAL = (
    "Many states were named after people or places. "
    "[Retrieval]<paragraph>Louisiana\nLouisiana was named in honour of King Louis XIV of France."
    "</paragraph>[Relevant]For instance, Louisiana was named after King Louis XIV of France."
    "[Fully supported]"
    "[Retrieval]<paragraph>Texas\nTexas is the second-largest state by area.</paragraph>[Irrelevant]"
    "Other names come from Native American words.[Utility:5]"
)

E = Expected
EXAMPLES = [
    PaperExample(
        "table4_memory",
        TABLE4_MEMORY,
        (
            E(RETRIEVAL, "Computer memory", RELEVANT, "Primary memory, also known", FULLY_SUPPORTED),
            E(RETRIEVAL, "Computer memory", RELEVANT, "Primary memory can be accessed", PARTIALLY_SUPPORTED),
            E(None, None, None, "...", None),
        ),
        UTILITY[4],
    ),
    PaperExample(
        "table4_delegate",
        TABLE4_DELEGATE,
        (
            E(NO_RETRIEVAL, None, None, "The manager realizes", None),
            E(RETRIEVAL, "Delegation", RELEVANT, "This includes tasks", PARTIALLY_SUPPORTED),
            E(NO_RETRIEVAL, None, None, "Since it is not possible", None),
            E(NO_RETRIEVAL, None, None, "The manager would then", None),
            E(RETRIEVAL, "Joint application design", IRRELEVANT, "For instance, the team", None),
            E(NO_RETRIEVAL, None, None, "By delegating tasks", None),
        ),
        UTILITY[4],
    ),
    PaperExample(
        "table4_poem",
        TABLE4_POEM,
        (
            E(NO_RETRIEVAL, None, None, "The stars begin", None),
            E(NO_RETRIEVAL, None, None, "The stars begin", None),
            E(NO_RETRIEVAL, None, None, " They flicker", None),
            E(NO_RETRIEVAL, None, None, " They flicker", None),
            E(NO_RETRIEVAL, None, None, " A chorus of crickets", None),
        ),
        UTILITY[4],
    ),
    PaperExample(
        "table4_walking_dead",
        TABLE4_WALKING_DEAD,
        (E(RETRIEVAL, "The Walking Dead (season 7)", RELEVANT, "October 23, 2016", FULLY_SUPPORTED),),
        UTILITY[4],
    ),
    PaperExample(
        "table4_shepherd",
        TABLE4_SHEPHERD,
        (
            E(None, None, None, "hey also are easily trained", None),
            E(RETRIEVAL, "German Shepherd", RELEVANT, "Because of this", PARTIALLY_SUPPORTED),
        ),
        UTILITY[1],
    ),
    PaperExample(
        "table6_astronomy",
        TABLE6_ASTRONOMY,
        (
            E(
                RETRIEVAL,
                "A Question and Answer Guide to Astronomy",
                RELEVANT,
                " A Question and Answer Guide to Astronomy is a non-fiction book",
                FULLY_SUPPORTED,
            ),
        ),
        UTILITY[4],
    ),
    PaperExample(
        "table6_the_lie",
        TABLE6_THE_LIE,
        (E(RETRIEVAL, "Lying (book)", RELEVANT, " The author of The Lie", FULLY_SUPPORTED),),
        UTILITY[4],
    ),
    PaperExample(
        "table6_ronaldinho",
        TABLE6_RONALDINHO,
        (
            E(RETRIEVAL, "Ronaldinho", RELEVANT, " Ronaldinho is a retired", FULLY_SUPPORTED),
            E(CONTINUE, None, None, " He played as an attacking", None),
            E(CONTINUE, None, None, " He won two FIFA", None),
        ),
        UTILITY[4],
    ),
    PaperExample(
        "table6_bodrov",
        TABLE6_BODROV,
        (
            E(RETRIEVAL, "Sergei Bodrov", RELEVANT, " Sergei Vladimirovich Bodrov", FULLY_SUPPORTED),
            E(CONTINUE, None, None, " He was born in Moscow", None),
            E(CONTINUE, None, None, " He is the president", None),
        ),
        UTILITY[4],
    ),
    PaperExample(
        "table7_sunday",
        TABLE7_SUNDAY,
        (
            E(RETRIEVAL, "Sunday", RELEVANT, " In 321 AD, the Roman Emperor", FULLY_SUPPORTED),
            E(RETRIEVAL, "Sunday", RELEVANT, " The official adoption", FULLY_SUPPORTED),
        ),
        UTILITY[4],
    ),
    PaperExample(
        "table7_tapner",
        TABLE7_TAPNER,
        (
            E(None, "Rory Tapner", RELEVANT, " Rory Tapner is a British businessman", NO_SUPPORT),
            E(None, None, None, ", ", None),
            E(None, "Rory Tapner", RELEVANT, " Rory Tapner was born", FULLY_SUPPORTED),
        ),
        None,
    ),
    PaperExample(
        "table7_venugopal",
        TABLE7_VENUGOPAL,
        (
            E(RETRIEVAL, "G. Venugopal", RELEVANT, " G. Venugopal is a popular", None),
            E(CONTINUE, None, None, " He has sung over 300", PARTIALLY_SUPPORTED),
            E(RETRIEVAL, "G. Venugopal", None, "G. Venugopal was born", FULLY_SUPPORTED),
        ),
        None,
    ),
    PaperExample(
        "figure2_no_retrieval",
        FIGURE2_NO_RETRIEVAL,
        (E(NO_RETRIEVAL, None, None, "My best summer vacation", None),),
        UTILITY[4],
    ),
    PaperExample(
        "figure2_retrieval",
        FIGURE2_RETRIEVAL,
        (
            E(None, None, None, "Many states were named", None),
            E(RETRIEVAL, "Louisiana", RELEVANT, "For instance, Louisiana", FULLY_SUPPORTED),
            E(RETRIEVAL, "Texas", IRRELEVANT, "Other names come from", None),
        ),
        UTILITY[4],
    ),
]
IDS = [ex.name for ex in EXAMPLES]


@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
def test_paper_example_round_trips_exactly(example: PaperExample):
    assert format_output(parse(example.output)) == example.output


@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
def test_paper_example_structure_matches_hand_reading(example: PaperExample):
    out = parse(example.output)
    assert len(out.segments) == len(example.segments)
    for seg, exp in zip(out.segments, example.segments, strict=True):
        assert seg.retrieve == exp.retrieve
        assert seg.paragraph_title == exp.title
        assert seg.is_rel == exp.is_rel
        assert seg.text.startswith(exp.text_start), seg.text
        assert seg.is_sup == exp.is_sup
    assert out.utility == example.utility


@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
def test_paper_example_plain_text_equals_stripped_output(example: PaperExample):
    assert parse(example.output).plain_text == strip_reflection(example.output)


def test_paragraph_keeps_title_newline_and_body():
    seg = parse(TABLE4_WALKING_DEAD).segments[0]
    assert seg.paragraph == (
        "The Walking Dead (season 7)\nThe Walking Dead (season 7) The seventh season of “The Walking Dead”, "
        "an American post-apocalyptic horror television series on AMC, premiered on October 23, 2016, and "
        "concluded on April 2, 2017, consisting of 16 episodes. ..."
    )
    assert seg.text == "October 23, 2016"


def test_whitespace_between_segments_is_kept_in_text_and_tail():
    # Table 4, first example: "... manipulate. [Fully supported] [Retrieval]" - the space before the
    # IsSup token belongs to the sentence, the one after it to the segment's tail.
    first = parse(TABLE4_MEMORY).segments[0]
    assert first.text.endswith("manipulate. ")
    assert first.tail == " "
    poem = parse(TABLE4_POEM).segments
    assert poem[0].text.endswith("night; ")
    assert poem[4].text == " A chorus of crickets sing a lullaby, To every creature that roams the sky "


def test_prose_brackets_stay_in_the_text():
    sunday = parse(TABLE7_SUNDAY).segments[1]
    assert sunday.text.endswith("seventh day of the week.[2]")
    # Placeholders common in instruction data stay text even when a token word appears inside them.
    s = "[No Retrieval]See [1], [citation needed], [Your Name] and [Name of the relevant office].[Utility:3]"
    out = parse(s)
    assert [seg.text for seg in out.segments] == [
        "See [1], [citation needed], [Your Name] and [Name of the relevant office]."
    ]
    assert format_output(out) == s


def test_brackets_inside_a_paragraph_are_not_tokens():
    s = "[Retrieval]<paragraph>Odd title [Utility:9]\nSee [Relevant] and [Retrieve=Yes].</paragraph>[Relevant]x."
    seg = parse(s).segments[0]
    assert seg.paragraph == "Odd title [Utility:9]\nSee [Relevant] and [Retrieve=Yes]."
    assert seg.is_rel == RELEVANT
    assert seg.text == "x."


def test_trailing_whitespace_after_utility_round_trips():
    s = "[No Retrieval]Fine.[Utility:4]\n"
    out = parse(s)
    assert out.utility == UTILITY[3]
    assert out.trailing == "\n"
    assert format_output(out) == s


@pytest.mark.parametrize("s", ["", "Just a plain answer without any token.", "[Utility:1]"])
def test_degenerate_outputs_round_trip(s: str):
    assert format_output(parse(s)) == s


def test_plain_text_has_no_segments_with_tokens():
    out = parse("Just text.")
    assert len(out.segments) == 1
    assert out.segments[0].retrieve is None
    assert out.utility is None
    assert out.tokens() == []


# --- malformed outputs -----------------------------------------------------------------------------


def _error_offset(s: str) -> int:
    with pytest.raises(ReflectionFormatError) as info:
        parse(s)
    assert f"at character {info.value.offset}" in str(info.value)
    return info.value.offset


@pytest.mark.parametrize(
    "bad",
    [
        "[Utility:7]",  # out of range
        "[Retrieve]",  # the paper's group name, not a token
        "[Retrieve=Yes]",  # the paper's notation
        "[ISREL=Relevant]",
        "[Fully Supported]",  # wrong case
        "[Supported]",
        "[Utility: 5]",
        "[relevant]",
        "[continue to use evidence]",
        "[No support/Contradictory]",
    ],
)
def test_unknown_bracket_token_raises_with_its_offset(bad: str):
    s = f"[Retrieval]<paragraph>T\nbody</paragraph>[Relevant]A sentence.{bad}[Utility:5]"
    assert _error_offset(s) == s.index(bad)


def test_unclosed_paragraph_raises_at_the_opening_tag():
    s = "[No Retrieval]First.[Retrieval]<paragraph>Title\nno end here[Relevant]Second."
    assert _error_offset(s) == s.index(PARAGRAPH_OPEN)


def test_closing_tag_without_opening_raises():
    s = "[Retrieval]Title\ntext</paragraph>[Relevant]x."
    assert _error_offset(s) == s.index(PARAGRAPH_CLOSE)


def test_two_utility_tokens_raise_at_the_second():
    s = "[No Retrieval]Fine.[Utility:5][Utility:4]"
    assert _error_offset(s) == s.index("[Utility:4]")


def test_token_after_utility_raises():
    s = "[No Retrieval]Fine.[Utility:5][Retrieval]"
    assert _error_offset(s) == s.index("[Retrieval]", s.index("[Utility:5]"))


def test_text_after_utility_raises_at_the_text():
    s = "[No Retrieval]Fine.[Utility:5]  More words."
    assert _error_offset(s) == s.index("More words.")
    s = "[No Retrieval]Fine.[Utility:5] More.[Retrieval]"
    assert _error_offset(s) == s.index("More.")


def test_is_sup_without_text_raises():
    s = "[Retrieval]<paragraph>T\nbody</paragraph>[Relevant][Fully supported][Utility:5]"
    assert _error_offset(s) == s.index(FULLY_SUPPORTED)
    s = "[Retrieval]<paragraph>T\nbody</paragraph>[Relevant]  [Partially supported]"
    assert _error_offset(s) == s.index(PARTIALLY_SUPPORTED)


def test_second_is_sup_for_one_segment_raises():
    s = "[Retrieval]<paragraph>T\nbody</paragraph>[Relevant]Text.[Fully supported] [No support / Contradictory]"
    assert _error_offset(s) == s.index(NO_SUPPORT)


# --- helpers ---------------------------------------------------------------------------------------


def test_tokens_lists_every_reflection_token_in_order():
    out = parse(TABLE4_DELEGATE)
    assert out.tokens() == [
        NO_RETRIEVAL,
        RETRIEVAL,
        RELEVANT,
        PARTIALLY_SUPPORTED,
        NO_RETRIEVAL,
        NO_RETRIEVAL,
        RETRIEVAL,
        IRRELEVANT,
        NO_RETRIEVAL,
        UTILITY[4],
    ]


def test_strip_reflection_leaves_what_a_reader_sees():
    assert strip_reflection(TABLE4_WALKING_DEAD) == "October 23, 2016"
    assert strip_reflection(FIGURE2_RETRIEVAL) == (
        "Many states were named after people or places. For instance, Louisiana was named after King "
        "Louis XIV of France.Other names come from Native American words."
    )
    assert strip_reflection("no tokens [1] here") == "no tokens [1] here"


@pytest.mark.parametrize("score,token", [(1, "[Utility:1]"), (3, "[Utility:3]"), (5, "[Utility:5]")])
def test_utility_token_and_value_are_inverse(score: int, token: str):
    assert utility_token(score) == token
    assert utility_value(token) == score


@pytest.mark.parametrize("score", [0, 6, -1])
def test_utility_token_rejects_out_of_range(score: int):
    with pytest.raises(ValueError):
        utility_token(score)


def test_utility_value_rejects_other_tokens():
    with pytest.raises(ValueError):
        utility_value(RELEVANT)


def test_format_paragraph_shape():
    assert format_paragraph("Louisiana", "Named after Louis XIV.") == (
        "<paragraph>Louisiana\nNamed after Louis XIV.</paragraph>"
    )


def test_built_structure_formats_like_the_paper():
    out = AugmentedOutput(
        segments=[
            Segment(
                text="October 23, 2016",
                retrieve=RETRIEVAL,
                paragraph="The Walking Dead (season 7)\nPremiered on October 23, 2016.",
                is_rel=RELEVANT,
                is_sup=FULLY_SUPPORTED,
            )
        ],
        utility=utility_token(5),
    )
    assert format_output(out) == (
        "[Retrieval]<paragraph>The Walking Dead (season 7)\nPremiered on October 23, 2016.</paragraph>"
        "[Relevant]October 23, 2016[Fully supported][Utility:5]"
    )


def test_vocabulary_matches_the_released_checkpoints():
    assert GROUP_TOKENS[Group.RETRIEVE] == ("[Retrieval]", "[No Retrieval]", "[Continue to Use Evidence]")
    assert GROUP_TOKENS[Group.IS_REL] == ("[Relevant]", "[Irrelevant]")
    assert GROUP_TOKENS[Group.IS_SUP] == (
        "[Fully supported]",
        "[Partially supported]",
        "[No support / Contradictory]",
    )
    assert tuple(f"[Utility:{i}]" for i in (1, 2, 3, 4, 5)) == UTILITY
    assert len(SPECIAL_TOKENS) == len(set(SPECIAL_TOKENS)) == 15
    assert DESIRABLE[Group.IS_SUP] == "[Fully supported]"
    assert DESIRABLE[Group.IS_USE] == "[Utility:5]"
