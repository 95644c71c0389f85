"""Library attributes replaced for the length of a block: how c4prep's engine workarounds put their functions in
place of Beam's, Dask's and partd's, and take them out again."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock


@contextmanager
def replaced(*replacements: tuple[Any, str, Any]) -> Iterator[None]:
    """While the block runs, each ``(owner, name, value)`` sets ``owner.name = value``; after it, even on an error,
    each attribute is what it was when the block began."""
    with ExitStack() as stack:
        for owner, name, value in replacements:
            stack.enter_context(mock.patch.object(owner, name, value))
        yield
