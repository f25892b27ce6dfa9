"""Adapter: the capacity line of a preset, predicted, and compared with what every rank's serving container logged."""

from __future__ import annotations

from pathlib import Path

from kvbake.deployfile import Deployment
from kvbake.errors import PresetError
from kvbake.kvarith.config import deepseek_family
from kvbake.kvarith.dense import dense_model_of, read_model_config
from kvbake.manifest import Manifest
from kvbake.operate.core.capacity_prediction import Prediction, check_ranks, deepseek_refusal, predict
from kvbake.yaml_documents import did_you_mean


def predict_preset(manifest: Manifest, preset_name: str, model_config: Path, device: str) -> Prediction:
    """The prediction for a preset of the manifest, from the model's config.json (or its folder)."""
    if preset_name not in manifest.presets:
        raise PresetError(f"unknown preset {preset_name!r}{did_you_mean(preset_name, list(manifest.presets))}",
                          f"choose one of: {', '.join(manifest.presets)}")
    preset = manifest.presets[preset_name]
    file, data = read_model_config(model_config, "--model-config")
    family = deepseek_family(data)
    if family is not None:
        raise deepseek_refusal(str(file), data.get("model_type"), family, preset)
    return predict(manifest, preset, dense_model_of(file, data), device)


def rank_logs(deployment: Deployment) -> dict[str, str]:
    """Every node's serving container log (empty when the container is absent)."""
    from kvbake.ship.adapters.fleet import connect

    return {name: engine.container_logs(deployment.launcher.container) for name, engine in connect(deployment).items()}


def check_deployment(prediction: Prediction, deployment: Deployment) -> list[str]:
    """One line per rank: the predicted capacity it logged, or (a worker of a multi-node serve) that it logs none;
    any other rank stops (ValidationStop)."""
    head = next((n.name for n in deployment.nodes if n.role == "head"), None)  # one node: its head or not, it must log
    return check_ranks(prediction, rank_logs(deployment), head)
