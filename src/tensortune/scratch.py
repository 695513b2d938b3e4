"""Temporary folders that a killed process leaks only until the next run looks.

A folder made by `make_folder` holds a lock file that its process keeps locked (``flock``)
for as long as it lives; the kernel drops the lock when the process dies, however it dies.
`sweep` deletes the folders whose lock is free: those of killed processes, and of processes
that exited without `remove_folder`. Folders without the lock file are never touched, so that
sweeping a folder shared with others (the system's temporary folder, the user's export
folder) deletes nothing that is not ours. POSIX only (``fcntl``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator

from tensortune.errors import TensortuneError

#: The lock file inside every folder that `make_folder` makes.
LOCK_FILE = ".tensortune-owner.lock"


class Folder:
    """A temporary folder and the open, locked file that marks its process as alive.

    Attributes:
        path: The folder.
    """

    def __init__(self, path: str, lock_fd: int) -> None:
        self.path = path
        self._lock_fd: int | None = lock_fd

    def remove(self) -> None:
        """Delete the folder and release its lock; never raises."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None


def make_folder(prefix: str, suffix: str = "", parent: str | None = None) -> Folder:
    """A new folder ``<parent>/<prefix><pid>-<random><suffix>``, locked for this process.

    Args:
        prefix: Start of its name.
        suffix: End of its name. Default ``""``.
        parent: Where to make it. Default None: the system's temporary folder.
    """
    path = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", suffix=suffix, dir=parent)
    fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a fresh file: nobody else holds it
    return Folder(path, fd)


def sweep(prefix: str, suffix: str = "", parent: str | None = None) -> list[str]:
    """Delete the folders in `parent` named ``<prefix>...<suffix>`` whose owner is gone (their
    lock file is not locked); returns their paths. Never raises.

    Args:
        prefix: Start of the names, as given to `make_folder`.
        suffix: End of the names. Default ``""``.
        parent: Where to look. Default None: the system's temporary folder.
    """
    parent = parent or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        path = os.path.join(parent, name)
        try:
            fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR)
        except OSError:  # not a folder of ours, or swept by another process meanwhile
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its owner lives
            os.close(fd)
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


def check_new_folder(directory: str) -> str:
    """The absolute path of `directory` if a folder may be created there (it does not exist,
    or is an empty folder, and its parent exists); `TensortuneError` otherwise."""
    directory = os.path.abspath(directory)
    if os.path.exists(directory) and (not os.path.isdir(directory) or os.listdir(directory)):
        raise TensortuneError(f"{directory} already exists and is not an empty folder")
    parent = os.path.dirname(directory)
    if not os.path.isdir(parent):
        raise TensortuneError(f"cannot export to {directory}: folder {parent} does not exist")
    return directory


@contextlib.contextmanager
def staged_folder(directory: str) -> Iterator[str]:
    """Yield a locked temporary folder beside `directory` (checked with `check_new_folder`) to
    write into; when the block ends without an error it is renamed to `directory`, so that the
    folder appears whole or not at all. A killed run's leftover is swept by the next one."""
    directory = check_new_folder(directory)
    parent = os.path.dirname(directory)
    prefix, suffix = f".{os.path.basename(directory)}.", ".tmp"
    sweep(prefix, suffix, parent)
    folder = make_folder(prefix, suffix, parent)
    try:
        yield folder.path
        if os.path.isdir(directory):
            os.rmdir(directory)  # empty, checked above
        os.remove(os.path.join(folder.path, LOCK_FILE))  # not part of the result
        os.rename(folder.path, directory)
    finally:
        folder.remove()  # after the rename: only the lock is left to release
