"""The data side of the Hub stand-in: files, their hashes, and the JSON the Hub API returns.

Each file is classified like a real Hub repository whose ``.gitattributes`` tracks weights
with Git LFS: ``*.gguf``, ``*.bin``, ``*.safetensors`` ... are LFS files (their ETag is the
sha256 of the content and the resolve endpoint redirects to the CDN); anything else is a
plain git blob (its ETag is the git blob sha1 and it is served by the resolve endpoint
itself). Every repository also gets the ``.gitattributes`` file a real one has.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

LFS_SUFFIXES = (".gguf", ".bin", ".safetensors", ".pt", ".pth", ".onnx", ".ckpt", ".h5")
GITATTRIBUTES = b"".join(
    f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n".encode() for suffix in LFS_SUFFIXES
)
DATE = "2026-01-01T00:00:00.000Z"


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _hash_source(source: bytes | Path) -> tuple[int, str]:
    if isinstance(source, bytes):
        return len(source), hashlib.sha256(source).hexdigest()
    digest = hashlib.sha256()
    size = 0
    with open(source, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


@dataclass
class StubFile:
    """One file of a stand-in repository: where its bytes are and what the Hub says about them."""

    path: str
    source: bytes | Path
    size: int = 0
    sha256: str = ""
    lfs: bool = False
    git_oid: str = ""
    pointer_size: int = 0
    size_listed: bool = True
    """False: the listing names the file without its size (see ``HubStub.hide_size``)."""

    def __post_init__(self) -> None:
        self.size, self.sha256 = _hash_source(self.source)
        self.lfs = self.path.lower().endswith(LFS_SUFFIXES)
        if self.lfs:
            pointer = (
                "version https://git-lfs.github.com/spec/v1\n"
                f"oid sha256:{self.sha256}\nsize {self.size}\n"
            ).encode()
            self.git_oid = _git_blob_sha1(pointer)
            self.pointer_size = len(pointer)
        else:
            self.git_oid = _git_blob_sha1(self.read(0, self.size))

    @property
    def etag(self) -> str:
        """What the Hub puts in ETag / X-Linked-Etag: sha256 for LFS files, git sha1 otherwise."""
        return self.sha256 if self.lfs else self.git_oid

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the real content."""
        if isinstance(self.source, bytes):
            return self.source[start:end]
        with open(self.source, "rb") as handle:
            handle.seek(start)
            return handle.read(end - start)

    def sibling(self, with_metadata: bool) -> dict[str, object]:
        """An entry of ``siblings`` in ``/api/models/{repo}`` (``?blobs=true`` adds metadata)."""
        entry: dict[str, object] = {"rfilename": self.path}
        if with_metadata and not self.size_listed:
            entry["blobId"] = self.git_oid
        elif with_metadata:
            entry["size"] = self.size
            entry["blobId"] = self.git_oid
            if self.lfs:
                entry["lfs"] = {
                    "sha256": self.sha256,
                    "size": self.size,
                    "pointerSize": self.pointer_size,
                }
        return entry

    def tree_entry(self, commit: str, expand: bool) -> dict[str, object]:
        """An entry of ``/api/models/{repo}/tree/...`` or ``paths-info``."""
        entry: dict[str, object] = {
            "type": "file",
            "oid": self.git_oid,
            "size": self.size,
            "path": self.path,
        }
        if self.lfs:
            entry["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": self.pointer_size}
        if expand:
            entry["lastCommit"] = {"id": commit, "title": "Upload files", "date": DATE}
        return entry


@dataclass
class StubRepo:
    """A model repository: its files by path (``.gitattributes`` added like on the real Hub)."""

    repo_id: str
    files: dict[str, StubFile] = field(default_factory=dict)
    gated: bool = False
    private: bool = False

    @classmethod
    def build(
        cls, repo_id: str, contents: dict[str, bytes | Path], *, gated: bool, private: bool
    ) -> StubRepo:
        sources: dict[str, bytes | Path] = {".gitattributes": GITATTRIBUTES, **contents}
        files = {path: StubFile(path, source) for path, source in sorted(sources.items())}
        return cls(repo_id, files, gated=gated, private=private)

    def directories(self) -> set[str]:
        dirs = set()
        for path in self.files:
            parts = path.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:depth]))
        return dirs

    def info(self, commit: str, *, blobs: bool, expand: list[str] | None) -> dict[str, object]:
        """The body of ``GET /api/models/{repo}[/revision/{rev}]``."""
        author = self.repo_id.split("/")[0]
        full: dict[str, object] = {
            "_id": hashlib.sha1(self.repo_id.encode()).hexdigest()[:24],
            "id": self.repo_id,
            "modelId": self.repo_id,
            "author": author,
            "sha": commit,
            "lastModified": DATE,
            "createdAt": DATE,
            "private": self.private,
            "gated": "manual" if self.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "library_name": "gguf",
            "tags": ["gguf"],
            "siblings": [f.sibling(blobs) for f in self.files.values()],
            "usedStorage": sum(f.size for f in self.files.values()),
        }
        if expand:
            return {
                "_id": full["_id"],
                "id": self.repo_id,
                **{k: full[k] for k in expand if k in full},
            }
        return full

    def tree(
        self, commit: str, folder: str, *, recursive: bool, expand: bool
    ) -> list[dict[str, object]] | None:
        """The body of ``GET /api/models/{repo}/tree/{rev}[/{folder}]``; None if no such folder."""
        if folder and folder not in self.directories():
            return None
        prefix = f"{folder}/" if folder else ""
        entries: list[dict[str, object]] = []
        for directory in sorted(self.directories()):
            if directory.startswith(prefix) and (recursive or "/" not in directory[len(prefix) :]):
                entries.append(self._dir_entry(directory, commit, expand))
        for path, stub_file in self.files.items():
            if path.startswith(prefix) and (recursive or "/" not in path[len(prefix) :]):
                entries.append(stub_file.tree_entry(commit, expand))
        return entries

    def paths_info(self, commit: str, paths: list[str], *, expand: bool) -> list[dict[str, object]]:
        """The body of ``POST /api/models/{repo}/paths-info/{rev}``: the paths that exist."""
        out: list[dict[str, object]] = []
        dirs = self.directories()
        for path in paths:
            path = path.strip("/")
            if path in self.files:
                out.append(self.files[path].tree_entry(commit, expand))
            elif path in dirs:
                out.append(self._dir_entry(path, commit, expand))
        return out

    @staticmethod
    def _dir_entry(path: str, commit: str, expand: bool) -> dict[str, object]:
        entry: dict[str, object] = {
            "type": "directory",
            "oid": hashlib.sha1(path.encode()).hexdigest(),
            "size": 0,
            "path": path,
        }
        if expand:
            entry["lastCommit"] = {"id": commit, "title": "Upload files", "date": DATE}
        return entry
