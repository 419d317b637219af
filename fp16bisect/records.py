"""Option records: frozen values, one per concern, each field checked once when the record is made.

A record's field declares, beside its default, the check that turns what a caller gives (a flag's text, a manifest's
value, an API argument) into the value stored, or raises ``UsageError`` naming the field; and the one-line help
of the flag it is given as on the command line (``--`` and the field's name with dashes), and which commands take
it. The command line builds its argument groups from these fields, a manifest's keys are their names, and a run's
records render themselves back into the flags that reproduce it (``Record.flags``): one spelling of each option.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from typing import Any, Callable, ClassVar, Iterable, Iterator, Mapping, TypeVar

from fp16bisect.errors import UsageError

Check = Callable[[Any, str], Any]  # (value given, field name) -> the value stored; raises UsageError naming it

# the commands that take options (``Flag.commands``)
SEARCH, CHECK, COMPARE, APPLY, MIGRATE, SCAN = "search", "check", "compare", "apply", "migrate", "scan"
FROM_FILE = (CHECK, COMPARE, APPLY)  # commands that read an override file: a value not given there is the file's
_AS_FLAGS: ContextVar[bool] = ContextVar("as_flags", default=False)


@contextmanager
def spelled_as_flags() -> Iterator[None]:
    """Records made inside name their fields in messages as the command line's flags (``--opt-level 9: ...``),
    not as the API's keywords (``opt_level 9: ...``): the command line makes its records inside."""
    token = _AS_FLAGS.set(True)
    try:
        yield
    finally:
        _AS_FLAGS.reset(token)


def as_flags() -> bool:
    """Whether messages name options as flags (inside ``spelled_as_flags``)."""
    return _AS_FLAGS.get()


@dataclass(frozen=True)
class Flag:
    """How a field is given on the command line: its help (what it does; the default is said from the field's
    own, never written here), metavar, the commands that take it, argparse's ``nargs``/``const`` when the flag's
    value is optional, a short alias, and ``repeat`` for a flag given several times (a tuple of values).

    ``unset``: what the default None means, as the help says it (``"fp16"``; None: nothing said). ``from_file``: a
    command that reads an override file (``FROM_FILE``) takes the file's value when the flag is not given, and its
    help says so. ``path``: the value is a file's path (a manifest's is relative to the manifest)."""

    help: str
    metavar: str | None = None
    commands: tuple[str, ...] = (SEARCH, CHECK)
    nargs: str | None = None
    const: Any = None
    short: str | None = None
    repeat: bool = False
    unset: str | None = None
    from_file: bool = False
    path: bool = False

    def flag(self, name: str) -> str:
        return "--" + name.replace("_", "-")

    def stated(self, default: Any) -> str | None:
        """The default as the help says it: the value's text, ``unset`` for None (or no value), nothing for a
        switch (a boolean's default is off)."""
        if isinstance(default, bool):
            return None
        if default is None or default == ():
            return self.unset
        return _text(default)

    def help_for(self, default: Any, command: str) -> str:
        """The help ``command``'s ``--help`` prints: the help, then the default (``default``: the field's)."""
        stated = self.stated(default)
        if self.from_file and command in FROM_FILE:
            return f"{self.help} (default: the override file's{f', else {stated}' if stated else ''})"
        if stated is None:
            return self.help
        return f"{self.help} (default{':' if ' ' in stated else ''} {stated})"  # "(default 1)", "(default: beside -o)"


def option(default: Any, check: Check | None, help: str, **flag: Any) -> Any:
    """A record's field: its default, its check (None: the record checks it with others), and its flag (``Flag``'s
    other fields as keywords)."""
    spec = {"check": check, "flag": Flag(help, **flag)}
    if isinstance(default, (list, dict, set)):
        raise TypeError("an option's default must be immutable (a tuple, not a list)")
    return field(default=default, metadata=spec)


def flag_of(f: Field) -> Flag | None:
    return f.metadata.get("flag")


def commands_of(f: Field) -> tuple[str, ...]:
    """The commands that take field ``f`` (none: a field without a flag)."""
    spec = flag_of(f)
    return () if spec is None else spec.commands


R = TypeVar("R", bound="Record")


