"""A strict parser for the RFC 9651 Structured Fields the RateLimit headers use: a List of
Items, each a String, Token, Integer or Boolean with parameters. Anything else (inner lists,
decimals, byte sequences) or any malformed input raises ValueError, so a test that parses a
header also checks its syntax."""

from __future__ import annotations

import re

_KEY = re.compile(r"[a-z*][a-z0-9_\-.*]*")
_INTEGER = re.compile(r"-?[0-9]{1,15}")
_TOKEN = re.compile(r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*")


class Token(str):
    """A Token (unquoted), kept apart from a String."""


BareItem = str | int | bool
Item = tuple[BareItem, dict[str, BareItem]]


def parse_list(field: str) -> list[Item]:
    parser = _Parser(field.strip(" "))
    items = [] if not parser.text else [parser.item()]
    while parser.pos < len(parser.text):
        parser.skip_ows()
        parser.expect(",")
        parser.skip_ows()
        if parser.pos == len(parser.text):
            raise ValueError(f"trailing comma in {field!r}")
        items.append(parser.item())
    return items


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def expect(self, char: str) -> None:
        if not self.text.startswith(char, self.pos):
            raise ValueError(f"expected {char!r} at {self.pos} in {self.text!r}")
        self.pos += 1

    def skip_ows(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def item(self) -> Item:
        value = self.bare()
        params: dict[str, BareItem] = {}
        while self.text.startswith(";", self.pos):
            self.pos += 1
            while self.text.startswith(" ", self.pos):
                self.pos += 1
            key = self.match(_KEY)
            params[key] = True
            if self.text.startswith("=", self.pos):
                self.pos += 1
                params[key] = self.bare()
        return value, params

    def bare(self) -> BareItem:
        char = self.text[self.pos : self.pos + 1]
        if char == '"':
            return self.string()
        if char == "?":
            self.pos += 1
            flag = self.text[self.pos : self.pos + 1]
            if flag not in ("0", "1"):
                raise ValueError(f"bad boolean in {self.text!r}")
            self.pos += 1
            return flag == "1"
        if char == "-" or char.isdigit():
            number = self.match(_INTEGER)
            if self.text.startswith(".", self.pos):
                raise ValueError(f"decimals are not expected in {self.text!r}")
            return int(number)
        return Token(self.match(_TOKEN))

    def string(self) -> str:
        self.expect('"')
        out = []
        while self.pos < len(self.text):
            char = self.text[self.pos]
            self.pos += 1
            if char == "\\":
                escaped = self.text[self.pos : self.pos + 1]
                if escaped not in ('"', "\\"):
                    raise ValueError(f"bad escape in {self.text!r}")
                out.append(escaped)
                self.pos += 1
            elif char == '"':
                return "".join(out)
            elif not " " <= char <= "~":
                raise ValueError(f"non-printable character in {self.text!r}")
            else:
                out.append(char)
        raise ValueError(f"unterminated string in {self.text!r}")

    def match(self, pattern: re.Pattern[str]) -> str:
        found = pattern.match(self.text, self.pos)
        if found is None:
            raise ValueError(f"unexpected {self.text[self.pos :]!r} in {self.text!r}")
        self.pos = found.end()
        return found.group()


def policies(field: str) -> dict[str, dict[str, BareItem]]:
    """A RateLimit or RateLimit-Policy field as {policy name: parameters}; names must be Strings."""
    parsed = {}
    for name, params in parse_list(field):
        if not isinstance(name, str) or isinstance(name, Token):
            raise ValueError(f"a policy name must be a String: {field!r}")
        parsed[name] = params
    return parsed
