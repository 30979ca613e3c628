"""A griffe extension for the API reference: cronbase's docstrings cross-reference with Sphinx
roles (``:class:`~cronbase.App```), which Markdown would print as they are. Each role becomes
inline code, and a link (mkdocstrings' autorefs) when it names an object the reference renders
at its public path (``cronbase.X``, ``cronbase.testing.X``...): ``~`` shows the last name only,
as in Sphinx.

mkdocs.yml loads it under the python handler's options: ``extensions:
[docs/reference/griffe_roles.py]``. The docstrings in src/ are left as they are.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from typing import Any

import griffe

# :class:`target`, :meth:`~target`, :func:`text <target>`...
_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|mod|exc|data|obj):`(~?)([^`<]+?)(?:\s*<([^>]+)>)?`"
)
# The public modules whose __all__ the reference renders, one ``::: module.Name`` each.
_PUBLIC = ("cronbase", "cronbase.testing")


def lookup(path: str) -> Any:
    """The object ``path`` names, found as mkdocstrings does (the longest importable module,
    then attributes of it: ``cronbase.testing.inline`` is the module, not the function), or None.
    tests/unit/test_docs_reference.py finds its directives' objects with it too."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name, None)
            if found is None:
                return None
        return found
    return None


def public_path(target: str) -> str | None:
    """``target``'s public path when the reference renders it (``cronbase.worker.Worker`` ->
    ``cronbase.Worker``), else None."""
    if not target.startswith("cronbase."):
        return None
    found = lookup(target)
    if found is None:
        return None
    name = target.rsplit(".", 1)[-1]
    for module_name in _PUBLIC:
        module = importlib.import_module(module_name)
        if name in getattr(module, "__all__", ()) and getattr(module, name) is found:
            return rendered_path(module_name, name)
    return None


def rendered_path(module_name: str, name: str) -> str:
    """Where the reference renders ``module_name.name``: that path, unless a submodule of the
    same name shadows it (``cronbase.testing.inline``, the function of the module ``inline``):
    then the object's own path."""
    if importlib.util.find_spec(f"{module_name}.{name}") is None:
        return f"{module_name}.{name}"
    found = getattr(importlib.import_module(module_name), name)
    return f"{found.__module__}.{found.__qualname__}"


def rewrite(text: str) -> str:
    """Every Sphinx role in ``text`` as inline code, linked when its target is rendered."""

    def replace(match: re.Match[str]) -> str:
        short, target, explicit = match.group(1), match.group(2).strip(), match.group(3)
        if explicit:  # :class:`text <target>`
            shown, target = target, explicit.strip().lstrip("~")
        else:
            shown = target.rsplit(".", 1)[-1] if short else target
        link = public_path(target)
        return f"[`{shown}`][{link}]" if link else f"`{shown}`"

    return _ROLE.sub(replace, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
