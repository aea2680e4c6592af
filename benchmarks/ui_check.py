"""Issue 34, point 6: Prefect's UI served by the project's servers shows a finished training's
round subflows, as a browser renders it.

    .venv/bin/python -m benchmarks.ui_check [--out docs/screenshots]

Needs Debian's Chromium (`apt-get install -y chromium`); not part of the test suite (CI has no
browser). For each of the project's servers that serve the UI: the temporary API with
MINIONSRL_PREFECT_UI=1 (`python -m flows.train`'s, on request) and the local stack
(deployments/local_stack.py), it runs a 3-round CartPole-v1 Fixed(2) training against it, then
opens the `train` flow run's page in headless Chromium, clicks its "Subflow Runs" tab (over the
DevTools protocol) and checks the page then lists every round subflow (round-0-x2 ...
round-2-x2); a screenshot of each page (the rounds on the run's timeline) goes to --out. Exit
status 1 when a page lacks a round.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.screenshots import WINDOW, chromium, screenshot

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 3


def shown_after_click(browser: str, url: str, tab: str, timeout_s: float = 60.0) -> str:
    """The page's visible text after clicking its `tab`, in headless Chromium driven over the
    DevTools protocol (a page loaded, then a click as a person makes it)."""
    import json
    import time
    import urllib.request

    from websockets.sync.client import connect

    from deployments.local_stack import free_port

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="minionsrl-chromium-") as profile:
        chrome = subprocess.Popen([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                                   "--no-first-run", "--disable-background-networking", "--disable-component-update",
                                   "--disable-sync", f"--user-data-dir={profile}", f"--window-size={WINDOW}",
                                   f"--remote-debugging-port={port}", url],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=2) as reply:
                        pages = [t for t in json.loads(reply.read())
                                 if t.get("type") == "page" and t.get("url", "").startswith(url)]
                    if pages:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("Chromium's DevTools did not answer")
                time.sleep(0.3)
            with connect(pages[0]["webSocketDebuggerUrl"], max_size=None) as ws:
                calls = iter(range(1, 10_000))

                def evaluate(expression: str):
                    ident = next(calls)
                    ws.send(json.dumps({"id": ident, "method": "Runtime.evaluate",
                                        "params": {"expression": expression, "returnByValue": True}}))
                    while (message := json.loads(ws.recv(timeout=timeout_s))).get("id") != ident:
                        pass
                    return message["result"]["result"].get("value")

                click = ("(() => { const found = document.evaluate("  # the innermost element whose text is the label
                         f"\"//*[normalize-space(.)='{tab}']\", document, null, "
                         "XPathResult.ORDERED_NODE_SNAPSHOT_TYPE, null); if (!found.snapshotLength) return false; "
                         "found.snapshotItem(found.snapshotLength - 1).click(); return true; })()")
                while not evaluate(click):  # the page has loaded once the tab exists
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"no {tab!r} tab on {url}: " + (evaluate("document.body.innerText") or "")[:600])
                    time.sleep(0.5)
                text = ""
                while time.monotonic() < deadline and "round-" not in text:
                    time.sleep(1.0)
                    text = evaluate("document.body.innerText") or ""
                return text
        finally:
            chrome.kill()
            chrome.wait(timeout=30)


def train_against(api_url: str | None, env: dict[str, str], tmp: Path) -> tuple[str, str]:
    """A short training; returns (the UI's base URL, the train flow run's id)."""
    import re

    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp / 'mlflow.db'}"
    proc = subprocess.run([sys.executable, "-m", "flows.train", "--env", "CartPole-v1", "--scheduler", "fixed:2",
                           "--max-rounds", str(ROUNDS), "--tracking-uri", store, "--checkpoint-dir",
                           str(tmp / "ckpt")], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("minionsrl/CartPole-v1").experiment_id])
    if api_url is None:  # the temporary API printed its UI's address
        api_url = re.search(r"Prefect UI: (http://\S+)", proc.stdout + proc.stderr).group(1)
    return api_url.removesuffix("/api").rstrip("/"), run.data.tags["prefect.flow_run_id"]


def check(name: str, browser: str, base: str, flow_run_id: str, out: Path) -> bool:
    url = f"{base}/runs/flow-run/{flow_run_id}"
    page = shown_after_click(browser, url, "Subflow Runs")
    missing = [f"round-{k}-x2" for k in range(ROUNDS) if f"round-{k}-x2" not in page]
    screenshot(browser, url, out / f"prefect_flow_run_{name}.png")  # the rounds on the run's timeline
    print(f"{name}: {url}, tab Subflow Runs: {'every round subflow listed' if not missing else f'MISSING {missing}'}")
    return not missing


def main(argv: list[str] | None = None) -> int:
    from deployments.local_stack import prefect_stack

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args(argv)
    browser = chromium()
    args.out.mkdir(parents=True, exist_ok=True)
    ok = True
    with tempfile.TemporaryDirectory(prefix="minionsrl-ui-") as tmp_name:
        tmp = Path(tmp_name)
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        env.update(PREFECT_HOME=str(tmp / "temporary-home"), MINIONSRL_PREFECT_UI="1", PYTHONPATH=str(ROOT))
        (tmp / "temporary").mkdir()
        # the temporary API stops with the training: render while a second one serves the same database
        base, flow_run_id = train_against(None, env, tmp / "temporary")
        starter = subprocess.Popen([sys.executable, "-c", "import time\nfrom deployments.local_api import prefect_api\n"
                                    "with prefect_api() as url:\n    print(url, flush=True)\n    time.sleep(900)\n"],
                                   env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            base = starter.stdout.readline().strip().removesuffix("/api")
            ok &= check("temporary", browser, base, flow_run_id, args.out)
        finally:
            starter.kill()
        with prefect_stack(tmp / "stack", deploy=False) as stack:
            (tmp / "stack-run").mkdir()
            base, flow_run_id = train_against(stack.api_url, dict(stack.env), tmp / "stack-run")
            ok &= check("local-stack", browser, base, flow_run_id, args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
