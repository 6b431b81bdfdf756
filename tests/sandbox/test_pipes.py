"""A command's output pipes are closed exactly once, under uvloop too.

`loop.connect_read_pipe` under uvloop closed each descriptor twice (MagicStack/uvloop#763); the
second close hit whatever the number had been reused for in between: the SQLite file another
thread had just opened (`SQLITE_IOERR_RDLOCK` on `runs.db` in about 1 of 30 starts of `agentos
serve`, none in 40 since `Output` reads with `add_reader`). That race needs another thread to
open a file inside a window of microseconds, which these tests do not reproduce on demand; they
check that `Output` itself closes a number once and leaves a reused one alone."""

from __future__ import annotations

import asyncio
import gc
import os
import tempfile

import pytest
import uvloop

from agentos.sandbox.pipes import Output, drain


async def _read_one(text: bytes) -> Output:
    r, w = os.pipe()
    os.write(w, text)
    os.close(w)
    async with Output(r, 1024) as out:
        await drain(out)
    return out


@pytest.mark.parametrize("new_loop", [uvloop.new_event_loop, asyncio.new_event_loop], ids=["uvloop", "asyncio"])
def test_a_number_reused_after_the_pipe_closed_is_left_alone(new_loop: type[asyncio.AbstractEventLoop]) -> None:
    async def main() -> None:
        for _ in range(5):
            out = await _read_one(b"hello")
            assert out.text() == "hello" and not out.truncated
            with tempfile.TemporaryFile() as other:  # likely takes the number the pipe had
                del out
                gc.collect()  # where a second close of the pipe's number would happen
                for _ in range(3):  # and the loop's own deferred closes
                    await asyncio.sleep(0.001)
                os.fstat(other.fileno())  # EBADF if someone closed it under us

    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(main())


async def test_output_keeps_the_head_and_says_it_was_truncated() -> None:
    r, w = os.pipe()
    os.write(w, b"x" * 5000)
    os.close(w)
    async with Output(r, 100) as out:
        await drain(out)
    assert out.text().startswith("x" * 100) and out.truncated


async def test_closing_twice_never_closes_the_number_again() -> None:
    r, w = os.pipe()
    os.close(w)
    async with Output(r, 16) as out:
        await drain(out)
    with tempfile.TemporaryFile() as other:  # the lowest free number: the pipe's, most likely
        await out.__aexit__(None, None, None)  # a second exit (an error path, a retry)
        os.fstat(other.fileno())
