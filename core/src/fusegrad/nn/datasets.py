"""Datasets as Tensors. ``mnist()`` reads the four IDX files from a folder, or downloads them
once into a cache, checking every file against the published checksums.

Where the files are looked for, first match wins: the ``folder`` argument; the folder named by
the ``FUSEGRAD_DATA`` environment variable (or its ``mnist/`` subfolder); the cache
``$XDG_CACHE_HOME/fusegrad/datasets/mnist`` (default ``~/.cache/...``), downloaded into if
needed. Only the cache is ever downloaded into.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import struct
import tempfile
import urllib.error
import urllib.request
import warnings
import zlib
from pathlib import Path
from typing import IO, Any

import numpy as np

from fusegrad.errors import DatasetNotFound, DownloadError, FileFormatError
from fusegrad.helpers import prod
from fusegrad.progress import progress
from fusegrad.tensor import Tensor

#: The four MNIST files, in the order ``mnist()`` returns them.
MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

#: A public mirror serving the original .gz files.
MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"

#: md5 of the original .gz files, as published with the dataset (checked on download).
MNIST_GZ_MD5 = {
    "train-images-idx3-ubyte": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte": "ec29112dd5afa0611ce80d1b7f02629c",
}

#: sha256 of the decompressed files (checked on every load: local copies may be re-gzipped).
MNIST_SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}

#: IDX element type codes (the magic number's third byte) and their big-endian numpy types.
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def mnist(
    folder: str | os.PathLike | None = None, device: str | None = None, allow_partial: bool = False
) -> tuple[Tensor | None, ...]:
    """MNIST as ``(X_train, Y_train, X_test, Y_test)``, as tinygrad's ``nn.datasets.mnist``.

    Images are uint8 of shape ``(N, 1, 28, 28)``, labels uint8 of shape ``(N,)``. With
    ``allow_partial=True`` a local folder may lack some files: those parts are None (with a
    warning) instead of a DatasetNotFound error.
    """
    where, cached = mnist_folder(folder)
    found = {name: _find(where, name) for name in MNIST_FILES}
    missing = [name for name, path in found.items() if path is None]
    if missing and cached:
        for name in missing:
            found[name] = download(
                f"{MNIST_URL}{name}.gz", where / f"{name}.gz", MNIST_GZ_MD5[name]
            )
    elif missing and not allow_partial:
        raise DatasetNotFound(
            f"MNIST files missing from {where}: {', '.join(missing)} (.gz or uncompressed); "
            "copy them there, or pass allow_partial=True to get None for the missing parts"
        )
    elif missing:
        warnings.warn(
            f"MNIST: {', '.join(missing)} not in {where}; returning None for them", stacklevel=2
        )
    arrays = {name: read_idx(path) for name, path in found.items() if path is not None}
    for split in ("train", "t10k"):
        images, labels = (
            arrays.get(f"{split}-images-idx3-ubyte"),
            arrays.get(f"{split}-labels-idx1-ubyte"),
        )
        if images is not None and labels is not None and len(images) != len(labels):
            raise FileFormatError(
                f"MNIST {split} in {where}: {len(images)} images but {len(labels)} labels"
            )
    return tuple(
        None
        if (a := arrays.get(name)) is None
        else Tensor(a.reshape(-1, 1, 28, 28) if "images" in name else a, device=device)
        for name in MNIST_FILES
    )


def cache_dir() -> Path:
    """Where downloaded datasets are kept: ``$XDG_CACHE_HOME/fusegrad/datasets``."""
    return (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fusegrad" / "datasets"
    )


def mnist_folder(folder: str | os.PathLike | None) -> tuple[Path, bool]:
    """The folder to read MNIST from, and whether it is the cache (the only one downloaded into)."""
    if folder is not None:
        return Path(folder), False
    if env := os.environ.get("FUSEGRAD_DATA"):
        root = Path(env)
        return (root / "mnist" if (root / "mnist").is_dir() else root), False
    return cache_dir() / "mnist", True


def _find(folder: Path, name: str) -> Path | None:
    """``name.gz`` or ``name`` in ``folder``, whichever exists first."""
    for candidate in (folder / f"{name}.gz", folder / name):
        if candidate.is_file():
            return candidate
    return None


# ---- IDX files -----------------------------------------------------------------------------------


def read_idx(path: Path, sha256: str | None = None) -> np.ndarray:
    """The array in an IDX file (gzipped or not), checked against the decompressed ``sha256``.

    Without ``sha256``, MNIST files are checked against ``MNIST_SHA256`` by their name.
    """
    name = path.name.removesuffix(".gz")
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise FileFormatError(
            f"{path} is not a valid gzip file ({e}); delete or replace it"
        ) from None
    expected = sha256 or MNIST_SHA256.get(name)
    if expected is not None and (digest := hashlib.sha256(data).hexdigest()) != expected:
        raise FileFormatError(
            f"{path}: decompressed content has sha256 {digest}, expected "
            f"{expected}; the file is corrupted or not {name}: delete or replace it"
        )
    return parse_idx(data, str(path))


def parse_idx(data: bytes, source: str = "IDX data") -> np.ndarray:
    """Decode IDX bytes: magic ``00 00 <type> <ndim>``, big-endian uint32 sizes, then the values."""
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] not in IDX_TYPES:
        raise FileFormatError(
            f"{source}: bad IDX magic {data[:4].hex()!r}, expected 0000 then a "
            f"type code ({', '.join(f'{c:02x}' for c in IDX_TYPES)}) and ndim"
        )
    ndim, start = data[3], 4 + 4 * data[3]
    if len(data) < start:
        raise FileFormatError(f"{source}: truncated IDX header ({len(data)} bytes, needs {start})")
    shape = struct.unpack(f">{ndim}I", data[4:start])
    dtype = np.dtype(IDX_TYPES[data[2]])
    needed = prod(shape) * dtype.itemsize
    if len(data) - start != needed:
        problem = "truncated" if len(data) - start < needed else "longer than its header says"
        raise FileFormatError(
            f"{source}: IDX data is {problem}: {len(data) - start} bytes for "
            f"shape {shape}, expected {needed}"
        )
    array = np.frombuffer(data, dtype=dtype, count=prod(shape), offset=start).reshape(shape)
    return array.astype(dtype.newbyteorder("="))


# ---- downloads -----------------------------------------------------------------------------------


def download(url: str, dest: Path, md5: str | None = None) -> Path:
    """Download ``url`` to ``dest``, showing progress on stderr; ``dest`` appears only if whole.

    The bytes go to a temporary file beside ``dest``, renamed once the length and ``md5``
    match, so an interrupted or corrupted download is never taken for a good one.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            digest = _fetch(url, f, dest.name)
        if md5 is not None and digest != md5:
            raise DownloadError(
                f"download of {url} has md5 {digest}, expected {md5}: the file is "
                "corrupted or was changed; it was not kept, try again later"
            )
        os.replace(tmp, dest)
    except BaseException:
        os.unlink(tmp)
        raise
    return dest


def _fetch(url: str, out: IO[bytes], label: str) -> str:
    """Stream ``url`` into ``out``; return the md5 of what was received."""
    digest, done, total = hashlib.md5(usedforsecurity=False), 0, 0
    try:
        with (
            urllib.request.urlopen(url, timeout=60) as response,
            progress(total=_length(response), desc=label, unit="B", scale=True) as bar,
        ):
            total = bar.total or 0
            while chunk := response.read(1 << 16):
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                bar.update(len(chunk))
    except http.client.IncompleteRead:
        pass  # the server closed early: reported below as a short download
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        raise DownloadError(
            f"could not download {url}: {e}; check the network, or put the files "
            "in a folder and pass it as folder= (or set FUSEGRAD_DATA)"
        ) from None
    if total and done != total:
        raise DownloadError(
            f"download of {url} stopped after {done} of {total} bytes; it was not kept, try again"
        )
    return digest.hexdigest()


def _length(response: Any) -> int | None:
    """The length the server announced, or None (the bar then counts without a total)."""
    return int(response.headers.get("Content-Length") or 0) or None
