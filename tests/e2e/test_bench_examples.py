"""bench/examples.py reads the documented command blocks from the pages themselves, and
tallies one run of the cheapest as written: the pages and the bench cannot drift apart."""

from __future__ import annotations

from bench import examples


def test_the_bench_reads_every_documented_block_and_its_promised_exits() -> None:
    found = {e.name: e for e in examples.examples()}
    assert set(found) == {
        "README: Test your scheduler",
        "README: diff",
        "README: explore",
        "docs/diff.md: worked example",
        "docs/bisect.md: worked example",
        "docs/skeleton.md: Try it",
    }
    readme = found["README: Test your scheduler"]
    assert len(readme.lines) == 8 and readme.lines[0] == "pytest -q test_scheduler.py"
    assert [readme.expected_exit(i) for i in range(5)] == [0, 0, 1, 1, 0]
    assert [found["docs/diff.md: worked example"].expected_exit(i) for i in range(3)] == [1, 1, 0]
    assert found["README: diff"].expected_exit(0) == 1  # the README shows a divergence


def test_one_run_of_an_example_is_tallied_as_written() -> None:
    (explore,) = [e for e in examples.examples() if e.name == "README: explore"]
    tally = [examples.Tally(explore.name, explore.lines[0], explore.expected_exit(0))]
    examples.run_example(explore, tally, examples.user_env())
    assert (tally[0].runs, tally[0].as_written, tally[0].misses) == (1, 1, {})
    table = examples.table(tally, 1, 1.0)
    assert table.startswith(examples.HEADING)
    assert "| README: explore | `peftlife explore --sut mutant:pause_flag_dropped" in table
