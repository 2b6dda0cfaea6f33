"""An httpx request tries no import: a failed import is not cached and costs every request."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A child process: an audit hook cannot be removed, and a module already imported here would
# hide the attempt. The child answers one request on loopback, then counts the imports that
# five more requests attempt.
_PROBE = textwrap.dedent(
    """
    import asyncio, sys
    import httpx

    attempts = []
    counting = False

    def hook(event, args):
        if counting and event == "import":
            attempts.append(args[0])

    async def answer(reader, writer):
        while (await reader.readline()) not in (b"\\r\\n", b""):
            pass
        writer.write(b"HTTP/1.1 200 OK\\r\\ncontent-length: 2\\r\\n\\r\\nok")
        await writer.drain()
        writer.close()

    async def main():
        global counting
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        url = "http://127.0.0.1:%d/" % server.sockets[0].getsockname()[1]
        async with httpx.AsyncClient() as client:
            assert (await client.get(url)).text == "ok"  # first use: imports are expected
            counting = True
            for _ in range(5):
                assert (await client.get(url)).text == "ok"
            counting = False
        server.close()

    sys.addaudithook(hook)
    asyncio.run(main())
    print(sorted(set(attempts)))
    """
)


def test_an_httpx_request_attempts_no_import() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    # Without sniffio installed, httpcore tried `import sniffio` several times per request.
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
