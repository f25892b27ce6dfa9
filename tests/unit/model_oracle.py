"""What the rollout model holds true after every step, read straight from the fake nodes and the hosts' folders."""

from __future__ import annotations

import functools
import hashlib
import shutil
from collections import Counter

from kvbake.engines.core.procfs import Process
from kvbake.ship.adapters.nodestate import AUDIT, STATE_NAME
from kvbake.ship.core.fencing import FENCE_PREFIX
from kvbake.ship.core.journal import DIVERGED, JOURNAL, read_diverged, read_journal
from kvbake.ship.core.noderecords import NodeRecords, decode
from kvbake.ship.core.release import Release

from fake_fleet import CONTAINER, REPO
from model_commands import recover, status
from model_world import HOSTS, NODES, STALE, World, acting_on

def audit_lines(world: World, node: str) -> Counter:
    """Every line of a node's audit log, counted (its files: the old whole-file log and one file per write)."""
    files = world.fakes[node].files.get(STATE_NAME, {})
    return Counter(line for key, data in files.items() if key.rpartition("/")[2].startswith(AUDIT) for line in data.decode().splitlines())


def lost_audit_lines(world: World, seen: dict[str, Counter]) -> list[str]:
    """Lines an earlier step saw in a node's audit log, or the other host left there in the middle of this step, that
    are gone now (`seen` is then brought up to date, and the marks taken mid-step dropped)."""
    lost = []
    for node in NODES:
        now = audit_lines(world, node)
        for before in (seen.get(node, Counter()), *(mark[node] for mark in world.audit_marks)):
            lost += [f"{node}: {line}" for line in (before - now)]
        seen[node] = now
    world.audit_marks.clear()
    return lost


def records(world: World, node: str) -> NodeRecords:
    return decoded(node, tuple(sorted(world.fakes[node].files.get(STATE_NAME, {}).items())))


@functools.lru_cache(maxsize=64)
def decoded(node: str, files: tuple[tuple[str, bytes], ...]) -> NodeRecords:
    return decode(node, {key.rpartition("/")[2]: data for key, data in files})


def image_of(release: Release) -> str:
    return str(release.adopted["image_id"]) if release.adopted else release.config_digest


def is_serve(process: Process) -> bool:
    return "serve" in process.argv and any(arg.endswith("/vllm") for arg in process.argv)


def running_serves(world: World, node: str) -> list[dict]:
    return [c for c in world.fakes[node].containers.values()
            if (c.get("State") or {}).get("Running") and any(is_serve(p) for p in c.get("Processes", ()))]


