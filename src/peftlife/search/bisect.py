"""Which commit broke it: git's bisection over a repository's scheduler files.

The commits after ``--good`` up to ``--bad`` on the first-parent line (``git
rev-list --first-parent GOOD..BAD``) are the candidates, oldest first. Each
probed commit's files are read with ``git show REV:path`` (found with ``git
ls-tree``) into a folder of their own, never through the work tree, the index
or HEAD, and loaded as the SUT ``PREFIX + FOLDER`` (``trtllm:FOLDER`` by
default). A commit whose files cannot be loaded is skipped, as ``git bisect
skip`` would; the others are good or bad by a test the caller gives (a saved
case's replay, or a bounded search).

The search is git's: probe the candidate nearest the middle of what is left
untested between the last good and the first bad commit; a skipped one is
replaced by its nearest untested neighbour. When only skipped commits are left
between the two, the first bad commit is any of them or the first bad one,
and the result lists them all.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol

import attrs

from peftlife import sut
from peftlife.search import outside
from peftlife.search.failure import LifecycleFailure
from peftlife.search.trace import Action
from peftlife.world.config import EngineConfig

DEFAULT_PREFIX = "trtllm:"
# Where TensorRT-LLM keeps the two files its adapter loads.
SCHEDULER_FILES = "tensorrt_llm/_torch/pyexecutor/scheduler"
Verdict = Literal["good", "bad", "skip"]


class BisectError(ValueError):
    """A repository or revision that cannot be bisected; the message says how to fix it."""


@attrs.frozen
class Commit:
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:10]


@attrs.frozen
class Failure:
    """How a commit failed: the first invariant, and the search's finding when it searched."""

    invariant: str
    found: LifecycleFailure | None = attrs.field(default=None, eq=False)
    # The commit's SUT as the probe resolved it: the finding's shrink builds with it.
    resolved: sut.Resolved | None = attrs.field(default=None, eq=False)


@attrs.frozen
class Probe:
    """One commit tested: good, bad (with its failure) or skip (with why)."""

    commit: Commit
    verdict: Verdict
    why: str = ""
    failure: Failure | None = None

    def describe(self) -> str:
        """One line, as the command prints it as it goes."""
        text = f"{self.commit.short} {self.verdict:<4}  {self.commit.subject}"
        if self.verdict == "bad" and self.failure is not None:
            text += f"  ({self.failure.invariant})"
        elif self.verdict == "skip":
            text += f"  (skipped: {self.why})"
        return text


# ---- the repository, read only ----


