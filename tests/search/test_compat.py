"""The patches of Hypothesis internals still apply to the Hypothesis installed."""

from __future__ import annotations

import hypothesis
import pytest
from hypothesis import core, stateful
from hypothesis.internal import reflection
from hypothesis.internal.conjecture import providers

from peftlife.search import compat


def test_every_private_name_a_patch_needs_is_there() -> None:
    gone = compat.missing()
    assert not gone, (
        f"Hypothesis {hypothesis.__version__} has moved {', '.join(gone)}: "
        "peftlife.search.compat must follow it"
    )


def test_the_digest_is_computed_once_inside_and_restored_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original, real = core.function_digest, reflection.function_digest
    computed: list[object] = []

    def counted(fn: object) -> bytes:
        computed.append(fn)
        return real(fn)

    monkeypatch.setattr(reflection, "function_digest", counted)
    with compat.digests_once():
        assert core.function_digest is not original
        assert stateful.function_digest is core.function_digest
        first = core.function_digest(test_the_constant_pool_is_empty_inside_and_restored_after)
        again = stateful.function_digest(test_the_constant_pool_is_empty_inside_and_restored_after)
    assert first == again and len(computed) == 1
    assert core.function_digest is original and stateful.function_digest is original


def test_the_constant_pool_is_empty_inside_and_restored_after() -> None:
    before = providers._local_constants
    with compat.stable_constants():
        assert providers._local_constants is not before
        pool = providers._local_constants
        assert not (pool.integers or pool.floats or pool.bytes or pool.strings)
    assert providers._local_constants is before
