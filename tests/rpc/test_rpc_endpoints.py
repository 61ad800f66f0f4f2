"""The RPC workers setting: endpoints checked once, in PlanOptions, naming the setting."""

from __future__ import annotations

import pytest

from homelab.engine.options import plan_options
from homelab.errors import ExitCode, UsageError
from homelab.plan.rpc_endpoints import parse_endpoint, parse_endpoints, split_endpoint


def test_endpoints_keep_their_order_and_are_written_plainly() -> None:
    assert parse_endpoints("gpu-box:50052, 192.168.1.20:050053") == (
        "gpu-box:50052",
        "192.168.1.20:50053",
    )
    assert parse_endpoints(["a:1", "b:2,c:3"]) == ("a:1", "b:2", "c:3")
    assert split_endpoint("192.168.1.20:50053") == ("192.168.1.20", 50053)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("gpu-box", "has no port"),
        ("gpu-box:", "has no port"),
        (":50052", "host must be"),
        ("[::1]:50052", "IPv6"),
        ("fe80::1:50052", "IPv6"),
        ("gpu box:50052", "host must be"),
        ("gpu-box:0", "1 to 65535"),
        ("gpu-box:65536", "1 to 65535"),
        ("gpu-box:5oo52", "1 to 65535"),
    ],
)
def test_a_malformed_endpoint_is_a_usage_error_naming_the_setting(text: str, says: str) -> None:
    with pytest.raises(UsageError) as error:
        parse_endpoint(text)
    assert says in error.value.message and repr(text) in error.value.message
    assert error.value.hint == "fix the RPC workers setting"
    assert error.value.exit_code == ExitCode.USAGE


def test_a_worker_listed_twice_or_an_empty_entry_is_refused() -> None:
    with pytest.raises(UsageError, match="listed twice"):
        parse_endpoints("a:1,b:2,a:01")
    with pytest.raises(UsageError, match="empty entry"):
        parse_endpoints("a:1,,b:2")


def test_plan_options_check_the_setting_once() -> None:
    options = plan_options(rpc=("a:1,b:002",))
    assert options.card.rpc == ("a:1", "b:2")
    assert plan_options().card.rpc == ()
    with pytest.raises(UsageError, match="has no port"):
        plan_options(rpc=("a",))
    with pytest.raises(UsageError) as error:
        plan_options(rpc=("a:1",), engine="vllm")
    assert "llama.cpp's" in error.value.message and "Ray" in (error.value.hint or "")
