"""A model-checked rollout: Hypothesis runs operator commands from two hosts on two fake nodes, with a fault at any call."""

# The world (model_world.py) is two fake node engines seen from two operator hosts, each with its own state folder;
# everything between the commands and the engines is kvbake's own code. Each command may carry one fault: a kill, an
# engine error or a lost node at a chosen call of a chosen engine method, a kill after a chosen journal write, a launcher
# that fails for one node and preset, a readiness timeout, the other host running a whole command between two engine
# calls, or a pause of the host (before a chosen lock check, between any two of its writes to a node, or inside a write,
# its fence advanced and the write itself landing once the host goes on, such as its call that moves a node's `current`
# tag) past the locks' staleness by the nodes' clocks,
# with its own clock jumped ahead, still or back, while the other host breaks its locks.
# The invariants (model_oracle.py) are checked after every step; one of them, that no audit line is ever lost.
# KVBAKE_MODEL_STEPS sets the number of steps (default 10,000), KVBAKE_MODEL_SEED the seed (default fixed, so CI
# replays the same run; `random`). KVBAKE_MODEL_SHRINK=0 reports a failure as found, without searching for a shorter
# one (a mutation run needs only that the model failed).

from __future__ import annotations

import os
import random
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from hypothesis import HealthCheck, Phase, seed, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

import model_commands as commands
from fake_engine import FakeEngine
from kvbake.errors import KvbakeError
from model_fixes import fix_failures
from model_oracle import adopted_failures, fingerprint, lost_audit_lines, missing_images, repair_failures, stray_copies, tag_failures, unsettled
from model_world import ACTIVE, FAULT_METHODS, HOSTS, NODES, STALE, Fault, World, lock_violations, patched

STEPS = int(os.environ.get("KVBAKE_MODEL_STEPS", "10000"))
MEMORY_FOLDER = Path("/dev/shm")  # Linux's memory-backed folder: each step writes and syncs many small files
STEPS_PER_RUN = 40
PRESETS = ("control", "packing", "other")


def model_phases(environ) -> tuple[Phase, ...]:
    """Hypothesis's phases for the model: all of them, or with KVBAKE_MODEL_SHRINK=0 all but the search for a shorter failure."""
    return tuple(phase for phase in Phase if phase != Phase.shrink or environ.get("KVBAKE_MODEL_SHRINK", "1") != "0")


def test_a_mutation_run_skips_the_search_for_a_shorter_failure_and_ci_keeps_it():
    assert Phase.shrink not in model_phases({"KVBAKE_MODEL_SHRINK": "0"})
    assert model_phases({}) == model_phases({"KVBAKE_MODEL_SHRINK": "1"}) == tuple(Phase)


# What a fault at an engine call does: kill, error and lost are twice as likely as the other host running a command meanwhile.
ENGINE_FAULTS = ("kill", "error", "lost", "kill", "error", "lost", "meanwhile-deploy", "meanwhile-revert", "meanwhile-resume",
                 "pause-deploy", "pause-revert", "pause-resume", "late-deploy", "late-revert", "late-resume")

hosts = st.sampled_from(HOSTS)
engine_faults = st.one_of(
    st.builds(lambda node, nth, kind: Fault(f"{node}.*", nth, kind), st.sampled_from(NODES), st.integers(1, 60), st.sampled_from(ENGINE_FAULTS)),
    st.builds(lambda node, method, nth, kind: Fault(f"{node}.{method}", nth, kind), st.sampled_from(NODES), st.sampled_from(FAULT_METHODS),
              st.integers(1, 6), st.sampled_from(ENGINE_FAULTS)))
faults = st.one_of(st.none(), st.none(), st.one_of(
    engine_faults,
    st.builds(Fault, st.just("journal"), st.integers(1, 8), st.just("kill")),
    st.builds(Fault, st.just("ready"), st.integers(1, 2), st.sampled_from(("kill", "timeout"))),
    st.builds(lambda node, preset: Fault(f"{node}:{preset}", 0, "launcher"), st.sampled_from(NODES), st.sampled_from(PRESETS)),
    st.builds(Fault, st.just("guard"), st.integers(1, 6), st.sampled_from(("pause-revert", "pause-resume", "pause-deploy"))),
    # the late `current` tag: a host stopped inside its call that moves a node's `current`, which lands after the other
    # host broke its locks and settled the nodes
    st.builds(lambda node, nth, kind: Fault(f"{node}.tag:current", nth, kind), st.sampled_from(NODES), st.integers(1, 2),
              st.sampled_from(("late-revert", "late-resume", "late-deploy")))))
