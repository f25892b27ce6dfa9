"""An adopted serve's secrets by name in release records and journals: a value an older kvbake wrote in clear goes at the next write."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from kvbake.secret_env import withhold_args
from kvbake.serve.core.serve_reading import withhold_command
from kvbake.ship.core.create_spec import withhold_spec
from kvbake.ship.core.noderecords import NodeRecords
from kvbake.ship.core.release import Release

SCRUBBED = "scrubbed a secret value an older kvbake wrote into {what} on {where}"
RECORD_KEYS = ("current", "previous", "adopted")
PLAN_SIDES = ("before_records", "after_records")


def withhold_adopted(adopted: Mapping[str, Any]) -> dict[str, Any]:
    """An adopted serve's record with its secrets by name: its create spec, the `docker exec` commands that started its
    vLLM and its Ray node, and its vLLM command line."""
    withheld = dict(adopted)
    if withheld.get("spec"):
        withheld["spec"] = withhold_spec(withheld["spec"])
    for key in ("exec", "ray_exec"):
        if withheld.get(key):
            withheld[key] = withhold_command(withheld[key])
    if withheld.get("serve_argv"):
        withheld["serve_argv"] = withhold_args(withheld["serve_argv"])[0]
    return withheld


def withhold_release(release: Release | None) -> Release | None:
    return replace(release, adopted=withhold_adopted(release.adopted)) if release is not None and release.adopted else release


def withhold_release_data(data: Any) -> Any:
    """A release record in its JSON form (as a journal holds it), withheld."""
    return {**data, "adopted": withhold_adopted(data["adopted"])} if isinstance(data, Mapping) and data.get("adopted") else data


def withhold_journal_data(journal: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A journal in its JSON form (or the copy a node keeps) with the release records of every node's plan withheld."""
    if not journal or not isinstance(journal.get("nodes"), (list, tuple)):
        return journal
    plans = [{**plan, **{side: {key: withhold_release_data(record) for key, record in plan[side].items()}
                         for side in PLAN_SIDES if isinstance(plan.get(side), Mapping)}} if isinstance(plan, Mapping) else plan
             for plan in journal["nodes"]]
    return {**journal, "nodes": plans}


def withhold_records(records: NodeRecords) -> NodeRecords:
    """A node's records with every release's adopted serve withheld, its journal copy's included."""
    releases = {key: withhold_release(getattr(records, key)) for key in RECORD_KEYS}
    return replace(records, **releases, transition=withhold_journal_data(records.transition))


def records_in_clear(records: NodeRecords) -> list[str]:
    """What of a node's records holds a secret value in clear: its release records, its journal copy."""
    releases = any(withhold_release(getattr(records, key)) != getattr(records, key) for key in RECORD_KEYS)
    journal = withhold_journal_data(records.transition) != records.transition
    return [what for what, held in (("the release records", releases), ("the journal copy", journal)) if held]
