"""Files written atomically, and arrays stored with their SHA-256: the one module for both.

Data files (taco_ref.data), models (taco_ref.model), checkpoints (taco_ref.train) and results
(taco_app.grid.cell) are all written through :func:`atomic_write`: a crash at any moment
leaves the old file or the new one, never a truncated mix. Models and checkpoints keep their
arrays as an ``.npz`` blob whose SHA-256 is recorded in a JSON file beside it
(:func:`npz_blob`, :func:`read_npz`), so a replaced, truncated or edited array file is refused.
Nothing here unpickles.
"""
import errno
import hashlib
import io
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import zipfile
import zlib

import numpy as np

MAX_JSON_BYTES = 64 * 2**20
"""Largest JSON metadata file read (model.json, checkpoint.json, results): 64 MiB."""
MAX_ARRAY_BYTES = 16 * 2**30
"""Largest array file read (data, weights, checkpoints): 16 GiB, also the bound on the
uncompressed arrays an .npz may claim."""

TEMP_PREFIX = ".tmp-"
"""Temporary files are named TEMP_PREFIX + random + the target's name, in the target's folder."""


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def ordinary_mode(directory=False):
    """The permissions an ordinary open() (0666) or mkdir() (0777) gives, less the umask:
    for files made through mkstemp / mkdtemp (0600 / 0700) before they take their final name."""
    return (0o777 if directory else 0o666) & ~_umask()


def check_room(path, nbytes):
    """OSError (ENOSPC or EFBIG, naming path) when a file of about nbytes cannot be written at
    path: fewer bytes free on its file system, or a file size limit (ulimit -f) below it. For
    writers that cannot fail cleanly half-way: HDF5 crashed the interpreter (SIGSEGV) after a
    write failed, leaving its temporary file behind."""
    import errno
    import resource
    directory = os.path.dirname(os.path.abspath(path))
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    if nbytes > free:
        raise OSError(errno.ENOSPC, f"about {nbytes / 2**20:.1f} MiB needed, {free / 2**20:.1f} MiB free "
                                    "on its disk", os.fspath(path))
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and nbytes > limit:
        raise OSError(errno.EFBIG, f"about {nbytes / 2**20:.1f} MiB needed, above the file size limit of "
                                   f"{limit / 2**20:.1f} MiB (ulimit -f)", os.fspath(path))


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
        os.chmod(tmp, ordinary_mode())
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


