"""`build.py doctor`: check, changing nothing, the engine, the registry's TLS and login, cosign's reach, the disk, every node."""

# On this host: the engine profile, the registry's TLS and login, cosign's reach of the registry (with the engines' CA)
# when the deployment requires signatures, the free disk of the manifest's folder.
# On every node: reachability, the base, the free disk under its data root and MemAvailable, and that the interfaces
# its launch settings name (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) exist there.

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from kvbake.attest.adapters.cosign import registry_reach
from kvbake.deployfile import Deployment, Node
from kvbake.engines.adapters.client import Engine
from kvbake.engines.core.reach import node_reach_fix
from kvbake.errors import BaseImageError, EngineError, KvbakeError, ManifestError, ResourceError, RolloutError
from kvbake.launcher.core.node_launch import interface_matches
from kvbake.lock import Lock
from kvbake.manifest import Manifest
from kvbake.operate.adapters.memwatch import GIB, gib, parse_mem_available
from kvbake.registry.adapters.credentials import credentials_for
from kvbake.ship.adapters.pusher import target_for
from kvbake.registry.adapters.registry_api import RegistryClient

OK, FAIL = "ok", "FAIL"
DISK_FLOOR = 20 * GIB  # room for one more base and a few releases


@dataclass(frozen=True)
class Check:
    """One line of the report: what was checked, the verdict, what was seen, and the error (with its fix) on a FAIL."""

    name: str
    verdict: str
    seen: str
    error: KvbakeError | None = None

    def line(self) -> str:
        text = f"{self.verdict:<4}  {self.name:<22} {self.seen}"
        return text + (f"; fix: {self.error.fix}" if self.error and self.error.fix else "")


def checked(name: str, probe) -> Check:
    """Run one probe: its text is an ok line; a KvbakeError is a FAIL line that keeps the error."""
    try:
        return Check(name, OK, probe())
    except KvbakeError as err:
        return Check(name, FAIL, err.message, err)


def engine_line(engine: Engine) -> str:
    facts = engine.ping()
    return f"{engine.label}: {engine.profile().describe()} ({facts['architecture']})"


def registry_line(engine: Engine, manifest: Manifest, registry: str | None) -> str:
    target = target_for(f"{manifest.output.repository}:doctor", registry)
    auth = credentials_for(target.registry, engine.config_dir())
    with RegistryClient(target.registry, auth) as client:
        tags = client.tags(target.name)
        scheme = client.http.base_url.scheme
    login = f"logged in as {auth.username}" if auth else "no login stored (anonymous)"
    return f"{target.registry} over {'TLS' if scheme == 'https' else 'plain HTTP (loopback only)'}, {login}, {target.name}: {len(tags)} tags"


def cosign_line(manifest: Manifest, registry: str | None) -> str:
    """cosign reaches the registry as the engines do (its TLS verified with the CA they trust there): push --sign, sign,
    and deploy's and rollback's signature checks all run cosign against it."""
    target = target_for(f"{manifest.output.repository}:doctor", registry)
    return registry_reach(f"{target.repository}:kvbake-doctor")


def signing_matters(deployment: Deployment | None) -> bool:
    """Whether doctor checks cosign: the deployment requires every release to be signed (deploy and rollback run it)."""
    return deployment is not None and deployment.signing.require_signature


def free_disk_line(path: Path, floor: int) -> str:
    """The free disk of the manifest's folder, where kvbake writes the lock, overlay/, its records and reports."""
    free = shutil.disk_usage(path).free
    if free < floor:
        raise ResourceError(f"{path}: {gib(free)} free, below {gib(floor)}", "free disk space there before a lock or build")
    return f"{path}: {gib(free)} free"


def node_base(engine: Engine, manifest: Manifest) -> tuple[str, dict] | None:
    """The base as the node holds it, (reference, inspect): under its node name (the tag `base sync` gives it), else
    under the manifest's own reference (a digest-pinned base the serve runs by digest, before its first `base sync`);
    None when the node holds neither."""
    for reference in dict.fromkeys((manifest.base.node_name, manifest.base.image)):
        inspect = engine.inspect_image(reference)
        if inspect is not None:
            return reference, inspect
    return None


def probe_image(engine: Engine, manifest: Manifest) -> str:
    """The image doctor's node probes run: the base under whichever name the node holds it."""
    found = node_base(engine, manifest)
    return found[0] if found is not None else manifest.base.node_name


def node_base_line(engine: Engine, node: str, manifest: Manifest, lock: Lock | None) -> str:
    name = manifest.base.node_name
    found = node_base(engine, manifest)
    if found is None:
        raise BaseImageError(f"{node} lacks {name}", "run python build.py base sync")
    reference, inspect = found
    config = engine.config_digest_of(inspect, reference)
    if lock is not None and config != lock.base.config_digest:
        raise BaseImageError(f"{node}: {reference} is config {config[:19]}, the lock pins {lock.base.config_digest[:19]}",
                             "run python build.py base sync (--force moves the tag)")
    if reference != name:
        return f"{node}: {reference} (config {config[:19]}); `base sync` tags it {name} after push (runbook §5)"
    return f"{node}: {name} (config {config[:19]})"


