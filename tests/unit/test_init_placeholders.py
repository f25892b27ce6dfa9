"""The values init leaves to fill, each with the command or edit that fills it, and the manifest fields init rewrites
(control's note and length, the drafter's limit, the registry host of a nested repository path)."""

from __future__ import annotations

from kvbake.ship.core.init_documents import InitOptions, deploy_document, manifest_document, placeholders, serve_port
from kvbake.serve.core.serve_description import BasePin, Drafter, Mounts, NodeServe, ServeDescription

ROOT = "/usr/local/lib/python3.12/dist-packages"
TEMPLATE = {"base": {"image": "old", "source_root": ROOT}, "donor": {"url": "u", "revision": "0" * 40},
            "output": {"repository": "registry.example.internal:5000/team/dsv41"},
            "presets": {"control": {"max_model_len": 1, "launcher_args": [], "note": "old"}, "packing": {"max_model_len": 327680, "launcher_args": []}}}


def described(**changes) -> ServeDescription:
    fields = dict(base=BasePin("spark:v5", "sha256:" + "a" * 64, False), head="a", max_model_len=8192, launcher_args=("--port", "9000"),
                  switches={}, env={}, mounts=Mounts(), addresses={}, master_port="", shape="main", model="/models/m")
    return ServeDescription(**{**fields, **changes})


def nodes(*names: str) -> list[NodeServe]:
    return [NodeServe(name, f"ssh://{name}", {"Name": f"/{name}-serve"}, None, {}) for name in names]


def test_every_placeholder_names_where_it_is_and_how_to_fill_it():
    description = described(addresses={"a": "10.0.0.1"})
    manifest = manifest_document(TEMPLATE, description, InitOptions())
    left = {p.where: p.fix for p in placeholders(manifest, deploy_document(nodes("a", "b", "c"), description, ROOT), description)}
    assert left["manifest.yaml output.repository"].startswith("run init again with --registry HOST:PORT")
    assert left["manifest.yaml donor.revision"].startswith("run init again with --donor-revision REV")
    assert left["manifest.yaml donor.revision"].endswith("then lock --donor CHECKOUT")
    assert left["deploy.yaml launcher.env.MODEL_DIR"].endswith("set MODEL_DIR to the model folder on the nodes")
    assert left["deploy.yaml nodes[].address of b, c"].startswith("set each node's address")
    assert left["manifest.yaml base.image (no registry digest)"].endswith("`base sync` puts it into the private registry")
    assert left["deploy.yaml signing.keys"].startswith("run init again with --signing-key PUB")
    assert len(left) == 6


def test_a_single_node_needs_no_address_and_a_filled_manifest_leaves_nothing():
    description = described(base=BasePin("r@sha256:" + "d" * 64, "sha256:" + "a" * 64, True), mounts=Mounts(model_dir="/srv/m"))
    manifest = manifest_document(TEMPLATE, description, InitOptions(registry="reg:5000", donor_revision="f" * 40))
    deploy = deploy_document(nodes("a"), description, ROOT, signing_keys=["reviewers/alice.pub"])
    assert deploy["signing"] == {"require_signature": True, "keys": ["reviewers/alice.pub"]}
    assert placeholders(manifest, deploy, description) == []


def test_control_gets_the_length_and_a_note_other_presets_keep_theirs_and_the_registry_keeps_the_path():
    manifest = manifest_document(TEMPLATE, described(), InitOptions(registry="reg.lan:5000", donor_url="https://d"))
    assert manifest["presets"]["control"]["max_model_len"] == 8192
    assert manifest["presets"]["control"]["note"].startswith("the serve the nodes ran when init read them")
    assert manifest["presets"]["packing"]["max_model_len"] == 327680 and "note" not in manifest["presets"]["packing"]
    assert manifest["output"]["repository"] == "reg.lan:5000/team/dsv41"
    assert manifest["donor"] == {"url": "https://d", "revision": "0" * 40}
    assert TEMPLATE["presets"]["control"]["note"] == "old", "the template itself is not changed"


def test_the_drafter_limit_is_the_one_given_else_controls_length():
    given = manifest_document(TEMPLATE, described(drafter=Drafter("--spec", "http://d", 4096)), InitOptions())
    assert given["drafter"]["max_positions"] == 4096 and given["drafter"]["note"] == "as the serve gave it (the drafter did not answer /v1/models)"
    ran = manifest_document(TEMPLATE, described(drafter=Drafter("--spec", "http://d", None)), InitOptions())
    assert ran["drafter"]["max_positions"] == 8192 and "raise only after" in ran["drafter"]["note"]
    deploy = deploy_document(nodes("a"), described(drafter=Drafter("--spec", "http://d", None)), ROOT)
    assert deploy["drafter"] == {"url": "http://d", "max_positions": 8192}


def test_the_port_is_the_serves_else_vllms_default():
    assert serve_port(described()) == "9000"
    assert serve_port(described(launcher_args=())) == "8000"
    one = deploy_document(nodes("a"), described(launcher_args=()), ROOT)
    assert one["start"] == "in-order" and one["readiness"]["url"] == "http://127.0.0.1:8000/health"
    assert one["launcher"]["env"]["GPUS"] == "all" and one["launcher"]["timeout_s"] == 600
    assert one["readiness"]["status"] == 200 and one["readiness"]["timeout_s"] == 1800 and one["readiness"]["interval_s"] == 2
    assert deploy_document(nodes("a"), described(gpus=False), ROOT)["launcher"]["env"]["GPUS"] == "none"


def test_a_repository_without_a_host_gets_the_registry_in_front():
    template = {**TEMPLATE, "output": {"repository": "dsv41"}}
    assert manifest_document(template, described(), InitOptions(registry="reg.lan:5000"))["output"]["repository"] == "reg.lan:5000/dsv41"


def test_the_containers_environment_is_written_with_sorted_names_and_an_unknown_model_folder_is_left_out():
    from kvbake.ship.core.init_documents import launcher_env

    env = launcher_env(described(env={"Z_VAR": "1", "A_VAR": "2"}), ROOT)
    assert env["CONTAINER_ENV"] == '{"A_VAR": "2", "Z_VAR": "1"}'
    assert "MODEL_DIR" not in deploy_document(nodes("a"), described(), ROOT)["launcher"]["env"]
