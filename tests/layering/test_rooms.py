"""The rooms of ``memory_tools``: ``scripts/check_layering.py`` refuses an import that runs up.

Bottom to top: the base (foundations < access < services), ``ingest/``, ``workflows/``,
``jobs/``, ``operations/``, the adapters ``mcp/`` and ``web/`` side by side, ``serving/`` and
``testing/``. A module may import its own room and any lower one.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .test_import_rules import SCRIPT, check

PACKAGE = "packages/memory_tools/src/memory_tools"


def _module(root: Path, where: str, source: str) -> Path:
    """Write ``source`` at ``where`` (a path under the package, e.g. ``jobs/worker.py``)."""
    path = root / PACKAGE / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("where", "source", "way"),
    [
        ("services.py", "from memory_tools.ingest.admission import DecodeAdmission\n", "up"),
        ("access.py", "from memory_tools.ingest.inputs import refuse_nul\n", "up"),
        ("errors.py", "from memory_tools.access import Caller\n", "up"),
        ("ingest/save.py", "from memory_tools.jobs.ocr import ocr_wanted\n", "up"),
        ("ingest/save.py", "from memory_tools.workflows import assets\n", "up"),
        ("workflows/assets.py", "import memory_tools.jobs.queue\n", "up"),
        ("jobs/worker.py", "from memory_tools.operations.reconcile import reconcile_store\n", "up"),
        ("jobs/ocr_jobs.py", "from memory_tools.operations import admin\n", "up"),
        ("operations/admin.py", "from memory_tools.mcp.tools import MemoryTools\n", "up"),
        ("web/uploads.py", "from memory_tools.serving.upload_routes import start_upload\n", "up"),
        ("mcp/tools.py", "from memory_tools.web.handlers import WebRequest\n", "sideways"),
        ("web/handlers.py", "from memory_tools.mcp import registry\n", "sideways"),
        ("serving/app.py", "from memory_tools.testing.web import signed_in\n", "up"),
        (
            "jobs/handlers.py",
            "def build():\n    from memory_tools.serving.job_worker import job_worker\n"
            "    return job_worker\n",
            "up",
        ),
        (
            "workflows/assets.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\nelse:\n"
            "    from memory_tools.jobs import queue\n",
            "up",
        ),
    ],
    ids=[
        "services-ingest",
        "access-ingest",
        "foundation-access",
        "ingest-jobs",
        "ingest-workflows",
        "workflows-jobs",
        "jobs-operations",
        "jobs-operations-package",
        "operations-mcp",
        "web-serving",
        "mcp-web",
        "web-mcp",
        "serving-testing",
        "in-a-function",
        "else-branch",
    ],
)
def test_an_import_back_up_the_rooms_is_refused(
    tmp_path: Path, where: str, source: str, way: str
) -> None:
    found = check.violations(_module(tmp_path, where, source))
    assert len(found) == 1, found
    assert found[0].startswith(f"{PACKAGE}/{where}:")
    assert f"this one runs {way}" in found[0]


@pytest.mark.parametrize(
    ("where", "source"),
    [
        ("services.py", "from memory_tools.capacity import DecodeAdmission\n"),
        ("access.py", "from memory_tools.text import refuse_nul\n"),
        ("ingest/save.py", "from memory_tools import Forbidden\nfrom memory_tools import access\n"),
        ("ingest/save.py", "from memory_tools.services import MemoryServices\n"),
        ("workflows/edits.py", "from memory_tools.ingest.plan import fused_text\n"),
        ("jobs/describe.py", "from memory_tools.workflows.edits import reembed_fused\n"),
        ("operations/enrich.py", "from memory_tools.jobs import ocr_jobs\n"),
        ("mcp/tools.py", "from memory_tools.operations.admin import OPERATOR\n"),
        ("web/uploads.py", "from memory_tools.workflows.uploads import start_upload\n"),
        ("serving/app.py", "from memory_tools.web import web_routes\nimport memory_tools.mcp\n"),
        ("testing/web.py", "from memory_tools.serving.app import build_http_server\n"),
        ("jobs/queue.py", "from memory_tools.jobs.handlers import JobFailed\n"),
        (
            "jobs/worker.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from memory_tools.operations.reconcile import Reconciliation\n",
        ),
    ],
    ids=[
        "foundation",
        "text",
        "package-root",
        "ingest-services",
        "workflows-ingest",
        "jobs-workflows",
        "operations-jobs",
        "adapter-operations",
        "web-workflows",
        "serving-adapters",
        "testing-anything",
        "same-room",
        "type-checking",
    ],
)
def test_imports_down_the_rooms_are_allowed(tmp_path: Path, where: str, source: str) -> None:
    assert check.violations(_module(tmp_path, where, source)) == []


def test_a_module_in_no_room_is_reported(tmp_path: Path) -> None:
    found = check.violations(_module(tmp_path, "helpers.py", "x = 1\n"))
    assert found == [
        f"{PACKAGE}/helpers.py:1: memory_tools.helpers is in no room (add it to ROOMS)"
    ]


def test_every_room_is_below_serving_but_testing() -> None:
    heights = {room.name: room.height for room in check.ROOMS}
    assert heights["mcp"] == heights["web"]  # the adapters may not import each other
    above = [name for name, height in heights.items() if height > heights["serving"]]
    assert above == ["testing"]
    chain = ["base", "access", "services", "ingest", "workflows", "jobs", "operations", "mcp"]
    assert [heights[name] for name in chain] == sorted({heights[name] for name in chain})


def test_the_script_names_the_import_that_runs_up(tmp_path: Path) -> None:
    root = _module(tmp_path, "jobs/worker.py", "x = 1\nfrom memory_tools.serving import app\n")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 1
    assert (
        f"{PACKAGE}/jobs/worker.py:2: imports memory_tools.serving (jobs may not import serving"
    ) in result.stdout


def test_a_circle_hidden_in_a_function_is_refused(tmp_path: Path) -> None:
    _module(tmp_path, "jobs/describe.py", "from memory_tools.jobs.handlers import JobFailed\n")
    root = _module(
        tmp_path,
        "jobs/handlers.py",
        "class JobFailed(Exception):\n    pass\n\n"
        "def build():\n    from memory_tools.jobs.describe import DescribeHandler\n"
        "    return DescribeHandler\n",
    )
    assert check.violations(root) == [
        f"{PACKAGE}: import circle memory_tools.jobs.describe <-> memory_tools.jobs.handlers "
        "(move the shared code to one module both import; an import inside a function only "
        "hides the circle)"
    ]


def test_a_longer_circle_is_refused(tmp_path: Path) -> None:
    _module(
        tmp_path, "serving/serve.py", "def later():\n    from memory_tools.serving import app\n"
    )
    _module(tmp_path, "serving/app.py", "from memory_tools.serving.links import stdio\n")
    root = _module(tmp_path, "serving/links.py", "import memory_tools.serving.serve\n")
    found = check.violations(root)
    assert len(found) == 1
    assert (
        "memory_tools.serving.app <-> memory_tools.serving.links <-> memory_tools.serving.serve"
        in (found[0])
    )


def test_a_package_and_its_modules_are_no_circle(tmp_path: Path) -> None:
    _module(tmp_path, "web/__init__.py", "from memory_tools.web.handlers import page\n")
    _module(tmp_path, "web/security.py", "from memory_tools import Forbidden\n")
    root = _module(tmp_path, "web/handlers.py", "from memory_tools.web import security\n")
    assert check.violations(root) == []
