"""Model references resolved without downloading: parsing, the HF cache first, then the header
cache, then range requests (every split part); offline from the caches, or a clear error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_fixtures import point_hf_at, recorded, write_split_gguf

from homelab.gguf.model_file import read_model
from homelab.hub.download import pull
from homelab.hub.errors import (
    BadModelRefError,
    HubAuthError,
    HubNetworkError,
    HubNotFoundError,
    HubOfflineError,
    QuantNotFoundError,
)
from homelab.hub.model_ref import (
    ModelRef,
    list_repo,
    parse_model_ref,
    resolve_model,
    resolve_model_ref,
)
from tests.factory import write_gguf
from tests.hubstub import DEFAULT_REVISION_SHA, HubStub

REPO = "tester/Tiny-GGUF"
SPLIT_REPO = "tester/Split-GGUF"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("models")
    split = write_split_gguf(folder / "Tiny-Q8_0.gguf", 3, weight_type="q8_0")
    return {
        "Tiny-Q4_0.gguf": write_gguf("llama", folder / "Tiny-Q4_0.gguf", weight_type="q4_0"),
        "Tiny-F16.gguf": write_gguf("llama", folder / "Tiny-F16.gguf"),
        "mmproj-Tiny-F16.gguf": folder / "Tiny-F16.gguf",
        **{f"Q8_0/{p.name}": p for p in split},
    }


@pytest.fixture
def hub(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HubStub]:
    plain = {k: v for k, v in models.items() if not k.startswith("Q8_0/")}
    with HubStub(
        {REPO: plain, SPLIT_REPO: models, "tester/Gated-GGUF": plain}, gated={"tester/Gated-GGUF"}
    ) as stub:
        point_hf_at(stub, monkeypatch, tmp_path / "hf-home")
        yield stub


def _range_gets(hub: HubStub) -> list:
    return [r for r in hub.requests if r.method == "GET" and r.host == "cdn"]


# -- parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "repo", "quant", "filename", "revision"),
    [
        ("owner/Model-GGUF", "owner/Model-GGUF", None, None, "main"),
        ("owner/Model-GGUF:q4_k_m", "owner/Model-GGUF", "q4_k_m", None, "main"),
        ("owner/Model-GGUF/sub/M-Q8_0.gguf", "owner/Model-GGUF", None, "sub/M-Q8_0.gguf", "main"),
        ("owner/Model-GGUF@v1.2:Q8_0", "owner/Model-GGUF", "Q8_0", None, "v1.2"),
        ("owner/Model-GGUF@" + "a" * 40 + "/M.gguf", "owner/Model-GGUF", None, "M.gguf", "a" * 40),
        ("hf.co/owner/Model-GGUF:Q6_K", "owner/Model-GGUF", "Q6_K", None, "main"),
        (
            "https://huggingface.co/owner/Model-GGUF/resolve/dev/M%20x-Q8_0.gguf?download=true",
            "owner/Model-GGUF",
            None,
            "M x-Q8_0.gguf",
            "dev",
        ),
    ],
)
def test_hub_references(
    text: str, repo: str, quant: str | None, filename: str | None, revision: str
) -> None:
    ref = parse_model_ref(text)
    assert (ref.repo, ref.quant, ref.filename, ref.revision) == (repo, quant, filename, revision)
    assert not ref.is_local


@pytest.mark.parametrize(
    "text",
    [
        "/no/such/Model-Q4_K_M.gguf",
        "./m.gguf",
        "missing.gguf",
        "models/missing.gguf",
        "~/x.gguf",
        "justaword",
    ],
)
def test_paths_stay_paths(text: str) -> None:
    ref = parse_model_ref(text)
    assert ref.is_local and ref.repo is None


def test_an_existing_folder_pair_is_a_path_not_a_repo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "owner" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert parse_model_ref("owner/name").is_local


@pytest.mark.parametrize("text", ["", "  ", "owner/na me:Q4", "owner/name:Q4/x.gguf", "a/b/c.txt"])
def test_bad_references_are_usage_errors(text: str) -> None:
    with pytest.raises(BadModelRefError) as caught:
        parse_model_ref(text)
    assert caught.value.exit_code == 2


def test_two_revisions_conflict() -> None:
    assert parse_model_ref("o/n:Q4_0", revision="dev").revision == "dev"
    with pytest.raises(BadModelRefError, match="revision"):
        parse_model_ref("o/n@v1:Q4_0", revision="v2")


# -- resolving ---------------------------------------------------------------------------


def test_local_file(models: dict[str, Path]) -> None:
    path = models["Tiny-F16.gguf"]
    resolved = resolve_model_ref(str(path))
    assert resolved.display == str(path) and resolved.is_downloaded
    assert resolved.model.tensors == read_model(path).tensors


def test_remote_header_equals_local_and_is_cached_for_next_time(
    hub: HubStub, models: dict[str, Path]
) -> None:
    resolved = resolve_model_ref(f"{REPO}:q4_0")
    local = read_model(models["Tiny-Q4_0.gguf"])
    assert resolved.model.metadata == local.metadata and resolved.model.tensors == local.tensors
    assert resolved.model.header.file_size == local.header.file_size
    assert resolved.display == hub.resolve_url(REPO, "Tiny-Q4_0.gguf")
    assert resolved.commit == DEFAULT_REVISION_SHA and not resolved.is_downloaded
    [part] = resolved.parts
    assert part.origin == "remote" and part.bytes_fetched > 0
    first_gets = len(recorded(hub, lambda r: r.method == "GET" and r.host == "cdn"))
    assert first_gets == part.requests

    again = resolve_model_ref(f"{REPO}:Q4_0")
    assert [p.origin for p in again.parts] == ["header-cache"]
    assert (
        again.model.tensors == local.tensors
        and again.model.header.file_size == local.header.file_size
    )
    assert len(_range_gets(hub)) == first_gets  # no byte of the file asked for again
    assert resolve_model(f"{REPO}:Q4_0").tensors == local.tensors


def test_default_quant_and_exact_file(hub: HubStub) -> None:
    assert resolve_model_ref(REPO).choice.tag == "F16"  # no Q4_K_M, no Q8_0: the first by name
    exact = resolve_model_ref(f"{REPO}/tiny-f16.GGUF")  # case-insensitive, like llama-server
    assert exact.choice.primary.path == "Tiny-F16.gguf"


def test_every_split_part_is_read_remotely(hub: HubStub, models: dict[str, Path]) -> None:
    resolved = resolve_model_ref(f"{SPLIT_REPO}:Q8_0")
    names = [p.filename for p in resolved.parts]
    assert names == [f"Q8_0/Tiny-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert all(p.origin == "remote" for p in resolved.parts)
    local = read_model(models[names[0]])
    assert len(resolved.model.parts) == 3
    assert resolved.model.weights_bytes == local.weights_bytes
    assert resolved.model.tensors == local.tensors
    requests = sum(p.requests for p in resolved.parts)
    gets = recorded(hub, lambda r: r.method == "GET" and r.host == "cdn")
    assert {r.filename for r in gets} == set(names) and len(gets) == requests


def test_a_missing_split_part_in_the_listing_is_refused(hub: HubStub) -> None:
    del hub.repos[SPLIT_REPO].files["Q8_0/Tiny-Q8_0-00002-of-00003.gguf"]
    with pytest.raises(QuantNotFoundError, match="2 of the 3 parts"):
        resolve_model_ref(f"{SPLIT_REPO}:Q8_0")


def test_a_downloaded_file_is_read_locally(hub: HubStub) -> None:
    pulled = pull(f"{REPO}:Q4_0")
    before = len(_range_gets(hub))
    resolved = resolve_model_ref(f"{REPO}:Q4_0")
    assert resolved.display == str(pulled.paths[0]) and resolved.is_downloaded
    assert [p.origin for p in resolved.parts] == ["hf-cache"]
    assert len(_range_gets(hub)) == before


def test_unknown_quant_lists_what_there_is(hub: HubStub) -> None:
    with pytest.raises(QuantNotFoundError) as caught:
        resolve_model_ref(f"{REPO}:Q5_K_M")
    assert "Q4_0" in caught.value.message and "F16" in caught.value.message
    assert "mmproj" not in caught.value.message


def test_unknown_repo(hub: HubStub) -> None:
    with pytest.raises(HubNotFoundError):
        resolve_model_ref("tester/Nope:Q4_0")


def test_gated_repo_needs_a_token(hub: HubStub, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(HubAuthError) as caught:
        resolve_model_ref("tester/Gated-GGUF:Q4_0")
    assert "HF_TOKEN" in (caught.value.hint or "")
    hub.require_token("hf_good")
    monkeypatch.setenv("HF_TOKEN", "hf_good")
    assert resolve_model_ref("tester/Gated-GGUF:Q4_0").model.arch == "llama"


# -- offline -----------------------------------------------------------------------------


def test_offline_uses_the_header_cache(hub: HubStub, monkeypatch: pytest.MonkeyPatch) -> None:
    online = resolve_model_ref(f"{SPLIT_REPO}:Q8_0")
    hub.close()  # the Hub is gone: nothing below may touch it
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = resolve_model_ref(f"{SPLIT_REPO}:Q8_0")
    assert [p.origin for p in offline.parts] == ["header-cache"] * 3
    assert offline.model.tensors == online.model.tensors
    assert offline.offline_reason == "HF_HUB_OFFLINE is set"
    assert offline.commit == online.commit


def test_offline_uses_a_downloaded_file(hub: HubStub, monkeypatch: pytest.MonkeyPatch) -> None:
    pulled = pull(f"{REPO}:F16")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolved = resolve_model_ref(f"{REPO}:f16")
    assert resolved.display == str(pulled.paths[0]) and resolved.is_downloaded


def test_offline_with_nothing_cached_says_what_is_missing(
    hub: HubStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolve_model_ref(f"{REPO}:Q4_0")  # one header cached
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubOfflineError) as caught:
        resolve_model_ref(f"{REPO}:F16")
    message = caught.value.message
    assert "HF_HUB_OFFLINE" in message and f"{REPO}:F16" in message and "cached: Q4_0" in message
    with pytest.raises(HubOfflineError, match="nothing of tester/Other"):
        resolve_model_ref("tester/Other:Q4_0")
    assert hub.requests_for("Tiny-F16.gguf", None) == []


def test_unreachable_hub_falls_back_to_the_caches(
    hub: HubStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolve_model_ref(f"{REPO}:Q4_0")
    hub.close()
    listing = list_repo(REPO)
    assert listing.offline_reason is not None and "unreachable" in listing.offline_reason
    assert [f.path for f in listing.files] == ["Tiny-Q4_0.gguf"]
    assert resolve_model_ref(f"{REPO}:Q4_0").parts[0].origin == "header-cache"
    with pytest.raises(HubNetworkError):  # nothing cached for this one: the real reason
        resolve_model_ref("tester/Other:Q4_0")


def test_model_ref_describes_itself() -> None:
    assert ModelRef("x", repo="o/n", quant="Q4_0").asked() == "o/n:Q4_0"
    assert ModelRef("x", repo="o/n", filename="a.gguf", revision="dev").asked() == "o/n@dev/a.gguf"
