"""Local HTTP server of the world and its CLI (docs/world.md, harness.world.server / cli)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from harness.tools.html_text import html_to_text
from harness.world.generator import WorldConfig, generate_world
from harness.world.server import PortInUseError, WorldServer
from harness.world.toolbox import WorldToolbox

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def world():
    return generate_world(WorldConfig(seed=5, size="tiny"))


def _get(url: str, timeout: float = 5.0, method: str = "GET"):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def test_serves_pages_with_content_type(world):
    with WorldServer(world) as srv:
        assert srv.base_url.startswith("http://127.0.0.1:") and srv.port > 0
        org = world.of_kind("org")[0]
        path = world.site_root(org)
        status, headers, body = _get(srv.base_url + path)
        assert status == 200
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        assert body.decode("utf-8") == world.pages[path].html
        # directory and root URLs serve index.html
        assert _get(f"{srv.base_url}/site/{org.slug}/")[2] == body
        assert _get(srv.base_url + "/")[2].decode() == world.pages["/index.html"].html
        status, headers, body = _get(srv.base_url + path, method="HEAD")
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0


def test_unknown_path_gets_404_page(world):
    with WorldServer(world) as srv:
        status, headers, body = _get(srv.base_url + "/no/such/page.html")
    assert status == 404
    assert headers["Content-Type"].startswith("text/html")
    assert b"404 Not Found" in body


def test_visit_text_through_http_equals_in_process_toolbox(world):
    with WorldServer(world) as srv:
        tb = WorldToolbox(world, srv.base_url)
        for path in list(world.pages)[:40]:
            url = srv.base_url + path
            html = _get(url)[2].decode("utf-8")
            assert html_to_text(html, base_url=url) == tb.call("visit", {"url": url})


def test_concurrent_requests(world):
    with WorldServer(world) as srv:
        results = []
        paths = list(world.pages)[:16]

        def fetch(p):
            results.append(_get(srv.base_url + p)[0])

        threads = [threading.Thread(target=fetch, args=(p,)) for p in paths]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == [200] * len(paths)


def test_taken_port_is_a_clear_error(world):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    try:
        with pytest.raises(PortInUseError, match=f"port {port} on 127.0.0.1 is already in use"):
            WorldServer(world, port=port).start()
    finally:
        blocker.close()


@pytest.mark.parametrize("port", [-1, 70000, "80", True])
def test_invalid_port(world, port):
    with pytest.raises(ValueError, match="WorldServer.port"):
        WorldServer(world, port=port)


def test_bind_address(world):
    """Another node's roles reach the world at the address it is bound to (docs/training.md "Two nodes")."""
    with WorldServer(world, host="127.0.0.2") as srv:
        assert srv.base_url == f"http://127.0.0.2:{srv.port}" and _get(srv.base_url + "/index.html")[0] == 200
        with pytest.raises(urllib.error.URLError):  # bound to that address only
            urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/index.html", timeout=2)
    with WorldServer(world, host="0.0.0.0") as srv:  # every interface; this machine's address for itself
        assert srv.base_url == f"http://127.0.0.1:{srv.port}" and _get(srv.base_url + "/index.html")[0] == 200
    with pytest.raises(OSError, match="cannot bind 192.0.2.7: no interface of this machine has that address"):
        WorldServer(world, host="192.0.2.7").start()
    proc = subprocess.run([sys.executable, "-m", "harness", "world", "serve", "--seed", "0", "--size", "tiny",
                           "--host", "192.0.2.7"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "cannot bind 192.0.2.7" in proc.stderr


def test_stopped_server_refuses_connections(world):
    srv = WorldServer(world).start()
    url = srv.base_url + "/index.html"
    assert _get(url)[0] == 200
    srv.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)


def test_test_routes_only_when_enabled(world):
    with WorldServer(world) as srv:
        assert _get(srv.base_url + "/__test__/error")[0] == 404
    with WorldServer(world, test_routes=True) as srv:
        status, _, body = _get(srv.base_url + "/__test__/error")
        assert status == 500 and b"500" in body
        with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
            urllib.request.urlopen(srv.base_url + "/__test__/slow", timeout=0.5)
        status, _, body = _get(srv.base_url + "/__test__/big?bytes=200000")
        assert status == 200 and len(body) >= 200000
        status, headers, _ = _get(srv.base_url + "/__test__/download")
        assert headers["Content-Type"] == "application/octet-stream" and "attachment" in headers["Content-Disposition"]
        status, _, body = _get(srv.base_url + "/__test__/links")
        assert b"http://example.com/" in body and b"file:///" in body
        # a redirect to a world page is followed by urllib
        status, _, body = _get(srv.base_url + "/__test__/redirect?to=/index.html")
        assert status == 200 and body.decode() == world.pages["/index.html"].html
    # the hung request did not keep the server from stopping (we got here)


def test_cli_serve_prints_address_and_serves():
    proc = subprocess.Popen([sys.executable, "-m", "harness", "world", "serve", "--seed", "2", "--size", "tiny"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "Serving the offline world" in line, line + proc.stderr.read() if proc.poll() is not None else line
        url = line.split(" at ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:")
        status, _, body = _get(url + "index.html")
        assert status == 200 and b"Offline web portal" in body
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode == 0


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_cli_serve_stops_on_ctrl_c_even_when_its_parent_ignored_sigint(inherited):
    """A server started from a background job or a test worker inherits SIGINT ignored (then Python raises no
    KeyboardInterrupt); Ctrl-C must stop it all the same (the README's "press Ctrl-C to stop")."""
    import signal

    def preexec() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN if inherited == "ignored" else signal.SIG_DFL)

    proc = subprocess.Popen([sys.executable, "-m", "harness", "world", "serve", "--seed", "2", "--size", "tiny"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec)
    try:
        assert "Serving the offline world" in proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_serve_bad_args_exit_2():
    out = subprocess.run([sys.executable, "-m", "harness", "world", "serve", "--seed", "-3"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "WorldConfig.seed" in out.stderr
    out = subprocess.run([sys.executable, "-m", "harness", "world", "serve", "--seed", "1", "--size", "huge"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "tiny|small|default" in out.stderr
