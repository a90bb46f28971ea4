"""The value types of the configuration file: each one check, one reason, one JSON Schema.

A field reads ``port: Annotated[int, integer(1, 65535)]``: the :class:`Rule` validates
(:mod:`director.schema.sections_base` calls it; so does pydantic, for the admin API's
bodies) and describes itself in JSON Schema.
A value arrives as the text the file holds (``"80"``) or, from Python, as itself (``80``);
both give the same result. A refusal is a :func:`problem`: the reason is shown as written,
``at`` points below the value (``("lower_threshold",)``), ``key`` says the line to name is
the key's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from director.core.model import canonical_address
from director.schema.sections_base import Problem

if TYPE_CHECKING:  # pydantic is loaded by the admin API and `director schema` only
    from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
    from pydantic.json_schema import JsonSchemaValue
    from pydantic_core import CoreSchema

Path = tuple[str | int, ...]
Check = Callable[[Any], Any]


def problem(reason: str, at: Path = (), key: bool = False) -> Problem:
    return Problem(reason, at, key)


def below(exc: Problem, *prefix: str | int) -> Problem:
    """``exc`` moved down to ``prefix`` (a field, an index) below where it is raised."""
    return exc.below(*prefix)


@dataclass(frozen=True, slots=True)
class Rule:
    """Annotated metadata: this check validates the field; ``schema`` documents it."""

    check: Check
    schema: dict[str, Any]

    def __call__(self, value: object) -> Any:
        return self.check(value)

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        """For the admin API's bodies (pydantic): a refusal in pydantic's own terms."""
        from pydantic_core import PydanticCustomError, core_schema

        check = self.check

        def validate(value: object) -> Any:
            try:
                return check(value)
            except Problem as exc:
                context = {"reason": exc.reason, "at": exc.at, "key": exc.key}
                raise PydanticCustomError("config", "{reason}", context) from None

        return core_schema.no_info_plain_validator_function(validate)

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return dict(self.schema)


def scalar(value: object) -> str:
    """The text of a value (``True`` is ``"true"``, as the file wrote it)."""
    if value.__class__ is str:
        return value
    if isinstance(value, (dict, list, tuple)):
        raise problem("must be a single value, not a list or mapping")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def items(value: object) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise problem("must be a list")
    return list(value)


_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def digits(text: str) -> bool:
    """Whether ``text`` is written in ASCII digits only (int() and str.isdigit() also take
    ``8_0`` and other scripts' digits, ``٨٠``: no config file means those)."""
    return bool(text) and text.isascii() and text.isdigit()


def integer(low: int, high: int) -> Rule:
    def check(value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = scalar(value)
            if not _INTEGER.fullmatch(text):
                raise problem(f"must be an integer between {low} and {high} (got {text!r})")
            number = int(text, 10)
        if not low <= number <= high:
            raise problem(f"must be an integer between {low} and {high} (got {number})")
        return number

    return Rule(check, {"type": "integer", "minimum": low, "maximum": high})


def one_of(*options: str) -> Rule:
    def check(value: object) -> str:
        text = scalar(value)
        if text not in options:
            raise problem(f"must be one of {', '.join(options)} (got {text!r})")
        return text

    return Rule(check, {"enum": list(options)})


_BOOL = one_of("true", "false")
FLAG = Rule(lambda v: v if isinstance(v, bool) else _BOOL(v) == "true", {"type": "boolean"})
TEXT = Rule(scalar, {"type": "string"})


def _address(value: object) -> str:
    try:
        return canonical_address(scalar(value))
    except ValueError as exc:
        raise problem(str(exc)) from None


ADDRESS = Rule(_address, {"type": "string", "format": "ip-address"})


def matching(pattern: str, reason: Callable[[str], str]) -> Rule:
    compiled = re.compile(pattern)

    def check(value: object) -> str:
        got = scalar(value)
        if not compiled.fullmatch(got):
            raise problem(reason(got))
        return got

    return Rule(check, {"type": "string", "pattern": f"^{pattern}$"})


IFNAME_RE = r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,14}"
NAME_RE = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"
DNS_LABEL_RE = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
QUALIFIED_RE = (
    r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)

IFNAME = matching(
    IFNAME_RE, lambda name: f"{name!r} is not an interface name (letters, digits, _.@-; 15 at most)"
)
FILE_PATH = matching(
    r"/[A-Za-z0-9_./@+-]*",
    lambda path: f"{path!r} must be an absolute path without spaces or quotes",
)
DNS_LABEL = matching(DNS_LABEL_RE, lambda _: "must be a DNS label (lowercase letters, digits, -)")


def seconds(least: float, most: float, example: str, reason: str, digits: int = 6) -> Rule:
    def check(value: object) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        else:
            got = scalar(value)
            if not _DECIMAL.fullmatch(got):
                raise problem(f"must be seconds{example} (got {got!r})")
            number = float(got)
        number = round(number, digits)
        if not least <= number <= most:
            raise problem(reason)
        return number

    return Rule(check, {"type": "number", "minimum": least, "maximum": most})


def list_of(rule: Rule) -> Rule:
    """A list whose items each pass ``rule``; a refusal names the item."""

    check = rule.check

    def each(value: object) -> tuple[Any, ...]:
        values = value if isinstance(value, (list, tuple)) else items(value)
        try:
            return tuple([check(item) for item in values])
        except Problem:
            for index, item in enumerate(values):  # which item: the refusal names it
                try:
                    check(item)
                except Problem as exc:
                    raise below(exc, index) from None
            raise

    return Rule(each, {"type": "array", "items": rule.schema})


class Listen(NamedTuple):
    host: str
    port: int


def _listen(value: object) -> Listen:
    if isinstance(value, tuple) and len(value) == 2:
        return Listen(str(value[0]), int(value[1]))
    got = scalar(value)
    raw_host, _, port_text = got.rpartition(":")
    if not digits(port_text) or not 0 <= int(port_text) <= 65535:  # 0: any free port
        raise problem(f"{got!r} is not ADDRESS:PORT (e.g. 127.0.0.1:9180)")
    return Listen(_address(raw_host.strip("[]")), int(port_text))


LISTEN = Rule(_listen, {"type": "string", "examples": ["127.0.0.1:9180", "[::1]:9180"]})
