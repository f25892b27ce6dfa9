"""Deploy, rollback, resume and revert on every node: phase 1 (pull by digest, check), phase 2 (lock, retag, restart, verify)."""

from __future__ import annotations

import getpass
import json
import secrets
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kvbake.attest.adapters.admission import signature_note, signer
from kvbake.deployfile import Deployment, Signing
from kvbake.engines.core.detection import EngineProfile
from kvbake.errors import DivergedError, EngineError, KvbakeError, RolloutError, SignatureError
from kvbake.secretscan import refuse_credentials
from kvbake.ship.adapters import adopted_serve
from kvbake.ship.adapters.fleet import Fleet
from kvbake.ship.adapters.node_locks import HeldLocks, NodeLock
from kvbake.ship.adapters.node_identity import config_digest_on, repository_of
from kvbake.ship.adapters.nodestate import NodeState, node_audit
from kvbake.ship.adapters.other_serves import refuse_other_serves
from kvbake.ship.adapters.stray_tags import refuse_stray_tags
from kvbake.ship.adapters.transitions import marker_image, records_of, release_of, revert, run_transition
from kvbake.ship.core.lock_claims import LockClaim
from kvbake.ship.core.journal import (Journal, NodePlan, clear_diverged, clear_journal, from_node_copy, journal_from_dict, read_diverged,
                                      read_journal, recovery_command)
from kvbake.ship.core.noderecords import NodeRecords
from kvbake.ship.core.release import Release, release_to_json, runtime_config
from kvbake.ship.core.store_changes import check_store_changes, read_stores, remember_stores, store_changes


@dataclass(frozen=True)
class NodeView:
    """What phase 1 saw on one node."""

    name: str
    records: NodeRecords
    current_id: str | None
    previous_id: str | None
    serving: str | None = None  # the ID of the serving container the node has, if any


def view(fleet: Fleet, name: str, reseat: frozenset[str] = frozenset()) -> NodeView:
    """What one node records and which images its tags name; a reseated node's records do not count. A `previous` tag
    on a node whose records name a current release and no previous one counts as none (a write of a host whose lock
    was broken can land late, after the revert that cleared that record), never a rollback target; the transitions
    refuse it first as a stray tag (`stray_tags`), which `deploy --reset-tags` removes. Records lost altogether leave
    both tags as they are."""
    engine = fleet.engines[name]
    try:
        records = NodeState(name, engine).read()
    except RolloutError:
        if name not in reseat:
            raise
        records = NodeRecords()
    if name in reseat:
        records = NodeRecords(audit=records.audit)
    container = engine.container_inspect(fleet.deployment.launcher.container)
    says_no_previous = records.current is not None and records.previous is None
    previous_id = None if says_no_previous else engine.image_id_of(fleet.tag("previous"))
    return NodeView(name, records, engine.image_id_of(fleet.tag("current")), previous_id, (container or {}).get("Id"))


def refuse_marks(views: list[NodeView]) -> None:
    """A node that keeps a diverged mark or an unfinished transition stops every operator host, not only the one that
    wrote it."""
    for v in views:
        if v.records.diverged:
            raise DivergedError(f"node {v.name} is marked diverged by {v.records.diverged.get('by', 'another host')} "
                                f"({v.records.diverged.get('revert_error')})", f"repair first: {v.records.diverged.get('repair')}")
    for v in views:
        if v.records.transition:
            t = v.records.transition
            command = recovery_command(str(t.get("kind")))
            raise RolloutError(f"node {v.name} holds the journal of an interrupted {t.get('kind')} {t.get('id')} (release {t.get('release_id')})",
                               f"run python build.py {command} --resume to finish it or {command} --revert to undo it, from any operator host")


def refuse_node_marks(fleet: Fleet) -> None:
    """A diverged mark on any node refuses a resume from every host: only a revert repairs a diverged deployment."""
    for name, engine in fleet.engines.items():
        mark = NodeState(name, engine).read().diverged
        if mark:
            raise DivergedError(f"node {name} is marked diverged by {mark.get('by', 'another host')} ({mark.get('revert_error')}); "
                                "a resume would build on a state nobody verified", f"repair first: {mark.get('repair')}")


