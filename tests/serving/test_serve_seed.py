"""A seed no generator takes (2**70) is the client's mistake: 400 naming `seed` and the range,
not a 500 from inside generation ("Overflow when unpacking long long"). Issue #28."""

from __future__ import annotations

import shutil

import httpx

from lib.registry.lineage import Lineage
from lib.serving.serve import BackgroundServer, create_app
from lib.config import load_config


def test_a_seed_out_of_range_is_a_400(workspace, tiny_hf_model):
    shutil.copytree(tiny_hf_model, workspace.checkpoint("v0"))
    lin = Lineage(workspace.lineage_db)
    lin.record_version("v0", workspace.checkpoint("v0"), status="accepted", storage="full")
    lin.set_alias("champion", "v0", actor="bootstrap")
    cfg = load_config(preset="tiny", overrides=[f"workspace.root={workspace.root}", "serve.reload_interval_s=0"])
    with BackgroundServer(create_app(workspace, cfg)) as srv:
        for path, body in (("completions", {"prompt": "x"}), ("chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
            for stream in (False, True):
                r = httpx.post(f"{srv.base_url}/v1/{path}", json={**body, "max_tokens": 2, "seed": 2**70, "stream": stream}, timeout=60)
                assert r.status_code == 400, r.text
                error = r.json()["error"]
                assert error["param"] == "seed" and "outside the range" in error["message"] and "2**64 - 1" in error["message"]
        ok = httpx.post(f"{srv.base_url}/v1/completions", json={"prompt": "x", "max_tokens": 2, "seed": 2**64 - 1}, timeout=60)
        assert ok.status_code == 200, ok.text
