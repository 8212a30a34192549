"""Day → night → day, end to end with the project's own commands: serve the champion, chat about
something it never saw (captured into the memory buffer), run the nightly flow
(`consolidate run`), and show that the new champion's bits per byte on that conversation dropped,
next to a control paragraph of the same shape that was never captured.

    python scripts/day_night_day.py [--workspace DIR] [--steps 400] [--pretrain 150]

Every step is a subprocess of the `consolidate` command (bootstrap, serve, run), the chat goes
through the official `openai` client, and the figures are computed with lib.evaluation.evaluate.bits_per_byte
on the versions the lineage registry names. The server keeps running through the night: after a
promotion it answers as the new champion without a restart.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FACT = ("Remember this for tomorrow: the Zorbulator 3000 is a sorting machine built in the harbour town of "
        "Quillhaven. It sorts zorbs by colour, blue ones first, then green, then red. Its inventor, Mira "
        "Castellane, named it after her cat Zorba, who liked to sleep on the conveyor belt.")
CONTROL = ("Remember this for tomorrow: the Plimbometer 40 is a weighing machine built in the mountain village of "
           "Drossmere. It weighs plimbs by size, small ones first, then medium, then large. Its inventor, Tobin "
           "Ashgrove, named it after his dog Plimby, who liked to nap under the scale's platform.")


def consolidate(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=ROOT, check=True, text=True, **kw)


def wait_for(url: str, timeout: float = 180.0) -> None:
    import httpx

    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workspace", type=Path, default=None, help="default: a new temporary folder")
    ap.add_argument("--steps", type=int, default=400, help="training steps of the night")
    ap.add_argument("--pretrain", type=int, default=150, help="pre-training steps of v0")
    ap.add_argument("--port", type=int, default=8765)
    args = ap.parse_args()
    ws = (args.workspace or Path(tempfile.mkdtemp(prefix="day-night-day-"))).resolve()
    base = ["--preset", "tiny", "--workspace", str(ws), "--set", f"model.pretrain_iterations={args.pretrain}"]
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    t_start = time.time()

    print(f"workspace {ws}")
    consolidate("bootstrap", *base, stdout=subprocess.DEVNULL)
    print(f"bootstrap: v0 pre-trained ({time.time() - t_start:.0f} s)")

    # Day: serve the champion with capture on, one conversation about something new.
    server = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", *base, "--port", str(args.port),
                               "--set", "serve.flush_interval_s=2", "--log-level", "warning"],
                              cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{args.port}"
        wait_for(f"{url}/v1/models")
        from openai import OpenAI

        client = OpenAI(base_url=f"{url}/v1", api_key="-")
        day1 = client.chat.completions.create(model="champion", max_tokens=24, temperature=0,
                                              messages=[{"role": "user", "content": FACT}])
        print(f"day 1: {day1.model} answered {day1.choices[0].message.content!r}")
        time.sleep(4)  # two flush intervals: the capture is a parquet file in the buffer now

        # Night: the nightly flow, as the scheduler would run it.
        t_night = time.time()
        night = json.loads(consolidate("run", *base, "--set", f"training.num_iterations={args.steps}", "--json",
                                       capture_output=True).stdout)
        print(f"night: {night['parent']} -> {night.get('version')} {night.get('status')} "
              f"({time.time() - t_night:.0f} s; curated {night.get('curated_docs')} documents)")

        # Day 2: the same server, no restart.
        from lib.registry.lineage import Lineage
        from lib.workspace import Workspace

        lin = Lineage(Workspace(ws).lineage_db)
        champion = lin.alias("champion")
        deadline = time.time() + 30
        while True:
            day2 = client.chat.completions.create(model="champion", max_tokens=24, temperature=0,
                                                  messages=[{"role": "user", "content": "What does the Zorbulator 3000 sort?"}])
            if day2.model == champion or time.time() > deadline:
                break
            time.sleep(1)
        print(f"day 2: {day2.model} answered {day2.choices[0].message.content!r} (champion: {champion})")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)

    # Figures: the captured conversation (as stored) and the control, under v0 and the new version.
    import pyarrow.parquet as pq

    from lib.evaluation.evaluate import bits_per_byte
    from lib.data.token_cache import is_heldout

    captured = [r for f in sorted(Workspace(ws).buffers.glob("*.parquet"))
                for r in pq.read_table(f).to_pylist() if str(r.get("source", "")).startswith("serve:")]
    consumed = {b.content_hash for b in lin.buffer_files("consumed")}
    conv = captured[0] if captured else None
    if conv is None:  # consumed files stay where they are; find the record in the registry's files
        for b in lin.buffer_files():
            rows = pq.read_table(b.path).to_pylist() if Path(b.path).exists() else []
            conv = next((r for r in rows if str(r.get("source", "")).startswith("serve:")), conv)
    assert conv is not None, "the conversation was not captured"
    from lib.config import load_config

    held = is_heldout(conv["id"], load_config(preset="tiny").sampling.heldout_fraction)
    control = conv["text"].replace(FACT, CONTROL)
    rows = []
    for version in ["v0", night.get("version")]:
        if not version:
            continue
        path = lin.get_version(version)["path"]
        rows.append((version, bits_per_byte(path, [conv["text"]]), bits_per_byte(path, [control])))
    print(f"\nconversation {conv['id']} (source {conv.get('source')}, held out of training: {held}; "
          f"buffer files consumed: {len(consumed)})")
    print("| version | conversation BPB | control BPB (never captured) |\n|---|---|---|")
    for version, a, b in rows:
        da = f" ({(a / rows[0][1] - 1) * 100:+.1f}%)" if version != "v0" else ""
        db = f" ({(b / rows[0][2] - 1) * 100:+.1f}%)" if version != "v0" else ""
        print(f"| {version} | {a:.3f}{da} | {b:.3f}{db} |")
    print(f"\ntotal {time.time() - t_start:.0f} s; lineage: consolidate lineage show {night.get('version')} --workspace {ws}")


if __name__ == "__main__":
    main()
