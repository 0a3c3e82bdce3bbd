"""Corpora in object storage: a root such as `s3://bucket/corpora/` holds one corpus per prefix, as a local root
holds one per folder.

A corpus is mirrored to a local folder before it is read, so its files are read with their formats (PDF, Office,
JSON, ...) exactly as a local folder's are, through one code path. Only what changed is downloaded: an object whose
ETag is the one the mirror recorded is not fetched again, and a file the prefix no longer holds leaves the mirror.
obstore talks to the store (S3 and its kin, Google Cloud Storage, Azure Blob); credentials, region and endpoint
come from the environment as it reads them (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, GOOGLE_SERVICE_ACCOUNT,
AZURE_STORAGE_ACCOUNT_NAME, ...), never from our settings.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from filelock import FileLock

SCHEMES = ("s3://", "s3a://", "gs://", "gcs://", "az://", "azure://", "abfs://", "abfss://")
MANIFEST = ".mirror.json"  # hidden: the corpus reader skips it


def is_object_storage(root: str) -> bool:
    return root.startswith(SCHEMES)


@dataclass(frozen=True)
class Mirrored:
    """What one mirroring of a corpus did."""

    downloaded: int
    unchanged: int
    removed: int

    @property
    def listed(self) -> int:
        return self.downloaded + self.unchanged


def _store(root: str):
    from obstore.store import from_url  # only a deployment with object storage pays for the import

    return from_url(root.rstrip("/") + "/")


@contextmanager
def _reading(where: str):
    """The store's error as one line that names the prefix (obstore's own holds the request, never a credential)."""
    from obstore.exceptions import BaseError

    try:
        yield
    except BaseError as problem:
        first = str(problem).strip().splitlines()[0] if str(problem).strip() else type(problem).__name__
        raise OSError(f"could not read {where}: {first}") from None


def corpus_names(root: str) -> list[str]:
    """The prefixes directly under the root: one corpus each."""
    with _reading(root):
        prefixes = _store(root).list_with_delimiter()["common_prefixes"]
    return sorted(name.rstrip("/").rsplit("/", 1)[-1] for name in prefixes)


def mirror(root: str, corpus: str, folder: Path) -> Mirrored:
    """Bring `folder` up to date with the corpus's prefix under `root`: fetch the objects that are new or whose ETag
    changed, delete the files whose object is gone. Concurrent mirrors of one folder (a sensor and a run) take turns."""
    import obstore

    store = _store(root)
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder.with_name(folder.name + ".lock"))), _reading(f"{root.rstrip('/')}/{corpus}/"):
        manifest_path = folder / MANIFEST
        recorded = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        listed = {}
        for batch in store.list(f"{corpus}/"):
            for meta in batch:
                relative = meta["path"][len(corpus) + 1 :]
                if relative and not relative.endswith("/"):  # a console's "folder" marker holds nothing
                    listed[_safe(relative, root, corpus)] = meta["e_tag"] or f"{meta['size']}:{meta['last_modified']}"
        fetched = 0
        for relative, tag in sorted(listed.items()):
            target = folder / relative
            if recorded.get(relative) == tag and target.is_file():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.partial")
            with open(partial, "wb") as out:
                for chunk in obstore.get(store, f"{corpus}/{relative}"):  # streamed: a large file is never held whole
                    out.write(chunk)
            os.replace(partial, target)
            recorded[relative] = tag
            fetched += 1
        gone = [relative for relative in recorded if relative not in listed]
        for relative in gone:
            (folder / relative).unlink(missing_ok=True)
            del recorded[relative]
        staged = manifest_path.with_name(MANIFEST + ".partial")
        staged.write_text(json.dumps(recorded, sort_keys=True))
        os.replace(staged, manifest_path)
    return Mirrored(downloaded=fetched, unchanged=len(listed) - fetched, removed=len(gone))


def _safe(relative: str, root: str, corpus: str) -> str:
    """An object's path inside its corpus, refused if it would leave the mirror (`..`) or is absolute."""
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(f"object {root.rstrip('/')}/{corpus}/{relative} has a path that leaves its corpus")
    return path.as_posix()
