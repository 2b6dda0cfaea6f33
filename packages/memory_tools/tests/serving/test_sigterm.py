"""Under ``sigterm_cancels`` (the worker) SIGTERM stops a command at an ``await``, never in the
middle of the event loop's work."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A command whose loop is running a callback when SIGTERM arrives (the callback sends it). A
# signal that raised where it landed cut that callback short: in a driver's protocol callback
# that leaves a waiter nobody wakes, and two idle workers ignored SIGTERM for 30 s in CI.
PROBE = textwrap.dedent(
    """
    import asyncio, os, signal
    import anyio
    from memory_tools.serving.commands import run_command, sigterm_cancels

    state = []

    async def command(_settings):
        loop = asyncio.get_running_loop()

        def callback():
            os.kill(os.getpid(), signal.SIGTERM)
            state.append("callback finished")

        async with sigterm_cancels():
            loop.call_soon(callback)
            try:
                async with anyio.create_task_group() as tasks:  # as the worker's: a group
                    tasks.start_soon(anyio.sleep, 60)
                    await asyncio.sleep(60)
            finally:
                await asyncio.sleep(0)  # cleanup that awaits still runs
                state.append("cleaned up")

    status = run_command(command)
    print(status, state)
    """
)


def test_sigterm_lets_the_running_callback_finish_then_unwinds_the_command(
    tmp_path: object,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        # Generous: a Python start and one loop turn; the bound only stops a hung probe.
        timeout=120,
        check=False,
        env={"MEMORY_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0 ['callback finished', 'cleaned up']", done.stderr


def test_sigterm_after_the_command_is_done_still_exits_cleanly(tmp_path: object) -> None:
    probe = PROBE.replace("await asyncio.sleep(60)", "pass").replace(
        "tasks.start_soon(anyio.sleep, 60)", "pass"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"MEMORY_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("0 ["), done.stderr
