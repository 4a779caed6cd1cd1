"""vLLM's state machine: a Hypothesis ``RuleBasedStateMachine`` over vLLM's own engine parts.

``machine_class(subject, scenario)`` builds the machine whose example draws
one engine configuration from the scenario's ranges (``@initialize``), then
takes a user's and an operator's actions on the driver
(``sut.adapters.vllm.Driver``): submit (an adapter or the base model, a
prompt of one of two token families so prompts share prefixes, a cache salt,
a token budget, a priority), step, abort (between steps or during one), the
model's end of sequence, ``add_lora`` (new, or reloaded in place),
``remove_lora`` and ``pin_lora``. After every step the checks of
``checker.vllm`` run over what the step read back; at the end of an example
the engine drains, at most ``DRAIN_STEPS`` steps, and every request must
have ended with a finished status. A broken rule raises ``VllmFinding``,
carrying the violations and the story of the example in vLLM's words.

An operator's call that vLLM's slot code refuses (a ``ValueError`` or
``RuntimeError`` the engine core returns to the client, which lives on) is
told in the story, not a finding; an ``AssertionError`` there is one.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from peftlife.checker.vllm import DRAINED, Checker, Limits, Violation
from peftlife.checker.vllm import V6 as RAISED
from peftlife.search.vllm.scenarios import VllmScenario
from peftlife.sut.adapters.vllm import Driver, Step, TinyConfig
from peftlife.sut.adapters.vllm.named import VllmSut
from peftlife.sut.adapters.vllm.slots import SlotsRaised, raised_at

# Steps the drain at the end of an example may take. The longest example (40 actions,
# each request at most 24 tokens, a 4-stage pipeline recomputing after preemptions)
# drains in well under this; more means a request that never ends.
DRAIN_STEPS = 400
FAMILIES = (0, 100)  # first tokens of the two prompt families: same family, shared prefix
SALTS = (None, "salt-a")


class VllmFinding(AssertionError):
    """A vLLM example broke a rule: its violations, configuration and story."""

    def __init__(self, violations: list[Violation], config: TinyConfig, story: list[str]):
        super().__init__(str(violations[0]))
        self.violations = violations
        self.config = config
        self.story = story

    @property
    def invariant(self) -> str:
        return self.violations[0].invariant


@attrs.define
class Tally:
    """What one search's examples add up to: examples begun, and the first finding's."""

    examples: int = 0
    examples_to_find: int | None = None


@st.composite
def configs(draw: st.DrawFn, s: VllmScenario) -> TinyConfig:
    """One engine configuration within ``s``'s ranges."""
    async_scheduling, pp = draw(st.sampled_from(s.loops))
    block_size = draw(st.sampled_from(s.block_sizes))
    num_blocks = draw(st.integers(*s.num_blocks))
    max_loras = draw(st.integers(*s.max_loras))
    return TinyConfig(
        block_size=block_size,
        num_blocks=num_blocks,
        max_num_seqs=draw(st.integers(*s.max_num_seqs)),
        max_num_batched_tokens=draw(st.integers(*s.max_num_batched_tokens)),
        # What one request may use: the pool less its null block (vLLM refuses to start
        # with a max_model_len its KV cache cannot hold), at most 64 tokens.
        max_model_len=min(64, (num_blocks - 1) * block_size),
        max_loras=max_loras,
        max_cpu_loras=max_loras + draw(st.integers(*s.extra_cpu_loras)),
        enable_prefix_caching=draw(st.sampled_from(s.prefix_caching)),
        policy=draw(st.sampled_from(s.policies)),
        async_scheduling=async_scheduling,
        pipeline_parallel_size=pp,
    )


