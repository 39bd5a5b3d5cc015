"""The shipped front (reference_impl/deploy/nginx) under Debian's nginx, in front of the mock:
its own refusals are the API's error bodies, written from openapi.yaml; streams pass unbuffered;
the conformance suite's full profile passes through it."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_server.children import free_port
from conformance.cli.main import main as conformance
from contract import (
    InferenceUnavailable,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    RequestTooLarge,
    spec,
)
from gallery.support import PACED
from reference_impl.front import ingress_nginx, nginx_errors
from tests.support.contract import CONTRACT
from tests.support.mock import (
    AUTH,
    KEY,
    MockProcess,
    completion_body,
    parse_sse,
    read_http_response,
)
from tests.support.nginx import SHIPPED, NginxFront
from tests.support.reference import conformant

KEEPALIVE_S = 0.2


@pytest.fixture(scope="module")
def front() -> Iterator[tuple[MockProcess, NginxFront]]:
    mock = MockProcess("--workers", "2", "--keepalive-seconds", str(KEEPALIVE_S), *PACED).start()
    nginx = NginxFront(f"127.0.0.1:{mock.port}")
    try:
        yield mock, nginx.start()
    finally:
        nginx.close()
        mock.close()


def _error(response: httpx.Response, expected: Exception) -> None:
    """The whole body is `expected`'s, its request_id the X-Request-Id nginx sent."""
    body = response.json()
    assert response.headers["x-request-id"] == body["request_id"]
    assert body == CONTRACT.errors.body(expected, body["request_id"])
    assert response.status_code == CONTRACT.errors.status(expected)


def test_the_shipped_error_pages_are_written_from_the_spec() -> None:
    assert (SHIPPED / "acs-errors.conf").read_text() == nginx_errors(spec())


def test_nginx_refusals_are_the_api_error_bodies(front: tuple[MockProcess, NginxFront]) -> None:
    _, nginx = front
    with httpx.Client(base_url=nginx.url, headers=AUTH, timeout=30) as client:
        response = client.request("TRACE", "/v1/completions")
        with pytest.raises(MethodNotAllowed) as refused:
            CONTRACT.match_route("TRACE", "/v1/completions")
        _error(response, refused.value)
        assert response.headers["allow"] == ", ".join(refused.value.allow)
        _error(
            client.request("TRACE", "/no/such/route"),
            NotFound.from_template("not_found", method="TRACE", path="/no/such/route"),
        )
        # A body over nginx's limit (above the API's cap): the API's own 413, as the API words it.
        limit = spec().caps["max_body_bytes"]
        _error(
            client.post(
                "/v1/completions",
                content=b" " * (10 << 20),
                headers={"Content-Type": "application/json"},
            ),
            RequestTooLarge.from_template("request_too_large", limit=limit),
        )
        # Over the API's cap but under nginx's: the API answers, its X-Request-Id its own.
        _error(
            client.post(
                "/v1/completions",
                content=b" " * (limit + 1),
                headers={"Content-Type": "application/json"},
            ),
            RequestTooLarge.from_template("request_too_large", limit=limit),
        )
        # The error pages are internal: asked for, they are an unknown route, as the API says.
        _error(
            client.get("/.acs-front/malformed"),
            NotFound.from_template("not_found", method="GET", path="/.acs-front/malformed"),
        )
    with socket.create_connection(("127.0.0.1", nginx.port), timeout=30) as s:
        s.sendall(b"GET /v1/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n")
        head, body = read_http_response(s)
    assert head.startswith(b"HTTP/1.1 400 ")
    data = json.loads(body)
    assert data == CONTRACT.errors.body(
        InvalidRequest(spec().messages["malformed_http"]), data["request_id"]
    )


def test_an_api_that_does_not_answer_is_503_inference_unavailable() -> None:
    nginx = NginxFront(f"127.0.0.1:{free_port()}").start()  # nothing listens there
    try:
        response = httpx.post(
            f"{nginx.url}/v1/completions", json=completion_body(), headers=AUTH, timeout=30
        )
    finally:
        nginx.close()
    error = InferenceUnavailable.from_template("inference_unavailable")
    _error(response, error)
    for name, value in CONTRACT.errors.headers(error).items():
        assert response.headers[name] == value


def test_a_stream_passes_unbuffered_with_its_keepalives(
    front: tuple[MockProcess, NginxFront],
) -> None:
    mock, nginx = front
    body = completion_body(stream=True, max_tokens=3, seed=7)
    slow = {**AUTH, "X-Mock-Ttft-Ms": str(int(KEEPALIVE_S * 1000 * 4))}
    through = httpx.post(f"{nginx.url}/v1/completions", json=body, headers=slow, timeout=30)
    direct = httpx.post(f"{mock.url}/v1/completions", json=body, headers=slow, timeout=30)
    assert through.status_code == 200, through.text
    streamed, plain = parse_sse(through.text), parse_sse(direct.text)
    assert streamed.comments and set(streamed.comments) == {"keepalive"}
    assert streamed.text() == plain.text()
    # Unbuffered: the first keepalive arrives before the first token, as the API sends it.
    with httpx.stream(
        "POST", f"{nginx.url}/v1/completions", json=body, headers=slow, timeout=30
    ) as response:
        first = next(response.iter_lines())
    assert first == ": keepalive"


