"""Drive the real Prefect UI in headless Chromium, as a user of the deployments would.

A `prefect server start` with its UI on loopback (private PREFECT_HOME), the pools of
deployments/create-pools.sh, every deployment of deployments/prefect.yaml, a process worker
(deployments/worker.sh); a bootstrap run makes the champion. Then, in Chromium (Debian's `chromium`, spoken
to over the DevTools protocol with the `websockets` client Prefect already installs):

1. open the custom-run form of `nightly-consolidation/manual` and check what it shows: the preset
   select on top reading `tiny`, no `serve` or `model` section, no "Property is type None",
   `curation.languages` holding `en`, `<workspace>` in a description shown as text (the same
   form in the V2 UI under /v2 is checked and photographed too);
2. type `training.num_iterations` into the form (the one field changed, to keep the night short)
   and press Submit;
3. wait for that flow run to end Completed (through the API), then open its page (the run
   graph) and its Artifacts tab, and each of the night's artifacts.

Screenshots (PNG) of every step go to --out; the script exits 1 if a check fails.

    python scripts/ui_check.py --out /tmp/ui-check            # ~6-10 min on 2 cores
    python scripts/ui_check.py --out /tmp/ui-check --keep     # leave server+worker up to look around

Trade-off: the DevTools protocol by hand (a few commands: navigate, evaluate, screenshot) instead
of Playwright, whose browsers are a separate download; the price is that element lookup is
written here against the UI's labels and buttons, which a Prefect UI release may rename.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PREFECT = str(BIN / "prefect")


def free_port(low: int = 4300, high: int = 4399) -> int:
    for port in range(low, high + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {low}-{high}")


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(1)
    tail = log.read_text()[-3000:] if log and log.exists() else ""
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s\n{tail}")


class Stack:
    """Server (with UI), pools, deployments and a CPU worker; stopped in reverse order."""

    def __init__(self, home: Path, workspace: Path, port: int):
        self.home, self.workspace, self.port = home, workspace, port
        self.api = f"http://127.0.0.1:{port}/api"
        self.ui = f"http://127.0.0.1:{port}"
        self.env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_API_URL": self.api,
                    "PREFECT_UI_API_URL": self.api, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                    "PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(port),
                    "CONSOLIDATION_WORKSPACE": str(workspace), "TOKENIZERS_PARALLELISM": "false",
                    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.env.pop("PREFECT_PROFILES_PATH", None)
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = open(self.home / f"{name}.log", "w")
        proc = subprocess.Popen(cmd, env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def cli(self, *args: str, timeout: float = 300) -> str:
        proc = subprocess.run([PREFECT, "--no-prompt", *args], env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"prefect {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        return proc.stdout

    def up(self) -> None:
        server = self.start("server", [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(self.port)])
        wait_http(f"{self.api}/health", 240, server, self.home / "server.log")
        subprocess.run(["sh", "deployments/create-pools.sh"], env=self.env, cwd=ROOT, check=True, capture_output=True)
        self.cli("deploy", "--all", "--prefect-file", "deployments/prefect.yaml")
        self.start("worker", ["sh", "deployments/worker.sh", "consolidation-cpu"])

    def down(self) -> None:
        for proc in reversed(self.procs):  # the worker script stops its worker itself
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    def get(self, path: str) -> Any:
        r = httpx.get(f"{self.api}/{path}", timeout=30)
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body: dict | None = None) -> Any:
        r = httpx.post(f"{self.api}/{path}", json=body or {}, timeout=30)
        r.raise_for_status()
        return r.json()

    def wait_final(self, run_id: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.get(f"flow_runs/{run_id}")["state"]
            if state["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                return state
            time.sleep(3)
        raise TimeoutError(f"flow run {run_id} did not finish within {timeout:.0f} s")


class Chromium:
    """Headless Chromium and one page, over the DevTools protocol (flattened sessions)."""

    def __init__(self, profile: Path, width: int = 1440, height: int = 1000):
        from websockets.sync.client import connect

        exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
        if exe is None:
            raise RuntimeError("no chromium on PATH: apt-get install chromium (Debian's package runs headless)")
        self.width, self.height = width, height
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", f"--user-data-dir={profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or len(port_file.read_text().split()) < 2:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.2)
        port, path = port_file.read_text().split()[:2]
        self.ws = connect(f"ws://127.0.0.1:{port}{path}", max_size=256 * 1024 * 1024, open_timeout=30)
        self.ids = itertools.count(1)
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime"):
            self.send(f"{domain}.enable", session=True)
        self.send("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height, deviceScaleFactor=1, mobile=False)

    def send(self, method: str, session: bool = False, timeout: float = 120, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def js(self, expression: str) -> Any:
        out = self.send("Runtime.evaluate", session=True, expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in out:
            raise RuntimeError(f"javascript failed: {out['exceptionDetails'].get('text')} {out['exceptionDetails'].get('exception', {}).get('description', '')}")
        return out["result"].get("value")

    def goto(self, url: str, ready: str, timeout: float = 60) -> None:
        self.send("Emulation.setDeviceMetricsOverride", session=True, width=self.width, height=self.height, deviceScaleFactor=1, mobile=False)
        self.send("Page.navigate", session=True, url=url)
        self.wait(ready, timeout, f"page {url}")

    def wait(self, predicate: str, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.js(f"Boolean({predicate})"):
                    time.sleep(0.5)  # let the last renders settle
                    return
            except RuntimeError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{what}: `{predicate}` not true within {timeout:.0f} s")

    def text(self) -> str:
        return self.js("document.body.innerText") or ""

    def screenshot(self, path: Path, full: bool = True) -> Path:
        """PNG of the page; full: the viewport grown to the tallest scrolling area first (the UI
        scrolls an inner pane, not the document)."""
        if full:
            height = self.js("Math.max(document.documentElement.scrollHeight, ...Array.from(document.querySelectorAll('*'))"
                             ".filter(e => e.scrollHeight > e.clientHeight + 5 && getComputedStyle(e).overflowY !== 'visible')"
                             ".map(e => e.scrollHeight + e.getBoundingClientRect().top))")
            self.send("Emulation.setDeviceMetricsOverride", session=True, width=self.width,
                      height=int(min(max(height or self.height, self.height), 16000)), deviceScaleFactor=1, mobile=False)
            time.sleep(1.0)
        data = self.send("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=False)["data"]
        path.write_bytes(base64.b64decode(data))
        if full:
            self.send("Emulation.setDeviceMetricsOverride", session=True, width=self.width, height=self.height, deviceScaleFactor=1, mobile=False)
        return path

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except Exception:  # noqa: BLE001 - closing a browser that is already gone
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


# JavaScript helpers: the form input of `section.name` (labels read "name" or "name (Optional)"),
# for both Prefect UIs (V1 and V2 put the input after the label in different containers).
FIELD_JS = """
(section, name) => {
  const labelText = (l) => l.textContent.replace(/ \\(Optional\\)$/, '').trim();
  for (const label of document.querySelectorAll('label')) {
    if (labelText(label) !== name) continue;
    for (let a = label.parentElement; a; a = a.parentElement) {
      const owner = Array.from(a.querySelectorAll('label')).find(l => labelText(l) === section);
      if (!owner) continue;
      const byId = label.htmlFor && document.getElementById(label.htmlFor);
      if (byId && byId.matches('input, textarea, select, button')) return byId;
      // the first input after the label, inside the property's own container
      for (let c = label.parentElement; c; c = c.parentElement) {
        const after = Array.from(c.querySelectorAll('input, textarea, select'))
          .filter(e => label.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING);
        if (after.length) return after[0];
      }
      return null;
    }
  }
  return null;
}
"""


def set_field(page: Chromium, section: str, name: str, value: str) -> None:
    ok = page.js(f"""(() => {{
      const el = ({FIELD_JS})({json.dumps(section)}, {json.dumps(name)});
      if (!el) return false;
      const setter = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set;
      el.focus(); setter.call(el, {json.dumps(value)});
      el.dispatchEvent(new Event('input', {{bubbles: true}}));
      el.dispatchEvent(new Event('change', {{bubbles: true}}));
      el.blur();
      return true;
    }})()""")
    if not ok:
        raise RuntimeError(f"no input for {section}.{name} in the form")


def field_value(page: Chromium, section: str, name: str) -> Any:
    return page.js(f"(() => {{ const el = ({FIELD_JS})({json.dumps(section)}, {json.dumps(name)}); "
                   f"return el ? (el.value ?? el.textContent) : null; }})()")


def click_button(page: Chromium, text: str) -> None:
    ok = page.js(f"""(() => {{
      const same = (e) => e.textContent.trim() === {json.dumps(text)};
      const b = Array.from(document.querySelectorAll('button, [role=tab], a')).find(same)
        || Array.from(document.querySelectorAll('*')).find(e => e.children.length === 0 && same(e));
      if (!b) return false; b.click(); return true; }})()""")
    if not ok:
        raise RuntimeError(f"no button {text!r} on the page")


def check(results: list[tuple[str, bool]], what: str, ok: bool) -> None:
    results.append((what, bool(ok)))
    print(f"  [{'ok' if ok else 'FAIL'}] {what}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "workspace" / "ui-check", help="folder for the screenshots")
    ap.add_argument("--workspace", type=Path, default=None, help="default: a new temporary folder")
    ap.add_argument("--port", type=int, default=None, help="server port (default: the first free one in 4300-4399)")
    ap.add_argument("--pretrain", type=int, default=30, help="pre-training steps of v0 (bootstrap run)")
    ap.add_argument("--steps", type=int, default=20, help="training.num_iterations typed into the night's form")
    ap.add_argument("--keep", action="store_true", help="leave the server and worker running at the end")
    ap.add_argument("--attach", default=None, metavar="URL",
                    help="check the UI of a running server (e.g. http://127.0.0.1:4200) whose deployments have a champion "
                         "and a worker: no server, deploy or bootstrap of our own")
    args = ap.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="ui-check-"))
    workspace = (args.workspace or tmp / "ws").resolve()
    (tmp / "home").mkdir()
    stack = Stack(tmp / "home", workspace, args.port or free_port())
    page = None
    results: list[tuple[str, bool]] = []
    t0 = time.monotonic()
    try:
        if args.attach:
            stack.ui, stack.api = args.attach.rstrip("/"), args.attach.rstrip("/") + "/api"
        else:
            print(f"server, pools, deployments, worker (logs in {stack.home}) ...", flush=True)
            stack.up()
            print(f"UI at {stack.ui}; bootstrap of the champion ({args.pretrain} steps) ...", flush=True)
            boot = stack.get("deployments/name/bootstrap/bootstrap")
            run = stack.post(f"deployments/{boot['id']}/create_flow_run", {"parameters": {"cfg": {
                "preset": "tiny", "workspace": {"root": str(workspace)}, "model": {"pretrain_iterations": args.pretrain}}}})
            state = stack.wait_final(run["id"], 1200)
            if state["type"] != "COMPLETED":
                raise RuntimeError(f"bootstrap ended {state['name']}: {state.get('message')}")

        page = Chromium(tmp / "chromium")
        manual = stack.get("deployments/name/nightly-consolidation/manual")
        print("the manual deployment's run form ...", flush=True)
        page.goto(f"{stack.ui}/deployments/deployment/{manual['id']}/run",
                  "Array.from(document.querySelectorAll('label')).some(l => l.textContent.startsWith('num_iterations'))", 90)
        page.screenshot(args.out / "1-run-form.png")
        text = page.text()
        labels = page.js("Array.from(document.querySelectorAll('label')).map(l => l.textContent.replace(/ \\(Optional\\)$/, ''))")
        check(results, "the preset select is the form's first field and reads tiny",
              labels[labels.index("cfg") + 1 if "cfg" in labels else 0] == "preset" and "tiny" in (field_value(page, "cfg", "preset") or text))
        check(results, "no 'Property is type None' in the form", "Property is type" not in text)
        check(results, "the nightly form has no serve or model section", "serve" not in labels and "model" not in labels)
        check(results, "curation.languages shows its default, en",
              page.js("Array.from(document.querySelectorAll('input, textarea')).some(e => e.value === 'en')"))
        check(results, "<workspace> in a description is shown as text", "under <workspace>/corpora/" in text)
        # The same form in the V2 UI (the server serves it under /v2): rendered without glitches too.
        page.goto(f"{stack.ui}/v2/deployments/deployment/{manual['id']}/run",
                  "Array.from(document.querySelectorAll('label')).some(l => l.textContent.startsWith('num_iterations'))", 90)
        page.screenshot(args.out / "1b-run-form-v2.png")
        text2 = page.text()
        labels2 = page.js("Array.from(document.querySelectorAll('label')).map(l => l.textContent.replace(/ \\(Optional\\)$/, ''))")
        check(results, "V2 UI: the form has the preset, no serve or model section, no 'Property is type None', languages = en, "
                       "<workspace> shown", "preset" in labels2 and "serve" not in labels2 and "model" not in labels2
              and "Property is type" not in text2 and "<workspace>/corpora/" in text2
              and page.js("Array.from(document.querySelectorAll('input, textarea')).some(e => e.value === 'en')"))
        page.goto(f"{stack.ui}/deployments/deployment/{manual['id']}/run",
                  "Array.from(document.querySelectorAll('label')).some(l => l.textContent.startsWith('num_iterations'))", 90)
        set_field(page, "training", "num_iterations", str(args.steps))
        time.sleep(1)
        page.screenshot(args.out / "2-run-form-filled.png")
        before = {r["id"] for r in stack.post("flow_runs/filter", {"deployments": {"id": {"any_": [manual["id"]]}}, "limit": 50})}
        click_button(page, "Submit")
        deadline = time.monotonic() + 60
        night = None
        while night is None and time.monotonic() < deadline:
            runs = stack.post("flow_runs/filter", {"deployments": {"id": {"any_": [manual["id"]]}}, "limit": 50})
            night = next((r for r in runs if r["id"] not in before), None)
            time.sleep(1)
        if night is None:
            page.screenshot(args.out / "2b-after-submit.png")
            raise RuntimeError("Submit created no flow run (see 2b-after-submit.png)")
        sent = night["parameters"]["cfg"]
        check(results, "the submitted run carries preset tiny and the typed num_iterations",
              sent.get("preset") == "tiny" and sent.get("training", {}).get("num_iterations") == args.steps)
        check(results, "fields left empty were not sent (the preset's seq_len applies)", "seq_len" not in sent.get("training", {}))
        print(f"night {night['name']} submitted from the form; waiting for it ...", flush=True)
        state = stack.wait_final(night["id"], 1800)
        check(results, f"the night ended Completed ({state['name']}: {state.get('message') or ''})", state["type"] == "COMPLETED")

        page.goto(f"{stack.ui}/runs/flow-run/{night['id']}", "document.querySelector('canvas') || document.body.innerText.includes('Completed')", 60)
        time.sleep(3)
        page.screenshot(args.out / "3-run-graph.png", full=False)
        click_button(page, "Artifacts")
        time.sleep(3)
        page.screenshot(args.out / "4-run-artifacts.png")
        artifacts = stack.post("artifacts/filter", {"flow_runs": {"id": {"any_": [night["id"]]}}, "limit": 50})
        keys = sorted({a["key"] for a in artifacts if a.get("key")})
        check(results, f"the night's own artifacts include training-curve, night-plot, gate-decision ({', '.join(keys)})",
              {"training-curve", "night-plot", "gate-decision"} <= set(keys))
        for n, key in enumerate(("night-plot", "gate-decision", "training-curve", "eval-before-after"), start=5):
            found = next((a for a in artifacts if a.get("key") == key), None)
            if found is None:
                continue
            page.goto(f"{stack.ui}/artifacts/artifact/{found['id']}", f"document.body.innerText.includes({json.dumps(key)})", 60)
            time.sleep(2)
            page.screenshot(args.out / f"{n}-artifact-{key}.png")
    finally:
        if page is not None:
            page.close()
        if args.attach:
            pass
        elif args.keep:
            print(f"left running: UI {stack.ui} (PREFECT_HOME={stack.home}); stop with: kill -- -{stack.procs[0].pid} -{stack.procs[-1].pid}")
        else:
            stack.down()
            shutil.rmtree(tmp, ignore_errors=True)  # its server's home and, unless given, the workspace
    failed = [w for w, ok in results if not ok]
    print(f"{len(results) - len(failed)}/{len(results)} checks passed in {time.monotonic() - t0:.0f} s; screenshots in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