def node_memory_and_disk_line(engine: Engine, node: str, manifest: Manifest, mem_floor: int, disk_floor: int) -> str:
    """MemAvailable and the free disk of the engine's data root, read by a short-lived container of the base."""
    root = str(engine.client.system.info().docker_root_dir)
    script = f"grep MemAvailable /proc/meminfo; df -B1 --output=avail {root} | tail -n 1"
    image = probe_image(engine, manifest)
    output = engine.run_probe(image, ["sh", "-c", script], {root: root})
    if not output.strip():  # a throw-away container's output can be lost under load: one more run before a FAIL
        output = engine.run_probe(image, ["sh", "-c", script], {root: root})
    lines = output.strip().splitlines()
    available = parse_mem_available(lines[0] if lines else "")
    free = int(lines[-1]) if len(lines) > 1 and lines[-1].strip().isdigit() else None
    if available is None or free is None:
        raise RolloutError(f"{node}: cannot read MemAvailable and free disk ({output.strip()[:80]!r})", "check the node's base image has sh, grep and df")
    if available < mem_floor:
        raise ResourceError(f"{node}: MemAvailable {gib(available)} is below the floor {gib(mem_floor)}",
                            "stop what else runs on that node before a supervised window")
    if free < disk_floor:
        raise ResourceError(f"{node}: {gib(free)} free under {root}, below {gib(disk_floor)}", "free disk space on that node")
    return f"{node}: MemAvailable {gib(available)}, {gib(free)} free under {root}"


def node_interfaces(engine: Engine, manifest: Manifest) -> list[str]:
    """The node's network interfaces, read by a short-lived container of the base on the node's host network."""
    output = engine.run_probe(probe_image(engine, manifest), ["ls", "-1", "/sys/class/net"], {}, network="host")
    return sorted(line.strip() for line in output.splitlines() if line.strip())


def missing_interfaces(node: Node, present: list[str]) -> list[tuple[str, str]]:
    """(variable, interface) for every interface the node's launch settings name that the node lacks."""
    return [(variable, wanted) for variable, names in node.launch.interfaces().items() for wanted in names
            if not interface_matches(variable, wanted, node.launch.env[variable], present)]


def node_interfaces_line(engine: Engine, node: Node, manifest: Manifest) -> str:
    present = node_interfaces(engine, manifest)
    missing = missing_interfaces(node, present)
    if missing:
        named = ", ".join(f"{variable}={wanted}" for variable, wanted in missing)
        raise ManifestError(f"{node.name}: {named} names no interface of the node (it has {', '.join(present) or 'none'})",
                            f"set nodes[{node.name}].launch.env to one of the node's interfaces in the deployment file")
    asked = ", ".join(f"{variable}={node.launch.env[variable]}" for variable in node.launch.interfaces())
    return f"{node.name}: {asked} (of {', '.join(present)})"


def diagnose(engine: Engine, manifest: Manifest, lock: Lock | None, deployment: Deployment | None, registry: str | None,
             mem_floor: int, disk_floor: int = DISK_FLOOR) -> list[Check]:
    """Every check, in order; a node that cannot be reached skips its own later checks."""
    checks = [checked("engine", lambda: engine_line(engine))]
    if checks[0].verdict == OK:
        checks.append(checked("registry", lambda: registry_line(engine, manifest, registry)))
    if signing_matters(deployment):
        checks.append(checked("cosign", lambda: cosign_line(manifest, registry)))
    checks.append(checked("free disk (here)", lambda: free_disk_line(manifest.root.absolute(), disk_floor)))
    for node in deployment.nodes if deployment else ():
        remote = Engine(node.host)
        reach = checked(f"node {node.name}", lambda: engine_line(remote))
        checks.append(reach)
        if reach.verdict != OK:
            checks[-1] = Check(reach.name, FAIL, reach.seen, RolloutError(reach.seen, node_reach_fix(node.host)))
            continue
        base = checked(f"base on {node.name}", lambda: node_base_line(remote, node.name, manifest, lock))
        checks.append(base)
        if base.verdict == OK:
            checks.append(checked(f"memory, disk {node.name}", lambda: node_memory_and_disk_line(remote, node.name, manifest, mem_floor, disk_floor)))
            if node.launch.interfaces():
                checks.append(checked(f"interfaces {node.name}", lambda: node_interfaces_line(remote, node, manifest)))
    return checks


def first_failure(checks: list[Check]) -> KvbakeError | None:
    """The run's error after the report: of the first failure's kind (its exit code), counting the FAIL lines and
    pointing at them, never repeating one (each already says its cause and fix)."""
    failed = [c for c in checks if c.verdict == FAIL]
    if not failed:
        return None
    first = failed[0].error or EngineError(failed[0].seen)
    return type(first)(f"doctor: {len(failed)} of {len(checks)} checks failed (the FAIL lines above); the first, "
                       f"{failed[0].name}, gives the exit code", "do what each FAIL line's fix says, then run doctor again")
