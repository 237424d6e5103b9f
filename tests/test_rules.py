"""autoRunRules: allow / ask / deny decide as docs/protocol.md says (a table, then through a
real server and the scripted model), and "always for this command" saves a rule that then
auto-runs the same command and still asks for another."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from pygls.exceptions import JsonRpcException

from oi_lsp.client import OIClient
from oi_lsp.core import rules
from oi_lsp.core.layers import SettingsLayers
from oi_lsp.core.profiles import ProfileError
from oi_lsp.core.settings import SettingsError, check, combine
from oi_lsp.protocol import Risk
from tests import modelserver as ms
from tests.conftest import StartServer, next_proposal, tool_results
from tests.modelserver import ModelServer

RULES = [
    {"language": "bash", "pattern": r"^git (status|log)\b", "action": "allow"},
    {"pattern": r"\bgit push\b", "action": "ask"},
    {"pattern": r"\brm\b", "action": "deny"},
    {"language": "shell", "pattern": r"^git\b", "action": "allow"},
]
LOW, HIGH = Risk(), Risk(level="high", reasons=["runs as root"])


def verdict(code: str, language: str = "shell", risk: Risk = LOW, **settings: Any) -> str:
    values = {"autoRunRules": RULES, **settings}
    return rules.decide(combine(values), language, code, risk).verdict


@pytest.mark.parametrize(("code", "language", "risk", "settings", "expected"), [
    ("git status", "shell", LOW, {}, "run"),  # allow (a "bash" rule covers shell)
    ("git log -3", "sh", LOW, {}, "run"),
    ("git status", "python", LOW, {}, "ask"),  # the rule is for shell only
    ("git push origin main", "shell", LOW, {"autoRun": True}, "ask"),  # ask beats autoRun
    ("rm -rf build", "shell", LOW, {"autoRun": True}, "deny"),  # deny refuses, never asks
    ("import os; os.system('rm x')", "python", LOW, {}, "deny"),  # no language: any
    ("git status && rm x", "shell", LOW, {}, "run"),  # first match wins: rule 1's allow
    ("git diff", "shell", LOW, {}, "run"),  # rule 4
    ("echo hi", "shell", LOW, {}, "ask"),  # no rule: autoRun (off)
    ("echo hi", "shell", LOW, {"autoRun": True}, "run"),  # no rule: autoRun (on)
    ("git status", "shell", HIGH, {}, "ask"),  # high risk always asks
    ("rm -rf /", "shell", HIGH, {}, "deny"),  # ... but deny still refuses
    ("git status", "shell", LOW, {"safeMode": "ask"}, "ask"),  # safe mode ask: every run asks
    ("git status", "shell", LOW, {"trusted": False}, "ask"),  # untrusted: nothing auto-runs
    ("rm x", "shell", LOW, {"trusted": False}, "deny"),
])
def test_rules_decide(code: str, language: str, risk: Risk, settings: dict[str, Any],
                      expected: str) -> None:
    assert verdict(code, language, risk, **settings) == expected


def test_no_rules() -> None:
    for value in ([], None):  # null: a client that cleared the setting
        check({"autoRunRules": value})
        settings = combine({"autoRunRules": value, "autoRun": True})
        assert rules.decide(settings, "shell", "ls", LOW).verdict == "run"


def test_deny_says_which_rule() -> None:
    decision = rules.decide(combine({"autoRunRules": RULES}), "shell", "rm -rf build\nls", LOW)
    assert decision.reason == (r"Not run: autoRunRules rule 3 (deny `\brm\b`) refuses this "
                               "shell code: rm -rf build")


@pytest.mark.parametrize(("value", "message"), [
    ([{"pattern": "(unclosed", "action": "allow"}], "not a valid regular expression"),
    ([{"pattern": "ls", "action": "always"}], "'allow', 'ask' or 'deny'"),
    ([{"patern": "ls", "action": "allow"}], "patern"),
    ([{"pattern": "", "action": "allow"}], "pattern"),
    ({"pattern": "ls", "action": "allow"}, "valid list"),
])
def test_a_bad_rule_is_a_clear_settings_error(value: Any, message: str) -> None:
    with pytest.raises(SettingsError, match="setting 'autoRunRules") as error:
        check({"autoRunRules": value})
    assert message in str(error.value)


@pytest.mark.parametrize(("language", "code", "word", "matches", "misses"), [
    ("shell", "ls -la src", "ls", ["ls", "ls -a /tmp", "ls src/*.py"],
     ["ls; rm -rf x", "ls && curl x", "ls | sh", "lsblk", "ls $(rm x)", "ls > f",
      "ls\nrm x", "echo ls"]),
    ("bash", "git status", "git", ["git push --force"], ["git status; reboot"]),
    ("shell", "ls | grep x", None, ["ls | grep x"], ["ls", "ls | grep y"]),  # exact text
    ("python", "print(1)", None, ["print(1)", "  print(1)\n"], ["print(2)", "print(1); x"]),
    ("shell", "echo a\necho b", None, ["echo a\necho b"], ["echo a"]),
])
def test_always_for_this_command(language: str, code: str, word: str | None,
                                 matches: list[str], misses: list[str]) -> None:
    assert rules.command_word(language, code) == word
    rule = rules.rule_for(language, code, "command")
    assert rule.action == "allow" and rule.language == rules.canonical(language)
    settings = combine({"autoRunRules": [rule.wire()]})
    assert rules.decide(settings, language, code, LOW).verdict == "run"  # what it was made of
    for other in matches:
        assert rules.decide(settings, language, other, LOW).verdict == "run", other
    for other in misses:
        assert rules.decide(settings, language, other, LOW).verdict == "ask", other


def test_always_for_this_text() -> None:
    rule = rules.rule_for("shell", "ls -la", "text")
    settings = combine({"autoRunRules": [rule.wire()]})
    assert rules.decide(settings, "shell", "ls -la", LOW).verdict == "run"
    assert rules.decide(settings, "shell", "ls", LOW).verdict == "ask"


def test_saved_rules_keep_the_profile(tmp_path: Path) -> None:
    profile = tmp_path / ".oi" / "profile.yaml"
    first = rules.rule_for("shell", "ls", "command")
    assert rules.save(tmp_path, first) == profile  # no file yet: made
    assert yaml.safe_load(profile.read_text()) == {"autoRunRules": [first.wire()]}

    profile.write_text("# my settings\nmaxSteps: 5  # keep it short\n")
    rules.save(tmp_path, first)
    text = profile.read_text()
    assert text.startswith("# my settings\nmaxSteps: 5  # keep it short\n")  # comments kept
    second = rules.rule_for("shell", "git status", "command")
    rules.save(tmp_path, second)
    rules.save(tmp_path, second)  # once only
    data = yaml.safe_load(profile.read_text())
    assert data == {"maxSteps": 5, "autoRunRules": [first.wire(), second.wire()]}

    profile.write_text("autoRunRules: [{pattern: '(', action: allow}]\n")
    with pytest.raises(ProfileError, match="regular expression"):
        rules.save(tmp_path, first)
    assert profile.read_text() == "autoRunRules: [{pattern: '(', action: allow}]\n"


async def test_untrusted_workspace_saves_no_rule(tmp_path: Path) -> None:
    layers = SettingsLayers(tmp_path, lambda: [{"trusted": False}])
    with pytest.raises(SettingsError, match="untrusted"):
        await layers.always("shell", "ls", "command")
    assert not (tmp_path / ".oi").exists()


# Through the server ----------------------------------------------------------------------------

async def test_allow_ask_deny_through_the_server(start_server: StartServer, model: ModelServer,
                                                 workspace: Path) -> None:
    client = await start_server(workspace, options=model.settings(autoRun=True, autoRunRules=[
        {"language": "shell", "pattern": "^echo ", "action": "allow"},
        {"pattern": "^printf ", "action": "ask"},
        {"pattern": r"\brm\b", "action": "deny"}]))
    marker = workspace / "keep.txt"
    marker.write_text("kept")
    model.script(ms.tools(("shell", "echo allowed"), ("shell", "rm -f keep.txt"),
                          ("shell", "printf 'asked\\n'")),
                 ms.text("Done."))
    chat = asyncio.create_task(client.chat("go"))
    allowed = await next_proposal(client)
    assert (allowed["code"], allowed["autoRun"]) == ("echo allowed", True)
    asked = await client.wait_for("oi/proposal", lambda p: not p["autoRun"], timeout=30)
    assert asked["code"] == "printf 'asked\\n'"  # ask beats autoRun
    await client.approve(asked["proposalId"], "run")
    result = await chat
    assert result["status"] == "done"
    assert marker.read_text() == "kept"  # deny: never ran, never asked
    proposed = [p["code"] for m, p in client.notifications if m == "oi/proposal"]
    assert proposed == ["echo allowed", "printf 'asked\\n'"]
    told = tool_results(model.requests[1])
    assert told[0] == "allowed" and told[2] == "asked"
    assert told[1] == r"Not run: autoRunRules rule 3 (deny `\brm\b`) refuses this shell " \
        "code: rm -f keep.txt"
    assert "Not run: autoRunRules rule 3" in client.stream(result["turnId"], "console")
    history = (await client.request("oi/history", {}))["messages"]
    assert [m.get("outcome") for m in history if m["type"] == "code"] == [
        "autoRan", "skipped", "ran"]


async def test_always_for_this_command_through_the_server(
        client: OIClient, model: ModelServer, workspace: Path) -> None:
    model.script(ms.tool("shell", "echo one"), ms.tool("shell", "echo two"),
                 ms.tool("shell", "ls -d ."), ms.text("Done."))
    chat = asyncio.create_task(client.chat("go"))
    first = await next_proposal(client)
    assert (first["autoRun"], first["command"]) == (False, "echo")
    answer = await client.approve(first["proposalId"], "run", always="command")
    assert answer["rule"] == {"language": "shell", "pattern": first_word("echo"),
                              "action": "allow"}
    saved = yaml.safe_load((workspace / ".oi" / "profile.yaml").read_text())
    assert saved == {"autoRunRules": [answer["rule"]]} and answer["file"].endswith(
        "profile.yaml")
    second = await client.wait_for("oi/proposal", lambda p: p["code"] == "echo two")
    assert second["autoRun"] is True  # the same command now runs without asking
    third = await client.wait_for("oi/proposal", lambda p: p["code"] == "ls -d .")
    assert third["autoRun"] is False  # another command still asks
    await client.approve(third["proposalId"], "run")
    assert (await chat)["status"] == "done"
    assert tool_results(model.requests[3]) == ["one", "two", "."]


def first_word(word: str) -> str:
    return rules.rule_for("shell", word, "command").pattern


async def test_always_needs_run_and_an_open_proposal(client: OIClient) -> None:
    with pytest.raises(JsonRpcException, match="'always' goes with decision 'run'"):
        await client.approve("nope", "skip", always="command")
    with pytest.raises(JsonRpcException, match="no open proposal"):
        await client.approve("nope", "run", always="command")
