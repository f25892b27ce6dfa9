"""`validate` end to end against the loopback test double, with a real serving container for the memory watcher; `config`."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvbake.engines.adapters.client import Engine
from kvbake.errors import RolloutError, ValidationStop
from kvbake.manifest import load_manifest
from kvbake.operate.adapters.memwatch import GIB, NodeMemory
from kvbake.operate.core.needle import make_needle_codes
from kvbake.serve.core.presets import choose_preset
from kvbake.operate.adapters.validation_run import ValidateRequest, run_validation
from tests.doubles.openai_double import Misbehaviour, OpenAIDouble

from conftest import run

pytestmark = pytest.mark.docker
STANDIN = Path(__file__).resolve().parents[2] / "examples" / "standin"
BASE = "kvbake-standin/vllm-base:0.33.0"
SMALL = ("--prefix-tokens", "2000", "--corruption-tokens", "2000", "--depths", "1000,3000")
SERVE = "import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: exit(0))\nwhile True: time.sleep(3600)\n"


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("validate") / "standin"
    shutil.copytree(STANDIN, folder, ignore=shutil.ignore_patterns(".kvbake", "overlay", "patches"))
    return folder / "manifest.yaml"


@pytest.fixture()
def double() -> Iterator[OpenAIDouble]:
    with OpenAIDouble() as running:
        yield running


@pytest.fixture(scope="module")
def serving(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A running container from the stand-in base; the test rewrites its /tmp/meminfo."""
    assert engine.inspect_image(BASE) is not None, "build the base first: python scripts/standin_base.py"
    name = f"kvbake-memtest-{secrets.token_hex(4)}"
    engine.client.run(BASE, ["-c", SERVE], entrypoint="python3", name=name, detach=True, networks=["none"], pull="never")
    folder = tmp_path_factory.mktemp("memwatch")
    deploy = folder / "deploy.yaml"
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"  # the engine under test
    nodes = [{"name": "spark-a", "host": host, "role": "head"}, {"name": "spark-b", "host": host, "role": "worker"}]
    deploy.write_text(json.dumps({"format": 1, "nodes": nodes, "launcher": {"command": ["true"], "container": name}}))
    try:
        yield {"engine": engine, "name": name, "deploy": deploy, "folder": folder}
    finally:
        engine.remove_container(name)


def set_meminfo(serving: dict, available_kib: int) -> None:
    source = serving["folder"] / "meminfo"
    source.write_text(f"MemTotal:       131072000 kB\nMemFree:         1000000 kB\nMemAvailable:   {available_kib} kB\n")
    serving["engine"].copy_in(source, serving["name"], "/tmp/meminfo")


def validate(capsys, manifest: Path, endpoint: str, *argv: str) -> tuple[int, str, str]:
    return run(capsys, "validate", "--manifest", str(manifest), "--endpoint", endpoint, *SMALL, *argv)


