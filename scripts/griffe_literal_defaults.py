"""A Griffe extension for the docs site's API page (mkdocs.yml): a default that names a module constant is shown
as the constant's value, ``atol: float = 0.01`` rather than ``atol: float = DEFAULT_ATOL``.

The signatures keep their one source of each default (``fp16bisect.tolerance.DEFAULT_ATOL``); the page shows what a
reader needs. Only constants whose value is a plain literal (a number, a string, None, True, False) are replaced.
"""

from __future__ import annotations

import ast

import griffe


class LiteralDefaults(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        for obj in _members(pkg):
            if obj.is_function:
                for parameter in obj.parameters:
                    parameter.default = _literal(parameter.default, loader) or parameter.default
            elif obj.is_attribute and obj.parent.is_class:  # a dataclass field: its __init__ default is made later
                obj.value = _literal(obj.value, loader) or obj.value


def _members(obj: griffe.Object):
    """Every function, method and attribute under ``obj`` (aliases, which point elsewhere, are skipped)."""
    for member in obj.members.values():
        if member.is_alias:
            continue
        if member.is_function or member.is_attribute:
            yield member
        elif member.is_module or member.is_class:
            yield from _members(member)


def _literal(default, loader: griffe.GriffeLoader) -> str | None:
    """The value of the constant ``default`` names, when it is a literal; else None (left as written)."""
    if not isinstance(default, griffe.ExprName):
        return None
    try:
        target = loader.modules_collection[default.canonical_path]
        while target.is_alias:
            target = target.final_target
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    if not target.is_attribute or target.value is None:
        return None
    text = str(target.value)
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return text
