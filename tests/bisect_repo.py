"""A git repository of the fake TensorRT-LLM checkout, with a defect introduced on the way.

Eight commits on ``main``, the first tagged ``v1``:

1. the scheduler, correct (its ``KVCacheV2Scheduler`` releases the adapter on suspend)
2. to 4. harmless edits
5. the defect of TensorRT-LLM issue #18407: suspend stops releasing the adapter
6. an import of a name peftlife's stand-ins do not have: this commit cannot be loaded
7. and 8. the import put right, and a harmless edit; the defect stays

The files sit where a TensorRT-LLM checkout has them, so ``trtllm:REPO`` loads
the work tree, and ``peftlife bisect --repo REPO`` finds commit 5.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

CHECKOUT = Path(__file__).parent / "fake_trtllm" / "checkout"
SCHEDULER_DIR = Path("tensorrt_llm", "_torch", "pyexecutor", "scheduler")

DEFECT = """    def _release_on_suspend(self, req):
        pass  # TensorRT-LLM issue #18407: the adapter stays active on the device
"""
RELEASE = """    def _release_on_suspend(self, req):
        if self.peft is not None:
            self.peft.mark_request_done(req, pause=True)
"""
LOGGER = "from tensorrt_llm.logger import logger\n"
UNLOADABLE = "from tensorrt_llm.logger import logger, log_once\n"

SUBJECTS = (
    "Add the KV cache v2 scheduler",
    "Scheduler: say why a victim is evicted",
    "Scheduler: name the pass's frontier",
    "Scheduler: comment on the PEFT budget",
    "Scheduler: leave the adapter alone on suspend",
    "Scheduler: log each eviction once",
    "Scheduler: log_once is not there yet, use the logger",
    "Scheduler: tidy the context phase",
)


def _git(repo: Path, *args: str, when: int = 0) -> str:
    # A fixed author, committer and date: the same history has the same hashes every time.
    date = f"{1_767_225_600 + 3600 * when} +0000"
    env = {
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
        **os.environ,
        "GIT_AUTHOR_NAME": "A. Author",
        "GIT_AUTHOR_EMAIL": "author@example.com",
        "GIT_COMMITTER_NAME": "A. Author",
        "GIT_COMMITTER_EMAIL": "author@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


def sources() -> list[dict[str, str]]:
    """The two scheduler files at each of the eight commits."""
    base = (CHECKOUT / SCHEDULER_DIR / "scheduler.py").read_text("utf-8")
    v2 = (CHECKOUT / SCHEDULER_DIR / "scheduler_v2.py").read_text("utf-8")
    assert DEFECT in v2 and LOGGER in v2
    correct = v2.replace(DEFECT, RELEASE)
    defective = v2
    notes = [
        "",
        "# Victims are evicted from the back of the list.\n",
        "# The frontier: requests at or after it are not scheduled in this pass.\n",
        "# The PEFT budget charges an adapter once per pass.\n",
    ]
    steps = []
    text = correct
    for note in notes:
        text += note
        steps.append(text)
    tail = "".join(notes)
    steps.append(defective + tail)  # 5: the defect
    steps.append((defective + tail).replace(LOGGER, UNLOADABLE))  # 6: cannot be loaded
    steps.append(defective + tail)  # 7
    steps.append(defective + tail + "# The context phase runs after the generation phase.\n")
    return [{"scheduler.py": base, "scheduler_v2.py": v2_text} for v2_text in steps]


def build(repo: Path) -> list[str]:
    """Make the repository at ``repo``; return its commits' hashes, oldest first."""
    repo.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "--quiet", "--initial-branch", "main")
    folder = repo / SCHEDULER_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (repo / "README.md").write_text("A scheduler.\n", "utf-8")
    shas = []
    for when, (subject, files) in enumerate(zip(SUBJECTS, sources(), strict=True)):
        for name, text in files.items():
            (folder / name).write_text(text, "utf-8")
        _git(repo, "add", "--all")
        _git(repo, "commit", "--quiet", "-m", subject, when=when)
        shas.append(_git(repo, "rev-parse", "HEAD"))
    _git(repo, "tag", "v1", shas[0])
    return shas
