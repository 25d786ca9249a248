"""The scripted model: replies are a pure function of the conversation."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest

from tenantry.models.scripted import (
    ECHO,
    FALLBACK_TEXT,
    Script,
    ScriptError,
    Step,
    ToolCall,
    UnknownModel,
    UsageOverride,
    completion_tokens,
    conversation_input,
    prompt_tokens,
    select_script,
)

SCRIPT = Script.of(
    Step.calls(ToolCall("lookup", {"query": "{input}", "limit": 3}),
               ToolCall("effect", {"note": "for {input}"})),
    Step.call("echo", text="{last_tool_result}"),
    Step.answer("Results:\n{tool_results}"),
)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def run_conversation(script: Script, first: str, results: dict[str, str]) -> list[dict[str, Any]]:
    """Drive a script to its final answer, answering each tool call from ``results``."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}, user(first)]
    for _ in range(10):
        reply = script.reply(messages)
        messages.append(reply.assistant_message())
        if not reply.tool_calls:
            return messages
        messages.extend(tool(c.id, results[c.name]) for c in reply.tool_calls)
    raise AssertionError("script did not finish")


def test_step_index_is_the_number_of_assistant_messages() -> None:
    messages = run_conversation(SCRIPT, "cats", {"lookup": "3 cats", "effect": "applied",
                                                 "echo": "applied"})
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert [len(m.get("tool_calls", [])) for m in assistant] == [2, 1, 0]
    first_calls = assistant[0]["tool_calls"]
    assert [c["function"]["name"] for c in first_calls] == ["lookup", "effect"]
    assert orjson.loads(first_calls[0]["function"]["arguments"]) == {"query": "cats", "limit": 3}
    assert orjson.loads(first_calls[1]["function"]["arguments"]) == {"note": "for cats"}
    assert assistant[-1]["content"] == "Results:\n3 cats\napplied\napplied"


def test_the_same_conversation_gets_the_identical_reply() -> None:
    """What crash recovery relies on: a retried or resumed call sees the same reply."""
    messages = run_conversation(SCRIPT, "dogs", {"lookup": "x", "effect": "y", "echo": "z"})
    for cut in range(2, len(messages) + 1):
        prefix = messages[:cut]
        rebuilt = orjson.loads(orjson.dumps(prefix))  # as if read back from the event log
        assert SCRIPT.reply(prefix) == SCRIPT.reply(rebuilt)
    replies = [SCRIPT.reply(messages[:3]), SCRIPT.reply(messages[:3])]
    assert replies[0].tool_calls == replies[1].tool_calls
    assert [c.id for c in replies[0].tool_calls] == ["call_1_0"]


def test_tool_call_ids_follow_the_conversation_position() -> None:
    reply = SCRIPT.reply([user("a")])
    assert [c.id for c in reply.tool_calls] == ["call_0_0", "call_0_1"]
    assert reply.finish_reason == "tool_calls"


