"""The entries of the on-disk kernel cache, each checked before it is used, so the cache heals.

An entry is a header, then the compiled bytes (the payload)::

    MAGIC (8 bytes, the format version in its last byte) | key (32 bytes: the sha256 the entry
    is stored under, its file name) | payload length (8 bytes) | sha256 of the payload (32 bytes)

A file that is truncated, has a flipped bit, was stored under another key (swapped or copied)
or is not an entry at all (foreign) is deleted with one ``KernelCacheWarning`` naming it, and
its kernel is compiled again: the caller sees a miss, never bad bytes. Each format version
has a folder of its own, so that fusegrad versions sharing a cache never meet each other's
entries (``kernels/`` holds the headerless entries of versions before this format: delete it).
"""

from __future__ import annotations

import hashlib
import os
import struct
import warnings

from fusegrad.helpers import cache_dir, write_atomically

#: The first bytes of every entry; the last one is the format version.
MAGIC = b"FGKERN\x00\x01"
#: The folder of the entries, inside ``helpers.cache_dir()``: named after the format version.
FOLDER = "kernels-v1"
#: magic, key, payload length, payload sha256
HEADER = struct.Struct("<8s32sQ32s")


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