@dataclass(frozen=True)
class Record:
    """The base of an option record: ``__post_init__`` runs each field's check, then ``checked`` (rules across
    fields). ``SHORTHAND``: the field a plain string or number given for the whole record sets (``judge="emulate"``
    is ``Judge(backend="emulate")``)."""

    SHORTHAND: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        for f in fields(self):
            check = f.metadata.get("check")
            if check is not None:
                object.__setattr__(self, f.name, given(check, getattr(self, f.name), f.name))
        self.checked()

    def checked(self) -> None:
        """Rules across fields (a subclass's): a ``UsageError`` naming them."""

    @classmethod
    def of(cls: type[R], value: Any, name: str | None = None) -> R:
        """``value`` as this record: itself, None (the defaults), a mapping of its fields, or (with ``SHORTHAND``)
        the value of that one field; anything else is a ``UsageError`` naming ``name``."""
        said = name or cls.__name__.lower()
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            known = {f.name for f in fields(cls)}
            unknown = sorted(shown(k) for k in value if k not in known)
            if unknown:
                raise UsageError(f"{said}: unknown key(s) {', '.join(unknown)}; {cls.__name__} takes "
                                 f"{', '.join(sorted(known))}")
            return cls(**value)
        if cls.SHORTHAND is not None and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return cls(**{cls.SHORTHAND: value})
        raise UsageError(f"{said}={value!r}: give a {cls.__name__}, a dict of its fields"
                         + (f" or its {cls.SHORTHAND}" if cls.SHORTHAND else ""))

    def changed(self) -> dict[str, Any]:
        """The fields whose values differ from the defaults, in field order."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.default is MISSING or getattr(self, f.name) != f.default}

    def flags(self, command: str = SEARCH) -> list[str]:
        """The command-line words that give this record's values to ``command`` where they are not the defaults."""
        words: list[str] = []
        for f in fields(self):
            spec = flag_of(f)
            value = getattr(self, f.name)
            if spec is None or command not in spec.commands or value == f.default:
                continue
            words += _words(spec.flag(f.name), value, spec)
        return words

    def replace(self: R, **changes: Any) -> R:
        return replace(self, **changes)

    def taken_by(self: R, command: str) -> R:
        """This record, when ``command`` takes every field given (not its default); else a ``UsageError`` naming
        the others and what ``command`` takes."""
        takes = [f.name for f in fields(self) if command in commands_of(f)]
        beyond = [name for name in self.changed() if name not in takes]
        if beyond:
            raise UsageError(f"{', '.join(beyond)}: not an option of {command}, which takes {', '.join(takes)} of "
                             f"the {type(self).__name__.lower()}: drop it")
        return self


def given(check: Check, value: Any, name: str) -> Any:
    """``check`` of ``value`` given as ``name`` (a field, or a function's parameter that is no record's): its
    ``UsageError`` names it as a flag inside ``spelled_as_flags``."""
    try:
        return check(value, name)
    except UsageError as exc:
        raise UsageError(_spelled(str(exc), name)) from None


def _spelled(message: str, name: str) -> str:
    """``message`` (a field's check, naming it first) with the field named as its flag inside
    ``spelled_as_flags``."""
    return as_flag(message, [name]) if as_flags() else message


def as_flag(message: str, names: Iterable[str]) -> str:
    """``message`` with the first word, when it is one of ``names`` (a field's check names it first: ``opt_level 9:
    ...``), as its flag (``--opt-level 9: ...``)."""
    for name in names:
        if message.startswith((f"{name} ", f"{name}=", f"{name}:")):
            return "--" + name.replace("_", "-") + message[len(name):]
    return message


def options_of(record: type, command: str) -> Iterator[tuple[Field, Flag]]:
    """The fields of ``record`` (a record, or any dataclass whose fields carry a ``Flag``) that ``command`` takes
    as flags, with their flags."""
    for f in fields(record):
        spec = flag_of(f)
        if spec is not None and command in spec.commands:
            yield f, spec


def _words(flag: str, value: Any, spec: Flag) -> list[str]:
    if isinstance(value, bool):
        return [flag] if value else []
    if spec.repeat:
        return [w for v in value for w in (flag, _text(v))]
    if spec.nargs == "?" and value == spec.const:
        return [flag]
    return [flag, _text(value)]


