"""Prompts: the original study's exact messages, shots, strict undefined variables, the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.base.errors import TemplateError
from runner.base.jinja import compile_text
from runner.base.types import Example
from runner.inputs.prompts import PROJECT_TEMPLATES, PromptBuilder, find_template
from runner.recipe import PromptSpec

PROJECT = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[2] / "shared"

SYSTEM_PROMPT = "Contextを参考にして、問題に回答してください。"
SHOT = {
    "question": "琵琶湖がある都道府県はどこか。",
    "context": "琵琶湖 [SEP] 琵琶湖（びわこ）は、滋賀県にある日本最大の湖である。",
    "answer": "滋賀県",
}
EX = Example(id="x1", question="Q", context="C", answers=("A",))


def build(tmp_path: Path, **spec) -> PromptBuilder:
    return PromptBuilder(PromptSpec(**spec), tmp_path, str(tmp_path / "recipe.yaml"))


# --------------------------------------------------------------------------- the original prompts


def test_project_templates_are_found_by_name(tmp_path):
    for name in ("jsquad.j2", "jsquad-system.j2", "jsquad-system-oneshot.j2"):
        assert find_template(name, tmp_path) == PROJECT_TEMPLATES / name
    assert PROJECT_TEMPLATES == PROJECT / "templates"


def test_exact_original_messages(tmp_path):
    b = build(tmp_path, template="jsquad.j2", system_template="jsquad-system.j2")
    assert b.messages(EX) == [
        {"role": "system", "content": "Contextを参考にして、問題に回答してください。"},
        {"role": "user", "content": "\nQuestion:Q\nContext: C\nOutput:"},
    ]


def test_exact_original_messages_japanese_example(tmp_path):
    ex = Example(
        id="a1",
        question="日本で梅雨がないのは北海道とどこか。",
        context="梅雨 [SEP] 梅雨は…",
        answers=("小笠原諸島",),
    )
    b = build(tmp_path, template="jsquad.j2", system_template="jsquad-system.j2")
    msgs = b.messages(ex)
    assert (
        msgs[1]["content"]
        == "\nQuestion:日本で梅雨がないのは北海道とどこか。\nContext: 梅雨 [SEP] 梅雨は…\nOutput:"
    )
    # the gold answer never leaks into the prompt
    assert "小笠原諸島" not in json.dumps(msgs, ensure_ascii=False)


def test_inline_system_text_is_a_template(tmp_path):
    b = build(tmp_path, template="jsquad.j2", system="S {{ shots | length }}")
    assert b.messages(EX)[0] == {"role": "system", "content": "S 0"}


def test_no_system_gives_one_user_message(tmp_path):
    b = build(tmp_path, template="jsquad.j2")
    assert b.messages(EX) == [{"role": "user", "content": "\nQuestion:Q\nContext: C\nOutput:"}]


def test_template_variables(tmp_path):
    (tmp_path / "vars.j2").write_text(
        "{{ id }}|{{ question }}|{{ context }}|{{ answers | join(',') }}|{{ example.question }}",
        encoding="utf-8",
    )
    b = build(tmp_path, template="vars.j2")
    assert b.messages(EX)[-1]["content"] == "x1|Q|C|A|Q"


def test_trailing_newline_kept(tmp_path):
    (tmp_path / "nl.j2").write_text("Q:{{ question }}\n", encoding="utf-8")
    assert build(tmp_path, template="nl.j2").messages(EX)[-1]["content"] == "Q:Q\n"


# --------------------------------------------------------------------------- shots


def test_oneshot_system_placement(tmp_path):
    b = build(
        tmp_path,
        template="jsquad.j2",
        system_template="jsquad-system-oneshot.j2",
        shots={"placement": "system", "examples": [SHOT]},
    )
    msgs = b.messages(EX)
    assert [m["role"] for m in msgs] == ["system", "user"]
    system = msgs[0]["content"]
    assert system.startswith(SYSTEM_PROMPT)
    rest = system[len(SYSTEM_PROMPT) :]
    i_q = rest.index("Question:" + SHOT["question"])
    i_c = rest.index("Context: " + SHOT["context"])
    i_a = rest.index("Output:" + SHOT["answer"])
    assert i_q < i_c < i_a
    # the question itself is unchanged and the shot is not repeated as turns
    assert msgs[1]["content"] == "\nQuestion:Q\nContext: C\nOutput:"


def test_oneshot_system_prompt_is_a_shared_prefix(tmp_path):
    b = build(
        tmp_path,
        template="jsquad.j2",
        system_template="jsquad-system-oneshot.j2",
        shots={"placement": "system", "examples": [SHOT]},
    )
    m1 = b.messages(EX)
    m2 = b.messages(Example(id="x2", question="Other", context="Else"))
    assert m1[0] == m2[0]
    assert m1[1] != m2[1]


def test_system_placement_where_no_template_reads_shots_is_refused(tmp_path):
    """Found by a tester: `placement: system` with a system prompt that never uses `shots` (or
    none at all) left every worked example out of every prompt, `check` said ok."""
    hint = (
        "use placement: turns (each shot a user/assistant exchange before the question), or show "
        "them in the system template: {% for s in shots %}Q: {{ s.question }} A: {{ s.answer }}\n"
        "{% endfor %}"
    )
    with pytest.raises(TemplateError) as ei:
        build(
            tmp_path,
            template="jsquad.j2",
            system="Be brief.",
            shots={"placement": "system", "examples": [SHOT]},
        )
    assert ei.value.field == "prompt.shots.placement" and ei.value.hint == hint
    assert ei.value.message == (
        "placement: system gives the 1 worked example(s) to the templates as `shots`, but neither "
        "prompt.system nor prompt.template reads `shots`: they would be left out of every prompt"
    )
    with pytest.raises(TemplateError, match="but there is no system prompt: they would be left"):
        build(tmp_path, template="jsquad.j2", shots={"placement": "system", "examples": [SHOT]})


def test_oneshot_template_without_shots_is_plain_system_prompt(tmp_path):
    b = build(tmp_path, template="jsquad.j2", system_template="jsquad-system-oneshot.j2")
    assert b.messages(EX)[0]["content"] == SYSTEM_PROMPT


def test_project_oneshot_recipe_renders_the_worked_example():
    from runner import load_recipes

    lr = next(
        x
        for x in load_recipes(PROJECT / "recipes" / "jsquad-study.yaml")
        if x.recipe.name == "jsquad-vllm-oneshot-cache"
    )
    b = PromptBuilder(lr.recipe.prompt, Path(lr.base_dir), lr.path)
    msgs = b.messages(EX)
    assert msgs[0]["role"] == "system"
    assert msgs[0]["content"].startswith(SYSTEM_PROMPT)
    assert "Question:琵琶湖がある都道府県はどこか。" in msgs[0]["content"]
    assert msgs[0]["content"].endswith("Output:滋賀県")
    assert msgs[1] == {"role": "user", "content": "\nQuestion:Q\nContext: C\nOutput:"}


def test_shots_as_turns(tmp_path):
    shot2 = {"question": "q2", "context": "c2", "answer": "a2"}
    b = build(
        tmp_path,
        template="jsquad.j2",
        system_template="jsquad-system.j2",
        shots={"placement": "turns", "examples": [SHOT, shot2]},
    )
    assert b.messages(EX) == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": f"\nQuestion:{SHOT['question']}\nContext: {SHOT['context']}\nOutput:",
        },
        {"role": "assistant", "content": "滋賀県"},
        {"role": "user", "content": "\nQuestion:q2\nContext: c2\nOutput:"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "\nQuestion:Q\nContext: C\nOutput:"},
    ]


def test_shots_turns_is_the_default_placement(tmp_path):
    b = build(tmp_path, template="jsquad.j2", shots={"examples": [SHOT]})
    assert [m["role"] for m in b.messages(EX)] == ["user", "assistant", "user"]


def test_shots_drawn_from_source_are_seeded(tmp_path):
    rows = [
        {"question": f"sq{i}", "context": f"sc{i}", "answers": [f"sa{i}", "other"]}
        for i in range(10)
    ]
    (tmp_path / "train.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    shots = {"k": 2, "seed": 5, "source": {"format": "jsonl", "path": "train.jsonl"}}
    a = build(tmp_path, template="jsquad.j2", shots=shots)
    b = build(tmp_path, template="jsquad.j2", shots=shots)
    assert a.shots == b.shots
    assert len(a.shots) == 2
    assert a.shots[0]["question"] != a.shots[1]["question"]
    for s in a.shots:
        i = int(s["question"][2:])
        assert s["answer"] == f"sa{i}"  # the first gold answer
        assert s["answers"] == [f"sa{i}", "other"]
    roles = [m["role"] for m in a.messages(EX)]
    assert roles == ["user", "assistant", "user", "assistant", "user"]


# --------------------------------------------------------------------------- StrictUndefined


def test_typo_in_template_is_an_error_naming_the_variable(tmp_path):
    (tmp_path / "typo.j2").write_text("Question:{{ questoin }}", encoding="utf-8")
    b = build(tmp_path, template="typo.j2")
    with pytest.raises(TemplateError) as ei:
        b.messages(EX)
    assert "questoin" in ei.value.message
    assert "undefined" in ei.value.message
    assert ei.value.field == "prompt.template"
    assert "typo.j2" in ei.value.message


def test_typo_in_attribute_is_an_error(tmp_path):
    b = build(
        tmp_path,
        template="jsquad.j2",
        system="{% for s in shots %}{{ s.questoin }}{% endfor %}",
        shots={"placement": "system", "examples": [SHOT]},
    )
    with pytest.raises(TemplateError) as ei:
        b.messages(EX)
    assert "questoin" in ei.value.message
    assert ei.value.field == "prompt.system"


def test_undefined_variable_in_compile_text():
    t = compile_text("{{ nosuch }}", "label", "where", "prompt.template")
    with pytest.raises(TemplateError, match="nosuch"):
        t.render("where", "prompt.template", question="q")


def test_syntax_error_names_line():
    with pytest.raises(TemplateError) as ei:
        compile_text("ok\n{% if %}", "label.j2", "where", "prompt.template")
    assert "label.j2 line 2: syntax error" in ei.value.message


def test_missing_template_file(tmp_path):
    with pytest.raises(TemplateError, match="template not found: 'absent.j2'"):
        build(tmp_path, template="absent.j2")


def test_non_utf8_template(tmp_path):
    (tmp_path / "latin.j2").write_bytes(b"caf\xe9 {{ question }}")
    with pytest.raises(TemplateError, match="not UTF-8"):
        build(tmp_path, template="latin.j2")


# --------------------------------------------------------------------------- sandbox

ESCAPES = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ joiner.__init__.__globals__.os }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ lipsum.__globals__['os'].popen('id').read() }}",
    "{{ self.__init__.__globals__ }}",
    "{{ question.__class__.__base__.__subclasses__() }}",
    "{{ question|attr('__class__') }}",
    "{{ '{0.__class__.__mro__}'.format(question) }}",
    "{{ dict.mro() }}",
    "{{ answers.append('x') }}",
]


@pytest.mark.parametrize("source", ESCAPES)
def test_sandbox_escape_raises_template_error(source):
    t = compile_text(source, "evil.j2", "where", "prompt.template")
    answers = ["A"]
    with pytest.raises(TemplateError) as ei:
        out = t.render("where", "prompt.template", question="q", context="c", answers=answers)
        pytest.fail(f"rendered: {out[:200]!r}")
    msg = ei.value.render()
    assert "evil.j2" in msg
    for leak in ("<class 'subprocess", "<module", "__builtins__", "uid="):
        assert leak not in msg
    assert answers == ["A"]  # immutable sandbox: nothing was modified


def test_sandbox_escape_through_prompt_builder(tmp_path):
    (tmp_path / "evil.j2").write_text(
        "{{ ''.__class__.__mro__[1].__subclasses__() }}", encoding="utf-8"
    )
    b = build(tmp_path, template="evil.j2")
    with pytest.raises(TemplateError, match="sandbox"):
        b.messages(EX)


@pytest.mark.parametrize(
    "source", ["{{ question + 1 }}", "{{ 1 / 0 }}", "{{ range(10**9) | list | length }}"]
)
def test_runtime_errors_in_templates_are_template_errors(source):
    t = compile_text(source, "bad.j2", "where", "prompt.template")
    with pytest.raises(TemplateError, match="bad.j2"):
        t.render("where", "prompt.template", question="q")