def check_views(views: list[NodeView], reseat: frozenset[str] = frozenset()) -> None:
    """Ranks must agree on their current release before anything changes; a recorded current must exist. A node being
    reseated after a store switch starts empty and is left out of the agreement."""
    refuse_marks(views)
    for v in views:
        if v.records.current is None and v.serving and v.name not in reseat:
            raise RolloutError(f"node {v.name} runs a serve kvbake did not deploy (container {v.serving[:12]}), which a deploy would replace "
                               "with no way back", "adopt it first: python build.py adopt --deploy FILE (the first rollback then "
                               "restores it exactly), or remove that container if it is not needed")
        if v.records.current and not v.current_id:
            raise RolloutError(f"node {v.name} records release {v.records.current.id} but has no current image",
                               f"re-create its records with: python build.py deploy --preset NAME --reseat {v.name}")
    currents = {(v.records.current.id if v.records.current else None) for v in views if v.name not in reseat}
    if len(currents) > 1:
        raise DivergedError(f"the nodes run different releases: {', '.join(f'{v.name}={v.records.current.id if v.records.current else None}' for v in views)}",
                            "roll every node to one release with deploy --preset, or repair by hand")


def require_base(fleet: Fleet, base_image: str, base_layers: tuple[str, ...]) -> None:
    """Every node must already hold the exact base: kvbake moves only the thin layer."""
    for name, engine in fleet.engines.items():
        base = engine.inspect_image(base_image)
        if base is None or tuple(base["RootFS"]["Layers"]) != base_layers:
            raise RolloutError(f"node {name} lacks the base image {base_image} (or holds another one)",
                               "run python build.py base sync: it puts the locked base in the private registry once and pulls it "
                               "by digest on every node; kvbake ships only the thin layer")


def stage_release(fleet: Fleet, release: Release, base_image: str, base_layers: tuple[str, ...]) -> dict[str, str]:
    """Phase 1 on every node: the base must be there; pull by digest; the pulled image must be the release's exactly
    (its config digest, on either store, its layers, its labels and its runtime config) before any tag moves or any
    serve restarts. Returns image IDs."""
    require_base(fleet, base_image, base_layers)
    staged = {}
    for name, engine in fleet.engines.items():
        engine.pull(release.image)
        pulled = engine.inspect_image(release.image)
        wrong = pulled_differences(release, pulled, config_digest_on(engine, pulled, repository_of(release.image)) if pulled else None)
        if wrong:
            raise RolloutError(f"node {name}: {release.image} is not the release's image ({'; '.join(wrong)})",
                               "deploy the digest push recorded for the locked build (leave --image out); nothing was moved")
        staged[name] = pulled["Id"]
    return staged


def pulled_differences(release: Release, pulled: dict | None, config_digest: str | None) -> list[str]:
    """Every way a pulled image differs from the release's: config digest first (it covers everything else)."""
    if pulled is None:
        return ["the engine does not hold it after the pull"]
    wrong = []
    if config_digest != release.config_digest:
        wrong.append(f"config {str(config_digest)[:19]}, not the lock's {release.config_digest[:19]}")
    if tuple(pulled["RootFS"]["Layers"]) != release.layers:
        wrong.append("other layers")
    labels = pulled["Config"]["Labels"] or {}
    if labels != dict(release.labels):
        wrong.append("other labels: " + ", ".join(sorted(set(labels) ^ set(release.labels) | {k for k in labels if labels[k] != release.labels.get(k)})[:3]))
    if release.image_config is not None and runtime_config(pulled["Config"]) != dict(release.image_config):
        changed = [k for k, v in runtime_config(pulled["Config"]).items() if release.image_config.get(k) != v]
        wrong.append(f"other {', '.join(changed)}")
    return wrong


