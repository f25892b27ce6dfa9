"""Each node's write fence on fake engines: every engine call is a write or a read, every write advances the fence, and a
host whose lock was broken writes nothing more, naming the host that broke it."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.errors import LockLost, RolloutError
from kvbake.ship.adapters.node_fence import CLAIM_TRIES, FencedEngine, NodeFence, before_write
from kvbake.ship.adapters.node_locks import LOCK_NAME, NodeLock
from kvbake.ship.adapters.nodestate import NodeState, node_audit
from kvbake.ship.core.fencing import FENCE_IMAGE, FENCE_LABEL, READS, WRITES, fence_name, generation_of, newest_generation

from engine_state_changes import STATE_CHANGING_CALLS
from fake_fleet import World, make_world

STALE = 60.0
IMAGE = "base:1"


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return make_world(tmp_path, monkeypatch)


def lock_of(world: World, node: str = "a") -> NodeLock:
    return NodeLock(node, world.engines[node], STALE, node_audit(node))


def no_note(claim) -> str:
    return ""


def fences(world: World, node: str = "a") -> list[str]:
    return sorted(name for name, c in world.engines[node].containers.items() if FENCE_LABEL in c["Config"]["Labels"])


# ---- the pure part ----

@pytest.mark.reads_source
def test_every_engine_call_is_either_a_write_or_a_read():
    calls = {name for name, value in inspect.getmembers(Engine) if callable(value) and not name.startswith("_")}
    assert not WRITES & READS
    assert calls == WRITES | READS, f"unclassified: {sorted(calls - WRITES - READS)}; not engine calls: {sorted((WRITES | READS) - calls)}"


@pytest.mark.reads_source
def test_the_fenced_calls_are_exactly_the_engine_calls_that_change_a_node():
    """Held against the tests' own list: a call that starts a serve, moves a tag or writes a record, classed as a read,
    would run unfenced after this host lost its lock."""
    calls = {name for name, value in inspect.getmembers(Engine) if callable(value) and not name.startswith("_")}
    changing = set(STATE_CHANGING_CALLS)
    assert changing <= calls, f"not engine calls: {sorted(changing - calls)}"
    assert WRITES == changing, f"change a node but are not fenced: {sorted(changing - WRITES)}; fenced though they change nothing: {sorted(WRITES - changing)}"
    assert READS == calls - changing, f"classed as reads though they change a node: {sorted(READS & changing)}"


@pytest.mark.parametrize(("name", "generation"), [("kvbake-fence-7", 7), ("/kvbake-fence-12", 12), ("kvbake-fence-", None),
                                                  ("kvbake-fence-3x", None), ("kvbake-lock", None), ("x-kvbake-fence-3", None),
                                                  ("Xkvbake-fence-3", None)])
def test_a_fence_name_carries_its_generation(name, generation):
    assert generation_of(name) == generation


def test_the_newest_generation_is_the_highest_by_number_not_by_text():
    assert newest_generation(["kvbake-fence-9", "kvbake-fence-10", "kvbake-lock"]) == 10
    assert newest_generation(["kvbake-lock"]) is None and fence_name(3) == "kvbake-fence-3"


# ---- the adapter ----

def test_taking_a_lock_claims_the_fence_and_each_write_advances_it_by_one(world):
    lock = lock_of(world)
    lock.acquire(IMAGE, "deploy-1", False, no_note)
    assert fences(world) == [fence_name(1)] and lock.fence.generation == 1
    assert world.engines["a"].containers[fence_name(1)]["Image"] == world.engines["a"].image_id_of(FENCE_IMAGE) == "sha256:empty", \
        "the fence pins no release image"
    assert world.engines["a"].containers[fence_name(1)]["Config"]["Labels"] == {FENCE_LABEL: "1"}, \
        "docker ps -a --filter label=kvbake.fence=1 finds it"
    engine = FencedEngine(world.engines["a"], lock.fence)
    engine.tag(image_id="sha256:base", reference="repo:current")  # a write's own arguments reach the engine, by name too
    assert world.engines["a"].tags["repo:current"] == "sha256:base"
    engine.container_inspect(LOCK_NAME)  # a read leaves the fence alone
    engine.untag("repo:current")
    assert fences(world) == [fence_name(3)] and lock.fence.generation == 3
    before_write(engine)
    assert fences(world) == [fence_name(4)]


def test_the_host_that_set_the_fence_last_advances_it_with_one_rename_and_proves_its_lock_only_when_it_claimed(world, monkeypatch):
    """Each write of the host that set the fence last is one rename from its generation to the next; claiming anew
    (reading every fence, then proving the lock) is only for a host that finds the fence moved."""
    lock = lock_of(world)
    lock.acquire(IMAGE, "deploy-1", False, no_note)
    proofs, renames, original = [], [], world.engines["a"].rename_container
    monkeypatch.setattr(lock.fence, "prove_held", lambda: proofs.append(1))
    monkeypatch.setattr(world.engines["a"], "rename_container", lambda old, new: renames.append((old, new)) or original(old, new))
    engine = FencedEngine(world.engines["a"], lock.fence)
    for n in range(3):
        engine.tag("sha256:base", f"repo:t{n}")
    assert renames == [(fence_name(g), fence_name(g + 1)) for g in (1, 2, 3)] and proofs == []
    assert fences(world) == [fence_name(4)] and lock.fence.generation == 4


def test_a_write_before_any_claim_claims_the_fence_first(world):
    proofs = []
    fence = NodeFence("a", world.engines["a"], lambda: proofs.append(1))
    FencedEngine(world.engines["a"], fence).tag("sha256:base", "repo:current")
    assert fence.generation == 1 and fences(world) == [fence_name(1)] and proofs == [1]
    assert world.engines["a"].tags["repo:current"] == "sha256:base"


def test_a_fence_that_moves_at_every_claim_is_a_clear_refusal_naming_the_node(world, monkeypatch):
    lock = lock_of(world)
    lock.acquire(IMAGE, "deploy-1", False, no_note)
    tries = []
    monkeypatch.setattr(world.engines["a"], "rename_container", lambda old, new: tries.append(new) and False)
    with pytest.raises(RolloutError) as refused:
        lock.fence.claim()
    assert len(tries) == CLAIM_TRIES and refused.value.exit_code == RolloutError.exit_code
    assert str(refused.value).startswith("node a: ") and f"{CLAIM_TRIES} times" in str(refused.value)
    assert "no other operator host runs a deploy" in refused.value.fix


def test_a_host_whose_lock_was_broken_writes_nothing_more_and_is_told_who_broke_it(world):
    slow = lock_of(world)
    slow.acquire(IMAGE, "deploy-1", False, no_note)
    fenced = FencedEngine(world.engines["a"], slow.fence)
    fenced.tag("sha256:base", "repo:current")
    world.advance(STALE + 1)
    breaker = lock_of(world)
    breaker.acquire(IMAGE, "deploy-2", True, no_note)
    assert breaker.fence.generation > slow.fence.generation + 1  # its claim, then the writes of the break's audit line
    with pytest.raises(LockLost, match=r"node a: this host no longer holds its lock: .* broke it as stale and holds it for deploy-2") as lost:
        fenced.tag("sha256:base", "repo:previous")
    assert "wrote nothing more" in lost.value.fix
    assert "repo:previous" not in world.engines["a"].tags
    FencedEngine(world.engines["a"], breaker.fence).tag("sha256:base", "repo:previous")  # the holder goes on
    assert world.engines["a"].tags["repo:previous"] == "sha256:base"


def test_a_host_that_claims_after_its_lock_was_broken_stops_and_the_holder_claims_past_it(world):
    """A host paused between taking its lock and claiming the fence: its late claim moves the fence, then proves the lock
    and stops; the holder's next write finds the fence moved, claims anew, proves its lock and writes."""
    slow = lock_of(world)
    assert slow._create(IMAGE, "deploy-1")
    world.advance(STALE + 1)
    breaker = lock_of(world)
    breaker.acquire(IMAGE, "deploy-2", True, no_note)
    with pytest.raises(LockLost, match="deploy-2"):
        slow.fence.claim()
    FencedEngine(world.engines["a"], breaker.fence).tag("sha256:base", "repo:current")
    assert world.engines["a"].tags["repo:current"] == "sha256:base" and fences(world) == [fence_name(breaker.fence.generation)]


def test_a_lost_lock_whose_breaker_already_released_says_no_host_holds_it(world):
    slow = lock_of(world)
    slow.acquire(IMAGE, "deploy-1", False, no_note)
    world.advance(STALE + 1)
    breaker = lock_of(world)
    breaker.acquire(IMAGE, "deploy-2", True, no_note)
    breaker.release()
    with pytest.raises(LockLost, match="no host holds it now"):
        FencedEngine(world.engines["a"], slow.fence).copy_in(Path("."), "kvbake-state", "/")


def test_an_engine_that_is_not_fenced_writes_without_a_fence(world):
    before_write(world.engines["a"])
    assert fences(world) == []