def number_text(value: float) -> str:
    """A number as short as it reads (``4``, ``0.05``, ``1e-05``) and read back as the same float: what a printed
    flag's value must be for the command to reproduce the run."""
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


def _text(value: Any) -> str:
    if isinstance(value, float):
        return number_text(value)
    if isinstance(value, Mapping):  # a shape profile given as a mapping: trtexec's text
        return ",".join(f"{k}:{v if isinstance(v, str) else 'x'.join(map(str, v))}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


# -- checks: each (value, name) -> the value stored, or a UsageError naming the field


def choice(*allowed: Any, optional: bool = False) -> Check:
    """One of ``allowed`` (None too when ``optional``)."""
    def check(value: Any, name: str) -> Any:
        if value is None and optional:
            return None
        if isinstance(value, str) and value in allowed:
            return value
        raise UsageError(f"{name} {value!r}: use one of {', '.join(map(repr, allowed))}")
    return check


def boolean(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    raise UsageError(f"{name} {value!r}: give True or False")


def whole(low: int | None = None, high: int | None = None, *, optional: bool = False, what: str = "") -> Check:
    """A whole number in [low, high] (its text too: a flag's or a manifest's), or None when ``optional``."""
    def check(value: Any, name: str) -> int | None:
        if value is None and optional:
            return None
        number = value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            number = int(value)
        if (not isinstance(number, int) or isinstance(number, bool) or (low is not None and number < low)
                or (high is not None and number > high)):
            span = f"from {low} to {high}" if low is not None and high is not None else \
                f"{low} or more" if low is not None else "a whole number"
            raise UsageError(f"{name} {shown(value)}: give {what or 'a whole number'} {span}".replace("  ", " "))
        return number
    return check


def real(low: float | None = None, *, above: bool = False, optional: bool = False, what: str = "") -> Check:
    """A finite number >= ``low`` (> with ``above``), its text too; None when ``optional``."""
    def check(value: Any, name: str) -> float | None:
        if value is None and optional:
            return None
        try:
            number = math.nan if isinstance(value, bool) else float(value)
        except (TypeError, ValueError):
            number = math.nan
        bad = not math.isfinite(number) or (low is not None and (number <= low if above else number < low))
        if bad:
            bound = "" if low is None else f" {'above' if above else 'of at least'} {low:g}"
            raise UsageError(f"{name} {shown(value)}: give a finite number{bound}" + (f" ({what})" if what else ""))
        return number
    return check


UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}  # what a duration's text may end with (none: seconds)


def duration(value: Any, name: str) -> float | None:
    """Seconds above 0: a number, its text, or text with a unit (``90s``, ``15m``, ``2h``); or None."""
    if value is None:
        return None
    text = value.strip().lower() if isinstance(value, str) else ""
    unit = next((u for u in sorted(UNITS, key=len, reverse=True) if text.endswith(u)), "")
    try:
        seconds = real(0, above=True)(text[: len(text) - len(unit)] if unit else value, name)
    except UsageError:
        raise UsageError(f"{name} {shown(value)}: give seconds above 0, or a duration with a unit: 90s, 15m, "
                         "2h") from None
    assert seconds is not None
    return seconds * UNITS.get(unit, 1.0)


def shown(value: Any) -> str:
    """A number given as text (a flag's, a manifest's) as it was typed; anything else (and text that is not one
    plain word) as its repr."""
    plain = isinstance(value, str) and value and value.isprintable() and not any(c.isspace() for c in value)
    return value if plain else repr(value)


def text(optional: bool = True) -> Check:
    """A string (None too when ``optional``)."""
    def check(value: Any, name: str) -> str | None:
        if value is None and optional:
            return None
        if isinstance(value, str):
            return value
        raise UsageError(f"{name} {value!r}: give a string")
    return check


def strings(value: Any, name: str) -> tuple[str, ...]:
    """One string or several (a list or tuple of them), stored as a tuple."""
    given = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, (list, tuple)) else None
    if value is None:
        return ()
    if given is None or not all(isinstance(v, str) and v for v in given):
        raise UsageError(f"{name} {value!r}: give a string or a list of strings")
    return given


def passed(check: Callable[[Any], Any]) -> Check:
    """A check that takes the value alone and raises its own ``UsageError`` (an existing rule, said once)."""
    return lambda value, name: check(value)
