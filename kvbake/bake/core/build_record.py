"""The build record: a JSON document of what one build produced, written beside the manifest."""

from __future__ import annotations

import getpass
import json
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kvbake import __version__
from kvbake.atomicfile import write_atomic
from kvbake.bake.core.plan import plan_summary
from kvbake.secretscan import refuse_credentials

RECORDS_DIR = ".kvbake/builds"


def build_record(built: Any, builder: str) -> dict[str, Any]:
    plan = built.plan
    return {
        "kvbake": __version__, "builder": builder,
        "image": built.reference, "image_id": built.image_id, "config_digest": built.config_digest,
        "engine": built.expected.profile.to_json() if built.expected else None,
        "layer_diff_id": plan.layer.diff_id, "archive_bytes": built.archive_bytes,
        "manifest_sha256": plan.lock.manifest_sha256, "lock_sha256": plan.lock.core_sha256(),
        "built_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "built_by": f"{getpass.getuser()}@{socket.gethostname()}",
        "timings_s": built.timings, "plan": plan_summary(plan),
    }


def write_json_record(folder: Path, reference: str, record: dict[str, Any]) -> Path:
    """Write `record` as `<folder>/<tag of reference>.json`; the one writer of build and push records; never a credential."""
    refuse_credentials(record, f"record {reference}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (reference.rsplit(":", 1)[1] + ".json")
    write_atomic(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    return path


def write_record(manifest_root: Path, record: dict[str, Any]) -> Path:
    return write_json_record(manifest_root / RECORDS_DIR, record["image"], record)
