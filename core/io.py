"""Writing result files so that a failure never leaves half a file behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from shardplan.errors import InputError

__all__ = ["write_atomic", "writable_folder"]


def writable_folder(path: str | Path) -> Path:
    """The folder ``path`` would be written into, checked before any work whose result goes there, so a long run
    does not end in an error (nor leave one output of two written).

    Raises:
        InputError: the folder does not exist or is not writable, or ``path`` is a folder (field ``output``).
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot write {target}: folder {folder} does not exist", field="output",
                         fix="create the folder or choose another path")
    if target.is_dir():
        raise InputError(f"cannot write {target}: it is a folder", field="output", fix="give a file name")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {target}: folder {folder} is not writable", field="output",
                         fix="choose a writable path")
    return folder


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and an atomic rename.

    Raises:
        InputError: the folder does not exist or is not writable.
    """
    target = Path(path)
    folder = writable_folder(target)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        # mkstemp creates the file private (0600); give it the mode an ordinary write would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise InputError(
            f"cannot write {target}: {exc.strerror}", field="output", fix="choose a writable path"
        ) from None
    return target
