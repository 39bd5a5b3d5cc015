"""http.yaml: what the HTTP layer refuses before the body's fields (routes, methods, media
types, JSON, keys)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from conformance.golden.cases import Cases, case, error


class HttpCases(Cases):
    """http.yaml: route, auth, media type, JSON."""

    def http(self) -> Iterator[dict[str, Any]]:
        msg, t = self.api.messages, ["http", "validation"]
        body = self.base
        yield case(
            "http.not_found",
            "unknown route",
            t,
            None,
            404,
            error(
                "not_found",
                msg["not_found"].format(method="GET", path="/v1/nothing"),
                None,
                self.api,
            ),
            path="/v1/nothing",
            method="GET",
        )
        yield case(
            "http.method_not_allowed",
            "wrong method on a known route",
            t,
            None,
            405,
            error(
                "method_not_allowed",
                msg["method_not_allowed"].format(
                    method="GET", path="/v1/completions", allow="POST"
                ),
                None,
                self.api,
            ),
            path="/v1/completions",
            method="GET",
        )
        yield case(
            "http.no_key",
            "no Authorization header",
            t + ["auth"],
            body,
            401,
            error("invalid_api_key", msg["invalid_api_key"], None, self.api),
            auth="none",
        )
        yield case(
            "http.not_bearer",
            "a key without the Bearer scheme",
            t + ["auth"],
            body,
            401,
            error("invalid_api_key", msg["invalid_api_key"], None, self.api),
            auth="Basic abc",
        )
        yield case(
            "http.empty_bearer",
            "an empty Bearer key",
            t + ["auth"],
            body,
            401,
            error("invalid_api_key", msg["invalid_api_key"], None, self.api),
            auth="Bearer ",
        )
        yield case(
            "http.media_type",
            "a body that is not application/json",
            t,
            body,
            415,
            error("unsupported_media_type", msg["unsupported_media_type"], None, self.api),
            headers={"Content-Type": "text/plain"},
        )
        yield case(
            "http.content_coding",
            "a body sent with a Content-Encoding (gzip): refused, not read as broken JSON",
            t,
            body,
            415,
            error("unsupported_media_type", msg["unsupported_content_coding"], None, self.api),
            headers={"Content-Encoding": "gzip"},
        )
        yield case(
            "http.invalid_json",
            "a body that is not JSON",
            t,
            None,
            400,
            error("invalid_json", msg["invalid_json"], None, self.api),
            raw_body="{not json",
        )
        yield case(
            "http.nan",
            "NaN is not JSON",
            t,
            None,
            400,
            error("invalid_json", msg["invalid_json"], None, self.api),
            raw_body='{"model": %s, "prompt": "x", "temperature": NaN}'
            % json.dumps(self.model.name),
        )
        yield case(
            "http.not_object",
            "a JSON body that is not an object",
            t,
            None,
            400,
            error("invalid_json", msg["not_json_object"], None, self.api),
            raw_body="[1, 2]",
        )
        yield case(
            "http.models", "the models list", ["http"], None, 200, path="/v1/models", method="GET"
        )
        yield case(
            "http.chat.empty_body",
            "chat is refused whatever the body",
            t,
            None,
            400,
            error("invalid_request", msg["chat_refused"], None, self.api),
            path="/v1/chat/completions",
            raw_body="{}",
        )
