"""The fix a one-line error gives works as written: the help it points at is the
command's own, the option it names is the one the door has, the install it gives
is one that can be run (peftlife is on no package index)."""

from __future__ import annotations

import sys

import pytest

from peftlife.doors import cli
from peftlife.search import database

pytest_plugins = ["pytester"]

# What each command needs besides options, so that only the unknown option is wrong.
REQUIRED = {
    "replay": ["r.json"],
    "diff": ["reference", "reference"],
    "bisect": ["--repo", ".", "--good", "a", "--bad", "b", "--scenario", "default"],
}


@pytest.mark.parametrize("command", cli.COMMAND_NAMES)
def test_an_unknown_option_points_at_its_commands_own_help(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    argv = [command, *REQUIRED.get(command, []), "--sutt=x"]
    assert cli.main(argv) == cli.EXIT_BAD_INPUT
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"peftlife: error: unrecognized arguments: --sutt=x (see 'peftlife {command} --help')"
    )


def test_a_redis_url_without_the_client_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis now raises ImportError
    with pytest.raises(database.DatabaseError) as err:
        database.open_database("redis://localhost:6379/0")
    assert str(err.value).endswith("needs the redis client: pip install redis")
    assert "peftlife[" not in str(err.value)


@pytest.mark.parametrize(
    ("hidden", "said"),
    [(True, "needs the redis client: pip install redis"), (False, "as --peftlife-database")],
)
def test_under_pytest_a_database_error_names_pytests_option(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, hidden: bool, said: str
) -> None:
    if hidden:
        monkeypatch.setitem(sys.modules, "redis", None)
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    # Port 1: nothing listens there, so the client is refused at once.
    result = pytester.runpytest_inprocess("--peftlife-database", "redis://127.0.0.1:1/0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [x for x in [*result.stdout.lines, *result.stderr.lines] if "peftlife: error" in x]
    assert line.startswith("ERROR: peftlife: error: --peftlife-database 'redis://127.0.0.1:1/0'")
    assert said in line and " --database" not in line
