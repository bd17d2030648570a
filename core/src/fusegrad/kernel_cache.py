"""The entries of the on-disk kernel cache, each checked before it is used, so the cache heals.

An entry is a header, then the compiled bytes (the payload)::

    MAGIC (8 bytes, the format version in its last byte) | key (32 bytes: the sha256 the entry
    is stored under, its file name) | payload length (8 bytes) | sha256 of the payload (32 bytes)

A file that is truncated, has a flipped bit, was stored under another key (swapped or copied)
or is not an entry at all (foreign) is deleted with one ``KernelCacheWarning`` naming it, and
its kernel is compiled again: the caller sees a miss, never bad bytes. Each format version
has a folder of its own, so that fusegrad versions sharing a cache never meet each other's
entries (``kernels/`` holds the headerless entries of versions before this format: delete it).

``usage()`` and ``clear()`` list and delete what fusegrad keeps on disk (``fusegrad cache info``
and ``fusegrad cache clear``): these folders, and BEAM's choices (``BEAM_FOLDER``), only.
"""

from __future__ import annotations

import hashlib
import os
import struct
import warnings
from dataclasses import dataclass, field

from fusegrad.helpers import cache_dir, write_atomically

#: The first bytes of every entry; the last one is the format version.
MAGIC = b"FGKERN\x00\x01"
#: The folder of the entries, inside ``helpers.cache_dir()``: named after the format version.
FOLDER = "kernels-v1"
#: The folder of BEAM search's choices (``codegen/search.py``), one JSON file per kernel.
BEAM_FOLDER = "beam"
#: magic, key, payload length, payload sha256
HEADER = struct.Struct("<8s32sQ32s")
#: What each folder of ``cache_dir()`` that fusegrad fills holds; nothing else there is touched
#: (downloaded datasets may share the folder).
FOLDERS = {
    FOLDER: "compiled kernels",
    "kernels": "compiled kernels of fusegrad versions before the checked format",
    BEAM_FOLDER: "BEAM search's choices",
}
#: The first bytes of a payload, and the kind of binary they start (the backend that made it).
PAYLOAD_KINDS = (
    (b"fusegrad shared library", "CPU shared libraries"),
    (b"\x7fELF", "ELF objects (CPU libraries, CUDA cubins)"),
    (b"poclbin", "OpenCL binaries (PoCL)"),
    (b"//", "source text (PTX, WGSL)"),
)


class KernelCacheWarning(UserWarning):
    """A kernel cache entry was bad (truncated, corrupted, swapped or foreign) and was deleted."""


def entry_path(key: str) -> str:
    """The file of the entry stored under ``key`` (a sha256 in hex)."""
    return os.path.join(cache_dir(), FOLDER, key)


def pack(key: str, payload: bytes) -> bytes:
    """The bytes of the entry holding ``payload`` under ``key``."""
    digest = hashlib.sha256(payload).digest()
    return HEADER.pack(MAGIC, bytes.fromhex(key), len(payload), digest) + payload


def unpack(key: str, entry: bytes) -> tuple[bytes | None, str]:
    """The payload of ``entry`` if it is whole and stored under ``key``; else None and what is
    wrong with it."""
    if len(entry) < HEADER.size or not entry.startswith(MAGIC):
        return None, "is not a fusegrad kernel cache entry (a foreign or truncated file)"
    _, stored_key, length, digest = HEADER.unpack_from(entry)
    if stored_key != bytes.fromhex(key):
        return None, f"holds the entry of {stored_key.hex()} (a swapped or copied file)"
    payload = entry[HEADER.size :]
    if len(payload) != length:
        return None, f"is truncated or extended ({len(payload)} bytes where {length} were stored)"
    if hashlib.sha256(payload).digest() != digest:
        return None, "is corrupted (its checksum does not match its contents)"
    return payload, ""


def read_entry(key: str) -> bytes | None:
    """The payload stored under ``key``, or None: absent, unreadable, or bad (then deleted)."""
    path = entry_path(key)
    try:
        with open(path, "rb") as f:
            entry = f.read()
    except OSError:
        return None
    payload, problem = unpack(key, entry)
    if payload is None:
        _discard(path)
        warnings.warn(
            f"kernel cache entry {key} {problem}; it was deleted and the kernel will be "
            "compiled again",
            KernelCacheWarning,
            stacklevel=2,
        )
    return payload