def locked(fleet: Fleet, journal_id: str, break_lock: bool, marker_image: str | Mapping[str, str]) -> HeldLocks:
    """Take the lock on every node (all or none); the locks stay renewed until released. The marker container is
    created from `marker_image`, one image for every node or one per node."""
    taken: list[NodeLock] = []
    try:
        for name, engine in fleet.engines.items():
            state = NodeState(name, engine)
            lock = NodeLock(name, engine, fleet.deployment.lock_stale_after_s, node_audit(name))
            image = marker_image if isinstance(marker_image, str) else marker_image[name]
            taken.append(lock)  # released below if acquire fails, even after it took the lock (a lock never taken releases nothing)
            try:
                lock.acquire(image, journal_id, break_lock, lambda claim, state=state: journal_note(state, claim))
            except EngineError as err:
                raise RolloutError(f"node {name}: cannot take the lock ({err.message})", "bring the node back, then retry; nothing was changed") from None
    except BaseException:
        HeldLocks(taken, fleet.deployment.lock_stale_after_s).release()
        raise
    return HeldLocks(taken, fleet.deployment.lock_stale_after_s)


def fenced(fleet: Fleet, held: HeldLocks) -> Fleet:
    """The fleet as the lock holder writes to it: every write to a node first advances that node's fence."""
    return replace(fleet, engines=held.fenced(fleet.engines))


def journal_note(state: NodeState, claim: LockClaim) -> str:
    """What the node knows of the deploy that holds its lock: whether it keeps that deploy's journal, which any
    operator host can finish or undo once the lock is stale."""
    try:
        transition = state.read().transition or {}
    except RolloutError:
        return ""
    if claim.deploy and transition.get("id") == claim.deploy:
        return ("; the node keeps that deploy's journal: if it is no longer running, once its lock is stale run "
                "python build.py deploy --resume or deploy --revert with --break-lock, from any operator host")
    return ""


def new_journal_id(kind: str) -> str:
    return f"{kind}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(3)}"


def damaged_records(fleet: Fleet, names: frozenset[str]) -> frozenset[str]:
    """Which of these nodes keep records that cannot be read."""
    damaged = set()
    for name in names:
        try:
            NodeState(name, fleet.engines[name]).read()
        except RolloutError:
            damaged.add(name)
    return frozenset(damaged)


def checked_stores(fleet: Fleet, reseat: frozenset[str]) -> tuple[dict[str, EngineProfile], frozenset[str]]:
    """Every node's profile now; a node whose image store changed since the last deploy must be reseated. A node whose
    records are damaged may be reseated too: its images stay, its records are written afresh."""
    profiles = {name: engine.profile() for name, engine in fleet.engines.items()}
    changes = store_changes(read_stores(fleet.deployment.state_dir), profiles)
    damaged = damaged_records(fleet, reseat - set(changes))
    check_store_changes(changes, set(reseat - damaged))
    return profiles, frozenset(changes) | damaged


def refuse_if_diverged(deployment: Deployment) -> None:
    diverged = read_diverged(deployment.state_dir)
    if diverged:
        raise DivergedError(f"the deployment is marked diverged ({diverged.get('revert_error')})", f"repair first: {diverged.get('repair')}")


def refuse_pending(deployment: Deployment) -> None:
    """This host's own marks: a diverged deployment, or a journal it left."""
    refuse_if_diverged(deployment)
    pending = read_journal(deployment.state_dir)
    if pending:
        command = recovery_command(pending.kind)
        raise RolloutError(f"an interrupted {pending.kind} ({pending.id}, release {pending.release_id}) left a journal",
                           f"run {command} --resume to finish it or {command} --revert to undo it")


def admitted(signing: Signing, release: Release, materials: Sequence[Mapping[str, Any]] | None, deploy_file: str) -> Release:
    """The release with the key that signed it (`signed_by`), when the deployment requires a signature (the signature
    gate: `attest/adapters/admission.signer`). An adopted serve is no kvbake image and is never signed; it passes as it is."""
    if release.adopted:
        return release
    signed_by = signer(signing, release.image, release.config_digest, materials, deploy_file)
    return release if signed_by is None else replace(release, signed_by=signed_by)


