"""The provenance commands: `keys` makes a cosign key pair, `sign` signs the pushed release, `trace` proves the chain."""

from __future__ import annotations

import argparse
from typing import Any

from kvbake.attest.adapters import cosign
from kvbake.attest.adapters.signing import opened_key, sign_pushed
from kvbake.lock import read_lock
from kvbake.manifest import load_manifest
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
    reference = pushed_image(manifest, lock).pinned  # a push record first: never ask for a password only to find nothing to sign
    return sign_pushed(reference, lock, manifest.path.name, args.key, opened_key(args.key))


def cmd_trace(args: argparse.Namespace) -> Result:
    from kvbake.command_output import emit
    from kvbake.errors import IntegrityError, SignatureError
    from kvbake.lock import load_lock_file
    from kvbake.bake.core.plan import tag_for
    from kvbake.provenance.adapters.evidence import fleet_links, local_links, pushed_digest, pushed_repository, registry_links, signature_links
    from kvbake.ship.core.push_record import PUSHES_DIR
    from kvbake.provenance.core.trace import PUSHED_MANIFEST, first_broken, table

    manifest = load_manifest(args.manifest)
    lock = load_lock_file(manifest.lock_path)  # a drifted manifest is a broken link to show, not a refusal
    links = local_links(manifest, lock) + registry_links(manifest, lock)
    pushed = next((link for link in links if link.name == PUSHED_MANIFEST and link.holds), None)
    if args.key and pushed is not None:
        repository = pushed_repository(manifest, pushed_digest(manifest.root / PUSHES_DIR / f"{tag_for(manifest, lock)}.json"))
        links += signature_links(f"{repository}@{pushed.value}", list(args.key), lock, manifest)
    if args.deploy is not None:
        from kvbake.deployfile import load_deployment
        from kvbake.ship.adapters.fleet import make_fleet

        links += fleet_links(make_fleet(load_deployment(args.deploy), manifest, lock), lock)
    data = {"links": [link.as_dict() for link in links]}
    broken = first_broken(links)
    if broken is None:
        return data | {"ok": True}, table(links) + f"\nevery link holds ({len(links)})"
    emit(args, data | {"ok": False}, table(links))
    failure = SignatureError if broken.kind in ("signature", "attestation") else IntegrityError
    count = sum(not link.holds for link in links)
    raise failure(f"trace: {count} broken link(s); the first: {broken.kind} {broken.name}: {broken.broken}",
                  "find who changed it (the two values above); rebuild, push and sign from the reviewed lock, or redeploy")
