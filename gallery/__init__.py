"""Broken servers: the mock's WSGI app wrapped by a middleware that gets one thing wrong the way
a real deployment does, so that each check of the suite is shown to fail on the server it is
for. One module per family of middleware; one registry of their modes, here.

    breaker.py   Breaker: a field, a status, an event or a body rewritten (`.mode`)
    wrong.py     Wrong: numbers wrong (steering, rows, sampling), all or some of the time (`.set`)
    effects.py   Ignoring: a request field dropped (`.field`); Batched: a batch's noise
    hostile.py   HostileBreaker: wrong on hostile input, served by gunicorn (a mode file)
    liars.py     Liar: a server that lies about itself (usage, resends, headers)
    peers.py     Peer: the mock behaving as llama.cpp's server or LiteLLM's proxy do

`MODES` maps every mode to its family (a name is one mode, whatever the family); `broken(app,
mode)` builds the middleware with that mode on (hostile.py's reads it from a file of its own).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gallery import breaker, effects, hostile, liars, peers, wrong

App = Callable[..., Iterable[bytes]]


def _breaker(app: App, mode: str) -> App:
    broken = breaker.Breaker(app)
    broken.mode = mode
    return broken


def _wrong(app: App, mode: str) -> App:
    broken = wrong.Wrong(app)
    broken.set(wrong.WRONGS[mode])
    return broken


def _ignoring(app: App, mode: str) -> App:
    broken = effects.Ignoring(app)
    broken.field = "greedy" if mode == "always greedy" else mode.removeprefix("ignores ")
    return broken


def _hostile(app: App, mode: str) -> App:
    """HostileBreaker reads its mode from a file (gunicorn's workers share it); one of its own."""
    fd, path = tempfile.mkstemp(prefix="acs-hostile-mode-")
    os.write(fd, mode.encode())
    os.close(fd)
    return hostile.HostileBreaker(app, Path(path))


FAMILIES: dict[str, tuple[Iterable[str], Callable[[App, str], Any]]] = {
    "breaker": (breaker.MODES, _breaker),
    "wrong": (wrong.WRONGS, _wrong),
    "effects": (
        (*(f"ignores {f}" for f in effects.IGNORABLE), "always greedy", "batched"),
        lambda app, mode: effects.Batched(app) if mode == "batched" else _ignoring(app, mode),
    ),
    "hostile": (hostile.MODES, _hostile),
    "liars": (liars.WAYS, liars.Liar),
    "peers": (peers.WAYS, lambda app, mode: peers.Peer(app, [mode])),
}


def _registry() -> dict[str, str]:
    modes: dict[str, str] = {}
    for family, (names, _) in FAMILIES.items():
        for name in names:
            if name in modes:
                raise ValueError(f"mode {name!r} of {family} is already {modes[name]}'s")
            modes[name] = family
    return modes


MODES = _registry()


def broken(app: App, mode: str) -> Any:
    """`app` behind the middleware of `mode`'s family, with `mode` on."""
    return FAMILIES[MODES[mode]][1](app, mode)