def test_tool_results_change_content_not_the_step() -> None:
    base = [user("q"), {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0_0", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    ]}]
    one = SCRIPT.reply([*base, tool("call_0_0", "first")])
    two = SCRIPT.reply([*base, tool("call_0_0", "second")])
    assert one.step_index == two.step_index == 1
    assert orjson.loads(one.tool_calls[0].arguments) == {"text": "first"}
    assert orjson.loads(two.tool_calls[0].arguments) == {"text": "second"}


def test_placeholders_reach_nested_arguments_and_leave_other_braces_alone() -> None:
    script = Script.of(Step.call("write", path="/tmp/{input}.json",
                                 body={"items": ["{input}", {"raw": "{not_a_placeholder}"}],
                                       "n": 1}))
    reply = script.reply([user("report")])
    assert orjson.loads(reply.tool_calls[0].arguments) == {
        "path": "/tmp/report.json",
        "body": {"items": ["report", {"raw": "{not_a_placeholder}"}], "n": 1},
    }


def test_placeholder_values_are_not_expanded_again() -> None:
    script = Script.of(Step.answer("[{last_tool_result}]"))
    messages = [user("secret-input"), tool("call_0_0", "a tool said {input}")]
    assert script.reply(messages).text == "[a tool said {input}]"


def test_placeholders_without_tool_messages_are_empty() -> None:
    script = Script.of(Step.answer("<{last_tool_result}|{tool_results}>"))
    assert script.reply([user("hi")]).text == "<|>"


def test_input_is_the_first_user_message_including_content_parts() -> None:
    parts = {"role": "user", "content": [{"type": "text", "text": "hello "},
                                         {"type": "image_url", "image_url": {"url": "x"}},
                                         {"type": "text", "text": "world"}]}
    assert ECHO.reply([{"role": "system", "content": "sys"}, parts, user("later")]).text == (
        "You said: hello world"
    )


def test_when_steps_run_out_the_last_answer_repeats() -> None:
    script = Script.of(Step.call("a"), Step.answer("final for {input}"))
    messages: list[dict[str, Any]] = [user("x")]
    messages += [{"role": "assistant", "content": "..."}] * 5
    reply = script.reply(messages)
    assert (reply.text, reply.tool_calls, reply.finish_reason) == ("final for x", (), "stop")


@pytest.mark.parametrize("script", [Script.of(Step.call("a")), Script()])
def test_when_steps_run_out_without_a_final_answer_it_says_done(script: Script) -> None:
    messages = [user("x"), {"role": "assistant", "content": "ok"}]
    assert script.reply(messages).text == "done"


def test_usage_is_a_quarter_of_the_characters_rounded_up() -> None:
    messages = [
        {"role": "system", "content": "abc"},                       # 3
        user("hello"),                                               # 5
        {"role": "assistant", "content": None, "tool_calls": [      # 4 + 8
            {"id": "c", "type": "function",
             "function": {"name": "echo", "arguments": '{"a": 1}'}}]},
        tool("c", "result"),                                         # 6
    ]
    assert prompt_tokens(messages) == math.ceil((3 + 5 + 4 + 8 + 6) / 4)
    answer = Script.of(Step.answer("seven!!")).reply(messages)
    assert answer.usage.prompt_tokens == 7
    assert answer.usage.completion_tokens == 2 == completion_tokens(answer)
    assert answer.usage.total_tokens == 9

    call = Script.of(Step.call("add", a=1, b=2)).reply([user("x")])
    # name + compact JSON arguments, exactly as sent on the wire
    assert call.tool_calls[0].arguments == '{"a":1,"b":2}'
    assert call.usage.completion_tokens == math.ceil((3 + 13) / 4)


def test_usage_overrides_replace_only_the_given_counts() -> None:
    script = Script.of(Step.answer("hi", usage=UsageOverride(prompt_tokens=1000)))
    usage = script.reply([user("hello world")]).usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (1000, 1, 1001)


def test_json_round_trip() -> None:
    script = Script.of(
        Step.calls(ToolCall("effect", {"note": "{input}", "nested": {"k": [1, 2]}}),
                   delay_ms=25),
        Step.answer("done: {tool_results}",
                    usage=UsageOverride(prompt_tokens=10, completion_tokens=2)),
    )
    text = script.to_json()
    assert Script.from_json(text) == script
    assert Script.from_json(text.encode()) == script
    assert orjson.loads(text) == {"steps": [
        {"tool_calls": [{"name": "effect", "arguments": {"note": "{input}",
                                                          "nested": {"k": [1, 2]}}}],
         "delay_ms": 25},
        {"text": "done: {tool_results}", "usage": {"prompt_tokens": 10, "completion_tokens": 2}},
    ]}
    assert Script.from_json('[{"text": "hi"}]') == Script.of(Step.answer("hi"))


@pytest.mark.parametrize("data", [
    "not json",
    '{"steps": {}}',
    '{"steps": [], "extra": 1}',
    '[{}]',
    '[{"tool_calls": []}]',
    '[{"tool_call": [{"name": "x"}]}]',
    '[{"tool_calls": [{"name": 7}]}]',
    '[{"tool_calls": [{"name": "x", "arguments": [1]}]}]',
    '[{"text": 5}]',
    '[{"text": "a", "delay_ms": -1}]',
    '[{"text": "a", "delay_ms": true}]',
    '[{"text": "a", "usage": {"prompt": 1}}]',
])
def test_invalid_scripts_are_refused(data: str) -> None:
    with pytest.raises(ScriptError):
        Script.from_json(data)


def test_select_script_by_model_name() -> None:
    default, named = Script.of(Step.answer("default")), Script.of(Step.answer("named"))
    scripts = {"default": default, "named": named, "gpt-4o-mini": named}
    messages = [user("hi")]
    assert select_script("scripted", messages, scripts) is default
    assert select_script("scripted", messages, {}) is ECHO
    assert select_script("scripted/named", messages, scripts) is named
    assert select_script("scripted/echo", messages, scripts) is ECHO
    assert select_script("gpt-4o-mini", messages, scripts) is named
    for unknown in ("scripted/missing", "gpt-5", "scripted/", "Scripted"):
        with pytest.raises(UnknownModel):
            select_script(unknown, messages, scripts)


def test_an_inline_script_in_the_first_user_message_wins() -> None:
    envelope = {"script": [{"tool_calls": [{"name": "effect", "arguments": {"note": "{input}"}}]},
                           {"text": "ok {last_tool_result}"}],
                "input": "buy milk"}
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"},
                                      user(orjson.dumps(envelope).decode())]
    script = select_script("scripted/other", messages, {})
    first = script.reply(messages)
    assert orjson.loads(first.tool_calls[0].arguments) == {"note": "buy milk"}
    messages += [first.assistant_message(), tool(first.tool_calls[0].id, "applied")]
    assert select_script("scripted", messages, {}).reply(messages).text == "ok applied"
    assert conversation_input(messages) == "buy milk"


def test_text_that_only_looks_like_json_is_ordinary_input() -> None:
    for text in ("{not json", '{"no_script": 1}'):
        messages = [user(text)]
        assert select_script("scripted", messages, {}) is ECHO
        assert ECHO.reply(messages).text == f"You said: {text}"


def test_a_broken_inline_script_is_an_error() -> None:
    with pytest.raises(ScriptError):
        select_script("scripted", [user('{"script": [{"bogus": 1}]}')], {})


def test_a_step_is_an_answer_tool_calls_or_both_never_nothing() -> None:
    with pytest.raises(ScriptError):
        Step()
    # Text beside calls is what the model says before them: the reply carries both, it
    # round-trips, and past the last step the model does not repeat it as an answer.
    script = Script.from_json('[{"text": "I will refund it.", "tool_calls": [{"name": "x"}]}]')
    assert script.steps == (Step(text="I will refund it.", tool_calls=(ToolCall("x"),)),)
    reply = script.reply([user("hi")])
    assert (reply.text, [c.name for c in reply.tool_calls]) == ("I will refund it.", ["x"])
    assert reply.finish_reason == "tool_calls"
    assert Script.from_json(script.to_json()) == script
    past = script.reply([user("hi"), reply.assistant_message(),
                         {"role": "tool", "tool_call_id": "call_0_0", "content": "ok"}])
    assert (past.text, past.tool_calls) == (FALLBACK_TEXT, ())


def test_malformed_calls_can_be_scripted_on_purpose() -> None:
    script = Script.from_json('[{"tool_calls": [{"name": "", "arguments": "{not json"}]}]')
    reply = script.reply([{"role": "user", "content": "hi"}])
    assert reply.tool_calls[0].name == ""
    assert reply.tool_calls[0].arguments == "{not json"
    assert Script.from_json(script.to_json()) == script
