"""Generator prompt, critic prompts and the strict reading of teacher replies."""

from __future__ import annotations

import pytest

from raypipe.prompts import (
    ASPECT_GROUP,
    ASPECT_INSTRUCTIONS,
    ASPECT_LABELS,
    DEMONSTRATIONS,
    Aspect,
    CriticExample,
    critic_prompt,
    format_generator_prompt,
    parse_teacher_reply,
    teacher_messages,
)
from raypipe.tokens import (
    CONTINUE,
    FULLY_SUPPORTED,
    IRRELEVANT,
    NO_RETRIEVAL,
    NO_SUPPORT,
    PARTIALLY_SUPPORTED,
    RELEVANT,
    RETRIEVAL,
    UTILITY,
    Group,
)

PASSAGE = "Varholm Bridge\nThe Varholm Bridge was designed by Anja Sote and opened in 1931."


def test_generator_prompt_without_input():
    assert format_generator_prompt("Name a colour.") == "### Instruction:\nName a colour.\n\n### Response:\n"


def test_generator_prompt_with_input():
    assert format_generator_prompt("Add the numbers.", "2 and 3") == (
        "### Instruction:\nAdd the numbers.\n\n### Input:\n2 and 3\n\n### Response:\n"
    )


def test_aspect_labels_and_groups():
    assert ASPECT_LABELS[Aspect.RETRIEVE_INPUT] == ("[Retrieval]", "[No Retrieval]")
    assert ASPECT_LABELS[Aspect.RETRIEVE] == ("[Retrieval]", "[No Retrieval]", "[Continue to Use Evidence]")
    assert ASPECT_LABELS[Aspect.IS_REL] == ("[Relevant]", "[Irrelevant]")
    assert ASPECT_LABELS[Aspect.IS_SUP] == (
        "[Fully supported]",
        "[Partially supported]",
        "[No support / Contradictory]",
    )
    assert ASPECT_LABELS[Aspect.IS_USE] == tuple(f"[Utility:{i}]" for i in range(1, 6))
    assert ASPECT_GROUP[Aspect.RETRIEVE_INPUT] is Group.RETRIEVE
    assert ASPECT_GROUP[Aspect.RETRIEVE] is Group.RETRIEVE
    assert ASPECT_GROUP[Aspect.IS_USE] is Group.IS_USE
    assert Aspect("is_sup") is Aspect.IS_SUP


@pytest.mark.parametrize("aspect", list(Aspect))
def test_every_instruction_names_every_label_of_its_aspect(aspect: Aspect):
    for label in ASPECT_LABELS[aspect]:
        assert label in ASPECT_INSTRUCTIONS[aspect]


@pytest.mark.parametrize("aspect", list(Aspect))
def test_demonstrations_are_labelled_explained_and_fit_their_aspect(aspect: Aspect):
    demos = DEMONSTRATIONS[aspect]
    assert 2 <= len(demos) <= 4
    for d in demos:
        assert d.example.aspect is aspect
        assert d.label in ASPECT_LABELS[aspect]
        assert len(d.explanation.split()) >= 5


@pytest.mark.parametrize("aspect", [Aspect.RETRIEVE_INPUT, Aspect.RETRIEVE, Aspect.IS_REL, Aspect.IS_SUP])
def test_demonstrations_show_every_class(aspect: Aspect):
    assert {d.label for d in DEMONSTRATIONS[aspect]} == set(ASPECT_LABELS[aspect])


def test_critic_prompt_is_generator_format_with_fields_in_order():
    ex = CriticExample(
        Aspect.IS_SUP,
        "Tell me about the Varholm Bridge.",
        preceding="It is a bridge.",
        evidence=PASSAGE,
        output="It was designed by Anja Sote.",
    )
    assert critic_prompt(ex) == (
        f"### Instruction:\n{ASPECT_INSTRUCTIONS[Aspect.IS_SUP]}\n\n### Input:\n"
        "Instruction: Tell me about the Varholm Bridge.\n"
        "Preceding sentences: It is a bridge.\n"
        f"Evidence: {PASSAGE}\n"
        "Output: It was designed by Anja Sote.\n\n### Response:\n"
    )


