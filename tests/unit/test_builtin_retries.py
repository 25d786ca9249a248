"""What a crash that cuts a built-in call short makes of it (tools/builtin.py
``retry_of``): exactly once where the effect takes the key or stays in the sandbox, at most
once otherwise — by the version's egress hosts and ``code_honours_keys`` alone."""

from __future__ import annotations

import pytest

from tenantry.agents.spec import AgentSpec, SandboxPolicy
from tenantry.tools.builtin import NAMES, Retry, retry_of

NO_EGRESS = SandboxPolicy()
EGRESS = SandboxPolicy(egress=("api.example.com",))
PASSES_KEYS = SandboxPolicy(egress=("api.example.com",), code_honours_keys=True)


@pytest.mark.parametrize(("tool", "sandbox", "retry"), [
    # Files: written or read again to the same end, whatever the sandbox may reach.
    ("write_file", EGRESS, Retry.KEYED), ("read_file", EGRESS, Retry.KEYED),
    ("list_files", NO_EGRESS, Retry.KEYED),
    # Nothing reaches outside: the effects are the sandbox's, which a fresh one drops.
    ("run_python", NO_EGRESS, Retry.FRESH_SANDBOX), ("run_shell", NO_EGRESS, Retry.FRESH_SANDBOX),
    ("browser_click", NO_EGRESS, Retry.FRESH_SANDBOX),
    # Code that may POST outside without passing the key on: at most once.
    ("run_python", EGRESS, Retry.UNKNOWN), ("run_shell", EGRESS, Retry.UNKNOWN),
    # ... unless the version says its code passes the key to hosts that honour it.
    ("run_python", PASSES_KEYS, Retry.FRESH_SANDBOX), ("run_shell", PASSES_KEYS,
                                                       Retry.FRESH_SANDBOX),
    # A page's form takes no key of ours: at most once, whatever the version says.
    ("browser_click", PASSES_KEYS, Retry.UNKNOWN), ("browser_type", EGRESS, Retry.UNKNOWN),
    ("browser_open", EGRESS, Retry.UNKNOWN),
])
def test_a_built_in_call_cut_short_is_retried_by_where_its_effects_can_be(
        tool: str, sandbox: SandboxPolicy, retry: Retry) -> None:
    assert retry_of(tool, sandbox) is retry


def test_every_built_in_tool_has_a_rule() -> None:
    assert {tool: retry_of(tool, EGRESS) for tool in NAMES}.keys() == NAMES


def test_the_version_keeps_code_honours_keys_and_old_versions_read_without_it() -> None:
    spec = AgentSpec(model="m", system_prompt="", sandbox=PASSES_KEYS)
    stored = spec.to_json()
    assert stored["sandbox"] == {"egress": ["api.example.com"], "code_honours_keys": True}
    assert AgentSpec.from_json(stored) == spec
    old = AgentSpec(model="m", system_prompt="", sandbox=EGRESS).to_json()
    assert old["sandbox"] == {"egress": ["api.example.com"]}  # as versions were stored
    assert AgentSpec.from_json(old).sandbox.code_honours_keys is False
