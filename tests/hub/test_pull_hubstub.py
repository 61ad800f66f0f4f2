"""The Hub stand-in speaks what huggingface_hub expects: checked with huggingface_hub itself.

If these pass, a test that points ``HF_ENDPOINT`` at the stand-in exercises the same code
paths in huggingface_hub as the real Hub would (listing, metadata HEAD, CDN redirect,
ranges, error classes).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, HfFileSystem, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub import errors as hf_errors

from tests.hubstub import DEFAULT_REVISION_SHA, HubStub

REPO = "org/Tiny-GGUF"


@pytest.fixture
def stub(hub_stub, tiny_gguf) -> HubStub:  # type: ignore[no-untyped-def]
    return hub_stub(
        {
            REPO: {
                "Tiny-Q4_K_M.gguf": tiny_gguf("q4.gguf", seed=1),
                "sub/Tiny-Q8_0.gguf": tiny_gguf("q8.gguf", seed=2),
                "README.md": b"# tiny\n",
            },
            "org/Gated": {"G-Q4_K_M.gguf": tiny_gguf("g.gguf", seed=3)},
            "org/Private": {"P-Q4_K_M.gguf": tiny_gguf("p.gguf", seed=4)},
        },
        gated={"org/Gated"},
        private={"org/Private"},
    )


def test_model_info_lists_siblings_with_lfs_metadata(stub: HubStub, tiny_gguf) -> None:  # type: ignore[no-untyped-def]
    info = HfApi(endpoint=stub.endpoint, token=False).model_info(REPO, files_metadata=True)
    assert info.sha == DEFAULT_REVISION_SHA
    by_name = {s.rfilename: s for s in info.siblings or []}
    assert set(by_name) == {".gitattributes", "README.md", "Tiny-Q4_K_M.gguf", "sub/Tiny-Q8_0.gguf"}
    data = tiny_gguf("q4.gguf", seed=1).read_bytes()
    gguf = by_name["Tiny-Q4_K_M.gguf"]
    assert gguf.lfs is not None and gguf.lfs.sha256 == hashlib.sha256(data).hexdigest()
    assert gguf.lfs.size == gguf.size == len(data)
    readme = by_name["README.md"]
    assert readme.lfs is None and readme.blob_id == hashlib.sha1(b"blob 7\0# tiny\n").hexdigest()
    bare = HfApi(endpoint=stub.endpoint, token=False).model_info(REPO)
    assert all(s.size is None for s in bare.siblings or [])


def test_listing_tree_and_paths_info(stub: HubStub) -> None:
    api = HfApi(endpoint=stub.endpoint, token=False)
    assert api.list_repo_files(REPO) == [
        ".gitattributes",
        "README.md",
        "Tiny-Q4_K_M.gguf",
        "sub/Tiny-Q8_0.gguf",
    ]
    top = {entry.path for entry in api.list_repo_tree(REPO)}
    assert top == {".gitattributes", "README.md", "Tiny-Q4_K_M.gguf", "sub"}
    inside = [entry.path for entry in api.list_repo_tree(REPO, path_in_repo="sub")]
    assert inside == ["sub/Tiny-Q8_0.gguf"]
    infos = api.get_paths_info(REPO, ["sub/Tiny-Q8_0.gguf", "missing.gguf", "sub"], expand=True)
    assert [type(i).__name__ for i in infos] == ["RepoFile", "RepoFolder"]
    assert infos[0].lfs is not None and infos[0].last_commit is not None
    refs = httpx.get(f"{stub.endpoint}/api/models/{REPO}/refs").json()
    assert refs["branches"][0] == {
        "name": "main",
        "ref": "refs/heads/main",
        "targetCommit": DEFAULT_REVISION_SHA,
    }


def test_resolve_head_redirects_lfs_files_to_another_origin(stub: HubStub) -> None:
    stub_file = stub.file(REPO, "Tiny-Q4_K_M.gguf")
    url = hf_hub_url(REPO, "Tiny-Q4_K_M.gguf", endpoint=stub.endpoint)
    meta = get_hf_file_metadata(url, token=False)
    assert meta.commit_hash == DEFAULT_REVISION_SHA
    assert meta.etag == stub_file.sha256 and meta.size == stub_file.size
    assert meta.location.startswith(stub.cdn_endpoint) and stub.cdn_endpoint != stub.endpoint
    head = httpx.head(url)
    assert head.status_code == 302
    assert head.headers["X-Linked-Etag"] == f'"{stub_file.sha256}"'
    assert head.headers["X-Linked-Size"] == str(stub_file.size)
    plain = get_hf_file_metadata(hf_hub_url(REPO, "README.md", endpoint=stub.endpoint), token=False)
    assert plain.etag == stub.file(REPO, "README.md").git_oid and plain.size == 7


def test_range_requests_and_unsatisfiable_ranges(stub: HubStub, tiny_gguf) -> None:  # type: ignore[no-untyped-def]
    data = tiny_gguf("q4.gguf", seed=1).read_bytes()
    url = stub.resolve_url(REPO, "Tiny-Q4_K_M.gguf")
    part = httpx.get(url, headers={"Range": "bytes=100-199"}, follow_redirects=True)
    assert part.status_code == 206 and part.content == data[100:200]
    assert part.headers["Content-Range"] == f"bytes 100-199/{len(data)}"
    assert part.headers["Accept-Ranges"] == "bytes"
    tail = httpx.get(url, headers={"Range": "bytes=-10"}, follow_redirects=True)
    assert tail.content == data[-10:]
    beyond = httpx.get(url, headers={"Range": f"bytes={len(data)}-"}, follow_redirects=True)
    assert beyond.status_code == 416 and beyond.headers["Content-Range"] == f"bytes */{len(data)}"
    with HfFileSystem(endpoint=stub.endpoint, token=False).open(
        f"{REPO}/Tiny-Q4_K_M.gguf", "rb"
    ) as handle:
        handle.seek(1000)
        assert handle.read(16) == data[1000:1016]


def test_hf_hub_download_lays_out_the_cache(stub: HubStub, hf_cache: Path, tiny_gguf) -> None:  # type: ignore[no-untyped-def]
    path = Path(
        hf_hub_download(
            REPO, "sub/Tiny-Q8_0.gguf", cache_dir=hf_cache, endpoint=stub.endpoint, token=False
        )
    )
    assert path.read_bytes() == tiny_gguf("q8.gguf", seed=2).read_bytes()
    assert os.readlink(path) == f"../../../blobs/{stub.file(REPO, 'sub/Tiny-Q8_0.gguf').sha256}"
    gets = stub.requests_for("sub/Tiny-Q8_0.gguf")
    assert [(r.host, r.status) for r in gets] == [("cdn", 200)]


@pytest.mark.parametrize(
    ("repo", "token", "error", "status"),
    [
        ("org/Gated", None, hf_errors.GatedRepoError, 401),
        ("org/Gated", "hf_wrong", hf_errors.GatedRepoError, 403),
        ("org/Private", None, hf_errors.RepositoryNotFoundError, 401),
        ("org/Private", "hf_wrong", hf_errors.RepositoryNotFoundError, 404),
        ("org/Missing", None, hf_errors.RepositoryNotFoundError, 404),
    ],
)
def test_access_errors_map_to_huggingface_hub_exceptions(
    stub: HubStub, hf_cache: Path, repo: str, token: str | None, error: type[Exception], status: int
) -> None:
    stub.require_token("hf_right")
    with pytest.raises(error) as raised:
        hf_hub_download(
            repo, "G-Q4_K_M.gguf", cache_dir=hf_cache, endpoint=stub.endpoint, token=token or False
        )
    assert raised.value.response.status_code == status  # type: ignore[attr-defined]


def test_token_opens_gated_and_private_repos_and_stays_off_the_cdn(
    stub: HubStub, hf_cache: Path
) -> None:
    stub.require_token("hf_right")
    for repo, name in (("org/Gated", "G-Q4_K_M.gguf"), ("org/Private", "P-Q4_K_M.gguf")):
        path = hf_hub_download(
            repo, name, cache_dir=hf_cache, endpoint=stub.endpoint, token="hf_right"
        )
        assert Path(path).stat().st_size == stub.file(repo, name).size
    for request in stub.requests:
        expected = None if request.host == "cdn" else "Bearer hf_right"
        assert request.authorization == expected, request


def test_missing_entry_and_revision(stub: HubStub, hf_cache: Path) -> None:
    with pytest.raises(hf_errors.RemoteEntryNotFoundError):
        hf_hub_download(REPO, "nope.gguf", cache_dir=hf_cache, endpoint=stub.endpoint, token=False)
    with pytest.raises(hf_errors.RevisionNotFoundError):
        HfApi(endpoint=stub.endpoint, token=False).model_info(REPO, revision="v9")


def test_cut_after_drops_the_connection_once(stub: HubStub) -> None:
    stub.cut_after("Tiny-Q4_K_M.gguf", 1000)
    url = stub.resolve_url(REPO, "Tiny-Q4_K_M.gguf")
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(url, follow_redirects=True)
    assert httpx.get(url, follow_redirects=True).content == stub.file(
        REPO, "Tiny-Q4_K_M.gguf"
    ).read(0, 10**9)
    sent = [r.bytes_sent for r in stub.requests_for("Tiny-Q4_K_M.gguf") if r.host == "cdn"]
    assert sent == [1000, stub.file(REPO, "Tiny-Q4_K_M.gguf").size]


def test_corrupt_serves_bytes_that_do_not_match_the_advertised_sha(stub: HubStub) -> None:
    stub.corrupt("Tiny-Q4_K_M.gguf", times=1)
    stub_file = stub.file(REPO, "Tiny-Q4_K_M.gguf")
    url = stub.resolve_url(REPO, "Tiny-Q4_K_M.gguf")
    bad = httpx.get(url, follow_redirects=True).content
    good = httpx.get(url, follow_redirects=True).content
    assert len(bad) == stub_file.size and hashlib.sha256(bad).hexdigest() != stub_file.sha256
    assert hashlib.sha256(good).hexdigest() == stub_file.sha256


def test_the_stand_in_shuts_down_cleanly(tiny_gguf) -> None:  # type: ignore[no-untyped-def]
    with HubStub({"a/b": {"x.gguf": b"GGUF" + bytes(100)}}) as stub:
        endpoint = stub.endpoint
        assert httpx.get(f"{endpoint}/api/models/a/b").status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{endpoint}/api/models/a/b", timeout=5)
