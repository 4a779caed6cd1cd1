"""vLLM's release table (``releases.py``) is well formed, and an older release it
declares loads and holds the seeded sweep.

The older release is 0.22.0, the oldest the driver steps: one more wheel for a
fresh cache (CI's) to fetch, skipped with ``PEFTLIFE_OFFLINE=1`` when not cached.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from tests.sut.test_vllm import _release

from peftlife.checker.vllm import Limits, findings
from peftlife.sut.adapters.vllm import Checkout, CheckoutError
from peftlife.sut.adapters.vllm.checkout import FILES
from peftlife.sut.adapters.vllm.releases import OLDEST, RANGES, for_version
from peftlife.sut.adapters.vllm.sweep import SEEDS, run_workload

OLDER = "0.22.0"
NEWEST = (10**6,)  # where an open range ends, for ordering


def test_each_range_starts_before_it_ends_and_reaches_a_supported_release() -> None:
    for r in RANGES:
        assert r.until is None or r.first < r.until, r
        assert r.until is None or r.until > OLDEST, f"{r} holds no release the driver steps"


def test_the_table_is_newest_first() -> None:
    keys = [(r.until or NEWEST, r.first) for r in RANGES]
    assert keys == sorted(keys, reverse=True)


def test_no_release_gets_one_name_from_two_ranges() -> None:
    releases = {r.first for r in RANGES} | {r.until for r in RANGES if r.until} | {OLDEST}
    for release in sorted(releases):
        held = [r for r in RANGES if r.holds(release)]
        names = Counter(
            (kind, obj, name)
            for r in held
            for kind, table in (("standin", r.standins), ("field", r.fields))
            for obj, values in table.items()
            for name in values
        )
        names.update(("file", path, "") for r in held for path, _ in r.files)
        twice = [n for n, count in names.items() if count > 1]
        assert not twice, (release, twice)


def test_a_file_a_range_drops_is_one_of_the_common_chain() -> None:
    common = {path for path, _ in FILES}
    for r in RANGES:
        assert set(r.without) <= common, r


def test_overlapping_ranges_merge() -> None:
    release = for_version("0.29.0")
    assert {"v1/hisparse/block_pool.py"} <= release.without
    assert "v1/kv_cache_layout.py" not in release.without
    assert release.fields_of("model_config") == {
        "uses_xdrope": False,
        "enable_return_routed_experts": False,
    }


def test_a_release_older_than_the_oldest_is_refused_in_one_line(tmp_path: Path) -> None:
    package = tmp_path / "vllm"
    (package / "v1" / "core" / "sched").mkdir(parents=True)
    (package / "v1" / "core" / "sched" / "scheduler.py").write_text("", encoding="utf-8")
    (package / "_version.py").write_text("__version__ = version = '0.21.0'\n", encoding="utf-8")
    with pytest.raises(CheckoutError, match=r"^vLLM 0\.21\.0: .*V1 model runner.*0\.22\.0$"):
        Checkout(tmp_path)


def test_the_oldest_release_holds_the_seeded_sweep() -> None:
    if os.environ.get("PEFTLIFE_VLLM_CHECKOUT"):
        pytest.skip(f"runs release {OLDER}, not the checkout PEFTLIFE_VLLM_CHECKOUT gives")
    checkout = Checkout(_release(OLDER))
    assert checkout.release.version == OLDER
    for prefix_caching in (False, True):
        for seed in SEEDS:
            config, steps = run_workload(checkout, seed, prefix_caching)
            assert findings(steps, Limits(config.max_loras, config.block_size)) == [], seed