def describe_config(c: TinyConfig) -> str:
    """The configuration in vLLM's option names."""
    loop = "async scheduling" if c.async_scheduling else "sync scheduling"
    return (
        f"num_gpu_blocks={c.num_blocks} block_size={c.block_size} max_loras={c.max_loras} "
        f"max_cpu_loras={c.max_cpu_loras} max_num_seqs={c.max_num_seqs} "
        f"max_num_batched_tokens={c.max_num_batched_tokens} max_model_len={c.max_model_len} "
        f"enable_prefix_caching={c.enable_prefix_caching} policy={c.policy} {loop} "
        f"pipeline_parallel_size={c.pipeline_parallel_size}"
    )


def describe_step(i: int, step: Step, num_blocks: int) -> str:
    """One step as vLLM would log it: scheduled tokens, preemptions, endings, blocks, slots."""
    parts = [f"step {i}:"]
    if step.tokens:
        parts.append("scheduled " + ", ".join(f"{r}+{n}" for r, n in step.tokens.items()))
    elif not step.scheduled:
        parts.append("nothing scheduled")
    if step.preempted:
        parts.append(f"preempted {', '.join(step.preempted)}")
    if step.ended:
        parts.append("ended " + ", ".join(f"{r} {s}" for r, s in step.ended.items()))
    if step.slots is not None and step.needed:
        parts.append(f"GPU slots {step.slots.slots}")
    parts.append(f"free blocks {step.pool_after.num_free} of {num_blocks - 1}")
    if step.in_flight:
        parts.append(f"{step.in_flight} batch(es) in flight")
    return " ".join(parts[:1]) + " " + "; ".join(parts[1:])