def reports(manifest: Path) -> list[dict]:
    """Every report, oldest first (names alone do not order runs within one second: a -2 sorts before the first)."""
    paths = sorted((manifest.parent / ".kvbake" / "validate").glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    return [json.loads(p.read_text()) for p in paths]


@pytest.mark.default_engine_only  # the plan against the double; no node engine involved
def test_a_clean_run_passes_every_step_and_writes_the_report(capsys, manifest, double):
    code, out, err = validate(capsys, manifest, double.url, "--preset", "control", "--pressure", "3")
    assert (code, err) == (0, "")
    for line in ("1 inertness        passed", "2 prefix identity  passed", "3 corruption set   passed", "4 needles          passed",
                 "5 pressure         passed", "release:  no release record (no --deploy given)", "corpus:   synthetic built-in"):
        assert line in out
    name = out.strip().splitlines()[-1].split()[1]
    data = json.loads((manifest.parent / name).read_text())
    assert data["outcome"] == "passed" and all(step["passed"] for step in data["steps"])
    assert (manifest.parent / name).with_suffix(".txt").read_text() in out
    page = ET.fromstring((manifest.parent / name).with_suffix(".html").read_text())
    assert [row.get("class") for row in page.iter("{http://www.w3.org/1999/xhtml}tr") if row.get("class")][-5:] == ["good"] * 5
    assert "not watched (no --deploy)" in "".join(page.itertext()) and "Pool pressure" in "".join(page.itertext())


# A double that drops the last code also drops the recall probe's only code, so auto would choose the identity
# oracle (and pass): the missing-code case forces the recall oracle.
@pytest.mark.parametrize(("faults", "reason", "argv"), [
    ({"foreign_code": make_needle_codes("kvbake:corruption set", 32)[5]},
     "corruption set: cross-request corruption: request 1 answered with request 3's code", ()),
    ({"cached_tokens_offset": -384}, "prefix identity: unexpected cached count: hit cached tokens: cached_tokens 1536, expected 1920", ()),
    ({"ignore_salt": True}, "reported 1920 cached tokens instead of 0, so cache hits leak across salts and this run is invalid", ()),
    ({"fail_status": 500}, "/v1/completions answered HTTP 500", ()),
    ({"omit_last_code": True}, "corruption set: incorrect output: request 1: missing", ("--oracle", "recall")),
], ids=["foreign-code", "wrong-cached-count", "leaking-salt", "http-500", "missing-code"])
@pytest.mark.default_engine_only  # the plan against the double; no node engine involved
def test_a_fault_stops_the_run_with_its_reason(capsys, manifest, double, faults, reason, argv):
    double.faults = Misbehaviour(**faults)
    code, out, err = validate(capsys, manifest, double.url, "--preset", "packing-327680", *argv)
    assert code == ValidationStop.exit_code and out == ""
    assert err.startswith("error (validation stop): ") and err.count("\n") == 1
    assert reason in err and "; report .kvbake/validate/" in err
    assert reports(manifest)[-1]["outcome"] == "stopped"


@pytest.mark.default_engine_only  # the plan against the double; no node engine involved
def test_an_unreachable_endpoint_is_a_one_line_stop(capsys, manifest):
    code, out, err = validate(capsys, manifest, "http://127.0.0.1:9", "--preset", "control")
    assert code == 15 and err.count("\n") == 1 and "cannot reach http://127.0.0.1:9/v1/models" in err


def test_the_memory_watcher_reads_every_node_inside_its_container(capsys, manifest, double, serving):
    set_meminfo(serving, 8 * 1024 * 1024)
    code, out, err = validate(capsys, manifest, double.url, "--preset", "control", "--deploy", str(serving["deploy"]),
                              "--meminfo-path", "/tmp/meminfo")
    assert code == 0, err
    assert "lowest MemAvailable spark-a 8.00 GiB, spark-b 8.00 GiB" in out and "no release record on spark-a" in out
    page = ET.fromstring((manifest.parent / out.strip().splitlines()[-1].split()[1]).with_suffix(".html").read_text())
    (chart,) = page.iter("{http://www.w3.org/2000/svg}svg")
    assert len(chart.findall("{http://www.w3.org/2000/svg}polyline")) == 2, "a line per node"
    assert {"spark-a", "spark-b", "floor 1.50 GiB"} <= {label.text for label in chart.iter("{http://www.w3.org/2000/svg}text")}


def test_a_node_below_the_floor_stops_the_run(capsys, manifest, double, serving):
    set_meminfo(serving, 1024 * 1024)
    code, out, err = validate(capsys, manifest, double.url, "--preset", "control", "--deploy", str(serving["deploy"]),
                              "--meminfo-path", "/tmp/meminfo", "--mem-interval", "0")
    assert code == 15 and "memory floor: MemAvailable below 1.50 GiB on spark-a 1.00 GiB, spark-b 1.00 GiB" in err
    assert double.received == ()


def test_a_node_whose_memory_cannot_be_read_stops_the_run(capsys, manifest, double, serving):
    code, out, err = validate(capsys, manifest, double.url, "--preset", "control", "--deploy", str(serving["deploy"]),
                              "--meminfo-path", "/tmp/absent", "--mem-interval", "0")
    assert code == 15 and f"node spark-a: cannot read MemAvailable from {serving['name']}:/tmp/absent" in err


def request(manifest: Path, url: str, preset: str = "packing-327680") -> ValidateRequest:
    loaded = load_manifest(manifest)
    return ValidateRequest(loaded, choose_preset(loaded, preset), url, depths=(1000, 3000), prefix_tokens=2000,
                           corruption_tokens=2000, mem_interval_s=0)


@pytest.mark.default_engine_only  # the plan against the double; no node engine involved
def test_a_floor_crossed_mid_run_stops_there_and_rolls_back(manifest, double):
    samples = iter([8, 8, 8, 1, 1])
    calls = []
    reader = lambda: [NodeMemory("spark-b", next(samples) * GIB)]  # noqa: E731 - a one-line fake
    with pytest.raises(ValidationStop, match="prefix identity: memory floor: MemAvailable below 1.50 GiB on spark-b"):
        run_validation(request(manifest, double.url), rollback=lambda: calls.append(1) or "rolled back", reader=reader)
    assert calls == [1]
    data = reports(manifest)[-1]
    assert [s["ran"] for s in data["steps"]] == [True, True, False, False, False]
    assert data["rollback"] == "done: rolled back" and data["memory"]["lowest_bytes"] == {"spark-b": GIB}


@pytest.mark.default_engine_only  # the plan against the double; no node engine involved
def test_a_clean_run_does_not_roll_back_and_a_failed_rollback_is_its_own_error(manifest, double):
    calls = []
    run_validation(request(manifest, double.url), rollback=lambda: calls.append(1) or "x")
    assert calls == []

    def broken() -> str:
        raise RolloutError("node spark-b is unreachable", "bring it back")

    double.faults = Misbehaviour(corrupt_hits=True)
    with pytest.raises(RolloutError, match=r"validation stopped \(prefix identity: incorrect output: hit output.*rollback failed"):
        run_validation(request(manifest, double.url), rollback=broken)


@pytest.mark.default_engine_only  # the plan against the double; no node engine involved
def test_rollback_on_failure_needs_a_deployment(capsys, manifest, double):
    code, _, err = validate(capsys, manifest, double.url, "--preset", "control", "--rollback-on-failure")
    assert code == 2 and err.count("\n") == 1 and "--rollback-on-failure needs --deploy" in err


@pytest.mark.default_engine_only  # the plan against the double; no node engine involved
def test_a_held_preset_needs_its_flag_and_reason(capsys, manifest, double):
    code, _, err = validate(capsys, manifest, double.url, "--preset", "longctx-524288")
    assert code == 14 and "is held" in err
    code, out, _ = validate(capsys, manifest, double.url, "--preset", "longctx-524288", "--allow-held", "--reason", "window 3")
    assert code == 0 and "override: --allow-held: window 3" in out


@pytest.mark.default_engine_only  # configuration files only; no node engine involved
def test_config_check_names_every_drifted_missing_and_extra_file(capsys, manifest, tmp_path):
    out_dir = tmp_path / "configs"
    assert run(capsys, "config", "--all", "--manifest", str(manifest), "--out", str(out_dir))[0] == 0
    assert run(capsys, "config", "--check", "--all", "--manifest", str(manifest), "--out", str(out_dir))[0] == 0
    (out_dir / "control" / "ranks.env").write_text("VLLM_DSV41_KV_PAIR=3\n")
    (out_dir / "packing-327680" / "launcher.args").unlink()
    (out_dir / "stale").mkdir()
    (out_dir / "stale" / "ranks.env").write_text("")
    code, _, err = run(capsys, "config", "--check", "--manifest", str(manifest), "--out", str(out_dir))
    assert code == 7 and err.count("\n") == 1
    assert "drifted: control/ranks.env; missing: packing-327680/launcher.args; extra: stale/ranks.env" in err


@pytest.mark.default_engine_only  # configuration files only; no node engine involved
def test_config_refuses_a_held_preset_without_its_flag(capsys, manifest, tmp_path):
    code, _, err = run(capsys, "config", "longctx-524288", "--manifest", str(manifest), "--out", str(tmp_path))
    assert code == 14 and "--allow-held" in err and not any(tmp_path.iterdir())
