"""How a section of the file is validated, without a validation library in the process.

A section is a frozen dataclass whose fields each say how they are checked: a field
``port: Annotated[int, integer(1, 65535)] = 80`` is checked by its :class:`~fields.Rule`; a
field whose type is another section (``conntrackd: ConntrackdSettings | None``) or a list of
them (``peers: tuple[PeerEntry, ...]``) is that section's mapping, or a list of them. Checks
across a section's fields are its methods marked :func:`after`. The same section is made
from the file (:func:`from_file`: a mapping whose keys are checked first) and from Python
(``Defaults(scheduler="rr")``: the same checks, the same values).

A refusal is a :class:`Problem` (one reason, ``at`` a path below the value it was raised
for); a section gathers every field's problems into one :class:`Invalid`, each as a
:class:`Fault` with its whole path, so ``director check`` names them all.

The director used pydantic for this until 0.4.8; a static box's ``director run`` and every
``director check`` now load none of it (a third of their imports and a quarter of their
memory). pydantic still makes the JSON Schema (``director schema``) from these same
classes, and validates the admin API's bodies.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

from director.core.model import shown

Path = tuple[str | int, ...]
Check = Callable[[Any], Any]
T = TypeVar("T")

_SECTION = "__director_section__"
_AFTER = "__director_after__"
# A module's sections that its annotations name but that it imports only when a file gives
# their key (a dict of class name to module, named so in the module): a static box's file
# has no ha:, bgp: or pools:, and their modules (and the core they pull in) would be most of
# a ``director check``'s imports for nothing.
LATER = "LATER_SECTIONS"


class Problem(ValueError):
    """A value refused: ``reason`` as the operator reads it, ``at`` below the value it was
    raised for (``("lower_threshold",)``), ``key``: the line to name is the key's."""

    def __init__(self, reason: str, at: Path = (), key: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.at, self.key = reason, tuple(at), key

    def below(self, *prefix: str | int) -> Problem:
        """The same refusal, moved down below ``prefix`` (a field, an index)."""
        return Problem(self.reason, (*prefix, *self.at), self.key)


class Fault(NamedTuple):
    path: Path
    reason: str
    key: bool


class Invalid(ValueError):
    """A section refused, with every fault found in it (at least one), in the order found."""

    def __init__(self, faults: Iterable[Fault]) -> None:
        self.faults = tuple(faults)
        first = self.faults[0]
        where = ".".join(str(part) for part in first.path)
        super().__init__(f"{where}: {first.reason}" if where else first.reason)

    def below(self, *prefix: str | int) -> Invalid:
        return Invalid(Fault((*prefix, *f.path), f.reason, f.key) for f in self.faults)


def after(method: Callable[[T], T]) -> Callable[[T], T]:
    """Marks a section's check across its fields, run once every field is valid (in the
    order defined); it raises a Problem or returns the section."""
    setattr(method, _AFTER, True)
    return method


def section(cls: type[T]) -> type[T]:
    """``cls`` as a frozen, slotted dataclass whose construction checks every field (its
    ``__init__`` is :func:`_init`: the dataclass's own is not made, to be thrown away)."""
    made: Any = dataclasses.dataclass(frozen=True, slots=True, init=False)(cls)
    setattr(made, _SECTION, True)
    # What pydantic reads when it makes the JSON Schema from the class (never imported here).
    made.__pydantic_config__ = {"extra": "forbid"}
    made.__init__ = _init
    return typing.cast(type[T], made)


def is_section(kind: object) -> bool:
    return isinstance(kind, type) and kind.__dict__.get(_SECTION, False)


def from_file(cls: type[T], data: object) -> T:
    """The section a file's mapping makes; Invalid with every fault if it makes none."""
    spec = _spec(cls)
    try:
        given = check_keys(data, spec.keys)
    except Problem as exc:
        raise Invalid((Fault(exc.at, exc.reason, exc.key),)) from None
    by_key = spec.by_key
    values, faults = _checked((key, *by_key[key], raw) for key, raw in given.items())
    if faults:
        raise Invalid(faults)
    made = object.__new__(cls)
    _fill(made, spec, values)
    return made


@dataclasses.dataclass(frozen=True, slots=True)
class Keys:
    """The keys a mapping may hold, and those it must."""

    every: frozenset[str]
    required: frozenset[str]

    @classmethod
    def of(cls, allowed: Mapping[str, bool]) -> Keys:
        return cls(frozenset(allowed), frozenset(k for k, needed in allowed.items() if needed))


def check_keys(data: object, keys: Keys) -> dict[str, Any]:
    """A mapping whose keys are all allowed, with every required one."""
    if isinstance(data, dict) and data.keys() <= keys.every and keys.required <= data.keys():
        return data
    if not isinstance(data, dict):
        raise Problem("must be a mapping of keys to values")
    for key in data:
        if key not in keys.every:
            label = key if key.isprintable() else shown(key)  # errors are one line
            allowed = ", ".join(sorted(keys.every))
            raise Problem(f"unknown key (allowed: {allowed})", (label,), True)
    raise Problem(f"missing required key {min(keys.required - data.keys())!r}")


def mapping_keys(cls: type) -> Keys:
    """The keys ``cls`` takes in the file (an alias, or the field's name), and those it must."""
    return _spec(cls).keys


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    """A section made from Python: each value given is checked as the file's would be."""
    spec = _spec(type(self))
    if len(args) > len(spec.names):
        raise TypeError(f"{type(self).__name__} takes {len(spec.names)} values, not {len(args)}")
    given: dict[str, Any] = dict(zip(spec.names, args, strict=False))
    for key, value in kwargs.items():
        name = spec.name_of.get(key)
        if name is None:
            allowed = ", ".join(sorted(spec.keys.every))
            raise Invalid((Fault((key,), f"unknown key (allowed: {allowed})", True),))
        if name in given:
            raise TypeError(f"{type(self).__name__}: {key!r} given twice")
        given[name] = value
    values, faults = _checked(
        (spec.key_of[name], name, spec.checks[name], value) for name, value in given.items()
    )
    for name in spec.required_names - given.keys():
        faults.append(Fault((), f"missing required key {spec.key_of[name]!r}", False))
    if faults:
        raise Invalid(faults)
    _fill(self, spec, values)


def _checked(given: Iterable[tuple[str, str, Check, Any]]) -> tuple[dict[str, Any], list[Fault]]:
    """Each (key in the file, field name, check, value given) checked: the values by field
    name, and every fault, each with its path from the section down."""
    values: dict[str, Any] = {}
    faults: list[Fault] = []
    for key, name, check, raw in given:
        try:
            values[name] = check(raw)
        except Problem as exc:
            faults.append(Fault((key, *exc.at), exc.reason, exc.key))
        except Invalid as exc:
            faults.extend(exc.below(key).faults)
        except ValueError as exc:  # a check's own fault, said as pydantic said it
            faults.append(Fault((key,), f"Value error, {exc}", False))
    return values, faults


def _fill(made: Any, spec: _Spec, values: dict[str, Any]) -> None:
    """Every field of ``made``: the checked ``values``, the defaults for the rest; then the
    checks across fields."""
    put = object.__setattr__
    for name, default, factory in spec.fields:
        if name in values:
            put(made, name, values[name])
        elif factory is not None:
            put(made, name, factory())
        else:
            put(made, name, default)
    for check in spec.after:
        try:
            check(made)
        except Problem as exc:
            raise Invalid((Fault(exc.at, exc.reason, exc.key),)) from None


class _Spec(NamedTuple):
    names: tuple[str, ...]  # in field order
    fields: tuple[tuple[str, Any, Callable[[], Any] | None], ...]  # name, default, factory
    checks: dict[str, Check]  # by name
    by_key: dict[str, tuple[str, Check]]  # by the key in the file
    key_of: dict[str, str]  # name -> key in the file
    name_of: dict[str, str]  # a name or a key -> name
    keys: Keys  # in the file
    required_names: frozenset[str]
    after: tuple[Callable[[Any], Any], ...]


_MISSING: Any = dataclasses.MISSING


def _spec(cls: type) -> _Spec:
    """How each field of ``cls`` is checked (read from its annotations at its first use)."""
    spec = _SPECS.get(cls)
    if spec is None:
        spec = _SPECS[cls] = _read_spec(cls)
    return spec


_SPECS: dict[type, _Spec] = {}


class _Later:
    """A section named in an annotation and imported at its first use (``LATER``): what
    the name evaluates to when the annotation is read, with ``| None`` kept."""

    __slots__ = ("module", "name", "optional")

    def __init__(self, module: str, name: str, optional: bool = False) -> None:
        self.module, self.name, self.optional = module, name, optional

    def __or__(self, other: object) -> _Later:
        if other is not None:
            return NotImplemented
        return _Later(self.module, self.name, optional=True)

    __ror__ = __or__

    def __call__(self) -> None:  # typing wants an annotation's value to be callable
        raise TypeError(f"{self.name} is a section imported later")

    def __repr__(self) -> str:
        return f"{self.module}.{self.name}{' | None' if self.optional else ''}"

    def load(self) -> type:
        return typing.cast(type, getattr(importlib.import_module(self.module), self.name))


class _Names(dict[str, Any]):
    """The class's own names, and the module's later sections as :class:`_Later`."""

    def __init__(self, own: Mapping[str, Any], later: Mapping[str, str]) -> None:
        super().__init__(own)
        self.later = later

    def __missing__(self, name: str) -> _Later:
        if name in self.later:
            return _Later(self.later[name], name)
        raise KeyError(name)


def load_later(cls: type) -> None:
    """Import the sections ``cls``'s module names for later, into its namespace, so that a
    reader of its annotations (pydantic, making the JSON Schema) finds them."""
    module = sys.modules[cls.__module__]
    for name, where in getattr(module, LATER, {}).items():
        setattr(module, name, _Later(where, name).load())


def _read_spec(cls: type) -> _Spec:
    # The module's names as the globals (a lambda in an annotation looks its names up there).
    module = vars(sys.modules[cls.__module__])
    hints = typing.get_type_hints(
        cls, globalns=module, localns=_Names(vars(cls), module.get(LATER, {})), include_extras=True
    )
    names: list[str] = []
    fields: list[tuple[str, Any, Callable[[], Any] | None]] = []
    checks: dict[str, Check] = {}
    by_key: dict[str, tuple[str, Check]] = {}
    key_of: dict[str, str] = {}
    name_of: dict[str, str] = {}
    required: set[str] = set()
    required_names: set[str] = set()
    for f in dataclasses.fields(cls):
        key = f.metadata.get("alias", f.name)
        check = _check_of(hints[f.name], f"{cls.__name__}.{f.name}")
        names.append(f.name)
        factory: Callable[[], Any] | None = (
            None if f.default_factory is _MISSING else typing.cast(Any, f.default_factory)
        )
        fields.append((f.name, f.default, factory))
        checks[f.name], by_key[key] = check, (f.name, check)
        key_of[f.name], name_of[f.name], name_of[key] = key, f.name, f.name
        if f.default is _MISSING and factory is None:
            required.add(key)
            required_names.add(f.name)
    after_checks = tuple(
        value
        for klass in reversed(cls.__mro__)
        for value in vars(klass).values()
        if callable(value) and getattr(value, _AFTER, False)
    )
    return _Spec(
        tuple(names),
        tuple(fields),
        checks,
        by_key,
        key_of,
        name_of,
        Keys(frozenset(by_key), frozenset(required)),
        frozenset(required_names),
        after_checks,
    )


def _check_of(hint: Any, where: str) -> Check:
    """The check of a field annotated ``hint``: its Rule's, or a section's (or a list of
    them, or one or none)."""
    if typing.get_origin(hint) is typing.Annotated:
        rules = [m for m in hint.__metadata__ if callable(getattr(m, "check", None))]
        if len(rules) != 1:
            raise TypeError(f"{where}: one Rule in Annotated, found {len(rules)}")
        return typing.cast(Check, rules[0].check)
    if isinstance(hint, _Later):
        return _at_first_use(hint, lambda cls: _one(cls, hint.optional))
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = [m for m in typing.get_args(hint) if m is not type(None)]
        optional = len(members) < len(typing.get_args(hint))
        if len(members) == 1:
            hint = members[0]
    if is_section(hint):
        return _one(hint, optional)
    args = typing.get_args(hint)
    many = typing.get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis
    if many and is_section(args[0]) and not optional:
        return _many(args[0])
    if many and isinstance(args[0], _Later) and not args[0].optional and not optional:
        return _at_first_use(args[0], _many)
    raise TypeError(f"{where}: {hint!r} has no Rule and is not a section or a list of them")


def _at_first_use(later: _Later, make: Callable[[type], Check]) -> Check:
    """The check ``make`` gives for the section ``later`` names, its module imported the
    first time a value is checked."""
    made: list[Check] = []

    def check(value: object) -> Any:
        if not made:
            made.append(make(later.load()))
        return made[0](value)

    return check


def _one(cls: type, optional: bool) -> Check:
    def check(value: object) -> Any:
        if value is None and optional:
            return None
        if isinstance(value, cls):
            return value
        return from_file(cls, value)

    return check


def _many(cls: type) -> Check:
    def check(value: object) -> tuple[Any, ...]:
        if not isinstance(value, (list, tuple)):
            raise Problem("must be a list")
        out: list[Any] = []
        faults: list[Fault] = []
        for index, item in enumerate(value):
            try:
                out.append(item if isinstance(item, cls) else from_file(cls, item))
            except Invalid as exc:
                faults.extend(exc.below(index).faults)
        if faults:
            raise Invalid(faults)
        return tuple(out)

    return check
