"""Sloppy tool calls: every shape models produce becomes a proposal (a table of them), and
one through the real server and the scripted model."""

from __future__ import annotations

import asyncio
import json

import pytest

from oi_lsp.client import OIClient
from oi_lsp.core.tool_calls import Repaired, Unusable, repair
from tests import modelserver as ms
from tests.conftest import next_proposal, tool_results
from tests.modelserver import ModelServer

JSON = json.dumps({"language": "python", "code": "print(1)"})

SHAPES = [
    # (what it is, function name, arguments, language, code)
    ("a well-formed call", "execute", JSON, "python", "print(1)"),
    ("the name doubled", "executeexecute", JSON, "python", "print(1)"),
    ("the name tripled, any case", "ExecuteExecuteExecute", JSON, "python", "print(1)"),
    ("a namespaced name", "functions.execute", JSON, "python", "print(1)"),
    ("no name", "", JSON, "python", "print(1)"),
    ("the language as the name", "python", json.dumps({"code": "print(1)"}), "python",
     "print(1)"),
    ("the language as the name, bare code", "bash", "ls -la", "bash", "ls -la"),
    ("an alias as the name", "functions.Shell", "echo hi", "shell", "echo hi"),
    ("JSON in a json fence", "execute", f"```json\n{JSON}\n```", "python", "print(1)"),
    ("JSON in a bare fence", "execute", f"```\n{JSON}\n```", "python", "print(1)"),
    ("JSON in a fence, no closing fence", "execute", f"```json\n{JSON}", "python", "print(1)"),
    ("bare code", "execute", "print('hi')", "python", "print('hi')"),
    ("bare fenced code", "execute", "```bash\nls -la\n```", "bash", "ls -la"),
    ("code as a JSON string", "execute", json.dumps("print(2)"), "python", "print(2)"),
    ("no language, fenced code", "execute", json.dumps({"code": "```sh\nls\n```"}), "sh", "ls"),
    ("no language, Python code", "execute", json.dumps({"code": "x = 1\nprint(x)"}), "python",
     "x = 1\nprint(x)"),
    ("no language, a shell command", "execute", json.dumps({"code": "ls -la /tmp"}), "shell",
     "ls -la /tmp"),
    ("no language, a shebang", "execute", json.dumps({"code": "#!/bin/bash\necho hi"}),
     "bash", "#!/bin/bash\necho hi"),
    ("no language, not Python, unknown first word", "execute",
     json.dumps({"code": "frobnicate --all"}), "python", "frobnicate --all"),
    ("empty language", "execute", json.dumps({"language": "", "code": "print(1)"}), "python",
     "print(1)"),
    ("an alias in upper case", "execute", json.dumps({"language": "PYTHON", "code": "1"}),
     "python", "1"),
    ("an alias in mixed case", "execute", json.dumps({"language": "JavaScript", "code": "1"}),
     "javascript", "1"),
    ("a language with spaces", "execute", json.dumps({"language": " Shell ", "code": "ls"}),
     "shell", "ls"),
    ("fenced code inside well-formed JSON", "execute",
     json.dumps({"language": "python", "code": "```python\nprint(3)\n```"}), "python",
     "print(3)"),
    ("the fence names another language than the argument", "execute",
     json.dumps({"language": "shell", "code": "```bash\nls\n```"}), "shell", "ls"),
]

UNUSABLE = [
    # (what it is, function name, arguments, what the model is told)
    ("an unknown tool", "browse", JSON, "Unknown tool 'browse'"),
    ("broken JSON", "execute", '{"language": "python", "code": ', "not valid JSON"),
    ("broken JSON in a fence", "execute", '```json\n{"code": \n```', "not valid JSON"),
    ("no code key", "execute", json.dumps({"language": "python"}), "not valid JSON"),
    ("code not a string", "execute", json.dumps({"code": 5}), "not valid JSON"),
    ("empty arguments", "execute", "", "no code"),
    ("an empty object", "execute", "{}", "not valid JSON"),
    ("blank code", "execute", json.dumps({"language": "python", "code": "  \n"}), "no code"),
]


@pytest.mark.parametrize(("shape", "name", "arguments", "language", "code"), SHAPES,
                         ids=[s[0] for s in SHAPES])
def test_sloppy_call_is_repaired(shape: str, name: str, arguments: str, language: str,
                                 code: str) -> None:
    assert repair(name, arguments) == Repaired(language, code)


@pytest.mark.parametrize(("shape", "name", "arguments", "told"), UNUSABLE,
                         ids=[u[0] for u in UNUSABLE])
def test_hopeless_call_is_told(shape: str, name: str, arguments: str, told: str) -> None:
    with pytest.raises(Unusable, match=told):
        repair(name, arguments)


def test_a_list_is_taken_as_code() -> None:
    # Not JSON the tool takes, but valid Python: proposed (the user decides), never dropped.
    assert repair("execute", "[1, 2]") == Repaired("python", "[1, 2]")


async def test_sloppy_call_becomes_a_proposal_and_runs(client: OIClient,
                                                       model: ModelServer) -> None:
    fenced = "```json\n" + json.dumps({"language": "PYTHON", "code": "print(6 * 7)"}) + "\n```"
    model.script(ms.tool("", "", name="functions.executeexecute", arguments=fenced),
                 ms.tool("", "", name="python", arguments="print('bare')"),
                 ms.text("Both ran."))
    chat = asyncio.create_task(client.chat("compute"))
    first = await next_proposal(client)
    assert (first["language"], first["code"]) == ("python", "print(6 * 7)")
    await client.approve(first["proposalId"], "run")
    since = len(client.notifications)
    second = await next_proposal(client, since)
    assert (second["language"], second["code"]) == ("python", "print('bare')")
    await client.approve(second["proposalId"], "run")
    result = await chat
    assert result["status"] == "done"
    assert tool_results(model.requests[2]) == ["42", "bare"]
    # The model sees its calls as the tool takes them, not as it wrote them.
    calls = [c for m in model.requests[2]["messages"] for c in m.get("tool_calls") or ()]
    assert [c["function"]["name"] for c in calls] == ["execute", "execute"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"language": "python",
                                                             "code": "print(6 * 7)"}