def test_critic_prompt_leaves_out_empty_fields_and_demonstrations():
    ex = CriticExample("retrieve_input", "Who designed the bridge?")
    prompt = critic_prompt(ex)
    assert prompt.endswith("### Input:\nInstruction: Who designed the bridge?\n\n### Response:\n")
    assert "Input: " not in prompt.split("### Input:\n", 1)[1]
    assert all(d.explanation not in prompt for d in DEMONSTRATIONS[Aspect.RETRIEVE_INPUT])


@pytest.mark.parametrize(
    "kwargs,missing",
    [
        (dict(aspect="is_sup", instruction="Q?", output="A."), "evidence"),
        (dict(aspect="is_sup", instruction="Q?", evidence=PASSAGE), "output"),
        (dict(aspect="is_rel", instruction="", evidence=PASSAGE), "instruction"),
        (dict(aspect="is_use", instruction="Q?"), "output"),
    ],
)
def test_example_missing_a_field_its_aspect_needs_raises(kwargs: dict, missing: str):
    with pytest.raises(ValueError, match=f"'{missing}'"):
        CriticExample(**kwargs)


@pytest.mark.parametrize(
    "kwargs,extra",
    [
        (dict(aspect="is_use", instruction="Q?", output="A.", evidence=PASSAGE), "evidence"),
        (dict(aspect="retrieve_input", instruction="Q?", output="A."), "output"),
        (dict(aspect="is_rel", instruction="Q?", evidence=PASSAGE, output="A."), "output"),
    ],
)
def test_example_setting_a_field_its_aspect_ignores_raises(kwargs: dict, extra: str):
    with pytest.raises(ValueError, match=f"'{extra}'"):
        CriticExample(**kwargs)


def test_unknown_aspect_raises():
    with pytest.raises(ValueError):
        CriticExample("is_fun", "Q?")


def test_teacher_messages_carry_instruction_demonstrations_and_example():
    ex = CriticExample(Aspect.IS_REL, "Who designed the Varholm Bridge?", evidence=PASSAGE)
    system, user = teacher_messages(ex)
    assert system["role"] == "system"
    assert system["content"].startswith(ASPECT_INSTRUCTIONS[Aspect.IS_REL])
    for d in DEMONSTRATIONS[Aspect.IS_REL]:
        assert f"{d.label}\n{d.explanation}" in system["content"]
    assert "[Relevant], [Irrelevant]" in system["content"]
    assert user == {
        "role": "user",
        "content": f"Instruction: Who designed the Varholm Bridge?\nEvidence: {PASSAGE}\nReply:",
    }