def write_entry(key: str, payload: bytes) -> None:
    """Store ``payload`` under ``key``, atomically (a reader sees the whole entry or none)."""
    write_atomically(entry_path(key), pack(key, payload))


def evict(key: str, why: str) -> None:
    """Delete the entry stored under ``key`` that checked out but could not be used (its library
    did not load), with one warning, so that the next compile stores a good one."""
    _discard(entry_path(key))
    warnings.warn(
        f"kernel cache entry {key} could not be loaded ({why}); it was deleted and the kernel "
        "is compiled again",
        KernelCacheWarning,
        stacklevel=3,
    )


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:  # gone already, or a read-only cache: it is a miss either way
        pass


@dataclass
class FolderUsage:
    """The files of one cache folder: how many, their bytes, and both per kind of content."""

    name: str
    holds: str
    path: str
    files: int = 0
    nbytes: int = 0
    kinds: dict[str, list[int]] = field(default_factory=dict)  # kind -> [files, bytes]


def usage() -> list[FolderUsage]:
    """What each of ``FOLDERS`` holds now (those that exist), entries sorted by payload kind."""
    found = []
    for name, holds, path in _folders():
        folder = FolderUsage(name, holds, path)
        with os.scandir(path) as entries:
            for entry in entries:
                if not entry.is_file(follow_symlinks=False) or not _ours(entry.name):
                    continue
                size = entry.stat(follow_symlinks=False).st_size
                kind = _kind(entry.path) if name == FOLDER else holds
                count = folder.kinds.setdefault(kind, [0, 0])
                count[0], count[1] = count[0] + 1, count[1] + size
                folder.files, folder.nbytes = folder.files + 1, folder.nbytes + size
        found.append(folder)
    return found


def _folders() -> list[tuple[str, str, str]]:
    """``(name, holds, path)`` of each of ``FOLDERS`` that exists (a real folder, not a link)."""
    found = []
    for name, holds in FOLDERS.items():
        path = os.path.join(cache_dir(), name)
        if os.path.isdir(path) and not os.path.islink(path):
            found.append((name, holds, path))
    return found


def _ours(name: str) -> bool:
    """Whether a file name is one fusegrad writes: a sha256 in hex (``.json`` for BEAM's
    choices), or a temporary file of ``write_atomically``."""
    key = name.removesuffix(".json")
    return name.startswith(".tmp-") or (len(key) == 64 and all(c in HEX for c in key))


HEX = frozenset("0123456789abcdef")


def _kind(path: str) -> str:
    """The kind of an entry, read from the first bytes of its payload."""
    if os.path.basename(path).startswith(".tmp-"):
        return "unfinished writes"
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER.size + 32)
    except OSError:
        return "unreadable"
    if not head.startswith(MAGIC):
        return "not entries (foreign files)"
    payload = head[HEADER.size :]
    return next((kind for magic, kind in PAYLOAD_KINDS if payload.startswith(magic)), "other")


def clear() -> tuple[int, int]:
    """Delete the files fusegrad wrote in ``FOLDERS``, then each folder left empty; nothing
    else under ``cache_dir()`` (a folder of the same name holding other files keeps them).
    Returns the files and bytes removed.

    Safe while other processes use the cache: a reader of a deleted entry sees a miss and
    compiles again, and a writer's atomic rename recreates its entry whole."""
    files = nbytes = 0
    for _, _, path in _folders():  # (not ``usage()``: that reads every entry's header)
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False) and _ours(entry.name):
                    size = entry.stat(follow_symlinks=False).st_size
                    try:
                        os.unlink(entry.path)
                    except FileNotFoundError:  # another process cleared it first
                        continue
                    files, nbytes = files + 1, nbytes + size
        try:
            os.rmdir(path)
        except OSError:  # not empty: files that are not ours, or an entry written meanwhile
            pass
    return files, nbytes
