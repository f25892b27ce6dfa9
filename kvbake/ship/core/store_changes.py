"""Each node's engine profile at the last completed transition, kept beside the journal on the deploying host."""

# A node whose image store changed since then has lost its images, records and serving container with the old store.

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from kvbake.atomicfile import write_atomic
from kvbake.engines.core.detection import EngineProfile
from kvbake.errors import RolloutError

ENGINES = "engines.json"


def read_stores(folder: Path) -> dict[str, dict[str, str]]:
    """Node → {name, store} as last seen; empty when never written. A damaged file is a typed error."""
    path = folder / ENGINES
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        return {str(k): {"name": str(v["name"]), "store": str(v["store"])} for k, v in data.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise RolloutError(f"{path.name} in {folder.name}/ is damaged", f"delete {path.name}; the next deploy writes it again") from None


def remember_stores(folder: Path, profiles: Mapping[str, EngineProfile]) -> None:
    data = {node: {"name": p.name, "store": p.store} for node, p in sorted(profiles.items())}
    write_atomic(folder / ENGINES, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())


def store_changes(recorded: Mapping[str, Mapping[str, str]], current: Mapping[str, EngineProfile]) -> dict[str, tuple[str, str]]:
    """Nodes whose image store differs from the recorded one: node → (old profile, new profile). Version upgrades
    on the same store keep the images and are not changes."""
    return {node: (recorded[node]["name"], profile.name) for node, profile in sorted(current.items())
            if node in recorded and recorded[node]["store"] != profile.store}


def check_store_changes(changes: Mapping[str, tuple[str, str]], reseat: set[str]) -> None:
    """A changed node must be named by --reseat; --reseat of a node that did not change is refused."""
    unknown = sorted(reseat - set(changes))
    if unknown:
        raise RolloutError(f"--reseat {', '.join(unknown)}: that node's image store did not change since the last deploy and its "
                           "records are intact", "reseat only a node whose store was switched or whose records are damaged; drop the option")
    missing = {node: change for node, change in changes.items() if node not in reseat}
    if missing:
        node, (old, new) = next(iter(sorted(missing.items())))
        raise RolloutError(f"node {node} ran {old} at the last deploy and runs {new} now: its images, release records and "
                           "serving container stayed in the old store",
                           f"pull the base on {node} from the private registry and tag it under the manifest's name, then "
                           f"deploy with --reseat {node}; or switch the node back to its old store")
