"""docker-compose.yml: the adapters' `ccdiff serve` needs a token by default, and every
service that talks to them sends the same one (issue 22)."""
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = ("quiche", "ngtcp2", "picoquic")


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