def machine_class(subject: VllmSut, scenario: VllmScenario) -> type[RuleBasedStateMachine]:
    """The machine searching ``subject`` in ``scenario``, with a tally of its own
    (``tests/search/test_vllm_machine.py`` runs it on two releases)."""
    s = scenario
    adapter = st.integers(1, s.adapters)
    pick = st.integers(0, 63)  # a live request, by its index among them

    class VllmLifecycle(RuleBasedStateMachine):
        sut_spec: ClassVar[str] = subject.spec
        scenario_name: ClassVar[str] = s.name
        tally: ClassVar[Tally] = Tally()

        def __init__(self) -> None:
            super().__init__()
            self.driver: Driver | None = None
            self.failed = False
            self.story: list[str] = []
            self.requests: dict[str, Any] = {}  # request id -> vLLM's Request

        @initialize(config=configs(s))
        def engine(self, config: TinyConfig) -> None:
            type(self).tally.examples += 1
            self.config = config
            self.checker = Checker(Limits(config.max_loras, config.block_size))
            self.story.append(f"engine: {describe_config(config)}")
            self.driver = Driver(subject.checkout, config)

        def _driver(self) -> Driver:
            assert self.driver is not None
            return self.driver

        def _found(self, violations: list[Violation]) -> None:
            self.failed = True
            tally = type(self).tally
            if tally.examples_to_find is None:
                tally.examples_to_find = tally.examples
            for v in violations:
                self.story.append(f"  broken: {v}")
            raise VllmFinding(violations, self.config, list(self.story))

        def _raised(self, what: str, err: Exception) -> None:
            where = raised_at(err, subject.checkout.package)
            self._found([Violation(self.checker.steps, RAISED, f"{what} raised {where}")])

        def _live(self) -> list[str]:
            return sorted(self._driver().scheduler.requests)

        def _step(self) -> None:
            driver = self._driver()
            step = driver.step()
            self.story.append(describe_step(self.checker.steps, step, self.config.num_blocks))
            if found := self.checker.check(step):
                self._found(found)

        @rule(
            lora=st.integers(0, s.adapters),
            family=st.sampled_from(FAMILIES),
            length=st.integers(1, s.prompt_tokens),
            budget=st.integers(1, s.max_tokens),
            salt=st.sampled_from(SALTS),
            priority=st.integers(0, 2),
        )
        def submit(
            self, lora: int, family: int, length: int, budget: int, salt: str | None, priority: int
        ) -> None:
            driver = self._driver()
            # A prompt and its budget within max_model_len, as vLLM's input processor
            # admits them (a longer prompt is refused before it reaches the scheduler).
            length = min(length, self.config.max_model_len - 1)
            budget = min(budget, self.config.max_model_len - length)
            rid = f"r{len(self.requests)}"
            under = f"adapter-{lora} (id {lora})" if lora else "the base model"
            said = f", cache_salt {salt!r}" if salt else ""
            self.story.append(
                f"submit {rid}: prompt tokens {family + 1}..{family + length} under {under}, "
                f"max_tokens {budget}{said}, priority {priority}"
            )
            tokens = range(family + 1, family + length + 1)
            try:
                driver.submit(rid, tokens, budget, lora, cache_salt=salt, priority=priority)
            except Exception as err:  # add_request is vLLM's scheduler
                self._raised("Scheduler.add_request", err)
            with driver.checkout.installed():
                self.requests[rid] = driver.scheduler.requests[rid]

        @precondition(lambda self: self.driver is not None and self.driver.busy)
        @rule()
        def step(self) -> None:
            self._step()

        @precondition(lambda self: self.driver is not None and bool(self.driver.scheduler.requests))
        @rule(which=pick, during=st.booleans())
        def abort(self, which: int, during: bool) -> None:
            live = self._live()
            rid = live[which % len(live)]
            self.story.append(f"abort {rid}" + (" while a step runs" if during else ""))
            try:
                self._driver().abort(rid, during_step=during)
            except Exception as err:  # finish_requests is vLLM's scheduler
                self._raised("Scheduler.finish_requests", err)

        @precondition(lambda self: self.driver is not None and bool(self.driver.scheduler.requests))
        @rule(which=pick)
        def end_of_sequence(self, which: int) -> None:
            live = self._live()
            rid = live[which % len(live)]
            self.story.append(f"the model samples end of sequence next for {rid}")
            self._driver().draw_eos(rid)

        def _operator(self, said: str, call: Any) -> None:
            try:
                answer = call()
            except SlotsRaised as refused:
                if isinstance(refused.__cause__, AssertionError):
                    self._found([Violation(self.checker.steps, RAISED, f"{said}: {refused}")])
                self.story.append(f"{said}: refused, {refused.error}")
                return
            self.story.append(f"{said}: {answer}")

        @rule(lora=adapter, reload=st.booleans())
        def add_lora(self, lora: int, reload: bool) -> None:
            driver = self._driver()
            if reload:
                said = f"add_lora adapter-{lora} (id {lora}), new weights loaded in place"
                self._operator(said, lambda: driver.reload_lora(lora))
            else:
                self._operator(
                    f"add_lora adapter-{lora} (id {lora})", lambda: driver.add_lora(lora)
                )

        @rule(lora=adapter)
        def remove_lora(self, lora: int) -> None:
            self._operator(f"remove_lora {lora}", lambda: self._driver().remove_lora(lora))

        @rule(lora=adapter)
        def pin_lora(self, lora: int) -> None:
            self._operator(f"pin_lora {lora}", lambda: self._driver().pin_lora(lora))

        def teardown(self) -> None:
            if self.driver is None or self.failed:
                return
            driver = self.driver
            self.story.append("drain: step until every request has ended")
            for _ in range(DRAIN_STEPS):
                if not driver.busy:
                    break
                self._step()
            with driver.checkout.installed():
                unended = [
                    f"{rid} is {r.status.name}"
                    for rid, r in self.requests.items()
                    if not r.is_finished()
                ]
            if unended:
                self._found(
                    [
                        Violation(
                            self.checker.steps,
                            DRAINED,
                            f"after {DRAIN_STEPS} drain steps {', '.join(unended)}",
                        )
                    ]
                )

    VllmLifecycle.__name__ = VllmLifecycle.__qualname__ = (
        f"VllmLifecycle[{subject.spec} @ {s.name}]"
    )
    return VllmLifecycle
