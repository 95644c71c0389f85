"""An advisory lock (``flock``) on a local folder, for the commands that write one folder at a time."""
from __future__ import annotations

import fcntl
import logging
import os

LOGGER = logging.getLogger(__name__)


class FolderBusy(Exception):
    """Another process holds the folder's lock."""


def lock_folder(path: str | os.PathLike, shown: str, writer: str) -> int:
    """Open the folder ``path`` and take its lock without waiting; the descriptor, whose closing releases it. A
    :class:`FolderBusy` while another process holds it. On a filesystem without locks (some network mounts) a
    warning naming ``shown`` and the ``writer`` that must not run beside this one, and the folder goes unlocked."""
    folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(folder)
        raise FolderBusy(path) from None
    except OSError as error:
        LOGGER.warning("%s cannot be locked (%s): make sure no other %s writes it", shown, error.strerror or error,
                       writer)
    return folder