@attrs.frozen
class Repo:
    """A git repository, only ever read: ``rev-parse``, ``rev-list``, ``ls-tree``, ``show``."""

    path: Path

    @classmethod
    def open(cls, path: Path) -> Repo:
        repo = cls(path)
        if not path.is_dir():
            raise BisectError(f"--repo {str(path)!r} is not a directory: give a git repository")
        try:
            repo._git("rev-parse", "--git-dir")
        except BisectError as err:
            raise BisectError(
                f"--repo {str(path)!r} is not a git repository: give the root of a clone"
            ) from err
        return repo

    def _git(self, *args: str) -> bytes:
        try:
            done = subprocess.run(
                ["git", "-C", str(self.path), *args],
                capture_output=True,
                check=False,
                timeout=120,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise BisectError(f"git could not run ({err}): install git") from err
        if done.returncode != 0:
            message = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise BisectError(message[-1] if message else f"git {args[0]} failed")
        return done.stdout

    def _text(self, *args: str) -> str:
        return self._git(*args).decode("utf-8", "replace").strip()

    def commit(self, rev: str, option: str) -> Commit:
        """The commit a revision names; ``option`` says which argument named it."""
        try:
            if rev.startswith("-"):
                raise BisectError(rev)
            sha = self._text("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        except BisectError as err:
            raise BisectError(
                f"{option} {rev!r} names no commit of {self.path}: give a commit, branch or tag"
            ) from err
        return Commit(sha, self._text("show", "-s", "--format=%s", sha))

    def between(self, good: Commit, bad: Commit) -> list[Commit]:
        """The candidates after ``good`` up to ``bad``, oldest first, ``bad`` last."""
        try:
            self._git("merge-base", "--is-ancestor", good.sha, bad.sha)
        except BisectError as err:
            raise BisectError(
                f"--good {good.short} is not an ancestor of --bad {bad.short}: give a good "
                "commit older than the bad one"
            ) from err
        if good.sha == bad.sha:
            raise BisectError("--good and --bad name the same commit: nothing to bisect")
        listed = self._text(
            "rev-list", "--first-parent", "--reverse", "--format=%H%x09%s", f"{good.sha}..{bad.sha}"
        )
        # Each commit prints a "commit SHA" header, then "SHA<TAB>subject".
        commits = [
            Commit(*line.split("\t", 1))
            for line in listed.splitlines()
            if "\t" in line and not line.startswith("commit ")
        ]
        if not commits or commits[-1].sha != bad.sha:
            raise BisectError(
                f"--bad {bad.short} is not on the first-parent line after --good {good.short}"
            )
        return commits

    def files(self, rev: str, paths: Sequence[str]) -> list[str]:
        """The files under ``paths`` at ``rev`` (a folder's files, or the file itself)."""
        listed = self._git("ls-tree", "-r", "-z", "--name-only", rev, "--", *paths)
        return [name for name in listed.decode("utf-8", "replace").split("\0") if name]

    def show(self, rev: str, path: str) -> bytes:
        return self._git("show", f"{rev}:{path}")

    def write_tree(self, rev: str, paths: Sequence[str], into: Path) -> list[str]:
        """Write the files under ``paths`` at ``rev`` into ``into``, at their paths."""
        names = self.files(rev, paths)
        for name in names:
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.show(rev, name))
        return names


# ---- probing one commit ----


def spec_for(prefix: str, folder: Path) -> str:
    """The SUT string of a folder: ``trtllm:`` makes ``trtllm:FOLDER``, a ``{}`` in the
    prefix is replaced by the folder, and a scheduler written to the protocol,
    ``package.module:attr``, is imported from the folder (``package.module:attr@FOLDER``).

    >>> spec_for("trtllm:{}:Correct", Path("/tmp/x"))
    'trtllm:/tmp/x:Correct'
    >>> spec_for("mypkg.sched:Suspender", Path("/tmp/x"))
    'mypkg.sched:Suspender@/tmp/x'
    """
    if "{}" in prefix:
        return prefix.replace("{}", str(folder))
    if prefix.startswith("trtllm:"):
        return f"{prefix}{folder}"
    return f"{prefix}@{folder}"


# A commit's test, given its SUT resolved once by the probe.
Test = Callable[[sut.Resolved], Failure | None]


class Prober:
    """Write each commit's files into its own folder, load it, and test it once."""

    def __init__(
        self, repo: Repo, scratch: Path, prefix: str, paths: Sequence[str], test: Test
    ) -> None:
        self.repo = repo
        self.scratch = scratch
        self.prefix = prefix
        self.paths = tuple(paths)
        self.test = test
        self.probes: dict[str, Probe] = {}

    def folder(self, commit: Commit) -> Path:
        return self.scratch / commit.sha

    def spec(self, commit: Commit, folder: Path | None = None) -> str:
        """The SUT string of a commit: the prefix with its folder in place of ``{}``, or
        after it."""
        return spec_for(self.prefix, folder or self.folder(commit))

    def probe(self, commit: Commit) -> Probe:
        if commit.sha not in self.probes:
            self.probes[commit.sha] = self._probe(commit)
        return self.probes[commit.sha]

    def _probe(self, commit: Commit) -> Probe:
        folder = self.folder(commit)
        try:
            written = self.repo.write_tree(commit.sha, self.paths, folder)
        except BisectError as err:
            return Probe(commit, "skip", f"git could not read its files: {err}")
        if not written:
            return Probe(commit, "skip", f"it has no file under {', '.join(self.paths)}")
        try:
            resolved = sut.resolve(self.spec(commit))
        except sut.SUTError as err:
            # Said of the commit's own paths, not of the scratch folder they were written to.
            why = str(err).replace(f"{self.spec(commit)}: ", "").replace(f"{folder}/", "")
            return Probe(commit, "skip", why.replace(str(folder), "."))
        failure = self.test(resolved)
        return Probe(commit, "good") if failure is None else Probe(commit, "bad", failure=failure)

    def keep(self, commit: Commit, where: Path) -> Path:
        """A copy of a probed commit's files at ``where`` (replaced if there), to replay later."""
        if where.exists():
            shutil.rmtree(where)
        shutil.copytree(self.folder(commit), where)
        return where

    def replays_clean(self, commit: Commit, case: Replayable) -> bool:
        """Whether ``case`` replays on ``commit`` with every invariant holding."""
        spec = self.spec(commit)
        outcome = outside.replay(case.config, case.actions, sut.load(spec), sut=spec)
        return outcome.held


class Replayable(Protocol):
    """What a replay needs of a case (``reports.Case`` has it)."""

    @property
    def config(self) -> EngineConfig: ...

    @property
    def actions(self) -> tuple[Action, ...]: ...


def ends_problem(good: Probe, bad: Probe, how: str) -> str | None:
    """Why ``--good`` and ``--bad`` cannot start a bisection, or None if they can."""
    if bad.verdict == "skip":
        return f"--bad {bad.commit.short} cannot be loaded: {bad.why}"
    if bad.verdict == "good":
        return (
            f"--bad {bad.commit.short} does not fail {how}: nothing to bisect (give a commit "
            "that fails, or search longer with --max-examples)"
        )
    if good.verdict == "skip":
        return f"--good {good.commit.short} cannot be loaded: {good.why}"
    if good.verdict == "bad":
        invariant = good.failure.invariant if good.failure else "?"
        return f"--good {good.commit.short} fails already ({invariant}): give an older good commit"
    return None


# ---- the bisection ----


@attrs.frozen
class Result:
    """The first bad commit found, the last good one before it, and, when skipped
    commits sit between the two, every commit that may be the first bad one."""

    first_bad: Probe
    last_good: Probe | None
    candidates: tuple[Commit, ...] = ()
    probes: tuple[Probe, ...] = ()


def steps(n: int) -> int:
    """Probes a bisection of ``n`` candidates (the last known bad) needs, skips aside.

    >>> steps(7), steps(1)
    (3, 0)
    """
    return math.ceil(math.log2(n)) if n > 1 else 0


def bisect(
    commits: Sequence[Commit],
    probe: Callable[[Commit], Probe],
    told: Callable[[Probe], None] | None = None,
) -> Result:
    """Git's bisection over ``commits`` (oldest first; the last is known bad, the
    commit before the first known good), with ``probe`` as the test.

    >>> cs = [Commit(str(i), f"commit {i}") for i in range(2, 9)]
    >>> def probe(c):
    ...     return Probe(c, "skip" if c.sha == "6" else "bad" if c.sha >= "5" else "good")
    >>> bisect(cs, probe).first_bad.commit.sha
    '5'
    """
    last = probe(commits[-1])
    if last.verdict != "bad":
        raise ValueError("the last commit must be bad")
    lo, hi = -1, len(commits) - 1
    seen: dict[int, Probe] = {hi: last}
    done: list[Probe] = []
    while True:
        untested = [i for i in range(lo + 1, hi) if i not in seen]
        if not untested:
            break
        middle = (lo + hi) / 2
        index = min(untested, key=lambda i: (abs(i - middle), i))
        result = probe(commits[index])
        seen[index] = result
        done.append(result)
        if told is not None:
            told(result)
        if result.verdict == "good":
            lo = index
        elif result.verdict == "bad":
            hi = index
    skipped = tuple(commits[i] for i in range(lo + 1, hi) if seen[i].verdict == "skip")
    return Result(
        first_bad=seen[hi],
        last_good=seen.get(lo),
        candidates=(*skipped, commits[hi]) if skipped else (),
        probes=tuple(done),
    )