def node_serving_failures(world: World, node: str, release: Release | None) -> list[str]:
    """The node runs exactly one serve, of its current release, with that release's switch set (in its vLLM process's
    environment); with no release, what it ran before kvbake (or nothing)."""
    serves = running_serves(world, node)
    if release is None:
        expected = [world.unadopted[node]] if node in world.unadopted else []
        found = [c["Id"] for c in serves]
        return [] if found == expected else [f"{node} records no release but runs {found or 'nothing'}, not {expected or 'nothing'}"]
    if len(serves) != 1:
        return [f"{node} runs {len(serves)} serves, not one of {release.preset}"]
    serve, failures = serves[0], []
    info = release.adopted or {}
    name, images = (info.get("name"), adopted_images(info, serve)) if info else (CONTAINER, (release.config_digest,))
    if serve["Name"] != name or serve["Image"] not in images:
        failures.append(f"{node} serves {serve['Name']} from {serve['Image']}, not {name} from {' or '.join(images)} ({release.preset})")
    switch_sets = {tuple(sorted((k, v) for k, v in p.env.items() if k == "S")) for p in serve.get("Processes", ()) if is_serve(p)}
    if switch_sets != {tuple(sorted(release.switches.items()))}:
        failures.append(f"{node} serves with switches {sorted(switch_sets)}, not {dict(release.switches)} ({release.preset})")
    policy = ((serve.get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name")
    # adopt turned the policy off (kvbake alone starts the serve while it is adopted); bringing it back gives it back
    if info and not (serve.get("HostConfig") or {}).get("AutoRemove") and policy not in ("no", info.get("restart")):
        failures.append(f"{node}: the adopted serve restarts {policy!r} at boot, not {info.get('restart')!r} as it did, nor 'no' as adopt left it")
    return failures


def adopted_images(info: dict, serve: dict) -> tuple[str, ...]:
    """What an adopted serve may run: its own image in the very container adopt found, and once that container is gone
    (a --rm serve set aside) and created again, the copy of its writable layer adopt committed: never its own image
    without that layer."""
    copy = info.get("copy")
    if copy and serve.get("Id") != info.get("container_id"):
        return (str(copy["image_id"]),)
    return (str(info.get("image_id")),)


def serving_failures(world: World) -> list[str]:
    recorded = {node: records(world, node).current for node in NODES}
    ids = {node: release.id if release else None for node, release in recorded.items()}
    failures = [f"the ranks record different releases: {ids}"] if len(set(ids.values())) > 1 else []
    return failures + [f for node, release in recorded.items() for f in node_serving_failures(world, node, release)]


def released_half_way(world: World, node: str, kind: str, tagged: str | None, release: Release | None) -> bool:
    """`adopt --release` (not journalled) untags an adopted `previous` before it writes the record without it: stopped in
    between, the record still names it and a second --release finishes."""
    return node in world.release_interrupted and kind == "previous" and tagged is None and bool(release and release.adopted)


def named_stray_tags(world: World) -> list[str]:
    """The stray tags kvbake's `status` names, read on a copy of the world with every node back (a node may be down)."""
    twin = world.copy()
    try:
        with acting_on(twin):
            for fake in twin.fakes.values():
                fake.down = False
            return list(status()(twin.fleets[HOSTS[0]])["stray_tags"])
    finally:
        shutil.rmtree(twin.folder, ignore_errors=True)


def tag_failures(world: World) -> list[str]:
    """A node that keeps no transition and no diverged mark has its tags on the images of its records, unless `status`
    names the tag that differs (a late write of a host whose lock was broken: the next deploy is refused, and its fix,
    `deploy --reset-tags`, is run); every node that keeps a transition keeps the same one."""
    failures, kept = [], {}
    for node in NODES:
        r = records(world, node)
        if r.transition:
            kept[node] = r.transition.get("id")
        if r.transition or r.diverged:
            continue
        for kind, release in (("current", r.current), ("previous", r.previous)):
            tagged, expected = world.fakes[node].tags.get(f"{REPO}:{kind}"), image_of(release) if release else None
            if tagged != expected and not released_half_way(world, node, kind, tagged, release):
                failures.append(f"{node}: tag {kind} names {tagged}, its record {expected}")
    if failures:
        named = named_stray_tags(world)
        failures = [f for f in failures if not any(line.startswith(stray_line(f)) for line in named)]
    if len(set(kept.values())) > 1:
        failures.append(f"the nodes keep different journals: {kept}")
    return failures


def stray_line(failure: str) -> str:
    """How `status` names the tag of a failure of tag_failures: `node a: tag current points at <image>`."""
    node, _, rest = failure.partition(": tag ")
    kind, _, rest = rest.partition(" names ")
    return f"node {node}: tag {kind} points at {rest.partition(', its record ')[0][:19]}"


def stray_copies(world: World) -> list[str]:
    """A settled node holds a copy of an adopted serve only while one of its records names it."""
    failures = []
    for node in NODES:
        r = records(world, node)
        if r.transition or r.diverged or node in world.release_interrupted:
            continue
        named = {str(release.adopted["copy"]["reference"]) for release in (r.current, r.previous, r.adopted)
                 if release is not None and release.adopted and release.adopted.get("copy")}
        held = {reference for reference in world.fakes[node].tags if reference.startswith("kvbake-adopted:")}
        failures += [f"{node}: the copy {reference} stays, and no record names it" for reference in sorted(held - named)]
    return failures


def missing_images(world: World) -> list[str]:
    return [f"{node}: the image of its {key} release {image_of(release)} is gone" for node in NODES
            for key, release in (("current", records(world, node).current), ("previous", records(world, node).previous),
                                 ("adopted", records(world, node).adopted)) if release and image_of(release) not in world.fakes[node].images]


def adopted_failures(world: World) -> list[str]:
    """A recorded adopted serve is kept (that very container, when it was not --rm) or can be recreated from its spec;
    while it is set aside it never starts at boot."""
    failures = []
    for node in NODES:
        r = records(world, node)
        for release in {x.id: x for x in (r.current, r.previous, r.adopted) if x and x.adopted}.values():
            info = release.adopted
            kept = next((c for c in world.fakes[node].containers.values() if c["Id"] == info["container_id"]), None)
            rm = bool(((info.get("spec") or {}).get("host") or {}).get("AutoRemove"))
            if kept is None and not info.get("spec"):
                failures.append(f"{node}: the adopted serve is neither kept nor recreatable")
            copy = info.get("copy")
            if kept is None and copy and copy["reference"] not in world.fakes[node].tags and node not in world.release_interrupted:
                failures.append(f"{node}: the adopted serve's copy {copy['reference']} is gone, so it comes back without its writable layer")
            if kept is None and not rm and node not in world.release_interrupted:
                failures.append(f"{node}: the kept adopted container {info['container_id']} is gone")
            policy = (((kept or {}).get("HostConfig") or {}).get("RestartPolicy") or {}).get("Name")
            if kept and not (kept.get("State") or {}).get("Running") and policy not in (None, "no"):
                failures.append(f"{node}: the set-aside adopted serve would start at boot (restart {policy})")
    return failures


def marks(world: World) -> list[dict]:
    found = [dict(records(world, node).diverged) for node in NODES if records(world, node).diverged]
    return found + [m for m in (read_diverged(world.state_dir(host)) for host in HOSTS) if m]


def pending(world: World) -> list[str]:
    """What a command must still clear: a diverged mark or a journal, on a node or on a host."""
    found = [f"{node} keeps {what}" for node in NODES for what, kept in (("a diverged mark", records(world, node).diverged),
                                                                        ("a journal", records(world, node).transition)) if kept]
    return found + [f"{host} keeps {name}" for host in HOSTS for name in (JOURNAL, DIVERGED) if (world.state_dir(host) / name).exists()]


def recovery(kind: object) -> str:
    return "adopt" if kind == "adopt" else "deploy"


def named_repair(world: World) -> tuple[str, str] | None:
    """The command the diverged marks name, else the revert of the pending journal's command."""
    for mark in marks(world):
        words = str(mark.get("repair", "")).split()
        return words[2], words[3].removeprefix("--")
    kinds = [records(world, node).transition.get("kind") for node in NODES if records(world, node).transition]
    kinds += [j.kind for j in (read_journal(world.state_dir(host)) for host in HOSTS) if j]
    return (recovery(kinds[0]), "revert") if kinds else None


def mark_failures(world: World) -> list[str]:
    """Every diverged mark names the revert of its own transition's command, as documented."""
    return [f"a mark of {m.get('kind')} {m.get('journal')} names {m.get('repair')!r}, not {recovery(m.get('kind'))} --revert" for m in marks(world)
            if str(m.get("repair", "")).split()[1:4] != ["build.py", recovery(m.get("kind")), "--revert"]]


def unsettled(world: World) -> list[str]:
    return serving_failures(world) + tag_failures(world) + pending(world)


def try_repair(world: World, host: str, mode: str) -> list[str]:
    """On a copy of the world, as documented (nodes back, stale locks broken): the named repair from `host`, then, if the
    other host still keeps a journal or a mark of its own, the command that names from there. Nothing may be left."""
    twin, outcomes = world.copy(), []
    try:
        with acting_on(twin):
            for fake in twin.fakes.values():
                fake.down, fake.clock = False, fake.clock + STALE + 1
            for who in (host, next(h for h in HOSTS if h != host)):
                named = named_repair(twin)
                if named is not None and (who == host or any((twin.state_dir(who) / n).exists() for n in (JOURNAL, DIVERGED))):
                    command = named[0], mode if named[1] == "revert" else named[1]
                    outcomes.append(f"{' --'.join(command)} from {who}: {twin.run(who, recover(command[1], command[0], True)) or 'done'}")
            left = unsettled(twin)
    finally:
        shutil.rmtree(twin.folder, ignore_errors=True)
    return [f"{'; '.join(outcomes)}; leaves {left}"] if left else []


def repair_failures(world: World, parity: int) -> list[str]:
    """An unsettled fleet keeps a diverged mark or a journal, and the command they name (deploy --revert, adopt --revert)
    repairs it from either host; with no diverged mark, --resume finishes it too. `parity` picks the host that reverts,
    the other one resumes: over the run, each command is tried from both hosts."""
    problems = unsettled(world)
    if not problems:
        return []
    if named_repair(world) is None:
        return [f"unsettled, yet no diverged mark and no journal names a repair: {problems}"]
    failures = mark_failures(world) + try_repair(world, HOSTS[parity % 2], "revert")
    return failures + ([] if marks(world) else try_repair(world, HOSTS[(parity + 1) % 2], "resume"))


def fingerprint(world: World) -> str:
    """What a repair depends on: the nodes' tags (but `staged`), containers (but the fence, whose generation no command
    reads), state records and reachability, the hosts' journals and marks."""
    parts = [repr((n, sorted(t for t in f.tags.items() if not t[0].endswith(":staged")),
                   sorted((k, c.get("Id"), c.get("Image"), repr(c.get("State")), repr(c.get("HostConfig")), repr(c.get("Processes")))
                          for k, c in f.containers.items() if not k.startswith(FENCE_PREFIX)),
                   sorted((k, d) for files in f.files.values() for k, d in files.items() if not k.endswith("audit.log")), f.down))
             for n, f in world.fakes.items()]
    parts += [repr([(p.name, p.read_bytes()) for p in sorted(world.state_dir(h).glob("*.json"))]) for h in HOSTS]
    return hashlib.sha256("".join(parts).encode()).hexdigest()