def regular_file(path, max_bytes, error=ValueError):
    """The size of path after checking that it is a regular file (not a FIFO, device or
    directory, which could hang or never end) of at most max_bytes; error(message) otherwise."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror or err})") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: not a regular file")
    if st.st_size > max_bytes:
        raise error(f"{path}: {st.st_size} bytes, more than the {max_bytes} this reader accepts")
    return st.st_size


def read_bytes(path, max_bytes, error=ValueError):
    """The contents of the regular file path, at most max_bytes (regular_file), read once.

    The buffer is the file's own size (as fstat reports it for the open file) plus one byte,
    never max_bytes: Python allocates the whole buffer a read asks for, and a 16 GiB request
    fails under an address-space limit or on a computer with less memory, whatever the file's
    size. A file that grows or shrinks while it is read is refused.
    """
    regular_file(path, max_bytes, error)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size        # the file opened, not the name stat'ed
            if size > max_bytes:
                raise error(f"{path}: {size} bytes, more than the {max_bytes} this reader accepts")
            blob = f.read(size + 1)
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror or err})") from None
    if len(blob) != size:
        raise error(f"{path}: changed while it was read ({size} bytes, then {len(blob)}{'+' * (len(blob) > size)})")
    return blob


def read_json(path, error=ValueError, max_bytes=MAX_JSON_BYTES):
    """A JSON object read from path: bounded size, UTF-8, nesting that cannot exhaust the stack,
    and an object (dict) at the top; error(message naming path) otherwise."""
    blob = read_bytes(path, max_bytes, error)
    try:
        value = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise error(f"{path}: not valid JSON ({err})") from None
    except RecursionError:
        raise error(f"{path}: JSON nested too deeply") from None
    if not isinstance(value, dict):
        raise error(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def load_npz(source, path, error=ValueError, what="array file", max_bytes=MAX_ARRAY_BYTES):
    """{name: array} of an .npz (source: bytes or a seekable binary file; path and what name
    it in messages: "PATH: not a readable WHAT (why)").

    Never unpickles; before any array is allocated every member's header is read and its
    claimed size (shape x item size) checked against the member's stored size and max_bytes, so
    a forged header cannot ask for terabytes. An .npy or any other file gives error(message).
    """
    stream = io.BytesIO(source) if isinstance(source, bytes) else source

    def bad(why):
        return error(f"{path}: not a readable {what} ({why})")
    try:
        if not zipfile.is_zipfile(stream):
            raise bad("not an .npz archive, a zip of .npy arrays")
        stream.seek(0)
        with zipfile.ZipFile(stream) as zf:
            total = 0
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    raise bad(f"member {info.filename!r} is not an .npy array")
                with zf.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read_header(member)
                if dtype.hasobject:
                    raise bad(f"{info.filename} holds Python objects, which are never unpickled")
                claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
                total += claimed
                if claimed > info.file_size or total > max_bytes:
                    raise bad(f"{info.filename} claims {claimed} bytes of data but holds "
                              f"{info.file_size}; limit {max_bytes}")
        stream.seek(0)
        with np.load(stream, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        if isinstance(err, error):
            raise
        raise bad(err) from None


def npy_offset(path, dtype, shape, error=ValueError, max_bytes=MAX_ARRAY_BYTES):
    """The byte offset of the data in the .npy file at path, after checking that it is a
    regular file whose header declares exactly dtype and shape (C order, no Python objects:
    never unpickled) and whose size is the header plus that many bytes, so that no read can run
    past its end; error("PATH: ...") otherwise. Nothing but the header is read."""
    size = regular_file(path, max_bytes, error)
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            got_shape, fortran, got_dtype = read_header(f)
            offset = f.tell()
    except (OSError, ValueError, EOFError) as err:
        raise error(f"{path}: not a readable .npy array ({' '.join(str(err).split())})") from None
    if got_dtype.hasobject or got_dtype != np.dtype(dtype) or fortran or tuple(got_shape) != tuple(shape):
        raise error(f"{path}: expected a {np.dtype(dtype)} array of shape {tuple(shape)} in C order, "
                    f"the header declares {got_dtype} {tuple(got_shape)}{' (Fortran order)' if fortran else ''}")
    need = offset + int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
    if size != need:
        raise error(f"{path}: {size} bytes, expected {need} for its header and a {np.dtype(dtype)} "
                    f"array of shape {tuple(shape)} (truncated or padded)")
    return offset


def read_npy_rows(path, offset, row_shape, dtype, start, count, error=ValueError):
    """Rows start .. start + count of the .npy file at path whose data begins at offset (from
    npy_offset, which checked its size), as a new array (count,) + row_shape: one positioned
    read, so the pages read stay in the page cache and out of this process's resident memory
    (a memory map would count them there)."""
    row_bytes = int(np.prod(row_shape, dtype=object)) * np.dtype(dtype).itemsize
    out = np.empty((count,) + tuple(row_shape), dtype)
    try:
        with open(path, "rb", buffering=0) as f:
            got = os.preadv(f.fileno(), [memoryview(out).cast("B")], offset + start * row_bytes)
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror or err})") from None
    if got != out.nbytes:
        raise error(f"{path}: ended after {got} of {out.nbytes} bytes (changed since it was opened)")
    return out


def open_npz(path, error=ValueError, what="array file"):
    """{name: array} of the .npz file at path, read from the open file without loading it whole:
    a regular file of at most MAX_ARRAY_BYTES (regular_file), then load_npz; error(message
    naming path) otherwise, an OSError included."""
    regular_file(path, MAX_ARRAY_BYTES, error)
    try:
        with open(path, "rb") as f:
            return load_npz(f, path, error, what)
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror or err})") from None


def read_npz(path, sha256, error=ValueError, recorded_in="its metadata", what="array file"):
    """{name: array} of the .npz at path, after checking its SHA-256 against sha256.

    Raises error(message naming path) if the file is missing, not a regular file, too large,
    does not match or is unreadable.
    """
    blob = read_bytes(path, MAX_ARRAY_BYTES, error)
    if hashlib.sha256(blob).hexdigest() != sha256:
        raise error(f"{path}: contents do not match the SHA-256 recorded in {recorded_in} "
                    "(truncated, replaced or edited)")
    return load_npz(blob, path, error, what)


def owned_prefix():
    """TEMP_PREFIX with this process's id: the prefix of temporaries that
    remove_dead_temporaries may delete once this process is gone."""
    return f"{TEMP_PREFIX}{os.getpid()}-"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # another user's process
        return True
    return True


def remove_dead_temporaries(directory, name):
    """Delete the temporaries for name (files or folders, owned_prefix + anything + name) in
    directory whose process has exited: what a writer killed mid-way (SIGKILL, power loss)
    left; returns how many. A living process's are spared."""
    removed = 0
    try:
        entries = os.listdir(directory)
    except OSError:
        return 0
    for entry in entries:
        m = re.match(re.escape(TEMP_PREFIX) + r"(\d+)-", entry)
        if m is None or not entry.endswith(name) or _alive(int(m.group(1))):
            continue
        full = os.path.join(directory, entry)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full)
            else:
                os.unlink(full)
            removed += 1
        except OSError:
            pass
    return removed


def exchange(a, b):
    """Swap the paths a and b (both existing) in one step: at every moment each name holds
    one of the two whole objects (Linux renameat2 RENAME_EXCHANGE). Returns False where the
    system has no such call (the caller then renames twice)."""
    import ctypes
    import ctypes.util
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL):          # kernel or file system without it
            return False
        raise OSError(err, os.strerror(err), os.fspath(b))
    return True


def remove_stale_temporaries(directory, older_than=3600.0):
    """Delete TEMP_PREFIX files in directory left by a killed writer (older than older_than
    seconds, so that a concurrent writer's file is spared); returns how many."""
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    now = time.time()
    for name in names:
        full = os.path.join(directory, name)
        if name.startswith(TEMP_PREFIX):
            try:
                if os.path.isfile(full) and now - os.path.getmtime(full) > older_than:
                    os.unlink(full)
                    removed += 1
            except OSError:
                pass
    return removed