@pytest.mark.parametrize(
    "aspect,reply,label",
    [
        (Aspect.IS_REL, "[Relevant]\nThe passage names the designer.", RELEVANT),
        (Aspect.IS_REL, "  relevant", RELEVANT),
        (Aspect.IS_REL, "**Rating:** [Irrelevant]\nOff topic.", IRRELEVANT),
        (Aspect.IS_REL, "Rating: Irrelevant.", IRRELEVANT),
        (Aspect.IS_REL, "[Irrelevant] It is not relevant to the question.", IRRELEVANT),
        (Aspect.IS_REL, "[Relevant]\n[Irrelevant] would be wrong here.", RELEVANT),  # second line ignored
        (Aspect.RETRIEVE_INPUT, "[Yes]", RETRIEVAL),
        (Aspect.RETRIEVE_INPUT, "Yes", RETRIEVAL),
        (Aspect.RETRIEVE_INPUT, "no", NO_RETRIEVAL),
        (Aspect.RETRIEVE_INPUT, "[No Retrieval]", NO_RETRIEVAL),
        (Aspect.RETRIEVE_INPUT, "Need retrieval? [No]", NO_RETRIEVAL),
        (Aspect.RETRIEVE_INPUT, "No, retrieval would not help here.", NO_RETRIEVAL),
        (Aspect.RETRIEVE, "[Continue to Use Evidence]\nThe passage covers it.", CONTINUE),
        (Aspect.RETRIEVE, "[retrieval]", RETRIEVAL),
        (Aspect.IS_SUP, "Score: [Fully supported]", FULLY_SUPPORTED),
        (Aspect.IS_SUP, "partially supported", PARTIALLY_SUPPORTED),
        (Aspect.IS_SUP, "[No support / Contradictory]", NO_SUPPORT),
        (Aspect.IS_SUP, "[no support/contradictory]", NO_SUPPORT),
        (Aspect.IS_SUP, "Contradictory", NO_SUPPORT),
        (Aspect.IS_USE, "5", UTILITY[4]),
        (Aspect.IS_USE, "[5]", UTILITY[4]),
        (Aspect.IS_USE, "Utility: 5", UTILITY[4]),
        (Aspect.IS_USE, "[Utility:2]\nIncomplete.", UTILITY[1]),
        (Aspect.IS_USE, "Perceived utility: 3", UTILITY[2]),
        (Aspect.IS_USE, "**4**", UTILITY[3]),
        (Aspect.IS_USE, "5/5", UTILITY[4]),
    ],
)
def test_teacher_reply_valid_forms(aspect: Aspect, reply: str, label: str):
    assert parse_teacher_reply(aspect, reply) == label


@pytest.mark.parametrize(
    "aspect,reply",
    [
        (Aspect.IS_REL, ""),  # empty
        (Aspect.IS_REL, "   \n  "),
        (Aspect.IS_REL, "[Relevant] [Irrelevant]"),  # two different labels
        (Aspect.IS_REL, "Relevant / Irrelevant"),
        (Aspect.IS_REL, "Relevant or irrelevant, hard to say."),
        (Aspect.IS_REL, "Partly relevant"),  # unknown label
        (Aspect.IS_REL, "[Yes]"),  # another aspect's label
        (Aspect.IS_REL, "The passage is [Relevant]"),  # label not first
        (Aspect.IS_REL, "Relevantly, yes"),  # label glued to a word
        (Aspect.RETRIEVE_INPUT, "Yes/No"),
        (Aspect.RETRIEVE_INPUT, "Nothing to retrieve"),
        (Aspect.RETRIEVE_INPUT, "[Continue to Use Evidence]"),  # only the 3-way aspect has it
        (Aspect.IS_SUP, "[Supported]"),
        (Aspect.IS_SUP, "[Relevant]"),
        (Aspect.IS_SUP, "[Fully supported] but [Partially supported] for the date"),
        (Aspect.IS_USE, "6"),
        (Aspect.IS_USE, "0"),
        (Aspect.IS_USE, "50"),
        (Aspect.IS_USE, "4.5"),
        (Aspect.IS_USE, "4-5"),
        (Aspect.IS_USE, "4 or 5"),
        (Aspect.IS_USE, "[4] or [5]"),
        (Aspect.IS_USE, "Utility: 4, maybe [Utility:5]"),
        (Aspect.IS_USE, "Great answer!"),
    ],
)
def test_teacher_reply_invalid_forms(aspect: Aspect, reply: str):
    assert parse_teacher_reply(aspect, reply) is None


@pytest.mark.parametrize("aspect", list(Aspect))
def test_every_demonstration_reply_parses_to_its_label(aspect: Aspect):
    # The reply shape the teacher is shown must be one the reader accepts.
    for d in DEMONSTRATIONS[aspect]:
        assert parse_teacher_reply(aspect, f"{d.label}\n{d.explanation}") == d.label