def audit_note(release: Release) -> str:
    """What the node's audit log says of the signature of the release it moves to."""
    if release.adopted:
        return "the adopted serve (no kvbake image, never signed)"
    return signature_note(release.image, release.signed_by)


def deploy(fleet: Fleet, release: Release, base_image: str, base_layers: tuple[str, ...], break_lock: bool,
           reseat: frozenset[str] = frozenset(), materials: Sequence[Mapping[str, Any]] | None = None) -> Journal:
    """Phase 1 (pull and check) needs no lock; then every lock, then the state is read and the plan fixed, then phase
    2. On failure every node is reverted (or the deployment is marked diverged). A release record holding anything that
    looks like a credential is refused before anything is pulled, and so is one the deployment file's reviewers did
    not sign and attest (its SLSA materials: `materials`, the lock's, when given)."""
    folder = fleet.deployment.state_dir
    refuse_credentials(json.loads(release_to_json(release)), f"release {release.id}")
    refuse_pending(fleet.deployment)
    profiles, reseated = checked_stores(fleet, reseat)
    release = admitted(fleet.deployment.signing, release, materials, fleet.deployment.path.name)
    staged = stage_release(fleet, release, base_image, base_layers)
    for name, image_id in staged.items():
        try:
            fleet.engines[name].tag(image_id, fleet.tag("staged"))
        except EngineError as err:
            raise RolloutError(f"node {name}: staging failed ({err.message})", "bring the node back, then retry; nothing serving was changed") from None
    journal_id = new_journal_id("deploy")
    held = locked(fleet, journal_id, break_lock, fleet.tag("staged"))
    try:
        views = [view(fleet, name, reseated) for name in fleet.engines]
        check_views(views, reseated)
        refuse_stray_tags(fleet, {v.name: v.records for v in views if v.name not in reseated})
        refuse_other_serves(fleet, {v.name: v.records for v in views})
        adopted_serve.refuse_missing_secrets({v.name: v.records.current for v in views})  # a failed deploy brings it back
        journal = Journal(journal_id, "deploy", release.id, tuple(deploy_plan(v, staged[v.name], release) for v in views))
        run_transition(fenced(fleet, held), journal, folder, held.check, audit_note(release))
    finally:
        held.release()
    remember_stores(folder, profiles)
    return journal


def rollback(fleet: Fleet, break_lock: bool) -> Journal:
    """Swap current and previous on every rank; nothing is pulled; the previous switch set comes back with it."""
    folder = fleet.deployment.state_dir
    refuse_pending(fleet.deployment)
    profiles, _ = checked_stores(fleet, frozenset())
    journal_id = new_journal_id("rollback")
    held = locked(fleet, journal_id, break_lock, fleet.tag("current"))
    try:
        views = [view(fleet, name) for name in fleet.engines]
        check_views(views)
        refuse_stray_tags(fleet, {v.name: v.records for v in views})
        refuse_other_serves(fleet, {v.name: v.records for v in views})
        for kind in ("previous", "current"):  # the rollback, or its revert, brings it back
            adopted_serve.refuse_missing_secrets({v.name: getattr(v.records, kind) for v in views})
        missing = [v.name for v in views if not (v.previous_id and v.records.previous)]
        if missing:
            raise RolloutError(f"no previous release on {', '.join(missing)}", "there is nothing to roll back to; deploy a release instead")
        refuse_different_previous(views)
        target = admitted(fleet.deployment.signing, views[0].records.previous, None, fleet.deployment.path.name)
        journal = Journal(journal_id, "rollback", target.id, tuple(rollback_plan(v) for v in views))
        run_transition(fenced(fleet, held), journal, folder, held.check, audit_note(target))
    finally:
        held.release()
    remember_stores(folder, profiles)
    return journal


