"""Files written atomically, and arrays stored with their SHA-256: the one module for both.

Data files (taco_ref.data), models (taco_ref.model), checkpoints (taco_ref.train) and results
(taco_ref.app.experiment) are all written through :func:`atomic_write`: a crash at any moment
leaves the old file or the new one, never a truncated mix. Models and checkpoints keep their
arrays as an ``.npz`` blob whose SHA-256 is recorded in a JSON file beside it
(:func:`npz_blob`, :func:`read_npz`), so a replaced, truncated or edited array file is refused.
Nothing here unpickles.
"""
import hashlib
import io
import os
import tempfile
import zipfile
import zlib

import numpy as np

TEMP_PREFIX = ".tmp-"
"""Temporary files are named TEMP_PREFIX + random + the target's name, in the target's folder."""


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path, write):
    """Call write(file_object) on a temporary file beside path, then rename it over path.

    The new file gets the permissions an ordinary open() would give (0666 less the umask).
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=TEMP_PREFIX, suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_bytes(path, blob):
    """atomic_write of a bytes object."""
    atomic_write(path, lambda f: f.write(blob))


def npz_blob(arrays):
    """(bytes of an uncompressed .npz of arrays, its SHA-256 hex digest)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    blob = buf.getvalue()
    return blob, hashlib.sha256(blob).hexdigest()


def read_npz(path, sha256, error=ValueError, recorded_in="its metadata"):
    """{name: array} of the .npz at path, after checking its SHA-256 against sha256.

    Raises error(message naming path) if the file is missing, does not match or is unreadable.
    """
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror or err})") from None
    if hashlib.sha256(blob).hexdigest() != sha256:
        raise error(f"{path}: contents do not match the SHA-256 recorded in {recorded_in} "
                    "(truncated, replaced or edited)")
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise error(f"{path}: unreadable arrays ({err})") from None
