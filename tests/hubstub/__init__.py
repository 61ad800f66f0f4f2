"""A local stand-in for the Hugging Face Hub, for tests (no internet).

``from tests.hubstub import HubStub``; see :mod:`tests.hubstub.server` for the protocol it
speaks and :class:`HubStub` for its API.
"""

from __future__ import annotations

from .repo import StubFile, StubRepo
from .server import DEFAULT_REVISION_SHA, HubStub, RecordedRequest

__all__ = ["DEFAULT_REVISION_SHA", "HubStub", "RecordedRequest", "StubFile", "StubRepo"]