def journal_on_nodes(fleet: Fleet) -> Journal | None:
    """The journal of an interrupted transition as the nodes keep it (for a host that did not start it), every forward
    step taken as one that may have run."""
    for name, engine in fleet.engines.items():
        transition = NodeState(name, engine).read().transition
        if transition:
            try:
                return from_node_copy(journal_from_dict(transition))
            except ValueError as err:
                raise RolloutError(f"node {name}: the journal it keeps is corrupt ({err})",
                                   f"re-create the node's records with: python build.py deploy --preset NAME --reseat {name}") from None
    return None


def kept_by_any_node(fleet: Fleet, journal_id: str) -> bool:
    return any((NodeState(name, engine).read().transition or {}).get("id") == journal_id for name, engine in fleet.engines.items())


def drop_local_copy(folder: Path, journal: Journal) -> None:
    """This host's copy of a transition no node keeps any more, and its diverged mark of that very transition: another
    host finished or undid it, or it never began."""
    clear_journal(folder)
    if (read_diverged(folder) or {}).get("journal") == journal.id:
        clear_diverged(folder)


def settled_elsewhere(folder: Path, journal: Journal, local: bool, mode: str) -> Journal:
    """No node keeps the journal: another operator host finished or undid the transition (perhaps while this one waited
    for the locks), or, killed before its first step, it never began. This host's copy goes; only the revert of a
    transition that never began succeeds (nothing ran, so nothing is undone)."""
    if local:
        drop_local_copy(folder, journal)
    if local and not journal.done:
        if mode == "revert":
            return journal.with_phase("never began")
        raise RolloutError(f"{journal.kind} {journal.id} never began (no step ran and no node keeps its journal), so there is "
                           "nothing to resume; this host's copy was removed", f"{recovery_command(journal.kind)} again (its plan is stale now)")
    raise RolloutError(f"{journal.kind} {journal.id} was already finished or undone from another operator host (no node keeps its "
                       "journal)" + ("; this host's copy was removed" if local else ""), "check python build.py status, then deploy as usual")


def superseded_local_copy(fleet: Fleet, folder: Path, local: Journal | None) -> Journal | None:
    """This host's journal, unless the nodes keep another one: then this host's transition was settled elsewhere or never
    began, and the nodes' journal is the one to finish or undo; this host's copy goes. When a node cannot be read, this
    host's copy stands (the locks then tell)."""
    if local is None:
        return None
    try:
        kept = journal_on_nodes(fleet)
    except KvbakeError:
        return local
    if kept is not None and kept.id != local.id:
        drop_local_copy(folder, local)
        return None
    return local


def recover(fleet: Fleet, mode: str, break_lock: bool, release_id: str | None = None, command: str = "deploy") -> Journal:
    """Finish (resume) or undo (revert) an interrupted transition from its journal: this host's, or the nodes' copy.
    `command` is the one the operator ran: `adopt` recovers adoptions only, `deploy` every other transition."""
    folder = fleet.deployment.state_dir
    local = superseded_local_copy(fleet, folder, read_journal(folder))
    journal = journal_on_nodes(fleet) if local is None else local
    if journal is None:
        if read_diverged(folder):
            raise RolloutError("the deployment is marked diverged, but neither this host nor any node keeps its journal",
                               f"check python build.py status; once every rank is on one release, move {folder / 'DIVERGED.json'} aside")
        raise RolloutError(f"there is no interrupted {command} to resume or revert", "nothing to do")
    owner = recovery_command(journal.kind)
    if owner != command:
        raise RolloutError(f"the interrupted transition is {journal.kind} {journal.id}, not an {command}" if command == "adopt" else
                           f"the interrupted transition is {journal.kind} {journal.id}", f"finish or undo it with python build.py {owner} "
                           f"--resume or {owner} --revert")
    if mode == "resume" and release_id is not None and journal.release_id != release_id:
        raise RolloutError(f"the journal is for release {journal.release_id}, not {release_id}", "run deploy --revert, then deploy again")
    admit_recovered(fleet, journal, mode)
    plans = {plan.node: plan for plan in journal.nodes}
    marker = {name: marker_image(fleet, plans[name]) if name in plans else fleet.tag("current") for name in fleet.engines}
    held = locked(fleet, new_journal_id(mode), break_lock, marker)
    try:
        if not kept_by_any_node(fleet, journal.id):  # read under the locks: another host may have settled it meanwhile
            return settled_elsewhere(folder, journal, local is not None, mode)
        if mode == "resume":
            refuse_node_marks(fleet)
            run_transition(fenced(fleet, held), journal, folder, held.check)
        else:
            revert(fenced(fleet, held), journal, folder, guard=held.check)
    finally:
        held.release()
    return journal


