"""Summarization and repeat detection (ADR 0031) as the pure decision sees them: the state
folded from a log, the prompt rebuilt from it, and what decide() returns. No I/O."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from tenantry.agents.spec import AgentSpec, Limits, SummarizePolicy
from tenantry.cli.runs import summarize as tail_line
from tenantry.ids import AgentId, RunId
from tenantry.models.scripted import Script, Step
from tenantry.models.summaries import SUMMARY_REQUEST, summarized_steps
from tenantry.runs import conversation, summaries
from tenantry.runs.decide import (
    CallModel,
    CallTool,
    RefusedRepeat,
    StopForBudget,
    Summarize,
    decide,
    idempotency_key,
)
from tenantry.runs.events import (
    BudgetStopped,
    Event,
    ModelReplied,
    Payload,
    RunCreated,
    Summarized,
    ToolCompleted,
)
from tenantry.runs.state import RunState
from tenantry.runs.trace import trace_of

RUN = "run_1"
AT = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = AgentSpec(model="m", system_prompt="be brief", tools=("lookup", "other"))


def fold(*payloads: Payload) -> RunState:
    events = [Event.of(seq, p, AT)
              for seq, p in enumerate((RunCreated("agt_1", 1, "normal", input="hi"),
                                       *payloads), start=1)]
    return RunState.fold(events)


def replied(*calls: tuple[str, dict[str, Any]], text: str = "", tokens: int = 10,
            cost: int = 5) -> ModelReplied:
    return ModelReplied(text, [{"id": f"c{i}", "name": name, "arguments": orjson.dumps(args)
                                .decode()} for i, (name, args) in enumerate(calls)],
                        {"input_tokens": tokens, "output_tokens": 1}, "openai", "acct", "m",
                        cost, "p1", 1.0)


def steps(*calls: tuple[str, dict[str, Any]], first_seq: int = 2) -> list[Payload]:
    """One single-call step per call: the reply, then its result."""
    log: list[Payload] = []
    for i, (name, args) in enumerate(calls):
        seq = first_seq + 2 * i
        log += [replied((name, args)),
                ToolCompleted(idempotency_key(RUN, seq, 0), name, seq, 0, args,
                              result=f"result {i} " + "x" * 40)]
    return log


def summarizing(after_tokens: int, keep: int = 2) -> AgentSpec:
    return dataclasses.replace(SPEC, summarize=SummarizePolicy(after_tokens, keep))


def summary(upto_seq: int, text: str = "did things", tokens: int = 30,
            cost: int = 7) -> Summarized:
    return Summarized(upto_seq, text, {"input_tokens": tokens, "output_tokens": 3}, "openai",
                      "acct", "m", cost, "p1", 1.0)


def lookups(n: int) -> list[tuple[str, dict[str, Any]]]:
    return [("lookup", {"q": i}) for i in range(n)]


# -- summarization ------------------------------------------------------------------------


def measured(state: RunState) -> int:
    """What the threshold is compared with: the next prompt and the summary request."""
    return conversation.estimate_tokens([*conversation.messages(state, SPEC),
                                         summaries.REQUEST])


def test_without_a_policy_or_under_the_threshold_the_model_is_called() -> None:
    state = fold(*steps(*lookups(10)))
    assert decide(state, SPEC, RUN) == CallModel()
    assert decide(state, summarizing(measured(state)), RUN) == CallModel()
    # Room is left for the summary request: a prompt just under the threshold is due.
    prompt = conversation.estimate_tokens(conversation.messages(state, SPEC))
    assert isinstance(decide(state, summarizing(prompt), RUN), Summarize)


def test_past_the_threshold_the_steps_before_the_kept_ones_are_summarized() -> None:
    state = fold(*steps(*lookups(10)))  # replies at seqs 2, 4, ..., 20; last seq 21
    size = measured(state)
    # The cut is just before the first kept reply: its tool result stays with it.
    assert decide(state, summarizing(size - 1, keep=2), RUN) == Summarize(17)
    assert decide(state, summarizing(size - 1, keep=0), RUN) == Summarize(21)
    # Nothing to fold in besides the kept steps: no summary (it could not help).
    assert decide(state, summarizing(1, keep=10), RUN) == CallModel()


def test_an_agent_limit_stops_the_run_before_a_summary_is_made() -> None:
    spec = dataclasses.replace(summarizing(1), limits=Limits(max_steps=3))
    decision = decide(fold(*steps(*lookups(3))), spec, RUN)
    assert decision == StopForBudget("max_steps", 3, 3)


def test_prompts_after_a_summary_hold_it_and_the_later_steps_only() -> None:
    spec = summarizing(400, keep=2)
    state = fold(*steps(*lookups(10)), summary(17, "looked up 0 to 7"))
    prompt = conversation.messages(state, spec)
    assert [m["role"] for m in prompt] == ["system", "user", "user", "assistant", "tool",
                                           "assistant", "tool"]
    assert summarized_steps(prompt[2]) == 8 and prompt[2]["content"].endswith("looked up 0 to 7")
    assert [m["tool_calls"][0]["function"]["arguments"] for m in prompt[3::2]] == [
        '{"q":8}', '{"q":9}']
    assert decide(state, spec, RUN) == CallModel()  # under the threshold again


def test_the_summarizing_prompt_covers_every_step_up_to_the_cut() -> None:
    spec = summarizing(100, keep=1)
    state = fold(*steps(*lookups(6)), summary(9, "first four"),
                 *steps(*lookups(3), first_seq=15))
    upto = summaries.due(state, spec)
    assert upto == 18  # the last reply (seq 19) is kept
    prompt = summaries.request(state, spec, upto)
    assert prompt[:2] == conversation.head(state, spec)
    assert summarized_steps(prompt[2]) == 4 and prompt[2]["content"].endswith("first four")
    assert prompt[-1] == {"role": "user", "content": SUMMARY_REQUEST}
    calls = [m["tool_calls"][0] for m in prompt if m["role"] == "assistant"]
    results = [m["tool_call_id"] for m in prompt if m["role"] == "tool"]
    # Steps 5..8 (seqs 10..17): every call with its result, none of the kept step.
    assert [c["function"]["arguments"] for c in calls] == [
        '{"q":4}', '{"q":5}', '{"q":0}', '{"q":1}']
    assert results == [c["id"] for c in calls]


def test_a_summary_is_billed_and_budgeted_but_is_not_a_step() -> None:
    state = fold(*steps(*lookups(2)), summary(5, tokens=100, cost=40))
    assert state.steps == 2
    assert state.input_tokens == 2 * 10 + 100 and state.output_tokens == 2 + 3
    assert state.cost_micros == 2 * 5 + 40
    spec = dataclasses.replace(summarizing(10_000), limits=Limits(max_tokens=120))
    assert decide(state, spec, RUN) == StopForBudget("max_tokens", 125, 120)


def test_the_estimate_counts_bytes_so_dense_scripts_are_not_undercounted() -> None:
    ascii_text = [{"role": "user", "content": "a" * 400}]
    cjk = [{"role": "user", "content": "字" * 400}]  # 3 bytes each in UTF-8
    assert conversation.estimate_tokens(ascii_text) == 100 + conversation.MESSAGE_TOKENS
    assert conversation.estimate_tokens(cjk) == 300 + conversation.MESSAGE_TOKENS


def test_the_scripted_model_counts_summarized_steps_and_answers_a_summary_request() -> None:
    script = Script.of(*(Step.call("lookup", q=i) for i in range(12)))
    state = fold(*steps(*lookups(10)), summary(17, "first eight"))
    prompt = conversation.messages(state, summarizing(400))
    reply = script.reply(prompt)
    # Eight summarized steps and two in full: the eleventh step comes next.
    assert reply.step_index == 10 and reply.tool_calls[0].arguments == '{"q":10}'
    request = summaries.request(fold(*steps(*lookups(3))), summarizing(1, keep=1), 5)
    answer = script.reply(request)
    assert answer.tool_calls == () and answer.text is not None
    assert answer.text.startswith("Steps 1-2 done; the last tool result began: result 1")


# -- repeat detection ---------------------------------------------------------------------


def test_the_same_call_is_refused_the_limit_th_time_and_stops_the_run_the_next() -> None:
    same = [("lookup", {"q": 1, "r": 2})] * 4
    assert isinstance(decide(fold(*steps(*same[:2]), replied(same[2])), SPEC, RUN), CallTool)
    state = fold(*steps(*same[:2]), replied(("lookup", {"r": 2, "q": 1})))  # same, reordered
    third = decide(state, SPEC, RUN)
    assert isinstance(third, RefusedRepeat) and third.key == idempotency_key(RUN, 6, 0)
    assert third.invalid is not None and third.arguments == {"q": 1, "r": 2}
    assert third.invalid.startswith('not run: lookup was called with the same arguments '
                                    '{"q":1,"r":2} 3 times in a row (the agent\'s repeat '
                                    'limit is 3)')
    fourth = decide(fold(*steps(*same[:3]), replied(same[3])), SPEC, RUN)
    assert fourth == StopForBudget("repeat_limit", 4, 3, "repeating")


def test_a_different_call_in_between_breaks_the_row() -> None:
    calls = [("lookup", {"q": 1}), ("lookup", {"q": 1}), ("other", {}), ("lookup", {"q": 1})]
    assert type(decide(fold(*steps(*calls[:3]), replied(calls[3])), SPEC, RUN)) is CallTool


def test_repeat_limit_zero_turns_it_off_and_old_versions_read_as_zero() -> None:
    off = dataclasses.replace(SPEC, limits=Limits(repeat_limit=0))
    same = [("lookup", {"q": 1})] * 6
    decision = decide(fold(*steps(*same[:5]), replied(same[5])), off, RUN)
    assert type(decision) is CallTool
    # A version stored before repeat detection existed keeps its runs' behaviour.
    stored = {"model": "m", "system_prompt": "s", "limits": {"max_steps": 5}}
    assert AgentSpec.from_json(stored).limits.repeat_limit == 0
    assert AgentSpec.from_json(SPEC.to_json()).limits.repeat_limit == 3 == Limits().repeat_limit
    assert "summarize" not in SPEC.to_json()
    spec = summarizing(500)
    assert AgentSpec.from_json(spec.to_json()) == spec


def test_a_cycle_of_two_replies_is_caught() -> None:
    a, b = ("lookup", {"q": "a"}), ("other", {"q": "b"})
    state = fold(*steps(a, b, a, b, a), replied(b))  # the sixth reply: A,B three times
    refused = decide(state, SPEC, RUN)
    assert isinstance(refused, RefusedRepeat) and refused.invalid is not None
    assert "the model sent the same 2 replies 3 times in a row" in refused.invalid
    stop = decide(fold(*steps(a, b, a, b, a, b), replied(a)), SPEC, RUN)
    assert stop == StopForBudget("repeat_limit", 4, 3, "repeating")
    # Two rounds of the cycle is no repeat yet.
    assert type(decide(fold(*steps(a, b, a), replied(b)), SPEC, RUN)) is CallTool


def test_identical_replies_with_several_calls_are_caught_as_a_cycle() -> None:
    def two(seq: int) -> list[Payload]:
        return [replied(("lookup", {"q": 1}), ("other", {"q": 2})),
                *[ToolCompleted(idempotency_key(RUN, seq, i), "t", seq, i, {}, result="r")
                  for i in range(2)]]

    log = [*two(2), *two(5)]
    assert type(decide(fold(*log, *two(8)[:1]), SPEC, RUN)) is RefusedRepeat
    assert decide(fold(*log, *two(8), *two(11)[:1]), SPEC, RUN) == StopForBudget(
        "repeat_limit", 4, 3, "repeating")


def test_runs_tail_shows_summaries_and_the_stop_reason() -> None:
    stop = {"type": "BudgetStopped", "data": {"limit": "repeat_limit", "used": 4, "max": 3,
                                              "reason": "repeating"}}
    assert tail_line(stop) == "repeat_limit: 4 of 3 (repeating)"
    assert tail_line({"type": "Summarized", "data": summary(17).to_data()}) == (
        "summary of the steps up to seq 17 by m (30→3 tokens)")


def test_the_trace_shows_a_summary_as_a_model_span_and_the_stop_reason() -> None:
    def at(ms: int) -> datetime:
        return AT + timedelta(milliseconds=ms)

    events = [
        Event.of(1, RunCreated("agt_1", 1, "normal", input="hi"), AT),
        Event.of(2, replied(("lookup", {"q": 1})), at(100)),
        Event.of(3, ToolCompleted(idempotency_key(RUN, 2, 0), "lookup", 2, 0, {"q": 1},
                                  result="r", duration_ms=10.0), at(200)),
        Event.of(4, dataclasses.replace(summary(3, tokens=50, cost=9), latency_ms=40.0,
                                        waited_ms=50.0), at(300)),
        Event.of(5, BudgetStopped("repeat_limit", 4, 3, reason="repeating"), at(400)),
    ]
    row = {"status": "failed", "agent_id": AgentId.new().uuid, "agent_version": 1,
           "created_at": AT, "started_at": at(10), "finished_at": at(400), "now": at(500)}
    trace = trace_of(RunId.new(), row, events)
    span = next(s for s in trace["spans"] if s["seq"] == 4 and s["kind"] == "model")
    assert span["label"] == "summary by m via acct" and span["duration_ms"] == 40.0
    assert span["detail"]["summary_upto_seq"] == 3 and span["detail"]["cost_micros"] == 9
    assert trace["summaries"] == [{"seq": 4, "upto_seq": 3}]
    assert trace["totals"]["cost_micros"] == 5 + 9 and trace["totals"]["input_tokens"] == 60
    assert trace["stopped"] == {"seq": 5, "limit": "repeat_limit", "used": 4, "max": 3,
                                "reason": "repeating"}