ran = [0]  # steps run in this process
fixes = [0]  # refusals whose printed fix was run


class RolloutModel(RuleBasedStateMachine):
    """Operator commands from either host, in any order, each with at most one fault."""

    def __init__(self) -> None:
        super().__init__()
        self.world: World | None = None
        self.repaired: set[str] = set()  # fingerprints of unsettled worlds whose repair was already tried
        self.fixes_run: set[tuple[str, str]] = set()  # (fingerprint, fix) pairs whose printed fix was already run
        self.audit_seen: dict = {}  # each node's audit lines at the last check

    @initialize(start=st.sampled_from(("fresh",) * 4 + ("main", "main --rm", "exec", "exec --rm")), order=st.sampled_from(("in-order", "workers-first")),
                adopted=st.booleans())
    def begin(self, start: str, order: str, adopted: bool) -> None:
        """An empty fleet, or one running a serve kvbake did not deploy, which is adopted at once or left to the rules."""
        ran[0] += 1
        self.world = World(Path(tempfile.mkdtemp(prefix="kvbake-model-")), order)
        ACTIVE.append(self.world)
        if start != "fresh":
            self.world.serve_unadopted(start.split()[0], start.endswith("--rm"))
            if adopted:
                assert self.world.run(HOSTS[0], commands.adopt()) is None

    def teardown(self) -> None:
        if self.world is not None:
            ACTIVE.remove(self.world)
            shutil.rmtree(self.world.folder, ignore_errors=True)

    def step(self, host: str, command: commands.Command, fault: Fault | None) -> object:
        """Run one command; when it is refused, run the fix it printed (on a copy of the world: see model_fixes.py)."""
        ran[0] += 1
        outcome = self.world.run(host, command, fault)
        if isinstance(outcome, KvbakeError) and (key := (fingerprint(self.world), outcome.fix)) not in self.fixes_run:
            self.fixes_run.add(key)
            fixes[0] += 1
            failures = fix_failures(self.world, host, outcome)
            assert not failures, failures
        return outcome

    @rule(host=hosts, break_lock=st.booleans(), fault=faults)
    def deploy_control(self, host: str, break_lock: bool, fault: Fault | None) -> None:
        self.step(host, commands.deploy("control", break_lock), fault)

    @rule(host=hosts, break_lock=st.booleans(), fault=faults)
    def deploy_packing(self, host: str, break_lock: bool, fault: Fault | None) -> None:
        self.step(host, commands.deploy("packing", break_lock), fault)

    @rule(host=hosts, break_lock=st.booleans(), fault=faults)
    def deploy_other(self, host: str, break_lock: bool, fault: Fault | None) -> None:
        self.step(host, commands.deploy("other", break_lock), fault)

    @rule(host=hosts, to=st.sampled_from(("previous", "adopted")), break_lock=st.booleans(), fault=faults)
    def rollback(self, host: str, to: str, break_lock: bool, fault: Fault | None) -> None:
        """`rollback` or `rollback --to adopted`."""
        self.step(host, commands.rollback_to_adopted(break_lock) if to == "adopted" else commands.rollback(break_lock), fault)

    @rule(host=hosts, release=st.booleans(), break_lock=st.booleans(), fault=faults)
    def adopt(self, host: str, release: bool, break_lock: bool, fault: Fault | None) -> None:
        """`adopt` or `adopt --release` (which, not journalled, may stop half-way: the model notes where it might have)."""
        if not release:
            self.step(host, commands.adopt(break_lock), fault)
            return
        outcome = self.step(host, commands.release_adoption(break_lock), fault)
        if outcome is None:
            self.world.release_interrupted.clear()
        elif fault is not None:
            self.world.release_interrupted.update(NODES)

    @rule(host=hosts, mode=st.sampled_from(("resume", "revert")), command=st.sampled_from(("deploy", "adopt")), break_lock=st.booleans(),
          fault=faults)
    def recover(self, host: str, mode: str, command: str, break_lock: bool, fault: Fault | None) -> None:
        self.step(host, commands.recover(mode, command, break_lock), fault)

    @rule(host=hosts, force=st.booleans(), disturb=st.sampled_from((None, "a untag", "b untag", "a foreign", "b foreign")), fault=faults)
    def base_sync(self, host: str, force: bool, disturb: str | None, fault: Fault | None) -> None:
        """`base sync [--force]`, after the base's tag on a node went away or came to name another image (then deploy
        refuses that node until a base sync puts the base back, with --force for a foreign image)."""
        if disturb:
            node, how = disturb.split()
            disturb_base(self.world.fakes[node], how)
        self.step(host, commands.base_sync(force), fault)

    @rule(host=hosts, break_lock=st.booleans(), fault=faults)
    def reset_tags(self, host: str, break_lock: bool, fault: Fault | None) -> None:
        """`deploy --reset-tags`."""
        self.step(host, commands.reset_tags(break_lock), fault)

    @rule(host=hosts)
    def status(self, host: str) -> None:
        self.step(host, commands.status(), None)

    @rule(seconds=st.sampled_from((60.0, STALE + 1)))
    def advance_clocks(self, seconds: float) -> None:
        ran[0] += 1
        for fake in self.world.fakes.values():
            fake.clock += seconds

    @rule()
    def bring_nodes_back(self) -> None:
        ran[0] += 1
        for fake in self.world.fakes.values():
            fake.down = False

    @precondition(lambda self: self.world is not None)
    @invariant()
    def no_two_hosts_hold_a_node_lock(self) -> None:
        assert not self.world.violations and not lock_violations(self.world), self.world.violations

    @precondition(lambda self: self.world is not None)
    @invariant()
    def no_transition_is_walked_again_once_settled(self) -> None:
        assert not self.world.rewalked, self.world.rewalked

    @precondition(lambda self: self.world is not None)
    @invariant()
    def every_node_runs_its_release_or_a_named_command_repairs_it(self) -> None:
        if not unsettled(self.world):
            return
        key = fingerprint(self.world)
        if key not in self.repaired:
            failures = repair_failures(self.world, len(self.repaired))
            assert not failures, failures
            self.repaired.add(key)

    @precondition(lambda self: self.world is not None)
    @invariant()
    def the_adopted_serve_stays_restorable_until_released(self) -> None:
        failures = adopted_failures(self.world)
        assert not failures, failures

    @precondition(lambda self: self.world is not None)
    @invariant()
    def records_journals_and_tags_agree(self) -> None:
        failures = tag_failures(self.world)
        assert not failures, failures

    @precondition(lambda self: self.world is not None)
    @invariant()
    def no_audit_line_is_ever_lost(self) -> None:
        lost = lost_audit_lines(self.world, self.audit_seen)
        assert not lost, lost

    @precondition(lambda self: self.world is not None)
    @invariant()
    def no_copy_of_an_adopted_serve_outlives_its_record(self) -> None:
        failures = stray_copies(self.world)
        assert not failures, failures

    @precondition(lambda self: self.world is not None)
    @invariant()
    def every_recorded_image_is_on_its_node(self) -> None:
        failures = missing_images(self.world)
        assert not failures, failures


