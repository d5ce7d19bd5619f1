"""docker-compose.yml: the adapters' `ccdiff serve` needs a token by default, and every
service that talks to them sends the same one (issue 22)."""
from pathlib import Path

import yaml

from ccdiff.stacks import load_recipes

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = tuple(load_recipes())     # every stack folder: each needs its adapter service


def services() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]


def test_every_adapter_service_requires_the_token_by_default():
    for name in ADAPTERS:
        env = services()[name].get("environment", {})
        assert env.get("CCDIFF_SERVE_TOKEN", "").startswith("${CCDIFF_SERVE_TOKEN:-"), name
        assert env["CCDIFF_SERVE_TOKEN"] != "${CCDIFF_SERVE_TOKEN:-}", "an empty default turns it off"


def test_every_client_of_the_adapters_sends_the_same_token():
    all_services = services()
    token = all_services["quiche"]["environment"]["CCDIFF_SERVE_TOKEN"]
    clients = [name for name, svc in all_services.items()
               if any(k.startswith("CCDIFF_REMOTE_") for k in (svc.get("environment") or {}))]
    assert set(clients) >= {"replay", "conformance"}
    for name in clients:
        assert all_services[name]["environment"].get("CCDIFF_SERVE_TOKEN") == token, name


def test_every_stack_recipe_has_its_adapter_service_and_remote():
    """Each implementations/<stack>/ has a compose service built with STACK=<stack>, and the
    runners reach it through CCDIFF_REMOTE_<STACK>."""
    all_services = services()
    for name in load_recipes():
        assert name in all_services, f"docker-compose.yml has no service {name}"
        assert all_services[name]["build"]["args"]["STACK"] == name
        for client in ("replay", "conformance", "ccdiff"):
            env = f"CCDIFF_REMOTE_{name.upper().replace('-', '_')}"   # ccdiff/remote.py
            assert all_services[client]["environment"][env] == f"{name}:7000"
            assert name in all_services[client]["depends_on"]
