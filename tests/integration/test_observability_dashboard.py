"""The controller's dashboard in a real browser: headless Chromium (Debian's ``chromium``)
loads it during a live LocalCluster run; the tests assert on the DOM its scripts built and keep
screenshots under $MLSCHED_ARTIFACTS (default: the test's tmp dir)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest

from mlsched.localcluster import LocalCluster
from mlsched.model import IterationStop

from .test_observability import START_S, TIMING, training

pytestmark = pytest.mark.integration
CHROMIUM = os.environ.get("MLSCHED_CHROMIUM") or shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install -y --no-install-recommends chromium)",
)
# Virtual milliseconds the page may run its timers (1 s polls) before the DOM is taken; the
# browser waits for the fetches they start, whatever the machine's speed.
VIRTUAL_TIME_MS = 4000


def browser(url: str, profile: Path, *action: str) -> str:
    """Run headless Chromium on ``url`` with ``action`` (--dump-dom, --screenshot=...)."""
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # as root in CI's container; the page is our own
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={VIRTUAL_TIME_MS}",
            "--window-size=1280,1000",
            *action,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class _Text(HTMLParser):
    """Collects the text inside the element whose id is ``wanted``."""

    VOID = frozenset({"br", "img", "input", "meta", "link", "hr", "col", "area", "source", "wbr"})

    def __init__(self, wanted: str) -> None:
        super().__init__()
        self.wanted = wanted
        self.depth = 0  # open elements inside the wanted one (0: outside it)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            return
        if self.depth:
            self.depth += 1
        elif dict(attrs).get("id") == self.wanted:
            self.depth = 1

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag not in self.VOID:
            self.depth -= 1
            self.parts.append(" ")

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.parts.append(data)


def section(dom: str, element_id: str) -> str:
    """The text inside the element with ``element_id`` (entities decoded)."""
    parser = _Text(element_id)
    parser.feed(dom)
    assert parser.parts, f"no element {element_id!r} with text in the page"
    return "".join(parser.parts)


def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("MLSCHED_ARTIFACTS") or tmp_path / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@needs_chromium
def test_dashboard_shows_the_running_cluster(
    tmp_path: Path, example_spec: Callable, wait_job: Callable
) -> None:
    cluster = LocalCluster(
        tmp_path / "c", TIMING, controller_extra=("--http-listen", "127.0.0.1:0")
    )
    saved = artifacts(tmp_path)
    try:
        cluster.start_controller(timeout_s=START_S)
        cluster.start_agent("node-a", gpus=2)
        cluster.wait_for_nodes({"node-a"}, timeout_s=START_S)
        url = (cluster.state_dir / "controller.http").read_text().strip()
        with cluster.client("alice") as client:
            job = client.submit(example_spec("resnet-like", stopping=IterationStop(10**9)))
            wait_job(cluster, client, job.id, training, START_S)
            overview = browser(url + "/", tmp_path / "profile", "--dump-dom")
            browser(url + "/", tmp_path / "profile", f"--screenshot={saved / 'overview.png'}")
            page = browser(url + f"/job/{job.id}", tmp_path / "profile", "--dump-dom")
            browser(
                url + f"/job/{job.id}",
                tmp_path / "profile",
                f"--screenshot={saved / 'job.png'}",
            )
            client.stop(job.id, "seen")
            wait_job(cluster, client, job.id, lambda j: j.state.terminal, START_S)
    finally:
        cluster.stop()

    assert 'data-loaded="yes"' in overview  # the scripts ran and every fetch answered
    summary = section(overview, "summary")
    assert "policy fifo-lease" in summary and "1/2 GPUs busy" in summary
    nodes = section(overview, "nodes")
    assert "node-a" in nodes and job.id in nodes and "free" in nodes  # one GPU each way
    row = section(overview, "jobs").split(job.id, 1)[1].split()
    assert row[:5] == ["resnet-like", "alice", "RUNNING", "best-effort", "1"]
    feed = section(overview, "events")
    assert f"job_submitted {job.id}" in feed and "STARTING -> RUNNING" in feed

    assert 'data-loaded="yes"' in page
    assert section(page, "job-title").strip() == f"resnet-like ({job.id})"
    assert section(page, "job-tasks").split()[-5:] == ["0", "1", "node-a", "0", "RUNNING"]
    timeline = section(page, "timeline")
    assert timeline.index("job_submitted") < timeline.index("PENDING -> STARTING")
    for shot in ("overview.png", "job.png"):
        assert (saved / shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dashboard_api_refuses_what_it_does_not_know(tmp_path: Path) -> None:
    """Without a browser: unknown pages and jobs are 404, a bad event cursor 400."""
    import urllib.error
    import urllib.request

    cluster = LocalCluster(
        tmp_path / "c", TIMING, controller_extra=("--http-listen", "127.0.0.1:0")
    )
    try:
        cluster.start_controller(timeout_s=START_S)
        url = (cluster.state_dir / "controller.http").read_text().strip()
        for path, code in (
            ("/api/jobs/j-nosuch", 404),
            ("/nope", 404),
            ("/api/events?after=x", 400),
        ):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url + path, timeout=30)
            assert refused.value.code == code, path
        with urllib.request.urlopen(url + "/api/events?after=0", timeout=30) as reply:
            assert b"controller_started" in reply.read()
    finally:
        cluster.stop()
