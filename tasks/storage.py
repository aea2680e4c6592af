"""Keys in a Prefect storage block: how weights go out to actors and batches come back.

Work-pool actors run in other processes, containers or regions, so nothing is passed by
reference: the backend writes the round's weights once and one small job envelope per actor,
the actor writes its batch, the backend reads it back. The block is configured in Prefect
(LocalFileSystem here, AzureBlobStorageContainer for ACI) and named by its slug.

This module moves bytes only; what the bytes mean, and how they are decoded without running
code, is tasks/workpool/protocol.py's business (models/run/wire.py: no pickle).

The generic block interface has only read_path and write_path. LocalFileSystem gets a fast
path (atomic rename on write, so a poller never reads half a file; deletes) because actors on a
process pool poll it many times a second.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from models.errors import ConfigError

if TYPE_CHECKING:
    from prefect.filesystems import LocalFileSystem

LOCAL_FS = "local-file-system"


class PathBlock(Protocol):
    """What the backend needs of a storage block: Prefect's generic file-system interface."""

    def read_path(self, path: str) -> bytes: ...

    def write_path(self, path: str, content: bytes) -> object: ...


class BlockStore:
    """put/get/delete bytes under string keys in a Prefect storage block."""

    def __init__(self, block: PathBlock, slug: str = ""):
        self.block = block
        self.slug = slug
        self.root: Path | None = None
        if type(block).__name__ == "LocalFileSystem":
            self.root = Path(getattr(block, "basepath", None) or ".").expanduser().resolve()

    @classmethod
    def load(cls, slug: str, create: bool = False) -> BlockStore:
        """Load the block `slug` ('block-type/name'); create a local one if asked and missing."""
        from prefect.blocks.core import Block

        try:
            return cls(Block.load(slug), slug)
        except (ValueError, KeyError) as exc:  # no such block, or no such block type
            if not (create and slug.startswith(f"{LOCAL_FS}/")):
                raise ConfigError(f"storage block {slug!r} not found: create it (deployments/README.md)"
                                  f" or pass another storage_block ({exc})") from None
        return cls(create_local_block(slug.split("/", 1)[1]), slug)

    # -- bytes ---------------------------------------------------------------------------
    def put(self, key: str, data: bytes) -> None:
        if self.root is not None:
            path = self.root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # readers see the whole file or none of it
            return
        self.block.write_path(key, data)

    def get(self, key: str) -> bytes | None:
        """The bytes at key, or None if nothing is there (yet)."""
        if self.root is not None:
            try:
                return (self.root / key).read_bytes()
            except FileNotFoundError:
                return None
        try:
            return self.block.read_path(key)
        except Exception as exc:  # each block raises its own 'not found'
            if _is_not_found(exc):
                return None
            raise

    def delete(self, *keys: str) -> None:
        """Best effort: local files are removed; on blob stores a lifecycle rule expires them."""
        if self.root is None:
            return
        for key in keys:
            with contextlib.suppress(OSError):
                (self.root / key).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> None:
        if self.root is None:
            return
        import shutil

        shutil.rmtree(self.root / prefix, ignore_errors=True)


def _is_not_found(exc: Exception) -> bool:
    name = type(exc).__name__
    return (isinstance(exc, FileNotFoundError) or "NotFound" in name
            or "does not exist" in str(exc) or "BlobNotFound" in str(exc))


def create_local_block(name: str, basepath: str | Path | None = None) -> LocalFileSystem:
    """Save a LocalFileSystem block `name` under PREFECT_HOME/minionsrl-storage (or basepath)."""
    from prefect.filesystems import LocalFileSystem
    from prefect.settings import PREFECT_HOME

    path = Path(basepath or Path(PREFECT_HOME.value()) / "minionsrl-storage").expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    block = LocalFileSystem(basepath=str(path))
    block.save(name, overwrite=True)
    return block