def admit_recovered(fleet: Fleet, journal: Journal, mode: str) -> None:
    """A recovery moves tags too: the release a resume finishes is admitted by the same check as a deploy's (the
    signature the deployment file requires), whoever started the transition; an adopted serve it brings back needs its
    secrets from the environment kvbake runs in."""
    side = "after_records" if mode == "resume" else "before_records"
    if journal.kind != "adopt":  # an adoption starts nothing
        adopted_serve.refuse_missing_secrets({plan.node: release_of(getattr(plan, side), "current") for plan in journal.nodes})
    if mode != "resume":
        # A revert returns each node to the release its own record held before the transition: an image the node
        # already held and served. It is admitted by that record, even when it predates `require_signature`, so an
        # interrupted transition can always be undone; only a release new to the nodes must pass the signature gate.
        return
    releases = {r.id: r for plan in journal.nodes if (r := release_of(plan.after_records, "current")) is not None}
    for release in releases.values():
        try:
            admitted(fleet.deployment.signing, release, None, fleet.deployment.path.name)
        except SignatureError as err:
            owner = recovery_command(journal.kind)
            raise SignatureError(err.message, f"{(err.fix or '').removesuffix('; nothing was moved')}, or undo the interrupted {journal.kind} "
                                 f"with python build.py {owner} --revert (it returns every node to the release it served before); "
                                 "nothing was moved") from None


def deploy_plan(v: NodeView, staged_id: str, release: Release) -> NodePlan:
    """`current` becomes the release; `previous` becomes the old current, unless the release is already current:
    then the real rollback target is kept. A node whose records name no current release (a first deploy, or a node
    being reseated) keeps no `previous` tag: no record would name the image it points at."""
    before = records_of(v.records.current, v.records.previous, v.records.adopted)
    if v.records.current is not None and v.records.current.id == release.id and v.current_id == staged_id:
        return NodePlan(v.name, v.current_id, v.previous_id, staged_id, v.previous_id, before,
                        records_of(release, v.records.previous, v.records.adopted))
    previous_after = v.current_id if v.records.current is not None else None
    return NodePlan(v.name, v.current_id, v.previous_id, staged_id, previous_after, before,
                    records_of(release, v.records.current, v.records.adopted))


def refuse_different_previous(views: list[NodeView]) -> None:
    """Every rank rolls back to one release: nodes whose previous releases differ would serve different ones after it.
    Every node records a previous release by now (one without is refused first)."""
    if len({v.records.previous.id for v in views}) > 1:
        shown = ", ".join(f"{v.name}={v.records.previous.id}" for v in views)
        raise RolloutError(f"the nodes' previous releases differ ({shown}), so a rollback would leave the ranks serving different releases",
                           "deploy the release you want on every node instead: python build.py deploy --preset NAME; nothing was changed")


def rollback_plan(v: NodeView) -> NodePlan:
    """Swap: `current` and `previous` trade image and record."""
    return NodePlan(v.name, v.current_id, v.previous_id, v.previous_id, v.current_id,
                    records_of(v.records.current, v.records.previous, v.records.adopted),
                    records_of(v.records.previous, v.records.current, v.records.adopted))


def who_deploys() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"