def disturb_base(fake: FakeEngine, how: str) -> None:
    if how == "untag":
        fake.tags.pop("base:1", None)
        return
    fake.images["sha256:foreign"] = {"Id": "sha256:foreign", "RootFS": {"Layers": ["sha256:foreign"]}, "Config": {"Labels": {}, "Env": []}}
    fake.tags["base:1"] = "sha256:foreign"


@contextmanager
def temporary_files_in_memory() -> Iterator[None]:
    """The hosts' folders and every temporary file in memory, when the system offers a memory-backed folder."""
    if not (MEMORY_FOLDER.is_dir() and os.access(MEMORY_FOLDER, os.W_OK)):
        yield
        return
    folder = tempfile.mkdtemp(prefix="kvbake-model-", dir=MEMORY_FOLDER)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tempfile, "tempdir", folder)
            yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def model_seed() -> int:
    """KVBAKE_MODEL_SEED: a number, or `random` for a new run each time; by default one fixed seed, so CI is repeatable."""
    chosen = os.environ.get("KVBAKE_MODEL_SEED", "20261202")
    return random.randrange(2**32) if chosen == "random" else int(chosen)


def test_the_rollout_model_keeps_its_invariants_through_any_commands_and_faults():
    chosen = model_seed()
    model = seed(chosen)(lambda: RolloutModel())
    options = settings(max_examples=max(1, -(-STEPS * 5 // (STEPS_PER_RUN * 4))), stateful_step_count=STEPS_PER_RUN, deadline=None, print_blob=True,
                       database=None, suppress_health_check=list(HealthCheck), phases=model_phases(os.environ))
    ran[0] = fixes[0] = 0
    try:
        with temporary_files_in_memory(), patched():
            run_state_machine_as_test(model, settings=options)
    except BaseException as err:
        err.add_note(f"replay with KVBAKE_MODEL_SEED={chosen} (steps run: {ran[0]})")
        raise
    print(f"rollout model: {ran[0]} steps, seed {chosen}, the printed fix of {fixes[0]} refusals run")
    assert ran[0] >= STEPS
