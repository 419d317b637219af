"""A Griffe extension for the docs site's API page (mkdocs.yml): a default that names a module constant is shown
as the constant's value, ``atol: float = 0.01`` rather than ``atol: float = DEFAULT_ATOL``; an option record's
field (``fp16bisect.records.option(default, check, help, **flag)``) is shown as its default, documented by its
help and its flag (``opt_level: int | None = None``, "tensorrt: builder optimisation level (None: 3). The flag
--opt-level of search, check.").

The signatures keep their one source of each default (``fp16bisect.tolerance.DEFAULT_ATOL``); the page shows what a
reader needs. Only constants whose value is a plain literal (a number, a string, None, True, False) are replaced.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib

import griffe


class LiteralDefaults(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        for obj in _members(pkg):
            if obj.is_function:
                for parameter in obj.parameters:
                    default = _option_default(obj.parent, parameter.name) if _is_option(parameter.default) else None
                    parameter.default = default or _literal(parameter.default, loader) or parameter.default
            elif obj.is_attribute and obj.parent.is_class:  # a dataclass field: its __init__ default is made later
                if _is_option(obj.value):
                    obj.value = _option_default(obj.parent, obj.name) or obj.value
                    obj.docstring = griffe.Docstring(_field_doc(obj.parent, obj.name), parent=obj)
                obj.value = _literal(obj.value, loader) or obj.value


def _is_option(value) -> bool:
    """``value`` is the call ``option(default, check, help, **flag)`` (``fp16bisect.records``)."""
    return isinstance(value, griffe.ExprCall) and str(value.function).rpartition(".")[2] == "option"


def _field(cls: griffe.Object, name: str):
    """The dataclass field ``name`` of the class ``cls`` stands for, imported (None: not found)."""
    try:
        made = getattr(importlib.import_module(cls.parent.path), cls.name)
        return next(f for f in dataclasses.fields(made) if f.name == name)
    except (ImportError, AttributeError, TypeError, StopIteration):
        return None


def _option_default(cls: griffe.Object, name: str) -> str | None:
    found = _field(cls, name)
    return None if found is None else repr(found.default)


def _field_doc(cls: griffe.Object, name: str) -> str:
    """A field's docstring: its flag's help, what its default None means, and the flag and the commands."""
    found = _field(cls, name)
    flag = None if found is None else found.metadata.get("flag")
    if flag is None:
        return ""
    said = f" (None: {flag.unset})" if flag.unset else ""
    return f"{flag.help}{said}. The flag `--{name.replace('_', '-')}` of {', '.join(flag.commands)}."


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
