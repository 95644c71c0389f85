"""WARC header lines to values, parsed as warcio parses them so intact files give exactly the records warcio gives."""
from __future__ import annotations


def decode_header_lines(lines: list[bytes]) -> tuple[list[str], str | None]:
    """Header lines as text, and the name of the first that is not UTF-8 (its bad bytes become `\\x` escapes)."""
    texts: list[str] = []
    undecodable = None
    for line in lines:
        try:
            texts.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            text = line.decode("utf-8", "backslashreplace")
            texts.append(text)
            undecodable = undecodable or text.partition(":")[0].strip()
    return texts, undecodable


def parse_warc_headers(lines: list[str]) -> dict[str, str]:
    """Header values by lower-case name, parsed as warcio parses them: the first of a repeated name wins, values are
    stripped, continuation lines (starting with a space or a tab) are appended, lines without a colon are ignored."""
    fields: list[list[str]] = []
    current: list[str] | None = None
    for index, line in enumerate(lines):
        line = line.rstrip()
        if index and line.startswith((" ", "\t")):
            if current is not None:
                current[1] += line
            continue
        name, colon, value = line.partition(":")
        current = [name.rstrip(" \t"), value.lstrip()] if colon else None
        if current is not None:
            fields.append(current)
    headers: dict[str, str] = {}
    for name, value in fields:
        headers.setdefault(name.lower(), value)
    return headers


def target_uri(uri: str | None) -> str | None:
    """WARC-Target-URI as warcio gives it: `<...>` unwrapped (a Wget 1.19 bug) and spaces escaped."""
    if uri is None:
        return None
    if uri.startswith("<") and uri.endswith(">"):
        uri = uri[1:-1]
    return uri.replace(" ", "%20")


def byte_count(value: str | None) -> int | None:
    """A Content-Length value as an int, or None unless it is plain ASCII digits."""
    return int(value) if value is not None and value.isascii() and value.isdigit() else None
