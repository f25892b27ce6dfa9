"""The adopted serve's copy: its container's writable layer, committed by `adopt` as a local image on its node."""

# A launcher's mods live in the serving container's writable layer (eugr's --apply-mod copies a folder in and patches
# vLLM's files where they run). A container started with --rm is gone once stopped, and its create spec alone makes
# it again without them. So adopt commits the writable layer to a local image, named after the container, and a way
# back that must recreate the serve creates it from that copy: the base's layers plus one, holding the mods.

from __future__ import annotations

from typing import Any, Iterable, Mapping

COPY_REPOSITORY = "kvbake-adopted"


def copy_reference(container_id: str) -> str:
    """The local name of one adopted container's copy (never pushed: no registry host in it)."""
    return f"{COPY_REPOSITORY}:{container_id[:12]}"


def copy_record(reference: str, image: Mapping[str, Any], base_layers: Iterable[str]) -> dict[str, str]:
    """What the adopted record keeps of the copy: its name, its image ID and the one layer it adds to the base."""
    layers, base = list(image["RootFS"]["Layers"]), list(base_layers)
    if layers[:len(base)] != base or len(layers) != len(base) + 1:
        raise ValueError(f"the copy {reference} holds {len(layers)} layers, not the base's {len(base)} plus one")
    return {"reference": reference, "image_id": str(image["Id"]), "layer": layers[-1]}


def copy_of(info: Mapping[str, Any] | None) -> Mapping[str, str] | None:
    """The copy an adopted record names (None: an earlier kvbake, or a serve adopted without one)."""
    return (info or {}).get("copy") or None


def image_to_recreate(info: Mapping[str, Any]) -> str:
    """The image a gone adopted serve is created from again: its copy when adopt made one, else its own image."""
    copy = copy_of(info)
    return str(copy["image_id"]) if copy else str(info["spec"]["image"])


def runs_the_copy(container: Mapping[str, Any], image: Mapping[str, Any] | None, info: Mapping[str, Any], base_layers: Iterable[str]) -> bool:
    """Whether a container runs the adopted serve's copy: that image, holding the base's layers plus the copy's one."""
    copy = copy_of(info)
    if not copy or image is None or container.get("Image") != copy["image_id"]:
        return False
    return list(image.get("RootFS", {}).get("Layers", [])) == [*base_layers, copy["layer"]]


def compared_layers(container: Mapping[str, Any], image: Mapping[str, Any] | None, info: Mapping[str, Any] | None,
                    base_layers: Iterable[str]) -> tuple[str, ...]:
    """The layers a rank is compared with its peers by: a copy's are its base's (each rank's copy adds a layer of its
    own container, which differs from its peers' even when the mods are the same)."""
    if info and runs_the_copy(container, image, info, base_layers):
        return tuple(base_layers)
    return tuple((image or {}).get("RootFS", {}).get("Layers", []))


def as_recorded(spec: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
    """A container's create spec with the copy's image read as the adopted serve's own: one recreated from the copy
    is the same serve."""
    copy = copy_of(info)
    if copy and spec.get("image") == copy["image_id"]:
        return {**spec, "image": info["spec"]["image"]}
    return dict(spec)


def copies_named(records: Iterable[Any]) -> set[str]:
    """The copies a node's records still need (its current, previous and adopted releases)."""
    return {str(copy["reference"]) for release in records if release is not None
            for copy in [copy_of(release.adopted)] if copy}


def stray_copies(held: Iterable[str], needed: set[str]) -> list[str]:
    """The copies a node holds that no record names: a revert or a forgotten adoption leaves them to remove."""
    return sorted(reference for reference in held if reference not in needed)
