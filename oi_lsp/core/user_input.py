"""A running program asks for input: the user is asked through the front end (oi/input), within
inputTimeout; whatever stops an answer (no support, a cancel, the timeout) ends the read as at
end of input, and the run's output says why. Neither the answer nor a password is logged."""

from __future__ import annotations

import asyncio
import logging

from ..executors.base import Chunk, Emit, ReadInput
from ..protocol import InputParams
from .link import Link, NoInput

log = logging.getLogger(__name__)


def asker(link: Link, workspace: str, turn_id: str, timeout: float, emit: Emit) -> ReadInput:
    """How the run `turn_id` reads input: by asking the user."""

    def note(text: str) -> None:
        emit(Chunk("console", "output", f"\n[{text}]\n"))

    async def read_input(prompt: str, password: bool) -> str | None:
        params = InputParams(workspace=workspace, turn_id=turn_id, prompt=prompt,
                             password=password)
        try:
            async with asyncio.timeout(timeout):
                value = await link.read_input(params)
        except NoInput as exc:
            note(f"the program asked for input, but {exc}: the read fails")
            return None
        except TimeoutError:
            note(f"no answer to the program's request for input within {timeout:g} s "
                 "(inputTimeout): the read fails")
            return None
        except Exception as exc:  # the client failed to answer: the read fails, the run goes on
            log.warning("could not ask for input: %s", type(exc).__name__)
            note("the request for input failed: the read fails")
            return None
        if value is None:
            note("input cancelled: the read fails")
        return value

    return read_input
