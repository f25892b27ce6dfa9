"""The provenance commands: `keys` makes a cosign key pair; `sign` signs the pushed release and attaches its provenance."""

from __future__ import annotations

import argparse
from typing import Any

from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
from kvbake.provenance.adapters import cosign
from kvbake.provenance.core.slsa import PREDICATE_TYPE, provenance_predicate
from kvbake.ship.core.push_record import pushed_image

Result = tuple[dict[str, Any], str]


def cmd_keys(args: argparse.Namespace) -> Result:
    cosign.cosign_binary()  # the tool first: never ask for a password only to fail
    secret = cosign.password()
    args.out.mkdir(parents=True, exist_ok=True)
    key, pub = cosign.generate_key_pair(args.out / args.name, secret)
    return ({"private_key": str(key), "public_key": str(pub)},
            f"wrote {key} (keep it secret; its password is the one given) and {pub} (list it under signing.keys in deploy.yaml)")


def cmd_sign(args: argparse.Namespace) -> Result:
    manifest = load_manifest(args.manifest)
    lock = read_lock(manifest)
    reference = pushed_image(manifest, lock).pinned
    cosign.cosign_binary()
    secret = cosign.password()
    predicate = provenance_predicate(lock, manifest.path.name)
    cosign.sign(reference, args.key, secret)
    cosign.attest(reference, args.key, secret, predicate, PREDICATE_TYPE)
    data = {"image": reference, "key": str(args.key), "attestation": PREDICATE_TYPE, "materials": len(predicate["materials"])}
    return data, (f"signed {reference} with {args.key.name} and attached its SLSA provenance "
                  f"({len(predicate['materials'])} materials: the base, {len(lock.patches)} patches, the donor commit)")