def _full_profile(url: str, key: str, report: Path, *extra: str, vllm: bool = False) -> None:
    """The full profile with --strict: no finding and no warning either (nginx's close of a body
    cut short by a client that half-closed is what HTTP lets any server do: robust:http.short_body).
    `vllm`: the reference's, where a loaded host may leave same_batch unproven (conformant)."""
    code = conformance(
        [
            "--base-url",
            url,
            "--api-key",
            key,
            "--profile",
            "full",
            "--no-progress",
            "--strict",
            "--json",
            str(report),
            *extra,
        ]
    )
    results = json.loads(report.read_text())["results"]
    unpassed = {r["id"]: r["findings"] for r in results if r["outcome"] in ("failed", "warned")}
    assert unpassed == {}
    assert conformant(code, results) if vllm else code == 0


def test_the_full_profile_passes_through_the_shipped_front(
    front: tuple[MockProcess, NginxFront], tmp_path: Path
) -> None:
    _full_profile(front[1].url, KEY, tmp_path / "report.json")


@pytest.mark.vllm
def test_the_full_profile_passes_through_the_front_of_the_reference(
    reference: Any, tmp_path: Path
) -> None:
    nginx = NginxFront(reference.url.removeprefix("http://")).start()
    try:
        _full_profile(
            nginx.url, reference.key, tmp_path / "report.json", "--wrong-key-expected", vllm=True
        )
    finally:
        nginx.close()


# What nginx answers itself, without the shipped error pages: HTML pages, TRACE's 405 (no Allow)
# among them, which schemathesis's unsupported_method holds against it.
FIVE_XX = "robust:http.framing"  # nginx's own 505 page for HTTP/2.0 on an HTTP/1.1 connection
NOT_DECODED = "robust:http.transfer_coding"  # nginx's own 501 page, not the API's 501
NGINX_OWN_WORDS = {
    "robust:http.chunk_size",
    "robust:http.cl_te",
    "robust:http.framing",
    "robust:headers.huge_value",
    "robust:headers.many",
    "robust:headers.long_request_line",
    "robust:path.tricks",
    "schema:unsupported_method",
}


def test_a_front_in_its_own_words_is_named_and_warned_and_fails_under_strict(
    front: tuple[MockProcess, NginxFront], tmp_path: Path
) -> None:
    mock, _ = front
    nginx = NginxFront(f"127.0.0.1:{mock.port}", errors=False).start()
    try:
        runs = {}
        for name, extra in (
            ("declared", ["--front", "nginx"]),
            ("strict", ["--front", "nginx", "--strict"]),
            ("undeclared", []),
        ):
            path = tmp_path / f"{name}.json"
            code = conformance(
                [
                    "--base-url",
                    nginx.url,
                    "--api-key",
                    KEY,
                    "-k",
                    "robust:*",
                    "-k",
                    "schema:unsupported_method",
                    "--no-progress",
                    "--json",
                    str(path),
                    *extra,
                ]
            )
            runs[name] = code, json.loads(path.read_text())
    finally:
        nginx.close()
    code, report = runs["declared"]
    by_outcome: dict[str, set[str]] = {}
    for r in report["results"]:
        by_outcome.setdefault(r["outcome"], set()).add(r["id"])
    # its 501 and 505 pages are protocol refusals (x-protocol-refusals), its words as its 4xx
    # pages are: warnings of the declared front, no failure (issue 57)
    assert (code, by_outcome.get("failed", set()), by_outcome["warned"]) == (
        0,
        set(),
        NGINX_OWN_WORDS | {NOT_DECODED},
    )
    framing = next(r for r in report["results"] if r["id"] == FIVE_XX)
    assert any(
        f["message"].startswith("HTTP/2.0 on an HTTP/1.1 connection") and f["warning"]
        for f in framing["findings"]
    ), framing
    warnings = [f for r in report["results"] for f in r["findings"] if f["warning"]]
    assert all(
        r["outcome"] != "warned" or all(f["warning"] for f in r["findings"])
        for r in report["results"]
    )
    # Each is a page that names its writer (nginx, not the API's Server) and the guide.
    for f in warnings:
        assert "answered by Server: nginx/" in f["message"] and 'HTML title "' in f["message"], f
        assert (
            "the declared front nginx" in f["message"]
            and "reference_impl/DEPLOY.md" in f["message"]
        )
    for name in ("strict", "undeclared"):  # a front no one declared is not taken on its word
        code, report = runs[name]
        assert code == 1
        assert {
            r["id"] for r in report["results"] if r["outcome"] == "failed"
        } == NGINX_OWN_WORDS | {NOT_DECODED}


def test_the_shipped_ingress_is_written_from_the_spec() -> None:
    assert (SHIPPED.parent / "k8s" / "ingress-nginx.yaml").read_text() == ingress_nginx(spec())
