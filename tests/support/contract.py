"""The core over openapi.yaml, as the tests hold it: what a server built over the
default spec must answer (its messages, bodies and checks)."""

from __future__ import annotations

from contract import Contract, spec

CONTRACT = Contract(spec())
