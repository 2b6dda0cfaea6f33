"""Names a package exports but loads on first use (a module ``__getattr__``, PEP 562).

An operator command needs settings and one repository; importing every package's whole public
API would load the HTTP app, the worker, pyvips, numpy and alembic first (about a second). So
the packages whose names pull those in (``memory_db``, ``memory_db.embedding``,
``memory_tools``, ``memory_tools.serving``) export them through this one loader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(
    package: str,
    namespace: dict[str, Any],
    modules: Mapping[str, tuple[str, ...]],
    *,
    submodules: tuple[str, ...] = (),
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports each name of ``modules`` on first use.

    ``modules`` maps a module to the names it provides; a loaded name is stored in
    ``namespace`` (the package's ``globals()``) so the import happens once. ``submodules``
    are the package's own modules reachable as attributes (``memory_tools.operations.admin``).
    """
    by_name = {name: module for module, names in modules.items() for name in names}

    def load(name: str) -> Any:
        if name in submodules:
            return import_module(f"{package}.{name}")
        module = by_name.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    return load
